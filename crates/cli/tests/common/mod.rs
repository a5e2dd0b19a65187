//! Running the poketrace binary, shared by the cli's integration tests.

#![allow(dead_code)] // each test binary uses its own part

use std::path::Path;
use std::process::Command;

/// `poketrace ARGS`, which must succeed: its stdout.
pub fn poketrace(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap();
    String::from_utf8(testkit::success(out, &format!("poketrace {args:?}"))).unwrap()
}

/// `poketrace simulate ARGS -o OUT`, which must succeed.
pub fn simulate(out: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("simulate").args(args).arg("-o").arg(out).output().unwrap();
    testkit::success(o, &format!("simulate {args:?}"));
}
