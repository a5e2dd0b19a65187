//! `profile --format perf-inject`: against `perf inject --itrace=iNil64` on
//! the same simulated trace, perf script shows the same samples with the
//! same branch stacks; over patched kernel code the stacks are the branches
//! that ran (the simulator's truth); a damaged input writes nothing.
//!
//! The tests with perf need `perf` (Debian linux-perf): without it they
//! skip, unless CI or POKETRACE_REQUIRE_PERF is set: then they fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use codeimage::{BaseImage, CodeTimeline, PokeEvents, UserCode};
use common::simulate;
use isa::{BranchClass, KernelIdioms};
use perfdata::abi::{sample_type as st, BRANCH_SAMPLE_HW_INDEX};
use perfdata::{BranchStack, PerfFile, RecordBody};
use testkit::{perf_available, perf_command};

fn scratch(name: &str) -> PathBuf {
    testkit::scratch!("profile-inject", name)
}

/// `poketrace profile DIR --format perf-inject -o OUT --period N`: its exit status and stderr.
fn profile(dir: &Path, out: &Path, period: u64) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace"))
        .args(["profile", dir.to_str().unwrap(), "--format", "perf-inject", "-o", out.to_str().unwrap(), "--period", &period.to_string()])
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `perf script -i INPUT ARGS`: stdout, which must come with an empty stderr (no warning).
fn perf_script(home: &Path, input: &Path, args: &[&str]) -> String {
    let o = perf_command(home).args(["script", "-i", input.to_str().unwrap()]).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let out = String::from_utf8(testkit::success(o, &format!("perf script -i {} {args:?}", input.display()))).unwrap();
    assert_eq!(stderr, "", "perf script -i {} {args:?} warned", input.display());
    out
}

/// `perf inject --itrace=iNil64 -i DIR -o OUT`.
fn perf_inject(home: &Path, dir: &Path, out: &Path, period: u64) {
    let o = perf_command(home)
        .args(["inject", &format!("--itrace=i{period}il64"), "-i", dir.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    testkit::success(o, "perf inject");
}

/// A random walk of a real user program on three CPUs: perf script shows
/// our samples exactly as perf inject's (thread, CPU, time, ip, period,
/// and each 64-entry branch stack), and reads ours without a warning.
#[test]
fn user_trace_samples_and_stacks_equal_perf_inject() {
    if !perf_available() {
        return;
    }
    let dir = scratch("user");
    let trace = dir.join("trace");
    let exe = env!("CARGO_BIN_EXE_poketrace");
    simulate(&trace, &["--elf", exe, "--cpus", "3", "--instructions", "60000", "--tsc-period", "50", "--seed", "3"]);
    let (ours, theirs) = (dir.join("ours.data"), dir.join("theirs.data"));
    let (code, stderr) = profile(&trace, &ours, 997);
    assert_eq!(code, Some(0), "{stderr}");
    let home = scratch("user-home");
    perf_inject(&home, &trace, &theirs, 997);
    assert!(assert_time_ordered(&ours).0 >= 170);
    let fields = ["-F", "pid,tid,cpu,time,ip,period,brstack,event", "--ns"];
    let (a, b) = (perf_script(&home, &ours, &fields), perf_script(&home, &theirs, &fields));
    assert!(a.lines().count() >= 170, "{} samples", a.lines().count());
    // Most stacks are full: 64 entries of from/to/flags.
    let full = a.lines().filter(|l| l.matches("/-/-/-/0/").count() == 64).count();
    assert!(full * 10 >= a.lines().count() * 9, "{full} full stacks of {}", a.lines().count());
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        assert_eq!(x, y, "sample {i}");
    }
    assert_eq!(a.lines().count(), b.lines().count());
}

/// A kernel trace (unpatched) on two CPUs: the same samples as perf
/// inject's, symbolised by the kcore_dir both copy. (perf's own stacks are
/// empty there: it keeps none for the idle task, pid 0, that the simulated
/// kernel runs as; ours are not.)
#[test]
fn kernel_trace_samples_equal_perf_inject() {
    if !perf_available() {
        return;
    }
    let dir = scratch("kernel");
    let trace = dir.join("trace");
    simulate(&trace, &["--cpus", "2", "--instructions", "50000", "--pokes", "0", "--protocol", "none", "--seed", "9"]);
    let (ours, theirs) = (dir.join("ours.data"), dir.join("theirs.data"));
    let (code, stderr) = profile(&trace, &ours, 500);
    assert_eq!(code, Some(0), "{stderr}");
    let home = scratch("kernel-home");
    perf_inject(&home, &trace, &theirs, 500);
    let fields = ["-F", "pid,tid,cpu,time,ip,sym,symoff,period", "--ns"];
    let (a, b) = (perf_script(&home, &ours, &fields), perf_script(&home, &theirs, &fields));
    assert!(a.lines().count() >= 190, "{} samples", a.lines().count());
    assert_eq!(a, b);
    let stacks = perf_script(&home, &ours, &["-F", "brstack"]);
    assert!(stacks.lines().all(|l| l.split_whitespace().count() == 64), "every kernel stack is full");
    assert!(ours.join("kcore_dir/kallsyms").is_file() && ours.join("data").is_file());
}

/// The simulated kernel trace rewritten as thread 77's own buffer (perf
/// record --per-thread: AUXTRACE cpu -1, per_cpu_mmaps 0), where perf
/// keeps branch stacks: the same samples and the same kernel stacks.
#[test]
fn per_thread_kernel_trace_stacks_equal_perf_inject() {
    if !perf_available() {
        return;
    }
    let dir = scratch("per-thread");
    let cpu_wide = dir.join("cpu-wide");
    simulate(&cpu_wide, &["--cpus", "1", "--pokes", "0", "--protocol", "none", "--instructions", "40000", "--seed", "8"]);
    let trace = dir.join("trace");
    common::as_thread_buffer(&cpu_wide, &trace);
    let (ours, theirs) = (dir.join("ours.data"), dir.join("theirs.data"));
    let (code, stderr) = profile(&trace, &ours, 331);
    assert_eq!(code, Some(0), "{stderr}");
    let home = scratch("per-thread-home");
    perf_inject(&home, &trace, &theirs, 331);
    let fields = ["-F", "comm,pid,tid,time,ip,sym,period,brstack", "--ns"];
    let (a, b) = (perf_script(&home, &ours, &fields), perf_script(&home, &theirs, &fields));
    assert!(a.lines().count() >= 100, "{} samples", a.lines().count());
    assert!(a.lines().all(|l| l.trim_start().starts_with("worker    70/77") && l.matches("/-/-/-/0/").count() > 0), "{}", a.lines().next().unwrap());
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        assert_eq!(x, y, "sample {i}");
    }
    assert_eq!(a.lines().count(), b.lines().count());
}

