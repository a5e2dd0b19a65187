//! With MTC and CYC timing, PSB segments decoded in parallel give the events
//! of one sequential decode (CYC timing starts again at each PSB+, from its
//! TSC and CBR, in both), on simulated runs with poked code.

#[path = "common/flow.rs"]
mod common;

use codeimage::window::Interval;
use intel_pt::flow::{CycConv, FlowDecoder, FlowEvent, MtcConv};
use intel_pt::parallel::{segments, ParallelFlow};

/// The simulator's MTC period (2^3 CTC ticks of 25 TSC ticks) and max non-turbo ratio.
const MTC: MtcConv = MtcConv { shift: 3, ratio_n: 25, ratio_d: 1 };
const CYC: CycConv = CycConv { max_non_turbo_ratio: 10 };

#[test]
fn parallel_equals_sequential_with_cyc_timing() {
    for (protocol, cyc_thresh) in [(sim::Protocol::Int3, 0), (sim::Protocol::PrePost, 4)] {
        let cfg = sim::SimConfig {
            cpus: 2,
            protocol,
            pokes: 150,
            instructions: 40_000,
            psb_period: 1024,
            mtc_freq: Some(3),
            cyc_thresh: Some(cyc_thresh),
            ..sim::SimConfig::default()
        };
        let name = format!("parallel-cyc-{protocol}");
        let (_, run) = common::simulate(&name, &cfg, None);
        let code = Interval(&run.full);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("thread pool");
        let par = ParallelFlow::new(FlowDecoder::new(&[], &code, run.cfg.clone()).with_mtc(MTC).with_cyc(CYC));
        let mut narrow = 0;
        for (cpu, trace) in run.aux.iter().enumerate() {
            assert!(segments(trace).len() > 10, "{name} cpu {cpu}: few segments");
            let mut want = Vec::new();
            FlowDecoder::new(trace, &code, run.cfg.clone()).with_mtc(MTC).with_cyc(CYC).run(|e| want.push(e));
            let mut got = Vec::new();
            pool.install(|| par.run(trace, |e| got.push(e)));
            if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
                panic!("{name} cpu {cpu}: event {i} differs: parallel {:x?}, sequential {:x?}", got.get(i), want.get(i));
            }
            // CYC timing is at work: most instructions within 100 ns.
            narrow += want.iter().filter(|e| matches!(e, FlowEvent::Insn { lo, hi, .. } if hi - lo < 100)).count();
            assert!(!want.iter().any(|e| matches!(e, FlowEvent::Error { .. })), "{name} cpu {cpu}: a decode error");
        }
        assert!(narrow > 60_000, "{name}: {narrow} instructions in windows under 100 ns");
    }
}
