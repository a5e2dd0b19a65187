//! Runs that leave the traced code and trap on undefined instructions
//! (`SimConfig::exits`), scored by `check`: the timeline decodes what was
//! traced with no error and is never wrong without a warning (silent wrong
//! 0), while the images that ignore or misplace the pokes are silently wrong.

use std::path::{Path, PathBuf};

use sim::check::{check, ModeReport};
use sim::SimConfig;
use tracedecode::ImageMode as Mode;

fn dir(name: &str) -> PathBuf {
    testkit::fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim-exits").join(name))
}

fn mode(r: &[ModeReport], m: Mode) -> &ModeReport {
    r.iter().find(|x| x.mode == m).unwrap()
}

#[test]
fn exits_without_pokes_decode_exactly_in_every_mode() {
    let d = dir("no-pokes");
    let cfg = SimConfig { cpus: 2, instructions: 40_000, pokes: 0, tsc_period: 50, exits: true, ..SimConfig::default() };
    let s = sim::simulate(&cfg, &d).unwrap();
    // The truth holds only what was traced: fewer than ran.
    assert!(s.instructions.iter().all(|&n| n > 30_000 && n < 40_000), "{s:?}");
    for r in check(&d).unwrap() {
        let t = &r.total;
        assert_eq!((t.correct, t.wrong, t.missing, t.errors, t.silent_wrong), (t.instructions, 0, 0, 0, 0), "{:?}: {t:?}", r.mode);
    }
}

#[test]
fn with_pokes_the_timeline_is_never_silently_wrong_and_the_static_image_is() {
    for (seed, tsc_period) in [(1, 400), (2, 20)] {
        let d = dir(&format!("pokes-{seed}"));
        let cfg = SimConfig { instructions: 100_000, pokes: 300, seed, tsc_period, exits: true, ..SimConfig::default() };
        sim::simulate(&cfg, &d).unwrap();
        let r = check(&d).unwrap();
        let (timeline, perf, stat) = (&mode(&r, Mode::Timeline).total, &mode(&r, Mode::PerfStyle).total, &mode(&r, Mode::Static).total);
        eprintln!("seed {seed}, TSC every {tsc_period} ns:\n timeline {timeline:?}\n perf-style {perf:?}\n static {stat:?}");
        assert_eq!((timeline.errors, timeline.silent_wrong), (0, 0), "timeline: {timeline:?}");
        assert!(timeline.correct * 1000 > timeline.instructions * 999, "{timeline:?}");
        // Decoding over the code before any poke is wrong, with no warning.
        assert!(stat.silent_wrong > 1000 && stat.silent_wrong <= stat.wrong, "{stat:?}");
    }
}
