//! Each queue's lines on their way from its decoder to the merge, in
//! batches. A decoder may run only a few batches ahead of the merge once
//! every queue has a decoder; before that none waits, so that a queue
//! without one yet always gets one (a decoder waiting would hold a worker
//! the merge needs for another queue's first line).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::line::Out;

/// Lines a queue's decoder hands over at once.
pub(crate) const BATCH: usize = 4096;

/// Batches a queue's decoder may be ahead of the merge by.
const BATCHES_AHEAD: usize = 2;

/// The batches of every queue, and which queues have a decoder.
pub(crate) struct Lanes {
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    batches: Vec<VecDeque<Vec<Out>>>,
    done: Vec<bool>,
    /// The next queue to get a decoder.
    next: usize,
    /// The merge stopped (its output failed): batches go nowhere.
    closed: bool,
}

impl Lanes {
    pub(crate) fn new(queues: usize) -> Lanes {
        let state = State { batches: (0..queues).map(|_| VecDeque::new()).collect(), done: vec![false; queues], next: 0, closed: false };
        Lanes { state: Mutex::new(state), changed: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A decoder that panicked holds no broken state here: batches are whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next queue without a decoder, now taken by the caller's.
    pub(crate) fn take(&self) -> Option<usize> {
        let mut s = self.lock();
        if s.closed || s.next >= s.done.len() {
            return None;
        }
        s.next += 1;
        Some(s.next - 1)
    }

    /// A batch of `queue`'s lines; waits while the queue is far enough ahead.
    pub(crate) fn send(&self, queue: usize, batch: Vec<Out>) {
        let mut s = self.lock();
        while !s.closed && s.next >= s.done.len() && s.batches[queue].len() >= BATCHES_AHEAD {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if !s.closed {
            s.batches[queue].push_back(batch);
            self.changed.notify_all();
        }
    }

    /// `queue`'s decoder is done.
    pub(crate) fn finish(&self, queue: usize) {
        self.lock().done[queue] = true;
        self.changed.notify_all();
    }

    /// `queue`'s next batch; `None` once its decoder is done and every batch taken.
    pub(crate) fn recv(&self, queue: usize) -> Option<Vec<Out>> {
        let mut s = self.lock();
        loop {
            if let Some(b) = s.batches[queue].pop_front() {
                self.changed.notify_all();
                return Some(b);
            }
            if s.done[queue] {
                return None;
            }
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The merge stops: decoders no longer wait, and no queue gets a new one.
    pub(crate) fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.batches.iter_mut().for_each(VecDeque::clear);
        self.changed.notify_all();
    }
}

/// Marks a queue's decoder done when it returns or unwinds, so that the
/// merge never waits for a decoder that is gone.
pub(crate) struct Finish<'a> {
    pub lanes: &'a Lanes,
    pub queue: usize,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.lanes.finish(self.queue);
    }
}
