//! CoreSight ETMv4 AUX data in perf.data, decoded by etm's flow decoder
//! over the code timeline, into the lines `decode` prints: perf's branch
//! samples from the instruction ranges (the last instruction of a range that
//! ends in a taken branch, to the start of the next range), exceptions as
//! `hw int`, trace starts, instructions and errors.
//!
//! The code is read over the window from the perf time of the trace's
//! latest timestamp to that of the next one: with the kernel's clock
//! counter as timestamp source (TRCCONFIGR.TS, metadata `ts_source` 1)
//! converted by TIME_CONV, so TEXT_POKE records apply at their time, where
//! perf 6.1 applies them when the record is read. Where the code changes
//! inside a window the trace decides which content ran (etm's flow
//! decoder); instructions it cannot decide are printed uncertain.

use codeimage::window::Interval;
use codeimage::CodeTimeline;
use etm::flow::{ElemKind, FlowDecoder, InstrRange, InstrSubtype, InstrType, Item};
use perfdata::auxtrace::CsEtmInfo;
use perfdata::TimeConv;

use crate::aux::Behind;
use crate::itrace::Itrace;
use crate::lanes::{Lanes, BATCH};
use crate::line::{count_insns, InsnBytes, Kind, Out};
use crate::queue::Queue;
use crate::setup::etm_configs;
use crate::units::Unit;
use crate::Error;

/// The trace's timestamps on the perf clock, and the code decoded (whose
/// bytes the lines carry).
struct PerfClock<'a> {
    code: &'a CodeTimeline,
    conv: Option<TimeConv>,
}

impl PerfClock<'_> {
    fn perf_time(&self, ts: u64) -> u64 {
        self.conv.map_or(ts, |c| c.to_perf_time(ts))
    }

    /// The 4 bytes of the instruction at `ip` that `r` decoded, when
    /// `itrace` asks for them: the word `r` picked there, else the code at
    /// `time` (its window's start).
    fn bytes(&self, itrace: &Itrace, r: Option<&InstrRange>, ip: u64, time: u64) -> InsnBytes {
        if !itrace.insn_bytes {
            return InsnBytes::default();
        }
        InsnBytes::new(&self.word(r, ip, time), 4)
    }

    /// The word at `ip` as `r` decoded it (see [`PerfClock::bytes`]).
    #[inline]
    fn word(&self, r: Option<&InstrRange>, ip: u64, time: u64) -> [u8; 4] {
        if let Some(w) = r.and_then(|r| r.picked_word(ip)) {
            return w.to_le_bytes();
        }
        let mut word = [0u8; 4];
        self.code.read_into(ip, &mut word, time);
        word
    }
}

/// perf's flags for the taken branch that ends a range, None when the last
/// instruction is no branch (ISB, WFI, or a range cut short).
fn branch_flags(r: &InstrRange) -> Option<&'static str> {
    Some(match (r.last_type, r.last_subtype) {
        (InstrType::Branch | InstrType::IndirectBranch, InstrSubtype::Link) => "call",
        (InstrType::Branch, _) if r.last_cond => "jcc",
        (InstrType::Branch, _) => "jmp",
        // perf gives an exception return no flags, and takes every other
        // indirect branch without link (RET, and BR too) as a return.
        (InstrType::IndirectBranch, InstrSubtype::Eret) => "",
        (InstrType::IndirectBranch, _) => "return",
        _ => return None,
    })
}

/// Per trace ID: where the flow stands between elements.
#[derive(Default, Clone, Copy)]
struct Flow {
    /// The last range, whose taken branch (if any) goes to the next range's start.
    prev: Option<InstrRange>,
    /// The preferred return address of an exception taken, whose vector the next range starts at.
    exception: Option<u64>,
    tracing: bool,
    /// Perf time of the latest timestamp.
    time: u64,
    /// Instructions since the last that got a line (`Itrace::period`).
    insns_seen: u64,
    /// Instructions since the last branch line (its `insns`).
    ran: u64,
}

/// Decodes every queue over `code` and passes its lines to `emit` in
/// (time, queue) order, a few batches per queue in memory at most, as
/// [`crate::pt::decode`] does. (A queue's lines keep the queue's order: in
/// time order when its timestamps only go up, as they do with one trace ID
/// a buffer.)
pub fn decode<E: From<Error>>(
    info: &CsEtmInfo,
    conv: Option<&TimeConv>,
    aux: &[Queue],
    itrace: &Itrace,
    code: &CodeTimeline,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    decode_runs(info, conv, aux, itrace, code, |_, _| true, emit)
}

/// The lines of `units` (from [`crate::units::cs_unit`]: runs without a
/// gap), those [`decode`] gives for their bytes, in its order. A buffer's
/// runs before a unit are decoded too (a run starts from the time the one
/// before ended at), their lines dropped.
pub fn decode_units<E: From<Error>>(
    info: &CsEtmInfo,
    conv: Option<&TimeConv>,
    aux: &[Queue],
    units: &[Unit],
    itrace: &Itrace,
    code: &CodeTimeline,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    let chosen = |queue: usize, base: usize| units.iter().any(|u| u.queue == queue && u.id.start == base);
    decode_runs(info, conv, aux, itrace, code, chosen, emit)
}

