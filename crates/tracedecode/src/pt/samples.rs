//! `perf inject --itrace=il64` style samples of every queue, in time
//! order: each queue decoded on its own thread into a [`BranchStacks`]
//! sink, its samples handed over in small batches through a bounded
//! channel, and the queues' samples merged by (time, queue).

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver};

use codeimage::window::{CodeSource, Interval, PerfStyle, Static};
use codeimage::CodeTimeline;

use super::brstack::{BranchSample, BranchStacks, Ring};
use super::plan::{decoder, Plan};
use crate::mode::ImageMode;
use crate::queue::Queue;
use crate::Error;

/// Samples a batch holds, and batches a queue may be ahead of the merge
/// by: what is held is bounded by the queues, not by the trace.
const BATCH: usize = 32;
const AHEAD: usize = 2;

/// What [`branch_samples`] met: samples made, instructions, decode errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleCounts {
    pub samples: u64,
    pub instructions: u64,
    pub errors: u64,
    /// Samples whose stack holds a branch decoded in an uncertain window.
    pub uncertain_samples: u64,
}

impl SampleCounts {
    fn add(&mut self, o: &SampleCounts) {
        self.samples += o.samples;
        self.instructions += o.instructions;
        self.errors += o.errors;
        self.uncertain_samples += o.uncertain_samples;
    }
}

/// A sample made on a decoding thread, with its own copy of the stack.
struct Made {
    cpu: u32,
    ip: u64,
    time: u64,
    period: u64,
    ring: Ring,
}

/// Decodes every queue over the image `image` picks (`tl`, or `code` for
/// [`ImageMode::Static`]) and hands `emit` a sample every `period`
/// instructions with the branches taken before it (the last
/// [`super::DEPTH`]), as `perf inject --itrace=il64` makes them, all
/// queues' samples in (time, queue) order.
pub fn branch_samples(
    plan: Plan<'_>,
    queues: &[Queue],
    image: ImageMode,
    (tl, code): (&CodeTimeline, &CodeTimeline),
    period: u64,
    emit: &mut impl FnMut(&BranchSample<'_>),
) -> Result<SampleCounts, Error> {
    match image {
        ImageMode::Timeline => samples_over(plan, queues, &Interval(tl), true, tl, period, emit),
        ImageMode::PerfStyle => samples_over(plan, queues, &PerfStyle(tl), false, tl, period, emit),
        ImageMode::Static => samples_over(plan, queues, &Static(code), false, tl, period, emit),
    }
}

/// [`branch_samples`] over `code`.
fn samples_over<C: CodeSource + Sync>(
    plan: Plan<'_>,
    queues: &[Queue],
    code: &C,
    upper_bounds: bool,
    tl: &CodeTimeline,
    period: u64,
    emit: &mut impl FnMut(&BranchSample<'_>),
) -> Result<SampleCounts, Error> {
    std::thread::scope(|s| {
        let mut lanes = Vec::with_capacity(queues.len());
        let mut workers = Vec::with_capacity(queues.len());
        for (i, q) in queues.iter().enumerate() {
            let (tx, rx) = sync_channel::<Vec<Made>>(AHEAD);
            let work = move || {
                let mut batch = Vec::with_capacity(BATCH);
                let mut send = |s: &BranchSample<'_>| {
                    batch.push(Made { cpu: s.cpu, ip: s.ip, time: s.time, period: s.period, ring: s.branches.clone() });
                    if batch.len() == BATCH {
                        // A closed lane (the merge gave up) leaves nothing to do but finish.
                        let _ = tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
                    }
                };
                let counts = {
                    let mut dec = decoder(plan.setup, code, upper_bounds);
                    let mut sink = BranchStacks::new(i, q.cpu, period, tl, plan.setup.filter, &mut send);
                    // Each run of the AUX data on its own: nothing is known across a gap.
                    for (base, piece) in q.pieces() {
                        sink.restart();
                        dec.reset_at(piece, base);
                        dec.run_with(&mut sink);
                    }
                    SampleCounts {
                        samples: sink.samples,
                        instructions: sink.instructions,
                        errors: sink.errors,
                        uncertain_samples: sink.uncertain_samples,
                    }
                };
                if !batch.is_empty() {
                    let _ = tx.send(batch);
                }
                counts
            };
            workers.push(std::thread::Builder::new().name("brstack".into()).spawn_scoped(s, work).map_err(Error::Spawn)?);
            lanes.push(Lane { rx, held: VecDeque::new(), open: true });
        }
        merge(&mut lanes, emit);
        let mut total = SampleCounts::default();
        for w in workers {
            total.add(&w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        Ok(total)
    })
}

/// One queue's samples as the merge sees them.
struct Lane {
    rx: Receiver<Vec<Made>>,
    held: VecDeque<Made>,
    /// Whether more may come.
    open: bool,
}

impl Lane {
    /// The next sample, waiting for its batch when none is held; `None` when the queue is done.
    fn peek(&mut self) -> Option<&Made> {
        while self.held.is_empty() && self.open {
            match self.rx.recv() {
                Ok(batch) => self.held.extend(batch),
                Err(_) => self.open = false,
            }
        }
        self.held.front()
    }
}

/// Hands every lane's samples to `emit` in (time, queue) order.
fn merge(lanes: &mut [Lane], emit: &mut impl FnMut(&BranchSample<'_>)) {
    loop {
        let mut next: Option<(u64, usize)> = None;
        for (i, lane) in lanes.iter_mut().enumerate() {
            if let Some(m) = lane.peek() {
                if next.is_none_or(|(t, _)| m.time < t) {
                    next = Some((m.time, i));
                }
            }
        }
        let Some((_, i)) = next else { return };
        let m = lanes[i].held.pop_front().expect("peeked");
        emit(&BranchSample { queue: i, cpu: m.cpu, ip: m.ip, time: m.time, period: m.period, branches: &m.ring });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes whose batches (of sample times) come through their channels
    /// merge into (time, queue) order, every sample once.
    #[test]
    fn lanes_merge_in_time_then_queue_order() {
        let times: [&[&[u64]]; 3] = [&[&[1, 5], &[9]], &[], &[&[1, 2, 3], &[3, 10]]];
        let mut lanes: Vec<Lane> = times
            .iter()
            .map(|batches| {
                let (tx, rx) = sync_channel(batches.len());
                for b in batches.iter() {
                    let made = b.iter().map(|&time| Made { cpu: 0, ip: time, time, period: 1, ring: Ring::default() }).collect();
                    tx.send(made).unwrap();
                }
                Lane { rx, held: VecDeque::new(), open: true }
            })
            .collect();
        let mut got = Vec::new();
        merge(&mut lanes, &mut |s| got.push((s.time, s.queue)));
        assert_eq!(got, [(1, 0), (1, 2), (2, 2), (3, 2), (3, 2), (5, 0), (9, 0), (10, 2)]);
    }
}
