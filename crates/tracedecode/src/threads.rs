//! Thread attribution: which task ran on each CPU when, from the side-band
//! records (ITRACE_START, context switches, COMM), as perf attributes samples.

use std::collections::HashMap;
use std::ops::Range;

use perfdata::abi::misc;
use perfdata::{Record, RecordBody};

use crate::queue::Queue;

/// Which task ran on each CPU when, and the tasks' names.
#[derive(Default)]
pub struct Threads {
    /// Per CPU: (from time, pid, tid), in time order once finished.
    runs: HashMap<u32, Vec<(u64, i32, i32)>>,
    comms: HashMap<i32, String>,
    /// Thread id -> process id, from COMM records (for per-thread buffers).
    pids: HashMap<i32, i32>,
}

impl Threads {
    /// Takes what `r` says about who runs where (records in file order).
    pub fn observe(&mut self, r: &Record<'_>) {
        let (Some(cpu), time) = (r.sample_id.cpu, r.sample_id.time.unwrap_or(0)) else {
            if let RecordBody::Comm(c) = &r.body {
                self.comm(c.pid as i32, c.tid as i32, c.comm);
            }
            return;
        };
        let run = match &r.body {
            RecordBody::ItraceStart(i) => Some((i.pid as i32, i.tid as i32)),
            RecordBody::SwitchCpuWide(sw) if r.misc & misc::SWITCH_OUT != 0 => Some((sw.next_prev_pid as i32, sw.next_prev_tid as i32)),
            RecordBody::SwitchCpuWide(_) | RecordBody::Switch if r.misc & misc::SWITCH_OUT == 0 => {
                r.sample_id.pid.zip(r.sample_id.tid).map(|(p, t)| (p as i32, t as i32))
            }
            RecordBody::Comm(c) => {
                self.comm(c.pid as i32, c.tid as i32, c.comm);
                None
            }
            _ => None,
        };
        if let Some((pid, tid)) = run {
            self.runs.entry(cpu).or_default().push((time, pid, tid));
        }
    }

    fn comm(&mut self, pid: i32, tid: i32, name: &[u8]) {
        self.comms.insert(tid, String::from_utf8_lossy(name).into_owned());
        self.pids.insert(tid, pid);
    }

    /// Puts each CPU's runs in time order, once every record is observed.
    pub fn finish(&mut self) {
        for v in self.runs.values_mut() {
            v.sort_by_key(|r| r.0);
        }
    }

    /// (pid, tid, comm) that produced a line of `queue`: the buffer's own
    /// thread for per-thread buffers, else the task on that CPU at that time.
    pub fn at(&self, queue: &Queue, cpu: u32, time: u64) -> Option<(i32, i32, &str)> {
        self.at_span(queue, cpu, time).0
    }

    /// [`Self::at`], and the times around `time` over which its answer for
    /// `queue` and `cpu` holds (until the next switch on that CPU).
    pub fn at_span(&self, queue: &Queue, cpu: u32, time: u64) -> (Option<(i32, i32, &str)>, Range<u64>) {
        let (pid, tid, span) = match queue.thread {
            Some(tid) => (self.pids.get(&tid).copied().unwrap_or(-1), tid, 0..u64::MAX),
            None => {
                let Some(v) = self.runs.get(&cpu) else { return (None, 0..u64::MAX) };
                let next = v.partition_point(|r| r.0 <= time);
                let end = v.get(next).map_or(u64::MAX, |r| r.0);
                let Some(i) = next.checked_sub(1) else { return (None, 0..end) };
                (v[i].1, v[i].2, v[i].0..end)
            }
        };
        let comm = self.comms.get(&tid).map_or(if tid == 0 { "swapper" } else { "" }, String::as_str);
        (Some((pid, tid, comm)), span)
    }
}
