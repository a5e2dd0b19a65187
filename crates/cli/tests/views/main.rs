//! `poketrace timeline` and `report`: the timeline's structure on simulated
//! runs with pokes, its options, bad input, and both in a real browser.

mod browser;
mod chromium;
#[path = "../common/mod.rs"]
mod common;
mod perfetto;
mod report;
mod tef;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use tef::Timeline;

/// `poketrace timeline DIR -o OUT ARGS`: its exit code and stderr.
fn timeline(dir: &Path, out: &Path, args: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("timeline").arg(dir).arg("-o").arg(out).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A simulated run with pokes, made once per name.
fn simulated(name: &str, args: &[&str]) -> PathBuf {
    let dir = testkit::scratch!("views", name);
    common::simulate(&dir.join("run"), args);
    dir
}

/// The TEXT_POKE records of `pokes --json`, as the timeline shows them.
/// A TEXT_POKE: address, time, CPU, kind, old and new bytes and instructions.
type Poke = (u64, u64, Value, String, String, String, String, String);

fn pokes_json(dir: &Path) -> Vec<Poke> {
    common::poketrace(&["pokes", "--json", dir.to_str().unwrap()])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "TEXT_POKE")
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (r["addr"].as_u64().unwrap(), r["time"].as_u64().unwrap(), r["cpu"].clone(), s("kind"), s("old"), s("new"), s("old_insn"), s("new_insn"))
        })
        .collect()
}

/// Both architectures, plain and gzipped: balanced slices, monotonic
/// tracks, call stacks named by symbol, one instant per TEXT_POKE.
#[test]
fn structure_of_simulated_runs() {
    for (arch, name) in [("x86_64", "x86"), ("aarch64", "arm")] {
        let dir = simulated(name, &["--arch", arch, "--cpus", "3", "--pokes", "40", "--instructions", "8000"]);
        let run = dir.join("run");
        let (plain, gz) = (dir.join("t.json"), dir.join("t.json.gz"));
        for out in [&plain, &gz] {
            let (code, err) = timeline(&run, out, &[]);
            assert_eq!(code, 0, "{arch}: {err}");
            // Every return reaches a frame on the stack or one open since the start.
            assert!(err.contains(" 0 stack restarts"), "{arch}: {err}");
        }
        let t = Timeline::read(&plain);
        assert_eq!(t.events, Timeline::read(&gz).events, "{arch}: the .gz file holds the same events");
        t.check_structure();
        // One stack track per simulated CPU's idle task, each with calls.
        let threads = t.thread_names(|pid| pid == 0);
        assert_eq!(threads.len(), 3, "{arch}: {threads:?}");
        let frames = t.slice_names(|pid, _| pid == 0);
        assert!(frames.contains("dispatch") && frames.iter().any(|f| f.starts_with("func_")), "{arch}: {frames:?}");
        assert!(frames.iter().all(|f| !f.is_empty()));
        // Each CPU track has its thread and kernel slices.
        let cpu_slices = t.slice_names(|pid, _| pid == 0x7fff_0001);
        assert!(cpu_slices.contains("kernel") && cpu_slices.iter().any(|s| s.starts_with("swapper/")), "{arch}: {cpu_slices:?}");
        // int3 traps while code is patched: interrupt slices, and their handler's frames.
        if arch == "x86_64" {
            assert!(cpu_slices.contains("interrupt"), "{cpu_slices:?}");
            let handlers: BTreeSet<String> = t.slices(|pid, _| pid == 0).filter(|(cat, _)| cat == "interrupt").map(|(_, n)| n).collect();
            assert_eq!(handlers, BTreeSet::from(["asm_exc_int3".to_string()]));
        }
        // The code-changes track: exactly the TEXT_POKE records.
        let want = pokes_json(&run);
        assert_eq!(want.len(), 40);
        let got: Vec<_> = t
            .instants(0x7fff_0003)
            .map(|(ts_ns, a)| {
                let s = |k: &str| a[k].as_str().unwrap().to_string();
                let addr = u64::from_str_radix(s("addr").trim_start_matches("0x"), 16).unwrap();
                let time = a["time"].as_u64().unwrap();
                assert_eq!(ts_ns, time, "the instant is at the poke's time");
                (addr, time, a["cpu"].clone(), s("kind"), s("old"), s("new"), s("old_insn"), s("new_insn"))
            })
            .collect();
        assert_eq!(got, want, "{arch}");
    }
}

