//! libipt's own test suite for `ptdump`: every case folder in
//! `libipt-ptt/cases` with a `ptdump.args` is run through `poketrace ptdump`
//! with those arguments, in that folder, and what it prints is compared
//! with `ptdump.exp` line by line as libipt's test script compares them
//! (`diff -b`: the amount of white space between words does not count,
//! since the expected lines are hand-aligned in the `.ptt` sources).
//!
//! The cases are found at `$POKETRACE_LIBIPT_PTT` (the `cases` folder) or at
//! `../shared/libipt-ptt/cases` beside the repository. Without them the test
//! skips, unless CI (or POKETRACE_REQUIRE_PERF) is set: then it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cases_dir() -> PathBuf {
    match std::env::var_os("POKETRACE_LIBIPT_PTT") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/libipt-ptt/cases"),
    }
}

/// A line with each run of white space as one space and none at the ends.
fn blanks_squeezed(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first lines where `got` and `want` differ (`-` expected, `+` got),
/// or `None` when they are the same but for white space.
fn difference(got: &str, want: &str) -> Option<String> {
    let (got, want): (Vec<_>, Vec<_>) = (got.lines().collect(), want.lines().collect());
    let differs = |&i: &usize| got.get(i).map(|l| blanks_squeezed(l)) != want.get(i).map(|l| blanks_squeezed(l));
    let lines: Vec<usize> = (0..got.len().max(want.len())).filter(differs).take(3).collect();
    if lines.is_empty() {
        return None;
    }
    let mut out = String::new();
    for i in lines {
        out += &format!("    line {}:\n      - {}\n      + {}\n", i + 1, want.get(i).unwrap_or(&"<end>"), got.get(i).unwrap_or(&"<end>"));
    }
    Some(out)
}

#[test]
fn libipt_ptdump_cases() {
    let dir = cases_dir();
    if !testkit::have(dir.is_dir(), &format!("libipt test cases not found at {}", dir.display())) {
        return;
    }
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("ptdump.args").is_file()).collect();
    cases.sort();
    assert!(!cases.is_empty(), "no case with a ptdump.args in {}", dir.display());
    let (mut failed, mut identical) = (Vec::new(), 0);
    for case in &cases {
        let args = std::fs::read_to_string(case.join("ptdump.args")).unwrap();
        let want = std::fs::read_to_string(case.join("ptdump.exp")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("ptdump").args(args.split_whitespace()).current_dir(case).output().unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        identical += usize::from(out.stdout == want.as_bytes());
        let problem = if !out.status.success() {
            Some(format!("    exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr).trim()))
        } else {
            difference(&got, &want)
        };
        if let Some(p) = problem {
            failed.push(format!("  {name} ({})\n{p}", args.trim()));
        }
    }
    let passed = cases.len() - failed.len();
    println!("ptdump: {passed} passed, {} failed; {identical} of {} byte for byte", failed.len(), cases.len());
    for f in &failed {
        println!("{f}");
    }
    assert!(failed.is_empty(), "ptdump: {} of {} libipt cases differ (listed above)", failed.len(), cases.len());
}

#[test]
fn difference_ignores_only_white_space() {
    assert_eq!(difference("a  b\nc\n", "a b \nc"), None);
    assert!(difference("a b\n", "a b\nc\n").unwrap().contains("<end>"));
    assert!(difference("ab\n", "a b\n").is_some());
}
