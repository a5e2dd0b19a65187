//! One pass over a perf.data's records: the trace's AUXTRACE_INFO, TIME_CONV,
//! the AUX queues and the side-band for thread attribution.

use std::collections::HashMap;

use perfdata::abi::auxtrace_type;
use perfdata::auxtrace::{CsEtmInfo, IntelPtInfo};
use perfdata::{PerfFile, Record, RecordBody, SortedRecords, TimeConv};

use crate::aux::AuxBytes;
use crate::queue::{AuxBreak, Queue};
use crate::threads::Threads;
use crate::Error;

/// The input's hardware trace, from its AUXTRACE_INFO.
pub enum Trace {
    IntelPt(IntelPtInfo),
    CoreSight(CsEtmInfo),
}

/// What a decode needs of a perf.data, read in one pass.
pub struct Input<'f> {
    /// The last Intel PT or CoreSight AUXTRACE_INFO.
    pub trace: Option<Trace>,
    pub time_conv: Option<TimeConv>,
    /// Ordered by (CPU, thread, mmap index), as perf orders its queues.
    pub queues: Vec<Queue<'f>>,
    pub threads: Threads,
    /// Records that could not be read (skipped), in file order.
    pub bad_records: Vec<perfdata::Error>,
    /// AUXTRACE records that do not follow on from the one before in their
    /// queue, in file order.
    pub breaks: Vec<AuxBreak>,
}

impl<'f> Input<'f> {
    /// Reads every record of `file` once; a record that cannot be read is
    /// skipped and kept in `bad_records`. The AUX data is not copied into
    /// memory ([`AuxBytes`]).
    pub fn read(file: &'f PerfFile) -> Result<Input<'f>, Error> {
        let mut reading = Reading::default();
        for r in file.records() {
            reading.take(r);
            if reading.failed.is_some() {
                break;
            }
        }
        reading.finish(file)
    }

    /// Reads `file` as [`Input::read`] does, in the same single pass over its
    /// records, and hands `each` every record that could be read in perf's
    /// delivery order ([`SortedRecords`]): for the side-band that wants time order.
    pub fn read_sorted(file: &'f PerfFile, mut each: impl FnMut(&Record<'f>)) -> Result<Input<'f>, Error> {
        let mut reading = Reading::default();
        // The records that could be read go on to be sorted; errors stay with the input.
        for r in SortedRecords::over(file.records().filter_map(|r| reading.take(r).map(Ok))).flatten() {
            each(&r);
        }
        reading.finish(file)
    }
}

/// An [`Input`] being read, record by record in file order.
#[derive(Default)]
struct Reading<'f> {
    trace: Option<Trace>,
    time_conv: Option<TimeConv>,
    /// Each queue with its records' data, joined at the end.
    queues: Vec<(Queue<'f>, Vec<&'f [u8]>, usize)>,
    /// Per mmap index: its queue, and where its last record's data ended
    /// in the AUX stream and how long it was.
    by_idx: HashMap<u32, (usize, (u64, usize))>,
    threads: Threads,
    bad_records: Vec<perfdata::Error>,
    breaks: Vec<AuxBreak>,
    /// The first AUXTRACE_INFO that could not be parsed: the input is refused.
    failed: Option<Error>,
}

impl<'f> Reading<'f> {
    /// Takes the next record in file order, and gives it back if it could be read.
    fn take(&mut self, r: perfdata::Result<Record<'f>>) -> Option<Record<'f>> {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.bad_records.push(e);
                return None;
            }
        };
        if self.failed.is_some() {
            return Some(r);
        }
        self.threads.observe(&r);
        match &r.body {
            RecordBody::AuxtraceInfo(i) if i.auxtrace_type == auxtrace_type::INTEL_PT => match IntelPtInfo::parse(i) {
                Ok(info) => self.trace = Some(Trace::IntelPt(info)),
                Err(e) => self.failed = Some(e.into()),
            },
            RecordBody::AuxtraceInfo(i) if i.auxtrace_type == auxtrace_type::CS_ETM => match CsEtmInfo::parse(i) {
                Ok(info) => self.trace = Some(Trace::CoreSight(info)),
                Err(e) => self.failed = Some(e.into()),
            },
            RecordBody::TimeConv(t) => self.time_conv = Some(*t),
            // perf queues AUX data by mmap index: one buffer per CPU, or per thread.
            RecordBody::Auxtrace(a) => {
                let end = (a.offset.saturating_add(a.data.len() as u64), a.data.len());
                match self.by_idx.get_mut(&a.idx) {
                    Some((q, expected)) => {
                        let (q, records, len) = &mut self.queues[*q];
                        if !follows(*expected, a.offset) {
                            self.breaks.push(AuxBreak { idx: a.idx, cpu: a.cpu, record: r.offset, expected: expected.0, found: a.offset });
                            q.breaks.push(*len);
                        }
                        *expected = end;
                        records.push(a.data);
                        *len += a.data.len();
                    }
                    None => {
                        self.by_idx.insert(a.idx, (self.queues.len(), end));
                        let thread = (a.cpu == u32::MAX).then_some(a.tid as i32);
                        let q = Queue { idx: a.idx, cpu: a.cpu, thread, trace: AuxBytes::Held(Vec::new()), breaks: Vec::new() };
                        self.queues.push((q, vec![a.data], a.data.len()));
                    }
                }
            }
            _ => {}
        }
        Some(r)
    }

    fn finish(self, file: &'f PerfFile) -> Result<Input<'f>, Error> {
        let Reading { trace, time_conv, queues, mut threads, bad_records, breaks, failed, .. } = self;
        if let Some(e) = failed {
            return Err(e);
        }
        let mut queues: Vec<Queue<'f>> = queues.into_iter().map(|(q, records, _)| Queue { trace: AuxBytes::join(file, &records), ..q }).collect();
        queues.sort_by_key(|q| (q.cpu, q.thread, q.idx));
        threads.finish();
        Ok(Input { trace, time_conv, queues, threads, bad_records, breaks })
    }
}

/// perf pads an AUXTRACE record's data to a multiple of this; its size
/// counts the padding, its offset does not.
const AUXTRACE_ALIGN: u64 = 8;

/// Whether a record at AUX offset `found` follows on from the data before
/// it, `len` bytes that ended at `end`: at `end`, or before it by less than
/// the padding that data may end with.
fn follows((end, len): (u64, usize), found: u64) -> bool {
    found == end || (len as u64).is_multiple_of(AUXTRACE_ALIGN) && found < end && end - found < AUXTRACE_ALIGN
}

#[cfg(test)]
mod tests {
    use super::follows;

    #[test]
    fn padding_is_no_overlap() {
        assert!(follows((100, 20), 100));
        // 16 bytes: up to 7 of them may be padding.
        assert!(follows((100, 16), 94));
        assert!(follows((100, 16), 93));
        assert!(!follows((100, 16), 92), "8 bytes back is an overlap");
        assert!(!follows((100, 20), 99), "20 bytes are not padded");
        assert!(!follows((100, 16), 101), "a gap");
    }
}
