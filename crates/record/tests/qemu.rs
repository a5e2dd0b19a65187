//! The real-kernel test. This machine's kernel emits no TEXT_POKE; Debian's
//! cloud kernel does, booted under qemu (TCG, no KVM needed):
//! `scripts/qemu-guest/run.sh` runs `poketrace record` inside the guest while
//! it toggles a static key, a tracepoint, a kprobe, the function tracer and
//! a BPF program, and brings the perf.data directory back. Here, on the
//! host: Linux perf reads it, `perf script --show-text-poke-events` and
//! `poketrace pokes` print the same history, every poke's old bytes equal
//! the kcore copy once the earlier pokes are applied (record, perfdata and
//! codeimage together, on real kernel code), and the BPF program's JIT
//! image is there, byte for byte what the guest kernel printed of it.
//!
//! About 15-40 s. Needs qemu-system-x86, busybox-static, cpio, perf and a
//! C compiler with static libc; without them it skips, unless CI (or
//! POKETRACE_REQUIRE_PERF) is set: then it fails.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use codeimage::{from_perf_data, AnomalyKind, BaseImage};
use common::*;
use perfdata::{PerfFile, RecordBody};

/// Builds the poketrace binary (a no-op when `cargo test --workspace` built
/// it already) in the profile of this test, and returns its path.
fn poketrace_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf(); // target/<profile>
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "--quiet", "-p", "poketrace", "--bin", "poketrace"]).current_dir(workspace());
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().unwrap();
    assert!(status.success(), "cargo build -p poketrace failed");
    profile_dir.join("poketrace")
}

fn run(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{} {args:?} failed: {}", program.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The JIT code the kernel printed (bpf_jit_enable=2) for the program
/// loaded by `comm`: `flen=2 proglen=16 pass=3 image=... from=bpf-load pid=108`
/// then `JIT code: 00000000: 0f 1f 44 00 00 ...` lines.
fn jit_dump(dmesg: &str, comm: &str) -> Vec<u8> {
    let mut lines = dmesg.lines().skip_while(|l| !l.contains(&format!("from={comm} ")));
    lines.next();
    lines
        .map_while(|l| l.split_once("JIT code: ").map(|(_, rest)| rest))
        .flat_map(|rest| rest.split_whitespace().skip(1).map(|b| u8::from_str_radix(b, 16).unwrap()))
        .collect()
}

#[test]
fn guest_kernel_pokes_recorded_and_read_back() {
    let tools = ["qemu-system-x86_64", "cpio", "perf", "cc"].into_iter().all(|t| command_works(t, "--version"));
    if !have(
        tools && Path::new("/bin/busybox").exists(),
        "qemu-system-x86, busybox-static, cpio, perf or cc missing (scripts/setup.sh --tests installs them)",
    ) {
        return;
    }
    let started = Instant::now();
    let bin = poketrace_binary();
    let out = scratch("qemu-guest");
    let status = Command::new(workspace().join("scripts/qemu-guest/run.sh")).arg(&bin).arg(&out).status().unwrap();
    assert!(status.success(), "scripts/qemu-guest/run.sh failed");
    let cycle = started.elapsed();
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    eprintln!("guest summary:\n{}{}", read("summary.txt"), read("workload.txt"));
    assert_eq!(read("status").trim(), "0", "poketrace record failed in the guest: {}", read("stderr.txt"));
    let rec = out.join("rec");
    let rec_s = rec.to_str().unwrap();

    // Linux perf reads the directory, with our kcore and kallsyms.
    let home = scratch("qemu-perf-home");
    let (_, stderr) = perf(&home, &["report", "-D", "-i", rec_s]);
    assert!(!stderr.contains("failed") && !stderr.contains("rror"), "perf report -D: {stderr}");
    let (perf_pokes, stderr) = perf(&home, &["script", "-v", "-i", rec_s, "--show-text-poke-events", "--ns"]);
    assert!(stderr.contains("kcore_dir/kcore for kernel data"), "perf did not use the kcore copy: {stderr}");
    assert!(!stderr.contains("Failed to"), "perf could not apply every poke: {stderr}");

    // poketrace reads it, and prints the same history as perf.
    run(&bin, &["dump", rec_s]);
    let ours = run(&bin, &["pokes", rec_s]);
    let ours: Vec<&str> = ours
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| !["Old insn:", "New insn:", "Kind:"].iter().any(|p| l.trim_start().starts_with(p)))
        .collect();
    let theirs: Vec<&str> = perf_pokes.lines().collect();
    assert_eq!(ours, theirs, "poketrace pokes and perf script --show-text-poke-events differ");

    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for line in run(&bin, &["pokes", "--json", rec_s]).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(k) = v.get("kind").and_then(|k| k.as_str()) {
            *kinds.entry(k.to_string()).or_default() += 1;
        }
    }
    eprintln!("poke kinds: {kinds:?}");
    for kind in ["jump-label", "static-call", "ftrace", "kprobe", "trampoline-created"] {
        assert!(kinds.contains_key(kind), "no {kind} poke recorded: {kinds:?}");
    }

    // Every poke's old bytes are what kcore (copied at start) held there
    // once the earlier pokes are applied.
    let file = PerfFile::open(&rec).unwrap();
    let t = from_perf_data(&file, BaseImage::new()).unwrap();
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    let pokes = kinds.values().sum::<u64>() as usize;
    assert!(t.pokes > 0 && t.pokes == pokes, "{} pokes in the timeline, {pokes} printed", t.pokes);
    let differ: Vec<_> = t.timeline.anomalies().iter().filter(|a| a.kind == AnomalyKind::OldBytesDiffer).collect();
    assert!(differ.is_empty(), "old bytes differ from the kcore copy: {differ:#x?}");

    // The BPF program's JIT image, where its KSYMBOL says it ran.
    let index = std::fs::read_to_string(rec.join("bpf/index.jsonl")).unwrap();
    let prog: serde_json::Value = index
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["name"] == "poketrace_test")
        .expect("no JIT image of poketrace_test");
    assert_eq!(prog["loaded"], "during");
    let ksym = file
        .records()
        .filter_map(|r| match r.unwrap().body {
            RecordBody::Ksymbol(k) if k.name.ends_with(b"_poketrace_test") => Some((k.addr, k.len)),
            _ => None,
        })
        .next()
        .expect("no KSYMBOL for poketrace_test");
    let mut image = BaseImage::new();
    image.add_elf(&rec.join("bpf").join(prog["file"].as_str().unwrap())).unwrap();
    let (region, at) = image.find(ksym.0).expect("the JIT image is not at the KSYMBOL address");
    assert_eq!(at, 0);
    assert_eq!(region.len(), ksym.1 as u64);
    let printed = jit_dump(&read("dmesg.txt"), "bpf-load");
    assert!(!printed.is_empty(), "the guest kernel printed no JIT code (bpf_jit_enable=2)");
    assert_eq!(region.bytes(), &printed[..], "the saved image differs from the JIT code the kernel printed");

    eprintln!("qemu cycle {:.1} s (boot, record, power-off), whole test {:.1} s", cycle.as_secs_f64(), started.elapsed().as_secs_f64());
}
