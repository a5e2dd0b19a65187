//! Cycle-accurate mode in the simulator: CYC packets before flow packets,
//! a CBR in every PSB+, perf's config bits and AUXTRACE_INFO words to match,
//! and what CYC timing buys the decoder over MTC alone.

use std::path::{Path, PathBuf};

use intel_pt::{Packet, PacketDecoder};
use perfdata::auxtrace::IntelPtInfo;
use perfdata::{PerfFile, RecordBody};
use sim::check::{check, Score};
use sim::SimConfig;
use tracedecode::ImageMode as Mode;

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim-cyc").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Each CPU's trace, the AUXTRACE_INFO and the PT event's config.
fn read(d: &Path, cpus: usize) -> (Vec<Vec<u8>>, IntelPtInfo, u64) {
    let file = PerfFile::open(d).unwrap();
    let mut trace = vec![Vec::new(); cpus];
    let mut info = None;
    for r in file.records() {
        match r.unwrap().body {
            RecordBody::Auxtrace(a) => trace[a.cpu as usize].extend_from_slice(a.data),
            RecordBody::AuxtraceInfo(i) => info = Some(IntelPtInfo::parse(&i).unwrap()),
            _ => {}
        }
    }
    let info = info.expect("AUXTRACE_INFO");
    let config = file.attrs().iter().find(|a| a.attr.type_ as u64 == info.pmu_type).expect("the PT event").attr.config;
    (trace, info, config)
}

/// CYC packets, and PSB+s, each of which must have a CBR of 20.
fn count_cyc(cpu: usize, t: &[u8]) -> usize {
    let (mut cycs, mut psbs, mut in_psb, mut cbr) = (0, 0, false, false);
    let mut dec = PacketDecoder::new(t);
    while let Some((off, p)) = dec.next_packet().unwrap() {
        match p {
            Packet::Psb => (in_psb, cbr, psbs) = (true, false, psbs + 1),
            Packet::PsbEnd => {
                assert!(cbr, "cpu {cpu}: PSB+ without CBR before {off:#x}");
                in_psb = false;
            }
            Packet::Cbr(r) => {
                assert!(in_psb && r == 20, "cpu {cpu}: CBR {r} at {off:#x}");
                cbr = true;
            }
            Packet::Cyc(c) => {
                assert!(c > 0 && !in_psb, "cpu {cpu}: CYC {c} at {off:#x}");
                cycs += 1;
            }
            _ => {}
        }
    }
    assert!(psbs > 2, "cpu {cpu}: {psbs} PSBs");
    cycs
}

fn timeline(d: &Path) -> Score {
    check(d).unwrap().into_iter().find(|r| r.mode == Mode::Timeline).unwrap().total
}

/// With wide MTC periods (32 CTC ticks, 800 ns) many pokes fall inside the
/// time an instruction is known to run in; CYC narrows that to the time
/// between two branches, and the decode becomes exact where MTC alone
/// guesses wrong (and loses the truth's path for a while) or is unsure.
#[test]
fn cyc_narrows_mtc_windows_around_pokes() {
    let base = SimConfig { cpus: 2, instructions: 60_000, pokes: 200, mtc_freq: Some(5), seed: 3, ..SimConfig::default() };
    let (dm, dc) = (dir("mtc5"), dir("mtc5-cyc"));
    let s = sim::simulate(&base, &dm).unwrap();
    sim::simulate(&SimConfig { cyc_thresh: Some(0), ..base.clone() }, &dc).unwrap();

    let (mtc_trace, info, config) = read(&dm, 2);
    assert_eq!(config & 0x2, 0, "cyc off in the event's config");
    assert!(mtc_trace.iter().enumerate().all(|(c, t)| count_cyc(c, t) == 0));
    let (cyc_trace, info_c, config_c) = read(&dc, 2);
    // perf's cyc (config bit 1) and cyc_thresh (bits 19-22); AUXTRACE_INFO
    // words 14 (cyc_bit) and 15 (max_non_turbo_ratio) as perf fills them.
    assert_eq!((config_c & 0x2, config_c >> 19 & 0xf), (0x2, 0));
    assert_eq!((info.cyc_bit, info.max_nonturbo_ratio), (0x2, 10));
    assert_eq!(info_c, info);
    for (c, t) in cyc_trace.iter().enumerate() {
        let n = count_cyc(c, t);
        assert!(n > 5_000, "cpu {c}: {n} CYC packets");
    }

    let (m, c) = (timeline(&dm), timeline(&dc));
    eprintln!("MTC period 800 ns, timeline: MTC alone {m:?}; with CYC {c:?}");
    let total = s.instructions.iter().sum::<u64>();
    assert_eq!((m.instructions, c.instructions), (total, total));
    // MTC alone leaves instructions wrong or missing here, and uncertain
    // choices; CYC none wrong, and a tenth of the choices.
    assert!(m.correct < total && m.wrong > 0 && m.uncertain > 20, "MTC alone: {m:?}");
    assert_eq!((c.correct, c.errors), (total, 0), "{c:?}");
    assert!(c.uncertain * 10 <= m.uncertain, "MTC {m:?}, CYC {c:?}");
}

/// A threshold (perf's cyc_thresh 5: one CYC per 16 cycles at most) sends
/// fewer CYCs; decoding stays all but exact (a TNT's six branches share the
/// CYC of its first, and a skipped CYC widens that further: where a poke
/// falls inside, the instruction is reported uncertain).
#[test]
fn cyc_threshold_sends_fewer_and_still_decodes() {
    let base = SimConfig { cpus: 2, instructions: 30_000, pokes: 100, mtc_freq: Some(3), seed: 5, cyc_thresh: Some(0), ..SimConfig::default() };
    let (d0, d5) = (dir("thresh0"), dir("thresh5"));
    sim::simulate(&base, &d0).unwrap();
    sim::simulate(&SimConfig { cyc_thresh: Some(5), ..base.clone() }, &d5).unwrap();
    let (t0, _, _) = read(&d0, 2);
    let (t5, _, config) = read(&d5, 2);
    assert_eq!(config >> 19 & 0xf, 5);
    for c in 0..2 {
        let (n0, n5) = (count_cyc(c, &t0[c]), count_cyc(c, &t5[c]));
        assert!(n5 * 10 < n0 * 9 && n5 > 100, "cpu {c}: {n0} CYCs without a threshold, {n5} with");
    }
    let s = timeline(&d5);
    assert_eq!(s.errors, 0, "{s:?}");
    assert!(s.wrong <= s.uncertain && s.correct * 1000 >= s.instructions * 999, "{s:?}");
}
