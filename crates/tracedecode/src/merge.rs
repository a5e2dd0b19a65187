//! The ordered merge: every queue's lines in (time, queue) order, as perf
//! merges its queues, streamed as the decoders make them.

use crate::lanes::Lanes;
use crate::line::Out;

/// One queue's lines as they come: the batch being taken apart.
struct Head {
    queue: usize,
    batch: std::vec::IntoIter<Out>,
}

impl Head {
    /// The queue's next line; `None` once its decoder is done.
    fn next(&mut self, lanes: &Lanes) -> Option<Out> {
        loop {
            if let Some(l) = self.batch.next() {
                return Some(l);
            }
            self.batch = lanes.recv(self.queue)?.into_iter();
        }
    }
}

/// Every queue's lines to `emit` in (time, queue) order: each queue's
/// lines come in its own order, the earliest of the queues' next lines
/// first (so, lines in time order within each queue, what sorting all of
/// them by time and queue gives). A queue's lines that come before every
/// other queue's next line go out in a run, without the heap: lines
/// between two timing packets share a time, so runs are long.
pub(crate) fn merge<E>(lanes: &Lanes, queues: usize, emit: &mut impl FnMut(&Out) -> Result<(), E>) -> Result<(), E> {
    use std::cmp::Reverse;
    let mut heads: Vec<Head> = (0..queues).map(|queue| Head { queue, batch: Vec::new().into_iter() }).collect();
    let mut next: Vec<Option<Out>> = heads.iter_mut().map(|h| h.next(lanes)).collect();
    let mut order: std::collections::BinaryHeap<Reverse<(u64, usize)>> =
        next.iter().enumerate().filter_map(|(i, l)| l.as_ref().map(|l| Reverse((l.time, i)))).collect();
    while let Some(Reverse((_, i))) = order.pop() {
        let Some(mut line) = next[i].take() else { continue };
        // The next line of the other queues, which this run stops before.
        let bound = order.peek().map_or((u64::MAX, usize::MAX), |r| r.0);
        loop {
            emit(&line)?;
            match heads[i].next(lanes) {
                Some(l) if (l.time, i) < bound => line = l,
                Some(l) => {
                    order.push(Reverse((l.time, i)));
                    next[i] = Some(l);
                    break;
                }
                None => break,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::line::Kind;

    /// The streaming merge gives what sorting all lines by (time, queue)
    /// gives, for queues whose lines come in time order, in batches of any
    /// size (empty ones too), from decoders on other threads.
    #[test]
    fn merge_is_a_stable_sort_by_time_and_queue() {
        let mut rng = testkit::Rng(0x5eed);
        for round in 0..50 {
            let queues = 1 + rng.below(6) as usize;
            let mut all: Vec<(u64, usize, u64)> = Vec::new();
            let lanes = Lanes::new(queues);
            std::thread::scope(|s| {
                for queue in 0..queues {
                    let (mut time, n) = (rng.below(10), rng.below(300) as usize);
                    let mut lines = Vec::new();
                    for k in 0..n {
                        time += rng.below(3); // ties within and across queues
                        lines.push((time, queue, k as u64));
                    }
                    all.extend(&lines);
                    let mut cuts: Vec<usize> = (0..rng.below(5)).map(|_| rng.below(n as u64 + 1) as usize).collect();
                    assert_eq!(lanes.take(), Some(queue));
                    let lanes = &lanes;
                    s.spawn(move || {
                        let _done = crate::lanes::Finish { lanes, queue };
                        cuts.push(0);
                        cuts.push(lines.len());
                        cuts.sort();
                        for w in cuts.windows(2) {
                            let batch = lines[w[0]..w[1]].iter().map(|&(time, queue, k)| Out {
                                time,
                                queue,
                                cpu: k as u32,
                                kind: Kind::Branch { from: k, to: 0, flags: "jcc", from_len: None, from_bytes: Default::default(), insns: 0 },
                            });
                            lanes.send(queue, batch.collect());
                        }
                    });
                }
                let mut got = Vec::new();
                merge::<()>(&lanes, queues, &mut |l| {
                    got.push((l.time, l.queue, u64::from(l.cpu)));
                    Ok(())
                })
                .unwrap();
                all.sort_by_key(|&(time, queue, _)| (time, queue));
                assert_eq!(got, all, "round {round}");
            });
        }
    }
}
