//! Set-up shared by the workspace's tests, benches and examples (a
//! dev-dependency only): when a missing external tool (perf,
//! trc_pkt_lister, gcc, qemu) skips a test and when it fails it, running
//! perf with a clean environment, fresh scratch directories, and a
//! deterministic RNG so random cases are the same every run;
//! [`modules`], each crate's module graph, by which a test keeps the
//! workspace free of import cycles; and inputs written by hand: [`le`]
//! integers, [`elf`] headers, [`perf`] side-band records.

pub mod elf;
pub mod le;
pub mod modules;
pub mod perf;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether a missing tool or data set must fail the test rather than skip
/// it: when `CI` or `POKETRACE_REQUIRE_PERF` is set (scripts/test.sh sets
/// the latter).
pub fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("POKETRACE_REQUIRE_PERF").is_some()
}

/// `ok`; when it is false, a note `skipping: WHAT` on stderr, or a panic
/// naming `what` (what is missing or failed) when [`required`].
#[track_caller]
pub fn have(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(!required(), "{what} (required: CI or POKETRACE_REQUIRE_PERF is set)");
        eprintln!("skipping: {what}");
    }
    ok
}

/// Whether `program arg` runs and exits with success.
pub fn runs(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// Whether Linux perf (Debian linux-perf) runs; see [`have`] for when its
/// absence fails the test.
#[track_caller]
pub fn perf_available() -> bool {
    have(runs("perf", "--version"), "perf not installed (`perf --version` failed)")
}

/// A `perf` command with a private HOME (no build-id cache shared between
/// tests running in parallel) and no user config.
pub fn perf_command(home: &Path) -> Command {
    let mut c = Command::new("perf");
    c.env("HOME", home).env("PERF_CONFIG", "/dev/null");
    c
}

/// `perf ARGS` as [`perf_command`] runs it, which must succeed: its stdout.
#[track_caller]
pub fn perf(home: &Path, args: &[&str]) -> String {
    let out = perf_command(home).args(args).output().unwrap();
    String::from_utf8(success(out, &format!("perf {args:?}"))).unwrap()
}

/// The stdout of `out`, which must have succeeded (else a panic naming
/// `what` with its stderr).
#[track_caller]
pub fn success(out: Output, what: &str) -> Vec<u8> {
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// `dir`, emptied if it exists and created: a scratch directory that holds
/// nothing from an earlier run.
pub fn fresh_dir(dir: impl AsRef<Path>) -> PathBuf {
    let d = dir.as_ref().to_path_buf();
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fresh (emptied) directory `CARGO_TARGET_TMPDIR/PARTS...`, for
/// integration tests and benches, where cargo sets that variable.
#[macro_export]
macro_rules! scratch {
    ($($part:expr),+ $(,)?) => {{
        let mut d = ::std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        $(d.push($part);)+
        $crate::fresh_dir(d)
    }};
}

/// A deterministic xorshift64 (13, 7, 17), so random test cases are the
/// same every run. The state must not be zero.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        let x = self.0 ^ (self.0 << 13);
        let x = x ^ (x >> 7);
        self.0 = x ^ (x << 17);
        self.0
    }
    /// In `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn bool(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// The low `n` bits of the next value (n in 1..=64).
    pub fn bits(&mut self, n: u32) -> u64 {
        if n == 64 {
            self.next()
        } else {
            self.next() & ((1 << n) - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_xorshift64() {
        let mut r = Rng(1);
        // 1 -> 1 ^ 1<<13 = 0x2001; ^ >>7 = 0x2001 ^ 0x40 = 0x2041; ^ <<17.
        assert_eq!(r.next(), 0x2041 ^ (0x2041 << 17));
        assert!((0..1000).all(|_| r.below(7) < 7 && r.bits(5) < 32));
    }

    #[test]
    fn fresh_dir_empties() {
        let d = std::env::temp_dir().join(format!("testkit-fresh-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("old"), b"x").unwrap();
        assert!(fresh_dir(&d).read_dir().unwrap().next().is_none());
        std::fs::remove_dir(&d).unwrap();
    }
}
