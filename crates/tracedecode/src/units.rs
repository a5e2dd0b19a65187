//! The independent units of a trace: runs of an AUX buffer that start at a
//! sync point, never cross a gap in the AUX data, and hold about a target
//! number of bytes, each named by an ID that says where it is.

use std::fmt;
use std::str::FromStr;

use intel_pt::flow::TimeConv;
use intel_pt::{Packet, PacketDecoder};

use crate::aux::Behind;
use crate::queue::Queue;

/// One unit: bytes `start..end` of a queue's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    /// Index of the queue in [`crate::Input::queues`].
    pub queue: usize,
    pub id: UnitId,
    /// Sync points it starts at (Intel PT: PSBs); 0 for a run cut at none.
    pub syncs: usize,
    /// The perf time of its first sync point and of the sync point after
    /// it (the unit's own last one when it ends a run), where they carry a time.
    pub time: (Option<u64>, Option<u64>),
}

impl Unit {
    pub fn bytes(&self) -> usize {
        self.id.end - self.id.start
    }
}

/// Where a unit is: the buffer's mmap index, and its byte range in the
/// buffer's AUX data as read (`IDX.START-END`, decimal). Stable: the same
/// input and target give the same IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnitId {
    pub idx: u32,
    pub start: usize,
    pub end: usize,
}

impl fmt::Display for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}-{}", self.idx, self.start, self.end)
    }
}

impl FromStr for UnitId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("segment ID {s:?}: expected BUFFER.START-END (as `poketrace segments` lists them)");
        let (idx, range) = s.split_once('.').ok_or_else(bad)?;
        let (start, end) = range.split_once('-').ok_or_else(bad)?;
        let id = UnitId { idx: idx.parse().map_err(|_| bad())?, start: start.parse().map_err(|_| bad())?, end: end.parse().map_err(|_| bad())? };
        if id.start >= id.end {
            return Err(format!("segment ID {s:?}: its range is empty"));
        }
        Ok(id)
    }
}

/// The units of Intel PT queues: each run without a gap cut at its PSBs
/// (bytes before a run's first PSB are decoded by nothing, so in no unit),
/// consecutive PSB segments grouped while they fit in `target` bytes (at
/// least one a unit). Times from each PSB+'s TSC by `conv`.
pub fn pt_units(queues: &[Queue], target: usize, conv: &TimeConv) -> Vec<Unit> {
    let mut units = Vec::new();
    for (queue, q) in queues.iter().enumerate() {
        let mut behind = Behind::new(&q.trace);
        for (base, piece) in q.pieces() {
            let cuts: Vec<(usize, usize)> = psb_segments(piece).inspect(|&(start, _)| behind.past(base + start)).collect();
            let time_at = |at: usize| psb_tsc(&piece[at..]).map(|tsc| conv.perf_time(tsc));
            let mut from = 0;
            while from < cuts.len() {
                let start = cuts[from].0;
                let mut to = from + 1;
                while to < cuts.len() && cuts[to].1 - start <= target {
                    to += 1;
                }
                let end = cuts[to - 1].1;
                let last = if to < cuts.len() { cuts[to].0 } else { cuts[to - 1].0 };
                let id = UnitId { idx: q.idx, start: base + start, end: base + end };
                units.push(Unit { queue, id, syncs: to - from, time: (time_at(start), time_at(last)) });
                from = to;
            }
        }
    }
    units
}

/// The units of CoreSight queues: each run without a gap is one unit, not
/// cut at its A-syncs (one run decodes on one thread).
pub fn whole_runs(queues: &[Queue]) -> Vec<Unit> {
    let mut units = Vec::new();
    for (queue, q) in queues.iter().enumerate() {
        for (base, piece) in q.pieces().filter(|(_, p)| !p.is_empty()) {
            let id = UnitId { idx: q.idx, start: base, end: base + piece.len() };
            units.push(Unit { queue, id, syncs: 0, time: (None, None) });
        }
    }
    units
}

/// The CoreSight unit `id` names among `queues`: one of [`whole_runs`].
pub fn cs_unit(queues: &[Queue], id: UnitId) -> Result<Unit, String> {
    let (queue, q) = queues.iter().enumerate().find(|(_, q)| q.idx == id.idx).ok_or_else(|| format!("segment {id}: no AUX buffer {}", id.idx))?;
    let mut runs = q.pieces().filter(|(_, p)| !p.is_empty()).map(|(base, p)| UnitId { idx: id.idx, start: base, end: base + p.len() });
    if !runs.any(|r| r == id) {
        return Err(format!(
            "segment {id}: not a whole run of AUX buffer {} without a gap (CoreSight units are, as `poketrace segments` lists them)",
            id.idx
        ));
    }
    Ok(Unit { queue, id, syncs: 0, time: (None, None) })
}

