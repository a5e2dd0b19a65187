//! What the `profile_*` tests share: a small C program with hot paths and
//! indirect calls built here, a simulated trace walking its real code, the
//! profile tools of LLVM 19 (Debian's bolt-19, llvm-19, clang-19), and the
//! program's functions.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// The program's source (crates/cli/tests/data/profile_hot.c).
pub const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/profile_hot.c");

/// An LLVM 19 tool by its Debian name (`NAME-19` on PATH, else in
/// /usr/lib/llvm-19/bin); None, or a failure when tools are required, if missing.
#[track_caller]
pub fn llvm_tool(name: &str) -> Option<PathBuf> {
    let versioned = format!("{name}-19");
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(&versioned))
        .chain([Path::new("/usr/lib/llvm-19/bin").join(name)])
        .find(|p| p.is_file());
    testkit::have(found.is_some(), &format!("{versioned} not installed (scripts/setup.sh --tests installs bolt-19, llvm-19, clang-19)"))
        .then(|| found.unwrap())
}

/// The program built into `dir/hot` with `cc` (`-O2 -Wl,--emit-relocs`, BOLT's relocation mode).
#[track_caller]
pub fn build(dir: &Path, cc: &str) -> Option<PathBuf> {
    let bin = dir.join("hot");
    let out = Command::new(cc).args(["-O2", "-g", "-Wl,--emit-relocs", "-o"]).arg(&bin).arg(SOURCE).output();
    let ok = out.as_ref().is_ok_and(|o| o.status.success());
    testkit::have(ok, &format!("{cc} could not build {SOURCE}: {out:?}")).then_some(bin)
}

/// `poketrace ARGS`, whatever its status.
pub fn poketrace(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap()
}

/// A simulated Intel PT trace of one CPU walking `bin`'s code, in `dir/trace`.
pub fn trace(dir: &Path, bin: &Path, instructions: u64, seed: u64) -> PathBuf {
    let trace = dir.join("trace");
    let n = instructions.to_string();
    let seed = seed.to_string();
    let args = ["simulate", "--elf", bin.to_str().unwrap(), "--cpus", "1", "--instructions", &n, "--seed", &seed, "-o", trace.to_str().unwrap()];
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap();
    testkit::success(out, "poketrace simulate --elf");
    trace
}

/// `poketrace profile TRACE --format FORMAT --binary BIN -o OUT`, which must succeed.
pub fn profile(trace: &Path, format: &str, bin: &Path, out: &Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace"))
        .arg("profile")
        .arg(trace)
        .args(["--format", format, "--binary"])
        .arg(bin)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    testkit::success(o, &format!("poketrace profile --format {format}"));
}

/// `program ARGS`, which must succeed: its stdout and stderr together.
#[track_caller]
pub fn run(program: &Path, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} {args:?} failed:\n{text}", program.display());
    text
}

/// The functions of `bin`'s symbol table: (start, end, name), sorted.
pub fn functions(bin: &Path) -> Vec<(u64, u64, String)> {
    let data = std::fs::read(bin).unwrap();
    let file = object::File::parse(&data[..]).unwrap();
    let mut f: Vec<_> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .map(|s| (s.address(), s.address() + s.size(), s.name().unwrap().to_string()))
        .collect();
    f.sort();
    f
}

/// The function of `fns` holding `addr`.
pub fn function_of(fns: &[(u64, u64, String)], addr: u64) -> Option<&str> {
    fns.iter().find(|f| addr >= f.0 && addr < f.1).map(|f| f.2.as_str())
}

/// The link-time addresses of `bin`'s executable segments, first to last.
pub fn code_span(bin: &Path) -> (u64, u64) {
    let data = std::fs::read(bin).unwrap();
    let file = object::File::parse(&data[..]).unwrap();
    let exec = file.segments().filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0));
    exec.fold((u64::MAX, 0), |(lo, hi), s| (lo.min(s.address()), hi.max(s.address() + s.size())))
}
