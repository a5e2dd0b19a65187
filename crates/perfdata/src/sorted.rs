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
use crate::file::{PerfFile, Records};
use crate::records::{Record, RecordBody};

impl PerfFile {
    /// Records in timestamp order, as perf delivers them (see [`SortedRecords`]).
    pub fn sorted_records(&self) -> SortedRecords<'_> {
        SortedRecords::new(self.records())
    }
}

/// Iterator over records in perf's delivery order.
pub struct SortedRecords<'a> {
    inner: Records<'a>,
    /// (time, seq, slot): the heap moves 24-byte keys, not ~500-byte records.
    queue: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slab: Vec<Option<Record<'a>>>,
    free: Vec<u32>,
    ready: VecDeque<Ready<'a>>,
    seq: u64,
    max_time: u64,
    next_flush: u64,
    /// Records queued with a time below what was already delivered.
    unordered: u64,
    last_delivered: u64,
    exhausted: bool,
}

enum Ready<'a> {
    Slot(u32),
    /// Rare (FINISHED_ROUND): boxed so that the queue stays small.
    Direct(Box<Result<Record<'a>>>),
}

impl<'a> SortedRecords<'a> {
    fn new(inner: Records<'a>) -> Self {
        SortedRecords {
            inner,
            queue: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
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
        while let Some(&Reverse((time, _, slot))) = self.queue.peek() {
            if time > limit {
                break;
            }
            self.queue.pop();
            self.last_delivered = time;
            self.ready.push_back(Ready::Slot(slot));
        }
    }
}

impl<'a> Iterator for SortedRecords<'a> {
    type Item = Result<Record<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.ready.pop_front() {
                Some(Ready::Slot(i)) => {
                    self.free.push(i);
                    return self.slab[i as usize].take().map(Ok);
                }
                Some(Ready::Direct(r)) => return Some(*r),
                None => {}
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
                        let slot = match self.free.pop() {
                            Some(i) => {
                                self.slab[i as usize] = Some(r);
                                i
                            }
                            None => {
                                self.slab.push(Some(r));
                                (self.slab.len() - 1) as u32
                            }
                        };
                        self.queue.push(Reverse((time, self.seq, slot)));
                    }
                    _ if matches!(r.body, RecordBody::FinishedRound) => {
                        self.flush(self.next_flush);
                        self.next_flush = self.max_time;
                        self.ready.push_back(Ready::Direct(Box::new(Ok(r))));
                    }
                    _ => return Some(Ok(r)),
                },
            }
        }
    }
}