/// The unit `id` names among `queues`, checked to be one [`pt_units`] can
/// list: in one buffer's run without a gap, from one of its PSBs to a
/// later PSB or the end of the run.
pub fn pt_unit(queues: &[Queue], id: UnitId, conv: &TimeConv) -> Result<Unit, String> {
    let (queue, q) = queues.iter().enumerate().find(|(_, q)| q.idx == id.idx).ok_or_else(|| format!("segment {id}: no AUX buffer {}", id.idx))?;
    let (base, piece) = q
        .pieces()
        .find(|(base, p)| (*base..base + p.len()).contains(&id.start))
        .ok_or_else(|| format!("segment {id}: past the end of AUX buffer {} ({} bytes)", id.idx, q.trace.len()))?;
    let cuts: Vec<(usize, usize)> = psb_segments(piece).map(|(s, e)| (base + s, base + e)).collect();
    let first = cuts.iter().position(|c| c.0 == id.start).ok_or_else(|| format!("segment {id}: byte {} is not a PSB", id.start))?;
    let last = cuts[first..]
        .iter()
        .position(|c| c.1 == id.end)
        .ok_or_else(|| format!("segment {id}: byte {} is neither a PSB nor the end of a run without gaps", id.end))?
        + first;
    let time_at = |at: usize| psb_tsc(&q.trace[at..]).map(|tsc| conv.perf_time(tsc));
    let after = cuts.get(last + 1).map_or(cuts[last].0, |c| c.0);
    Ok(Unit { queue, id, syncs: last + 1 - first, time: (time_at(id.start), time_at(after)) })
}

/// The PSB segments of a run (none without a PSB).
pub(crate) fn psb_segments(piece: &[u8]) -> impl Iterator<Item = (usize, usize)> + use<'_> {
    let any = intel_pt::find_psb(piece).is_some();
    intel_pt::parallel::psb_segments(piece).filter(move |_| any)
}

/// The TSC of the PSB+ `buf` starts with, if it has one before its PSBEND.
fn psb_tsc(buf: &[u8]) -> Option<u64> {
    let mut packets = PacketDecoder::new(buf);
    while let Ok(Some((_, p))) = packets.next_packet() {
        match p {
            Packet::Tsc(tsc) => return Some(tsc),
            Packet::PsbEnd => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PSB+ with TSC `tsc`, then `pad` PAD bytes.
    fn psb_segment(tsc: u64, pad: usize) -> Vec<u8> {
        let mut b = intel_pt::PSB.to_vec();
        b.push(0x19);
        b.extend_from_slice(&tsc.to_le_bytes()[..7]);
        b.extend_from_slice(&[0x02, 0x23]);
        b.resize(b.len() + pad, 0);
        b
    }

    const CONV: TimeConv = TimeConv { shift: 0, mult: 1, zero: 1000 };

    #[test]
    fn units_group_psb_segments_and_stop_at_gaps() {
        // Run 1: 5 junk bytes, then PSB segments of 126 bytes; run 2 (after a gap): 2 more.
        let mut trace = vec![0x55; 5];
        (0..4).for_each(|i| trace.extend(psb_segment(10 * i, 100)));
        let gap = trace.len();
        (4..6).for_each(|i| trace.extend(psb_segment(10 * i, 100)));
        let queues = [Queue { idx: 7, cpu: 2, thread: None, trace: trace.into(), breaks: vec![gap] }];
        let ids = |target| pt_units(&queues, target, &CONV).iter().map(|u| (u.id.start, u.id.end, u.syncs)).collect::<Vec<_>>();
        assert_eq!(ids(1), [(5, 131, 1), (131, 257, 1), (257, 383, 1), (383, 509, 1), (509, 635, 1), (635, 761, 1)]);
        assert_eq!(ids(300), [(5, 257, 2), (257, 509, 2), (509, 761, 2)]);
        assert_eq!(ids(1 << 20), [(5, 509, 4), (509, 761, 2)], "never across the gap");
        let units = pt_units(&queues, 300, &CONV);
        assert_eq!(units[0].time, (Some(1000), Some(1020)), "to the next unit's first PSB+");
        assert_eq!(units[1].time, (Some(1020), Some(1030)), "the run's last: to its own last PSB+");
        // Each listed unit is found from its ID; ranges that are none are refused.
        for u in &units {
            assert_eq!(pt_unit(&queues, u.id, &CONV).as_ref(), Ok(u));
        }
        for (start, end, why) in [(5, 761, "neither a PSB nor the end"), (6, 131, "not a PSB"), (0, 131, "not a PSB"), (761, 800, "past the end")] {
            let err = pt_unit(&queues, UnitId { idx: 7, start, end }, &CONV).unwrap_err();
            assert!(err.contains(why), "{start}-{end}: {err}");
        }
        assert!(pt_unit(&queues, UnitId { idx: 1, start: 5, end: 131 }, &CONV).unwrap_err().contains("no AUX buffer 1"));
    }

    #[test]
    fn ids_read_back_and_bad_ones_are_named() {
        let id = UnitId { idx: 3, start: 4096, end: 12288 };
        assert_eq!(id.to_string(), "3.4096-12288");
        assert_eq!("3.4096-12288".parse::<UnitId>(), Ok(id));
        for bad in ["3", "3.4096", "x.1-2", "3.5-5", "3.9-2", "3.1-2-3"] {
            let err = bad.parse::<UnitId>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}
