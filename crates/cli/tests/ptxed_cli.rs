//! `poketrace ptxed` on bad input: missing, empty or cut-off files, bad
//! `--raw` ranges, garbage traces over garbage code. Each gets ptxed's
//! message and a non-zero exit where nothing can be decoded; none a panic.

use std::process::{Command, Output};

fn ptxed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("ptxed").args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str, bytes: &[u8]) -> String {
    let dir = testkit::fresh_dir(format!("{}/ptxed-cli/{name}", env!("CARGO_TARGET_TMPDIR")));
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

/// Deterministic bytes (xorshift), so a failure can be run again.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn missing_and_empty_files_and_bad_ranges_are_named() {
    let code = scratch("code.bin", &[0x90, 0x90, 0xc3]);
    let raw = format!("{code}:0x1000");
    let trace = scratch("trace.pt", &intel_pt::PSB);
    let empty = scratch("empty.pt", &[]);
    for (args, message) in [
        (vec!["--pt", "/nonexistent/trace.pt", "--raw", &raw], "ptxed: failed to open /nonexistent/trace.pt".to_string()),
        (vec!["--pt", &empty, "--raw", &raw], format!("ptxed: bad offset 0x0 into {empty}")),
        (vec!["--pt", &trace, "--raw", "/nonexistent/code.bin:0x1000"], "failed to load '/nonexistent/code.bin'".to_string()),
        (vec!["--pt", &trace, "--raw", &format!("{code}:8-16:0x1000")], "bad offset 0x8".to_string()),
        (vec!["--raw", &raw], "ptxed: no pt file".to_string()),
    ] {
        let o = ptxed(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(&message), "{args:?}: {}", stderr(&o));
    }
}

/// Garbage after a PSB, cut at every length up to 64 bytes and whole, over
/// garbage code that overlaps itself: the decode ends, reporting errors in
/// its output, never panicking.
#[test]
fn garbage_and_cut_traces_end_without_a_panic() {
    let code = scratch("garbage.bin", &garbage(7, 4096));
    for seed in 0..24 {
        let mut trace = intel_pt::PSB.to_vec();
        trace.extend(garbage(seed, 2048));
        for len in (1..=64).step_by(7).chain([trace.len()]) {
            let path = scratch(&format!("garbage-{seed}-{len}.pt"), &trace[..len]);
            let args = ["--pt", &path, "--raw", &format!("{code}:0x1000"), "--raw", &format!("{code}:0x1800"), "--no-inst", "--stat"];
            let o = ptxed(&args);
            assert!(matches!(o.status.code(), Some(0 | 1)), "{args:?}: {:?} {}", o.status, stderr(&o));
            assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
        }
    }
}