/// [`decode`], keeping the lines of the runs `chosen(queue, start)` says:
/// a buffer's runs after its last chosen one are not decoded.
fn decode_runs<E: From<Error>>(
    info: &CsEtmInfo,
    conv: Option<&TimeConv>,
    aux: &[Queue],
    itrace: &Itrace,
    code: &CodeTimeline,
    chosen: impl Fn(usize, usize) -> bool + Sync,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    let mut configs = Vec::new();
    let mut cpu_of = [u32::MAX; 128];
    for (cpu, cfg) in etm_configs(info)? {
        cpu_of[(cfg.trace_id() & 0x7f) as usize] = cpu as u32;
        configs.push(cfg);
    }
    // Timestamps are perf's clock counter only with ts_source 1 on every CPU (as perf decides).
    let virtual_ts = info.cpus.iter().all(|c| c.etmv4().and_then(|r| r.ts_source) == Some(1));
    let clock = PerfClock { code, conv: conv.copied().filter(|_| virtual_ts) };
    // perf separates AUX chunks with four FSYNCs: a discontinuity.
    let framing = etm::Framing::Aligned { reset_on_4x_fsync: true };
    let decode_one = |queue: usize, lanes: &Lanes| {
        let q = &aux[queue];
        let mut out = Vec::with_capacity(BATCH);
        let mut flows = [Flow::default(); 128];
        let last_chosen = q.pieces().map(|(base, _)| base).filter(|&base| chosen(queue, base)).last();
        // Each piece of the trace on its own: never across a gap in the AUX data.
        for (base, piece) in q.pieces().take_while(|&(base, _)| Some(base) <= last_chosen) {
            let keep = chosen(queue, base);
            for f in &mut flows {
                *f = Flow { time: f.time, insns_seen: f.insns_seen, ran: f.ran, ..Flow::default() };
            }
            let mut reader = etm::PacketReader::new(piece, framing, &configs, etm::ErrorRecovery::Resync);
            let mut decoder = FlowDecoder::new(Interval(code), &configs);
            if let Some(conv) = clock.conv {
                decoder = decoder.with_perf_clock(conv);
            }
            // Both passes let go of the bytes behind them.
            let mut behind = Behind::new(&q.trace);
            decoder.window_timestamps_scanned(reader.clone(), |index| behind.past(base + index as usize));
            let mut behind = Behind::new(&q.trace);
            etm::flow::run(&mut reader, &mut decoder, |item| {
                let e = match item {
                    Item::Element(e) => e,
                    Item::Packet(p) => return behind.past(base + p.index as usize),
                    _ => return,
                };
                let id = (e.trace_id & 0x7f) as usize;
                let cpu = if cpu_of[id] == u32::MAX { q.cpu } else { cpu_of[id] };
                let made = out.len();
                element(&mut flows[id], e, queue, cpu, itrace, &clock, &mut out);
                if !keep {
                    out.truncate(made);
                }
                if base > 0 {
                    for l in &mut out[made..] {
                        if let Kind::Error { offset, .. } = &mut l.kind {
                            *offset += base;
                        }
                    }
                }
                if out.len() >= BATCH {
                    lanes.send(queue, std::mem::replace(&mut out, Vec::with_capacity(BATCH)));
                }
            });
            q.trace.release(base..base + piece.len());
        }
        if !out.is_empty() {
            out.shrink_to_fit();
            lanes.send(queue, out);
        }
    };
    crate::pool::decode_merged(aux.len(), decode_one, emit)
}

