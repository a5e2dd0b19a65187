//! Runs with deferred TIPs (`SimConfig::deferred_tips`: an indirect jump's
//! or call's TIP sent after the TNT of the branches after it), scored by
//! `check`: other packets for the same execution, decoded to the same
//! instructions, with no error.

use std::path::{Path, PathBuf};

use sim::check::check;
use sim::SimConfig;

fn dir(name: &str) -> PathBuf {
    testkit::fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim-deferred-tips").join(name))
}

#[test]
fn deferred_tips_change_the_packets_not_the_decode() {
    let cfg = SimConfig { cpus: 2, instructions: 40_000, pokes: 0, tsc_period: 100, ..SimConfig::default() };
    let (plain, deferred) = (dir("plain"), dir("deferred"));
    sim::simulate(&cfg, &plain).unwrap();
    sim::simulate(&SimConfig { deferred_tips: true, ..cfg.clone() }, &deferred).unwrap();
    let read = |d: &Path| std::fs::read(d.join("data")).unwrap();
    assert!(read(&plain) != read(&deferred), "deferring changed no packet");
    for r in check(&deferred).unwrap() {
        let t = &r.total;
        assert_eq!((t.correct, t.wrong, t.missing, t.errors, t.silent_wrong), (t.instructions, 0, 0, 0, 0), "{:?}: {t:?}", r.mode);
    }
}