/// The records of `path` are in time order (samples of all CPUs and the
/// side-band among them, as perf inject writes them); returns how many
/// samples and side-band records have a time.
fn assert_time_ordered(path: &Path) -> (usize, usize) {
    let file = PerfFile::open(path).unwrap();
    let (mut last, mut samples, mut side) = (0, 0, 0);
    for r in file.records() {
        let r = r.unwrap();
        if let Some(t) = r.time() {
            assert!(t >= last, "record at {:#x}: time {t} after {last}", r.offset);
            last = t;
            if matches!(r.body, RecordBody::Sample(_)) {
                samples += 1;
            } else {
                side += 1;
            }
        }
    }
    (samples, side)
}

/// One sample read back: cpu, ip, and its stack oldest first.
struct Read {
    cpu: u32,
    ip: u64,
    stack: Vec<(u64, u64)>,
}

/// Our output's samples, checked to be laid out as perf inject lays them out.
fn read_samples(path: &Path) -> Vec<Read> {
    let file = PerfFile::open(path).unwrap();
    let synth = file.attrs().iter().find(|a| a.attr.sample_type & st::BRANCH_STACK != 0).expect("an event with branch stacks");
    assert_eq!(synth.attr.branch_sample_type, BRANCH_SAMPLE_HW_INDEX);
    let mut out = Vec::new();
    for r in file.records() {
        let r = r.unwrap();
        if let RecordBody::Sample(s) = r.body {
            let stack = BranchStack::parse(s.branch_stack.unwrap(), true, r.offset).unwrap();
            assert_eq!(stack.hw_idx, Some(0));
            let mut v: Vec<(u64, u64)> = stack.entries().map(|e| (e.from, e.to)).collect();
            v.reverse();
            out.push(Read { cpu: s.cpu.unwrap(), ip: s.ip.unwrap(), stack: v });
        }
    }
    out
}

