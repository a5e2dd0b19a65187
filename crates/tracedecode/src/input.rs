//! One pass over a perf.data's records: the trace's AUXTRACE_INFO, TIME_CONV,
//! the AUX queues and the side-band for thread attribution.

use std::collections::HashMap;

use perfdata::abi::auxtrace_type;
use perfdata::auxtrace::{CsEtmInfo, IntelPtInfo};
use perfdata::{PerfFile, RecordBody, TimeConv};

use crate::queue::Queue;
use crate::threads::Threads;
use crate::Error;

/// The input's hardware trace, from its AUXTRACE_INFO.
pub enum Trace {
    IntelPt(IntelPtInfo),
    CoreSight(CsEtmInfo),
}

/// What a decode needs of a perf.data, read in one pass.
pub struct Input {
    /// The last Intel PT or CoreSight AUXTRACE_INFO.
    pub trace: Option<Trace>,
    pub time_conv: Option<TimeConv>,
    /// Ordered by (CPU, thread, mmap index), as perf orders its queues.
    pub queues: Vec<Queue>,
    pub threads: Threads,
}

impl Input {
    /// Reads every record of `file` once.
    pub fn read(file: &PerfFile) -> Result<Input, Error> {
        let mut trace = None;
        let mut time_conv = None;
        let mut queues: Vec<Queue> = Vec::new();
        let mut by_idx: HashMap<u32, usize> = HashMap::new();
        let mut threads = Threads::default();
        for r in file.records() {
            let r = r?;
            threads.observe(&r);
            match r.body {
                RecordBody::AuxtraceInfo(i) if i.auxtrace_type == auxtrace_type::INTEL_PT => trace = Some(Trace::IntelPt(IntelPtInfo::parse(&i)?)),
                RecordBody::AuxtraceInfo(i) if i.auxtrace_type == auxtrace_type::CS_ETM => trace = Some(Trace::CoreSight(CsEtmInfo::parse(&i)?)),
                RecordBody::TimeConv(t) => time_conv = Some(t),
                // perf queues AUX data by mmap index: one buffer per CPU, or per thread.
                RecordBody::Auxtrace(a) => match by_idx.get(&a.idx) {
                    Some(&q) => queues[q].trace.extend_from_slice(a.data),
                    None => {
                        by_idx.insert(a.idx, queues.len());
                        queues.push(Queue { idx: a.idx, cpu: a.cpu, thread: (a.cpu == u32::MAX).then_some(a.tid as i32), trace: a.data.to_vec() });
                    }
                },
                _ => {}
            }
        }
        queues.sort_by_key(|q| (q.cpu, q.thread, q.idx));
        threads.finish();
        Ok(Input { trace, time_conv, queues, threads })
    }
}