/// A user program (random walks through an ELF file's code): its threads'
/// stacks named by the file's symbols, user-mode slices on the CPU tracks,
/// and nothing of it with --kernel-only.
#[test]
fn user_code_by_elf_symbols_and_kernel_only() {
    let dir = testkit::scratch!("views", "user");
    common::simulate(&dir.join("run"), &["--elf", env!("CARGO_BIN_EXE_poketrace"), "--cpus", "2", "--instructions", "5000"]);
    let out = dir.join("user.json");
    let (code, err) = timeline(&dir.join("run"), &out, &[]);
    assert_eq!(code, 0, "{err}");
    let t = Timeline::read(&out);
    t.check_structure();
    let threads = t.thread_names(|pid| pid < 0x7fff_0000);
    assert_eq!(threads.len(), 2, "{threads:?}");
    assert!(threads.iter().all(|n| n.starts_with("poketrace ")), "{threads:?}");
    let frames = t.slice_names(|pid, _| pid < 0x7fff_0000);
    assert!(frames.len() > 5 && frames.iter().all(|f| !f.starts_with("[unknown]")), "{frames:?}");
    let modes = t.slice_names(|pid, _| pid == 0x7fff_0001);
    assert!(modes.contains("user") && !modes.contains("kernel"), "{modes:?}");
    let (code, err) = timeline(&dir.join("run"), &out, &["--kernel-only"]);
    assert_eq!(code, 0, "{err}");
    let t = Timeline::read(&out);
    t.check_structure();
    assert_eq!(t.slices(|pid, _| pid < 0x7fff_0002).count(), 0);
}

/// Times come from the trace: with CYC packets each call has its own,
/// without them the calls between two timing packets share one.
#[test]
fn cycle_accurate_times_reach_each_call() {
    let mut distinct = Vec::new();
    for (name, cyc) in [("mtc", &[][..]), ("cyc", &["--cyc"][..])] {
        let dir = simulated(name, &[&["--cpus", "2", "--pokes", "10", "--instructions", "5000", "--mtc-freq", "3"][..], cyc].concat());
        let out = dir.join("t.json");
        assert_eq!(timeline(&dir.join("run"), &out, &[]).0, 0);
        let t = Timeline::read(&out);
        t.check_structure();
        distinct.push((t.distinct_begin_times(0), t.slice_count(0)));
    }
    let [(mtc, _), (cyc, slices)] = distinct[..] else { unreachable!() };
    assert!(cyc > 5 * mtc && cyc * 2 > slices, "distinct slice times: {mtc} with MTC only, {cyc} of {slices} with CYC");
}