/// What CPU `cpu` ran: each instruction's address, and whether it took a
/// branch (went elsewhere than after itself, in the code of its time).
fn truth(dir: &Path, tl: &CodeTimeline, cpu: u32) -> Vec<(u64, bool)> {
    let ran: Vec<(u64, u64)> = sim::TruthReader::open(&dir.join(format!("truth/cpu{cpu}.bin"))).unwrap().map(|r| r.unwrap()).collect();
    let mut out = Vec::with_capacity(ran.len());
    for (i, &(time, addr)) in ran.iter().enumerate() {
        let mut b = [0u8; 16];
        tl.read_into(addr, &mut b, time);
        let insn = isa::classify_x86_64(addr, &b, &KernelIdioms::default()).unwrap();
        let next = ran.get(i + 1).map(|r| r.1);
        let taken = next.is_some_and(|n| n != addr + insn.len as u64) && insn.class != BranchClass::None;
        out.push((addr, taken));
    }
    out
}

/// Checks every sample of `out` (made of the simulated run in `trace` on
/// `cpus` CPUs) against what ran: its stack, oldest to newest, is the last
/// taken branches before its instruction. Returns the samples checked and
/// the entries at patched sites.
fn assert_stacks_follow_truth(trace: &Path, out: &Path, cpus: u32) -> (usize, usize) {
    let file = PerfFile::open(trace).unwrap();
    let mut base = BaseImage::new();
    codeimage::add_base_with(&file, &mut base, &UserCode::default()).unwrap();
    let tl = codeimage::over_base(&file, base, PokeEvents::Single).unwrap().timeline;
    let sites: std::collections::HashSet<u64> = tl.pokes().iter().map(|p| p.addr).collect();
    let samples = read_samples(out);
    let (mut at_sites, mut checked) = (0, 0);
    for cpu in 0..cpus {
        let ran = truth(trace, &tl, cpu);
        // The taken branches, as (from, to, index of the instruction it went to).
        let taken: Vec<(u64, u64, usize)> = (0..ran.len() - 1).filter(|&i| ran[i].1).map(|i| (ran[i].0, ran[i + 1].0, i + 1)).collect();
        let mut pos = 0;
        for (n, s) in samples.iter().filter(|s| s.cpu == cpu).enumerate() {
            // A trace start (from 0) can only be the oldest entry.
            let stack: Vec<(u64, u64)> = s.stack.iter().copied().filter(|b| b.0 != 0).collect();
            assert!(stack.len() + 1 >= s.stack.len(), "cpu {cpu} sample {n}: a trace start inside the stack {:x?}", s.stack);
            let found = (pos..=taken.len() - stack.len()).find(|&j| {
                let run = &taken[j..j + stack.len()];
                run.iter().zip(&stack).all(|(t, b)| (t.0, t.1) == *b)
                    // The sample's instruction comes after the newest branch and before the next one is taken.
                    && {
                        let from = run.last().map_or(0, |t| t.2);
                        let until = taken.get(j + stack.len()).map_or(ran.len(), |t| t.2);
                        ran[from..until].iter().any(|r| r.0 == s.ip)
                    }
            });
            let Some(j) = found else { panic!("cpu {cpu} sample {n} at {:#x}: stack {:x?} is not what ran last", s.ip, stack) };
            pos = j;
            at_sites += stack.iter().filter(|b| sites.contains(&b.0)).count();
            checked += 1;
        }
    }
    (checked, at_sites)
}

/// A simulated kernel run with jump labels, static calls and kprobes
/// patched while it runs: every sample's stack is, oldest to newest, the
/// taken branches that ran last before its instruction, at the patched
/// sites too (a JMP half taken, a NOP half not, a static call's target of
/// that time, an INT3 as a trap into its handler).
#[test]
fn stacks_at_patched_sites_follow_the_truth() {
    let dir = scratch("pokes");
    let trace = dir.join("trace");
    simulate(&trace, &["--cpus", "2", "--instructions", "60000", "--pokes", "300", "--tsc-period", "20", "--seed", "4"]);
    let out = dir.join("ours.data");
    let (code, stderr) = profile(&trace, &out, 301);
    assert_eq!(code, Some(0), "{stderr}");
    let (checked, at_sites) = assert_stacks_follow_truth(&trace, &out, 2);
    assert!(checked >= 300, "{checked} samples");
    let (samples, side) = assert_time_ordered(&out);
    assert!(samples == checked && side >= 250, "{samples} samples, {side} side-band records in time order");
    assert!(at_sites > 0, "no stack holds a branch at a patched site");
    assert!(stderr.contains(", 0 samples with branches decoded where the code may have been either version"), "{stderr}");
}

