//! Timestamp order, the way perf's ordered-events queue delivers records.
//!
//! Kernel records with a timestamp are queued; at each FINISHED_ROUND, the
//! queued records up to the largest timestamp seen before the *previous* round
//! are delivered in time order (equal times keep file order). Records without
//! a timestamp and perf's own records (AUXTRACE, ID_INDEX, ...) are delivered
//! at once, as perf does; at the end everything left is delivered.
//!
//! Like perf's ordered-events allocation limit, the queue is bounded: when it
//! holds more than [`SortedRecords::queue_limit`] records, its oldest half is
//! delivered at once. Records that then arrive with an earlier time are
//! delivered late and counted ([`SortedRecords::unordered_records`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::mem::size_of;

use crate::abi::record_type as rt;
use crate::error::Result;
use crate::file::{PerfFile, Records};
use crate::records::{Record, RecordBody};

impl PerfFile {
    /// Records in timestamp order, as perf delivers them (see [`SortedRecords`]).
    pub fn sorted_records(&self) -> SortedRecords<'_> {
        SortedRecords::over(self.records())
    }
}

/// Memory the queued records may take (perf's ordered-events limit is of this kind).
const QUEUE_BYTES: usize = 64 << 20;

/// Iterator over records in perf's delivery order, of the records `I`
/// yields in file order.
pub struct SortedRecords<'a, I = Records<'a>> {
    inner: I,
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
    queue_limit: usize,
    /// Times the queue passed its limit and its oldest half was delivered early.
    early_flushes: u64,
}

enum Ready<'a> {
    Slot(u32),
    /// Rare (FINISHED_ROUND): boxed so that the queue stays small.
    Direct(Box<Result<Record<'a>>>),
}

impl<'a, I: Iterator<Item = Result<Record<'a>>>> SortedRecords<'a, I> {
    /// The records of `inner`, which yields a file's records in file order
    /// (as [`PerfFile::records`] does, perhaps looked at on the way).
    pub fn over(inner: I) -> Self {
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
            queue_limit: QUEUE_BYTES / size_of::<Option<Record<'_>>>(),
            early_flushes: 0,
        }
    }

    /// Sets how many records may wait in the queue (at least 2).
    pub fn with_queue_limit(mut self, records: usize) -> Self {
        self.queue_limit = records.max(2);
        self
    }

    /// How many records may wait in the queue: by default as many as fit in 64 MiB.
    pub fn queue_limit(&self) -> usize {
        self.queue_limit
    }

    /// How many times the queue passed its limit and delivered its oldest half early.
    pub fn early_flushes(&self) -> u64 {
        self.early_flushes
    }

    /// Records waiting in the queue now.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Delivers the oldest half of the queue, as perf's OE_FLUSH__HALF does.
    fn flush_half(&mut self) {
        self.early_flushes += 1;
        for _ in 0..self.queue.len() / 2 {
            let Some(Reverse((time, _, slot))) = self.queue.pop() else { break };
            self.last_delivered = time;
            self.ready.push_back(Ready::Slot(slot));
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

impl<'a, I: Iterator<Item = Result<Record<'a>>>> Iterator for SortedRecords<'a, I> {
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
                        if self.queue.len() > self.queue_limit {
                            self.flush_half();
                        }
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
