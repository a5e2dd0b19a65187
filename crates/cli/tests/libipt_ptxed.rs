//! libipt's decoder test suite for ptxed: every case folder with a
//! `ptxed.args` is run through `poketrace ptxed` with those arguments, in the
//! folder, and its output compared with `ptxed.exp` as libipt's own test
//! script compares (`diff -ub`: runs of blanks count as one, trailing blanks
//! none; the `.exp` files are written by libipt's pttc and differ from
//! ptxed's output in blanks only).
//!
//! Not every case passes yet, so the test holds a ratchet:
//! `libipt_ptxed.passing` lists the cases that pass. A listed case that
//! fails is a regression; a case that passes unlisted must be added, so
//! that the list stays exact. The totals are always printed.
//!
//! Cases: `$POKETRACE_LIBIPT_PTT`, else `../shared/libipt-ptt/cases` beside
//! the clone; missing, the test fails in CI and is skipped elsewhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longer than any case needs by far: a case still running is hung.
const CASE_TIMEOUT: Duration = Duration::from_secs(20);

fn cases_dir() -> PathBuf {
    match std::env::var_os("POKETRACE_LIBIPT_PTT") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/libipt-ptt/cases"),
    }
}

/// A line as `diff -b` sees it: blanks runs as one space, none at the end.
fn normalized(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What ptxed prints in `case`, or why it could not be run.
fn run_case(case: &Path) -> Result<String, String> {
    let args = std::fs::read_to_string(case.join("ptxed.args")).map_err(|e| format!("ptxed.args: {e}"))?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_poketrace"))
        .arg("ptxed")
        .args(args.split_whitespace())
        .current_dir(case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait().map_err(|e| format!("wait: {e}"))? {
            Some(_) => break,
            None if start.elapsed() > CASE_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("still running after {CASE_TIMEOUT:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    let out = child.wait_with_output().map_err(|e| format!("output: {e}"))?;
    if !out.stderr.is_empty() && out.stdout.is_empty() {
        return Err(String::from_utf8_lossy(&out.stderr).trim_end().to_string());
    }
    String::from_utf8(out.stdout).map_err(|e| format!("output is not UTF-8: {e}"))
}

/// `None` when `ours` matches `expected` line for line; else the first lines
/// that differ, as a short report.
fn difference(expected: &str, ours: &str) -> Option<String> {
    let exp: Vec<String> = expected.lines().map(normalized).collect();
    let got: Vec<String> = ours.lines().map(normalized).collect();
    let at = (0..exp.len().max(got.len())).find(|&i| exp.get(i) != got.get(i))?;
    let show = |lines: &[String]| lines.iter().skip(at).take(3).map(|l| format!("      {l}")).collect::<Vec<_>>().join("\n");
    Some(format!("    at line {}: expected\n{}\n    got\n{}", at + 1, show(&exp), show(&got)))
}

#[test]
fn libipt_ptxed_cases_match_the_ratchet() {
    let dir = cases_dir();
    if !testkit::have(dir.is_dir(), &format!("libipt test cases not found at {}", dir.display())) {
        return;
    }
    let listed: BTreeSet<String> = include_str!("libipt_ptxed.passing").lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("ptxed.args").is_file()).collect();
    cases.sort();
    assert!(!cases.is_empty(), "no case with a ptxed.args in {}", dir.display());
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    for l in &listed {
        assert!(cases.iter().any(|c| &name(c) == l), "libipt_ptxed.passing lists {l}, which is not a case in {}", dir.display());
    }

    let (mut passed, mut failed) = (0, 0);
    let mut regressions = Vec::new();
    let mut unlisted = Vec::new();
    for case in &cases {
        let case_name = name(case);
        let expected = std::fs::read_to_string(case.join("ptxed.exp")).unwrap_or_default();
        let diff = match run_case(case) {
            Ok(ours) => difference(&expected, &ours),
            Err(why) => Some(format!("    did not run: {why}")),
        };
        match diff {
            None => {
                passed += 1;
                if !listed.contains(&case_name) {
                    unlisted.push(case_name);
                }
            }
            Some(report) => {
                failed += 1;
                if listed.contains(&case_name) {
                    regressions.push(format!("  {case_name}\n{report}"));
                } else if std::env::var_os("POKETRACE_PTXED_VERBOSE").is_some() {
                    eprintln!("{case_name}\n{report}");
                }
            }
        }
    }
    println!("ptxed: {passed} passed, {failed} failed");
    for case in &unlisted {
        println!("passes but is not in libipt_ptxed.passing, add the line: {case}");
    }
    assert!(regressions.is_empty(), "{} listed cases fail:\n{}", regressions.len(), regressions.join("\n"));
    assert!(unlisted.is_empty(), "{} cases pass that libipt_ptxed.passing does not list (lines above)", unlisted.len());
}