/// Coarse timing (a TSC every 2 us) leaves pokes between timing packets:
/// the samples whose stacks hold branches decoded there are counted apart.
#[test]
fn uncertain_stacks_are_counted() {
    let dir = scratch("uncertain");
    let trace = dir.join("trace");
    simulate(&trace, &["--cpus", "1", "--instructions", "100000", "--pokes", "400", "--tsc-period", "2000", "--seed", "2"]);
    let stat = common::poketrace(&["decode", trace.to_str().unwrap(), "--stat", "--json"]);
    let uncertain = serde_json::from_str::<serde_json::Value>(&stat).unwrap()["uncertain"].as_u64().unwrap();
    assert!(uncertain > 0, "the run has no uncertain instruction: {stat}");
    let (code, stderr) = profile(&trace, &dir.join("ours.data"), 97);
    assert_eq!(code, Some(0), "{stderr}");
    let counted: u64 =
        stderr.split(" samples with branches decoded where").next().and_then(|h| h.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(counted > 0, "{stderr}");
}

/// A trace with stretches the decoder cannot read: exit status 1, the
/// samples around them written, and no stack reaches across a decode
/// error (each is still what ran last).
#[test]
fn decode_errors_end_stacks() {
    let dir = scratch("errors");
    let trace = dir.join("trace");
    simulate(&trace, &["--cpus", "1", "--instructions", "200000", "--pokes", "100", "--tsc-period", "20", "--seed", "6"]);
    common::damage_trace(&trace);
    let out = dir.join("ours.data");
    let (code, stderr) = profile(&trace, &out, 211);
    assert_eq!(code, Some(1), "{stderr}");
    let errors: u64 = stderr.split(" decode errors").next().and_then(|h| h.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(errors > 0, "{stderr}");
    let (checked, _) = assert_stacks_follow_truth(&trace, &out, 1);
    assert!(checked >= 800, "{checked} samples");
}

/// A trace cut short: a clear error, and neither the output nor its temporary file is left.
#[test]
fn truncated_input_writes_nothing() {
    let dir = scratch("truncated");
    let trace = dir.join("trace");
    simulate(&trace, &["--cpus", "1", "--instructions", "20000", "--pokes", "10"]);
    let data = trace.join("data");
    let len = std::fs::metadata(&data).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&data).unwrap().set_len(len * 2 / 3).unwrap();
    let out = dir.join("out.data");
    let (code, stderr) = profile(&trace, &out, 100);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("could not be read") && stderr.contains("truncated"), "{stderr}");
    assert!(!out.exists() && !dir.join("out.data.tmp").exists());
}

/// An output in a directory that does not exist: an error naming it, and the directory is not made.
#[test]
fn missing_output_directory_is_an_error() {
    let dir = scratch("no-dir");
    let trace = dir.join("trace");
    simulate(&trace, &["--cpus", "1", "--instructions", "5000", "--pokes", "5"]);
    let out = dir.join("missing/out.data");
    let (code, stderr) = profile(&trace, &out, 100);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("missing/out.data.tmp: No such file or directory"), "{stderr}");
    assert!(!dir.join("missing").exists());
}

/// An input without a kcore_dir (a plain perf.data file) gives a plain
/// file; an earlier output in the way is replaced whole.
#[test]
fn plain_file_input_gives_a_file_and_replaces_an_earlier_output() {
    let dir = scratch("plain");
    let trace = dir.join("trace");
    simulate(&trace, &["--elf", env!("CARGO_BIN_EXE_poketrace"), "--cpus", "1", "--instructions", "20000"]);
    let out = dir.join("out.data");
    std::fs::write(&out, b"an earlier output").unwrap();
    let (code, stderr) = profile(&trace.join("data"), &out, 1000);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.is_file() && !dir.join("out.data.tmp").exists());
    let samples = read_samples(&out);
    assert!(samples.len() >= 19 && samples.iter().all(|s| s.cpu == 0 && !s.stack.is_empty()), "{} samples", samples.len());
}
