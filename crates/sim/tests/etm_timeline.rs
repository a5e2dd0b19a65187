//! ETMv4 runs scored by `check`: the timeline mode decodes code that
//! changes between two timestamps by the trace, so no instruction is
//! silently wrong, where perf-style (the code at the latest timestamp) is.

use std::path::{Path, PathBuf};

use isa::Arch;
use sim::check::{check, ModeReport};
use sim::{Protocol, SimConfig};
use tracedecode::ImageMode as Mode;

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("etm-timeline").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run(protocol: Protocol, name: &str) -> Vec<ModeReport> {
    let cfg = SimConfig { arch: Arch::Aarch64, cpus: 4, instructions: 200_000, pokes: 400, protocol, seed: 11, ..SimConfig::default() };
    let d = dir(name);
    sim::simulate(&cfg, &d).unwrap();
    check(&d).unwrap()
}

fn mode(r: &[ModeReport], m: Mode) -> &ModeReport {
    r.iter().find(|x| x.mode == m).unwrap()
}

#[test]
fn timeline_mode_is_never_silently_wrong_on_int3_runs() {
    let r = run(Protocol::Int3, "int3");
    let (perf, tl) = (mode(&r, Mode::PerfStyle), mode(&r, Mode::Timeline));
    // The run has pokes that matter: the code at the latest timestamp goes wrong.
    assert!(perf.total.wrong > 0, "perf-style: {:?}", perf.total);
    assert_eq!(tl.total.wrong, 0, "timeline: {:?}", tl.total);
    assert_eq!(tl.total.errors, 0, "timeline: {:?}", tl.total);
    // What the trace could not decide is reported, and it is little.
    assert!(tl.total.missing <= tl.total.uncertain, "timeline: {:?}", tl.total);
    assert!(tl.total.correct * 1000 >= tl.total.instructions * 999, "timeline: {:?}", tl.total);
}

#[test]
fn timeline_mode_reports_pre_post_windows_as_uncertain() {
    let r = run(Protocol::PrePost, "prepost");
    let tl = mode(&r, Mode::Timeline);
    assert_eq!(tl.total.wrong, 0, "timeline: {:?}", tl.total);
    assert!(tl.total.uncertain > 0, "timeline: {:?}", tl.total);
}