/// One element's lines.
fn element(f: &mut Flow, e: &etm::flow::Element, queue: usize, cpu: u32, itrace: &Itrace, clock: &PerfClock<'_>, out: &mut Vec<Out>) {
    let made = out.len();
    let line = |time, kind| Out { time, queue, cpu, kind };
    match e.kind {
        ElemKind::Timestamp { value, .. } => f.time = clock.perf_time(value),
        ElemKind::InstrRange(r) => {
            if itrace.branches {
                if !f.tracing {
                    out.push(line(
                        f.time,
                        Kind::Branch { from: 0, to: r.start, flags: "tr strt", from_len: None, from_bytes: InsnBytes::default(), insns: 0 },
                    ));
                } else if let Some((from, flags)) = taken(f.prev) {
                    let from_bytes = clock.bytes(itrace, f.prev.as_ref(), from, f.time);
                    out.push(line(f.time, Kind::Branch { from, to: r.start, flags, from_len: Some(4), from_bytes, insns: 0 }));
                }
                if let Some(from) = f.exception.take() {
                    let from_bytes = clock.bytes(itrace, None, from, f.time);
                    out.push(line(f.time, Kind::Branch { from, to: r.start, flags: "hw int", from_len: Some(4), from_bytes, insns: 0 }));
                }
            }
            if itrace.instructions {
                for ip in (r.start..r.end).step_by(4) {
                    if !itrace.sampled(&mut f.insns_seen) {
                        continue;
                    }
                    let word = clock.word(Some(&r), ip, f.time);
                    let class = isa::classify_aarch64(ip, u32::from_le_bytes(word)).class;
                    // The last instruction's taken branch goes where the next range starts: not known yet.
                    let bytes = InsnBytes::new(&word, 4);
                    out.push(line(f.time, Kind::Insn { ip, len: 4, class, to: None, uncertain: r.uncertain, ends: false, bytes }));
                }
            }
            f.tracing = true;
            f.exception = None;
            f.prev = Some(r);
        }
        ElemKind::Exception { ret_addr, .. } => {
            if itrace.branches && f.tracing {
                if let Some((from, flags)) = taken(f.prev) {
                    let from_bytes = clock.bytes(itrace, f.prev.as_ref(), from, f.time);
                    out.push(line(f.time, Kind::Branch { from, to: ret_addr, flags, from_len: Some(4), from_bytes, insns: 0 }));
                }
            }
            f.exception = Some(ret_addr);
            f.prev = None;
        }
        ElemKind::NoSync(_) | ElemKind::TraceOn(_) | ElemKind::EoTrace(_) => {
            f.tracing = false;
            f.prev = None;
            f.exception = None;
        }
        // Errors are made whether printed or not (`Itrace::errors`): they are counted.
        ElemKind::Error(err) => {
            out.push(line(f.time, Kind::Error { offset: e.index as usize, ip: None, code: 3, reason: err.to_string() }));
            f.tracing = false;
            f.prev = None;
        }
        ElemKind::AddrNacc(addr) => {
            let reason = format!("no code at {addr:#x} in the image");
            out.push(line(f.time, Kind::Error { offset: e.index as usize, ip: Some(addr), code: 5, reason }));
            f.tracing = false;
            f.prev = None;
        }
        _ => {}
    }
    // Instructions between branch lines: a range's run after its lines; none after an error.
    let (step, stops) = match e.kind {
        ElemKind::InstrRange(r) => (r.end.saturating_sub(r.start).div_ceil(4), false),
        ElemKind::Error(_) | ElemKind::AddrNacc(_) => (0, true),
        _ => (0, false),
    };
    f.ran = if stops { 0 } else { count_insns(&mut out[made..], f.ran, step).0 };
}

/// The taken branch that ends `r`: its address and perf's flags.
fn taken(r: Option<InstrRange>) -> Option<(u64, &'static str)> {
    let r = r.filter(|r| r.executed)?;
    Some((r.end - r.last_size as u64, branch_flags(&r)?))
}

#[cfg(test)]
mod tests {
    use codeimage::{BaseImage, Poke, TimelineBuilder};
    use etm::flow::{Element, Isa, Picked};

    use super::*;

    const NOP: u32 = 0xd503_201f;
    /// `b 0x2008` at 0x2000.
    const B: u32 = 0x1400_0002;

    /// A range whose walk took the B that a poke at time 100 wrote over the
    /// NOP at 0x2000: its lines carry the B, not the NOP at the window's
    /// start (time 50), in the instruction line and as the next branch's source.
    #[test]
    fn lines_carry_the_word_the_range_picked() {
        let mut base = BaseImage::new();
        base.add_bytes(0x2000, [NOP; 4].iter().flat_map(|w| w.to_le_bytes()).collect(), "program");
        let mut b = TimelineBuilder::new(base);
        b.poke(Poke { time: 100, settled: None, addr: 0x2000, old: &NOP.to_le_bytes(), new: &B.to_le_bytes(), cpu: None });
        let code = b.build();
        let clock = PerfClock { code: &code, conv: None };
        let mut range = InstrRange {
            start: 0x2000,
            end: 0x2004,
            num_i: 1,
            last_size: 4,
            isa: Isa::A64,
            executed: true,
            last_type: InstrType::Branch,
            last_subtype: InstrSubtype::None,
            last_cond: false,
            uncertain: false,
            picked: Picked::default(),
        };
        range.note_picked(0x2000, B);
        let next = InstrRange { start: 0x2008, end: 0x200c, picked: Picked::default(), ..range };
        let itrace = Itrace { branches: true, instructions: true, errors: true, period: 1, insn_bytes: true };
        let mut f = Flow { time: 50, ..Flow::default() };
        let mut out = Vec::new();
        for r in [range, next] {
            element(&mut f, &Element { trace_id: 0x10, index: 0, kind: ElemKind::InstrRange(r) }, 0, 0, &itrace, &clock, &mut out);
        }
        let insn = out.iter().find_map(|l| match &l.kind {
            Kind::Insn { ip: 0x2000, bytes, class, .. } => Some((bytes.as_slice().to_vec(), *class)),
            _ => None,
        });
        assert_eq!(insn, Some((B.to_le_bytes().to_vec(), isa::BranchClass::DirectJump)));
        let branch = out.iter().find_map(|l| match &l.kind {
            Kind::Branch { from: 0x2000, to: 0x2008, from_bytes, .. } => Some(from_bytes.as_slice().to_vec()),
            _ => None,
        });
        assert_eq!(branch, Some(B.to_le_bytes().to_vec()));
    }
}
