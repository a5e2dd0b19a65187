//! The input's AUX buffers (perf's queues).

use crate::aux::AuxBytes;

/// One AUX buffer of the input (perf's queue): per CPU, or per thread.
pub struct Queue<'f> {
    /// The mmap index of its AUXTRACE records.
    pub idx: u32,
    /// The CPU (`u32::MAX` for a per-thread buffer followed across CPUs).
    pub cpu: u32,
    /// The traced thread of a per-thread buffer.
    pub thread: Option<i32>,
    /// The AUXTRACE records' data, one after the other (not copied into
    /// memory: see [`AuxBytes`]).
    pub trace: AuxBytes<'f>,
    /// Where in `trace` a record starts that does not follow on from the
    /// one before (a gap or overlap in their AUX offsets): decoding never
    /// runs across these.
    pub breaks: Vec<usize>,
}

impl Queue<'_> {
    /// The runs of `trace` without a break, each with its offset in `trace`.
    pub fn pieces(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let starts = std::iter::once(0).chain(self.breaks.iter().copied());
        let ends = self.breaks.iter().copied().chain(std::iter::once(self.trace.len()));
        starts.zip(ends).map(|(start, end)| (start, &self.trace[start..end]))
    }
}

/// Where a queue's AUXTRACE record does not follow on from the one before:
/// its AUX offset is past the end of that one (a gap: trace lost) or
/// before it (an overlap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxBreak {
    pub idx: u32,
    pub cpu: u32,
    /// File offset of the AUXTRACE record.
    pub record: u64,
    /// Where the previous record's data ended, in the AUX stream.
    pub expected: u64,
    /// The record's own AUX offset.
    pub found: u64,
}

impl AuxBreak {
    pub fn is_gap(&self) -> bool {
        self.found > self.expected
    }

    /// A line for stderr naming the queue, the AUX offsets and the record.
    pub fn describe(&self) -> String {
        let what = if self.is_gap() {
            format!("{} bytes of trace missing between AUX offsets {:#x} and {:#x}", self.found - self.expected, self.expected, self.found)
        } else {
            format!("AUX offset {:#x} overlaps the data before it, which ended at {:#x}", self.found, self.expected)
        };
        let cpu = if self.cpu == u32::MAX { String::new() } else { format!(" (cpu {})", self.cpu) };
        format!("AUX buffer {}{cpu}: {what} (AUXTRACE record at file offset {:#x}); decoding restarts at the next PSB", self.idx, self.record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_at_the_breaks() {
        let q = Queue { idx: 0, cpu: 0, thread: None, trace: (0..10).collect::<Vec<u8>>().into(), breaks: vec![3, 7] };
        let got: Vec<(usize, Vec<u8>)> = q.pieces().map(|(at, p)| (at, p.to_vec())).collect();
        assert_eq!(got, [(0, vec![0, 1, 2]), (3, vec![3, 4, 5, 6]), (7, vec![7, 8, 9])]);
        let whole = Queue { breaks: vec![], ..q };
        assert_eq!(whole.pieces().count(), 1);
    }
}
