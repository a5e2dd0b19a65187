//! Timestamp order, the way perf's ordered-events queue delivers records.
//!
//! Kernel records with a timestamp are queued; at each FINISHED_ROUND, the
//! queued records up to the largest timestamp seen before the *previous* round
//! are delivered in time order (equal times keep file order). Records without
//! a timestamp and perf's own records (AUXTRACE, ID_INDEX, ...) are delivered
//! at once, as perf does; at the end everything left is delivered.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::abi::record_type as rt;
use crate::error::Result;
use crate::file::Records;
use crate::records::{Record, RecordBody};

struct Queued<'a> {
    time: u64,
    seq: u64,
    record: Record<'a>,
}

impl PartialEq for Queued<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl Eq for Queued<'_> {}
impl PartialOrd for Queued<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

/// Iterator over records in perf's delivery order.
pub struct SortedRecords<'a> {
    inner: Records<'a>,
    queue: BinaryHeap<Reverse<Queued<'a>>>,
    ready: VecDeque<Result<Record<'a>>>,
    seq: u64,
    max_time: u64,
    next_flush: u64,
    /// Records queued with a time below what was already delivered.
    unordered: u64,
    last_delivered: u64,
    exhausted: bool,
}

impl<'a> SortedRecords<'a> {
    pub(crate) fn new(inner: Records<'a>) -> Self {
        SortedRecords {
            inner,
            queue: BinaryHeap::new(),
            ready: VecDeque::new(),
            seq: 0,
            max_time: 0,
            next_flush: 0,
            unordered: 0,
            last_delivered: 0,
            exhausted: false,
        }
    }

    /// How many records arrived with a timestamp below an already-flushed
    /// round (perf warns "Timestamp below last timeslice flush").
    pub fn unordered_records(&self) -> u64 {
        self.unordered
    }

    fn flush(&mut self, limit: u64) {
        while let Some(Reverse(q)) = self.queue.peek() {
            if q.time > limit {
                break;
            }
            let Reverse(q) = self.queue.pop().expect("peeked");
            self.last_delivered = q.time;
            self.ready.push_back(Ok(q.record));
        }
    }
}

impl<'a> Iterator for SortedRecords<'a> {
    type Item = Result<Record<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Some(r);
            }
            if self.exhausted {
                return None;
            }
            match self.inner.next() {
                None => {
                    self.exhausted = true;
                    self.flush(u64::MAX);
                }
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(r)) => match (r.record_type(), r.time()) {
                    (ty, Some(time)) if ty < rt::USER_TYPE_START => {
                        if time < self.last_delivered {
                            self.unordered += 1;
                        }
                        self.max_time = self.max_time.max(time);
                        self.seq += 1;
                        self.queue.push(Reverse(Queued { time, seq: self.seq, record: r }));
                    }
                    _ if matches!(r.body, RecordBody::FinishedRound) => {
                        self.flush(self.next_flush);
                        self.next_flush = self.max_time;
                        self.ready.push_back(Ok(r));
                    }
                    _ => return Some(Ok(r)),
                },
            }
        }
    }
}
