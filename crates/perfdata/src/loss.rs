//! What a file says it lost: LOST records (a ring buffer overflowed and the
//! kernel dropped records) and AUX records flagged TRUNCATED, PARTIAL or
//! COLLISION (trace data cut or overwritten).

use std::collections::HashMap;

use crate::abi::aux_flag;
use crate::records::{Record, RecordBody};

/// Loss windows kept one by one; later ones widen the last (memory stays bounded).
const MAX_WINDOWS: usize = 10_000;

/// Records dropped by one ring buffer: after `after` (the time of the buffer's
/// record before; None when there was none) and before `at`, the LOST record's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostWindow {
    pub cpu: Option<u32>,
    pub after: Option<u64>,
    pub at: Option<u64>,
    pub records: u64,
}

impl LostWindow {
    /// Whether records from before time `t` may be among the lost ones.
    pub fn may_precede(&self, t: u64) -> bool {
        self.after.is_none_or(|after| after < t)
    }

    /// `N records lost on cpu C between A and B`, times as seconds.nanoseconds.
    pub fn describe(&self) -> String {
        let cpu = self.cpu.map_or("an unknown cpu".to_string(), |c| format!("cpu {c}"));
        let time = |t: Option<u64>, none: &str| t.map_or(none.to_string(), |t| format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000));
        format!("{} records lost on {cpu} between {} and {}", self.records, time(self.after, "the start"), time(self.at, "an unknown time"))
    }
}

/// Losses seen so far; feed it every record in time order.
#[derive(Default, Debug)]
pub struct Losses {
    windows: Vec<LostWindow>,
    lost_records: u64,
    pub aux_truncated: u64,
    pub aux_partial: u64,
    pub aux_collision: u64,
    /// Time of the last record per cpu: where the next loss on that cpu starts.
    last_time: HashMap<Option<u32>, u64>,
}

impl Losses {
    pub fn observe(&mut self, r: &Record<'_>) {
        let cpu = r.sample_id.cpu;
        match &r.body {
            RecordBody::Lost(l) => {
                self.lost_records = self.lost_records.saturating_add(l.lost);
                let window = LostWindow { cpu, after: self.last_time.get(&cpu).copied(), at: r.time(), records: l.lost };
                let full = self.windows.len() >= MAX_WINDOWS;
                match self.windows.last_mut() {
                    Some(last) if full => {
                        last.after = last.after.min(window.after);
                        last.at = last.at.max(window.at);
                        last.records = last.records.saturating_add(l.lost);
                        last.cpu = if last.cpu == cpu { cpu } else { None };
                    }
                    _ => self.windows.push(window),
                }
            }
            RecordBody::Aux(a) => {
                self.aux_truncated += (a.flags & aux_flag::TRUNCATED != 0) as u64;
                self.aux_partial += (a.flags & aux_flag::PARTIAL != 0) as u64;
                self.aux_collision += (a.flags & aux_flag::COLLISION != 0) as u64;
            }
            _ => {}
        }
        if let Some(t) = r.time() {
            self.last_time.insert(cpu, t);
        }
    }

    /// Records the kernel says it dropped, in all.
    pub fn lost_records(&self) -> u64 {
        self.lost_records
    }

    /// One window per LOST record (the last widened past [`MAX_WINDOWS`]).
    pub fn windows(&self) -> &[LostWindow] {
        &self.windows
    }

    /// AUX records whose trace data was cut, partial or overwritten.
    pub fn aux_damaged(&self) -> u64 {
        self.aux_truncated + self.aux_partial + self.aux_collision
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.aux_damaged() == 0
    }

    /// Lines for stderr: each loss window (the first `max`), then AUX damage.
    pub fn report(&self, max: usize) -> Vec<String> {
        let mut lines: Vec<String> = self.windows.iter().take(max).map(LostWindow::describe).collect();
        if self.windows.len() > max {
            lines.push(format!("... and {} more LOST records; {} records lost in all", self.windows.len() - max, self.lost_records));
        }
        if self.aux_damaged() > 0 {
            lines.push(format!(
                "AUX trace damaged: {} records TRUNCATED, {} PARTIAL, {} COLLISION",
                self.aux_truncated, self.aux_partial, self.aux_collision
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Aux, Lost};
    use crate::sample::SampleId;

    fn record(body: RecordBody<'static>, time: u64, cpu: u32) -> Record<'static> {
        let sample_id = SampleId { time: Some(time), cpu: Some(cpu), ..SampleId::default() };
        Record { offset: 0, inner_offset: None, misc: 0, size: 0, body, sample_id }
    }

    #[test]
    fn windows_start_at_the_same_cpus_last_record_and_stay_bounded() {
        let mut l = Losses::default();
        l.observe(&record(RecordBody::FinishedRound, 5, 0));
        l.observe(&record(RecordBody::FinishedRound, 7, 1));
        l.observe(&record(RecordBody::Lost(Lost { id: 1, lost: 3 }), 9, 0));
        assert_eq!(l.windows(), &[LostWindow { cpu: Some(0), after: Some(5), at: Some(9), records: 3 }]);
        assert!(l.windows()[0].may_precede(6) && !l.windows()[0].may_precede(5));
        for t in 0..2 * MAX_WINDOWS as u64 {
            l.observe(&record(RecordBody::Lost(Lost { id: 1, lost: 1 }), 10 + t, 1));
        }
        assert_eq!(l.windows().len(), MAX_WINDOWS);
        assert_eq!(l.lost_records(), 3 + 2 * MAX_WINDOWS as u64);
        assert_eq!(l.windows().iter().map(|w| w.records).sum::<u64>(), l.lost_records());
        assert_eq!(l.windows().last().unwrap().at, Some(10 + 2 * MAX_WINDOWS as u64 - 1));
    }

    #[test]
    fn aux_flags_are_counted() {
        let mut l = Losses::default();
        let aux = |flags| RecordBody::Aux(Aux { aux_offset: 0, aux_size: 8, flags });
        l.observe(&record(aux(0), 1, 0));
        assert!(l.is_empty());
        l.observe(&record(aux(aux_flag::TRUNCATED | aux_flag::COLLISION), 2, 0));
        l.observe(&record(aux(aux_flag::PARTIAL), 3, 0));
        assert_eq!((l.aux_truncated, l.aux_partial, l.aux_collision), (1, 1, 1));
        assert_eq!(l.report(10), vec!["AUX trace damaged: 1 records TRUNCATED, 1 PARTIAL, 1 COLLISION".to_string()]);
    }
}
