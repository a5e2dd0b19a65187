//! Helpers shared by the live tests: when to skip, perf, the poketrace binary.

#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};

pub use testkit::{have, runs as command_works};

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh scratch directory under the target dir.
pub fn scratch(name: &str) -> PathBuf {
    testkit::scratch!("record", name)
}

/// perf with a private HOME and no user config; returns (stdout, stderr).
pub fn perf(home: &Path, args: &[&str]) -> (String, String) {
    let out = testkit::perf_command(home).args(args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "perf {args:?} failed: {stderr}");
    (stdout, stderr)
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}
