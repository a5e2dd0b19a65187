//! Queues decoded on a bounded pool of threads, their lines merged in
//! order as they come.

use crate::lanes::{Finish, Lanes};
use crate::line::Out;
use crate::merge::merge;
use crate::Error;

/// Queues decoded at once at most, whatever the cores: a decoder waiting
/// for the merge costs no CPU, and while every queue has one the lines
/// held stay bounded. Past this, the first queues' lines are held until
/// the last queues get a decoder.
const LIVE_QUEUES: usize = 256;

/// Decodes `queues` queues, `decode(queue, lanes)` handing each one's lines
/// to `lanes` in batches, on at most [`LIVE_QUEUES`] threads (or the
/// cores, if more), and passes every line to `emit` in (time, queue) order.
/// Threads the system refuses are done without, if one starts.
pub(crate) fn decode_merged<E: From<Error>>(
    queues: usize,
    decode: impl Fn(usize, &Lanes) + Sync,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = queues.min(LIVE_QUEUES.max(cores));
    let lanes = Lanes::new(queues);
    std::thread::scope(|s| {
        let mut started = 0;
        for _ in 0..workers {
            let (lanes, decode) = (&lanes, &decode);
            let worker = move || {
                while let Some(queue) = lanes.take() {
                    let _done = Finish { lanes, queue };
                    decode(queue, lanes);
                }
            };
            match std::thread::Builder::new().name("decode".into()).spawn_scoped(s, worker) {
                Ok(_) => started += 1,
                Err(e) if started == 0 => {
                    lanes.close();
                    return Err(Error::Spawn(e).into());
                }
                Err(_) => break,
            }
        }
        let merged = merge(&lanes, queues, emit);
        lanes.close();
        merged
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::line::Kind;

    /// More queues than threads, each with more batches than a decoder may
    /// be ahead by: every line comes out once, in (time, queue) order, and
    /// no decoder waits for ever on a merge that waits for another queue.
    #[test]
    fn more_queues_than_threads_all_merge_in_order() {
        let queues = 3 * LIVE_QUEUES + 7;
        let lines_of = |queue: usize| (0..5 * queue % 11 + 6).map(move |k| (k as u64 / 3 + (queue % 4) as u64, queue, k));
        let decode = |queue: usize, lanes: &Lanes| {
            for (time, queue, k) in lines_of(queue) {
                let kind = Kind::Branch { from: k as u64, to: 0, flags: "jmp", from_len: None, from_bytes: Default::default(), insns: 0 };
                lanes.send(queue, vec![Out { time, queue, cpu: 0, kind }]);
            }
        };
        let mut got = Vec::new();
        decode_merged::<Error>(queues, decode, &mut |l| {
            let Kind::Branch { from, .. } = l.kind else { unreachable!("only branches are sent") };
            got.push((l.time, l.queue, from as usize));
            Ok(())
        })
        .unwrap();
        let mut all: Vec<(u64, usize, usize)> = (0..queues).flat_map(lines_of).collect();
        all.sort_by_key(|&(time, queue, _)| (time, queue));
        assert_eq!(got.len(), all.len());
        assert_eq!(got, all);
    }

    /// An output that fails stops the merge, and the decoders still running
    /// are not left waiting: the call returns the output's error.
    #[test]
    fn a_failed_output_stops_every_decoder() {
        let decode = |queue: usize, lanes: &Lanes| {
            for k in 0..100u64 {
                lanes.send(
                    queue,
                    vec![Out {
                        time: k,
                        queue,
                        cpu: 0,
                        kind: Kind::Branch { from: 0, to: 0, flags: "jmp", from_len: None, from_bytes: Default::default(), insns: 0 },
                    }],
                );
            }
        };
        let mut n = 0;
        let r = decode_merged(600, decode, &mut |_| {
            n += 1;
            if n == 50 {
                return Err(Error::Setup("output failed".into()));
            }
            Ok(())
        });
        assert!(matches!(r, Err(Error::Setup(m)) if m == "output failed"));
    }
}
