//! Helpers shared by the live tests: when to skip, perf, the poketrace binary.

#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether a missing prerequisite must fail the test instead of skipping it:
/// in CI (`CI` set) or when POKETRACE_REQUIRE_PERF is set (scripts/test.sh in CI).
pub fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("POKETRACE_REQUIRE_PERF").is_some()
}

/// Skips (returns false) or, when [`required`], panics, naming what is missing.
pub fn have(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(!required(), "{what} (required: CI or POKETRACE_REQUIRE_PERF is set)");
        eprintln!("skipping: {what}");
    }
    ok
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn command_works(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// A fresh scratch directory under the target dir.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("record").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// perf with a private HOME and no user config; returns (stdout, stderr).
pub fn perf(home: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new("perf").args(args).env("HOME", home).env("PERF_CONFIG", "/dev/null").output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "perf {args:?} failed: {stderr}");
    (stdout, stderr)
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}