/// Per-thread buffers (AUXTRACE cpu -1, as `perf record --per-thread`
/// makes them): a lane per buffer, a stack track per traced thread.
#[test]
fn per_thread_buffers() {
    let dir = simulated("per-thread", &["--cpus", "2", "--pokes", "10", "--instructions", "5000"]);
    let run = dir.join("per-thread");
    copy_run(&dir.join("run"), &run);
    let mut bytes = std::fs::read(run.join("data")).unwrap();
    for r in perfdata::PerfFile::open(dir.join("run")).unwrap().records().map(Result::unwrap) {
        if let perfdata::RecordBody::Auxtrace(a) = r.body {
            // After the header, size, offset, reference and idx: tid, cpu.
            let at = r.offset as usize + 36;
            bytes[at..at + 4].copy_from_slice(&(100 + a.idx).to_le_bytes());
            bytes[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        }
    }
    std::fs::write(run.join("data"), &bytes).unwrap();
    let out = dir.join("t.json");
    let (code, err) = timeline(&run, &out, &[]);
    assert_eq!(code, 0, "{err}");
    let t = Timeline::read(&out);
    t.check_structure();
    let mut lanes = t.thread_names(|pid| pid == 0x7fff_0001);
    lanes.sort();
    assert_eq!(lanes, ["buffer 0", "buffer 1"]);
    let mut threads = t.thread_names(|pid| pid < 0x7fff_0001 || pid == 0x7fff_0005);
    threads.sort();
    assert_eq!(threads, [":100", ":101"]);
    assert!(t.slice_count(0x7fff_0005) > 100);
}

/// --cpu, --time, --tid and --kernel-only keep what they name.
#[test]
fn options_select_cpus_times_threads() {
    let dir = simulated("options", &["--cpus", "3", "--pokes", "10", "--instructions", "6000"]);
    let run = dir.join("run");
    let out = dir.join("cpu.json");
    assert_eq!(timeline(&run, &out, &["--cpu", "0,2"]).0, 0);
    let t = Timeline::read(&out);
    t.check_structure();
    let cpus: Vec<u32> = t.tids_of(0x7fff_0001);
    assert_eq!(cpus, [0, 2]);
    let all = dir.join("all.json");
    assert_eq!(timeline(&run, &all, &[]).0, 0);
    let whole = Timeline::read(&all);
    let (lo, hi) = whole.span_ns(0);
    let (a, b) = (lo + (hi - lo) / 4, lo + (hi - lo) / 2);
    let range = format!("{}.{:09},{}.{:09}", a / 1_000_000_000, a % 1_000_000_000, b / 1_000_000_000, b % 1_000_000_000);
    let out = dir.join("time.json");
    assert_eq!(timeline(&run, &out, &["--time", &range]).0, 0);
    let t = Timeline::read(&out);
    t.check_structure();
    let (x, y) = t.span_ns(0);
    assert!(a <= x && y <= b && x < y, "{range}: {x}..{y}");
    // The simulated kernel is all kernel code; thread 0 is all there is.
    for (args, same) in [(&["--kernel-only"][..], true), (&["--tid", "0"][..], true), (&["--tid", "7"][..], false)] {
        let out = dir.join("filtered.json");
        assert_eq!(timeline(&run, &out, args).0, 0, "{args:?}");
        let t = Timeline::read(&out);
        t.check_structure();
        assert_eq!(t.slice_count(0) == whole.slice_count(0), same, "{args:?}");
    }
    for bad in [&["--cpu", "x"][..], &["--time", "2,1"], &["--time", "10%,20%"], &["--tid", "a"]] {
        assert_eq!(timeline(&run, &dir.join("bad.json"), bad).0, 2, "{bad:?}");
    }
}

/// Bad input still gives a file: the problem on the decode track, exit 1
/// (2 when the input cannot be read at all).
#[test]
fn bad_input_is_shown_on_the_decode_track() {
    let dir = simulated("bad", &["--cpus", "2", "--pokes", "10", "--instructions", "6000"]);
    let run = dir.join("run");
    // A corrupt trace: garbage over the middle of each AUX buffer.
    let corrupt = dir.join("corrupt");
    copy_run(&run, &corrupt);
    let data = corrupt.join("data");
    let mut bytes = std::fs::read(&data).unwrap();
    let file = perfdata::PerfFile::open(&run).unwrap();
    let mut rng = testkit::Rng(0x7173);
    for r in file.records().map(Result::unwrap) {
        if let perfdata::RecordBody::Auxtrace(a) = r.body {
            let start = r.offset as usize + 48 + a.data.len() / 3;
            for b in &mut bytes[start..start + a.data.len() / 3] {
                *b = rng.next() as u8;
            }
        }
    }
    std::fs::write(&data, &bytes).unwrap();
    let out = dir.join("corrupt.json");
    let (code, err) = timeline(&corrupt, &out, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("decode errors"), "{err}");
    let t = Timeline::read(&out);
    t.check_structure();
    let errors = t.slices(|pid, tid| pid == 0x7fff_0002 && tid < 0x1000_0000).filter(|(cat, _)| cat == "error").count();
    assert!(errors > 0);
    assert_eq!(t.instants(0x7fff_0003).count(), 10, "the pokes are still there");

    // No AUX data: only the side-band of a run.
    let sideband = dir.join("sideband.data");
    let mut w = testkit::perf::sideband_writer(&sideband);
    w.write(
        perfdata::abi::misc::KERNEL,
        &perfdata::RecordBody::TextPoke(perfdata::TextPoke { addr: 0xffff_ffff_8100_0040, old: &common::NOP5, new: &common::JMP }),
        &common::at(5),
    )
    .unwrap();
    w.finish().unwrap();
    let out = dir.join("noaux.json");
    let (code, err) = timeline(&sideband, &out, &[]);
    assert_eq!(code, 1, "{err}");
    let t = Timeline::read(&out);
    t.check_structure();
    assert!(t.input_problems().iter().any(|p| p.contains("no Intel PT or CoreSight AUXTRACE_INFO")), "{:?}", t.input_problems());
    assert_eq!(t.instants(0x7fff_0003).count(), 1);

    // CoreSight whose timestamps need TIME_CONV, without it.
    let arm = simulated("bad-arm", &["--arch", "aarch64", "--cpus", "2", "--pokes", "10", "--instructions", "4000"]);
    let no_conv = dir.join("no-conv");
    copy_run(&arm.join("run"), &no_conv);
    let mut bytes = std::fs::read(no_conv.join("data")).unwrap();
    let file = perfdata::PerfFile::open(arm.join("run")).unwrap();
    let conv = file.records().map(Result::unwrap).find(|r| matches!(r.body, perfdata::RecordBody::TimeConv(_))).expect("a TIME_CONV record");
    // Another record type, which readers skip.
    bytes[conv.offset as usize..conv.offset as usize + 4].copy_from_slice(&200u32.to_le_bytes());
    std::fs::write(no_conv.join("data"), &bytes).unwrap();
    let out = dir.join("noconv.json");
    let (code, err) = timeline(&no_conv, &out, &[]);
    assert_eq!(code, 1, "{err}");
    let t = Timeline::read(&out);
    t.check_structure();
    assert!(t.input_problems().iter().any(|p| p.contains("no TIME_CONV")), "{:?}", t.input_problems());

    // Not a perf.data file at all.
    let junk = dir.join("junk.data");
    std::fs::write(&junk, b"not a perf.data file, just some words").unwrap();
    let out = dir.join("junk.json");
    let (code, err) = timeline(&junk, &out, &[]);
    assert_eq!(code, 2, "{err}");
    let t = Timeline::read(&out);
    assert!(t.input_problems().iter().any(|p| p.contains("cannot read")), "{:?}", t.input_problems());
}

/// A copy of a simulated perf.data directory (data and kcore_dir).
fn copy_run(from: &Path, to: &Path) {
    let to = testkit::fresh_dir(to);
    std::fs::copy(from.join("data"), to.join("data")).unwrap();
    let k = testkit::fresh_dir(to.join("kcore_dir"));
    for e in std::fs::read_dir(from.join("kcore_dir")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), k.join(e.file_name())).unwrap();
    }
}
