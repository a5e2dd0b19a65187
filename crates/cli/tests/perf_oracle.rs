//! Linux perf as the oracle: files our writer makes, and files real `perf
//! record` makes, printed by perf and by poketrace, must agree field for field.
//!
//! Needs `perf` (Debian linux-perf). Without it these tests skip, unless CI
//! or POKETRACE_REQUIRE_PERF is set: then they fail (`testkit::required`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{poketrace, simulate};
use perfdata::abi::{attr_flag, ksymbol_type, misc, sample_type as st, KSYMBOL_FLAG_UNREGISTER};
use perfdata::kcore::{write_kcore_dir, Machine, Segment};
use perfdata::*;
use testkit::{perf, perf_available, Rng};

const TEXT: u64 = 0xffff_ffff_8100_0000;
const OOL: u64 = 0xffff_ffff_a000_1000;
const BPF: u64 = 0xffff_ffff_c000_2000;

fn scratch(name: &str) -> PathBuf {
    testkit::scratch!("perf-oracle", name)
}

/// A simulated trace in scratch directory `name`, made with `args`, and a
/// scratch HOME for perf beside it.
fn simulated(name: &str, args: &[&str]) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    simulate(&dir, args);
    (dir, scratch(&format!("{name}-home")))
}

/// tests/data/walkme.c built with gcc into `dir`; None (a skip) without gcc unless perf is required.
fn compile_walkme(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/walkme.c");
    let exe = dir.join("walkme");
    match Command::new("gcc").args(["-O2", "-fno-inline-functions", "-o"]).arg(&exe).arg(&src).output() {
        Ok(o) if o.status.success() => Some(exe),
        other => {
            testkit::have(false, &format!("gcc failed: {other:?}"));
            None
        }
    }
}

fn norm(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Kernel functions in the made-up image: (name, offset from _text).
const FUNCS: &[(&str, u64)] = &[
    ("_text", 0),
    ("start_kernel", 0x100),
    ("schedule", 0x1000),
    ("do_sys_open", 0x1400),
    ("__SCT__might_resched", 0x1800),
    ("kfree", 0x2000),
    ("tcp_sendmsg", 0x2800),
    ("_etext", 0x4000),
];

struct Varied {
    dir: PathBuf,
    pokes: usize,
}

/// A perf.data directory with kcore_dir, two attrs, four CPUs, many pokes of
/// every kind, trampoline creation and removal, KSYMBOL OOL and BPF, BPF_EVENT.
fn write_varied(dir: &Path, seed: u64, n_pokes: usize) -> Varied {
    let mut rng = Rng(seed | 1);
    let side = st::TID | st::TIME | st::CPU | st::IDENTIFIER;
    let attr = |text_poke: bool| EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        config: 9,
        sample_type: side,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::KSYMBOL | attr_flag::BPF_EVENT | if text_poke { attr_flag::TEXT_POKE } else { 0 },
        ..EventAttr::default()
    };
    let attrs =
        vec![AttrWithIds { attr: attr(true), ids: vec![100, 101, 102, 103] }, AttrWithIds { attr: attr(false), ids: vec![200, 201, 202, 203] }];
    // Code: NOP5 at every 0x40 of the image, so pokes have something to replace.
    let mut code = vec![0xccu8; 0x4000];
    for chunk in code.chunks_mut(0x40) {
        chunk[..5].copy_from_slice(&[0x0f, 0x1f, 0x44, 0x00, 0x00]);
    }
    let kallsyms: String = FUNCS.iter().map(|(n, off)| format!("{:016x} T {n}\n", TEXT + off)).collect();
    write_kcore_dir(&dir.join("kcore_dir"), Machine::X86_64, &[Segment { vaddr: TEXT, bytes: code }], &kallsyms, "").unwrap();

    let mut w = Writer::create(dir.join("data"), attrs).unwrap();
    w.features.hostname = Some("oracle".into());
    w.features.osrelease = Some("6.1.0-test".into());
    w.features.arch = Some("x86_64".into());
    w.features.nrcpus = Some(NrCpus { available: 4, online: 4 });
    w.features.cmdline = Some(vec!["poketrace-test".into(), "--seed".into(), seed.to_string()]);
    let mut time = 1_000_000_000u64;
    let sid = |time: u64, cpu: u32, tid: u32, id: u64| SampleId {
        pid: Some(if tid == 0 { 0 } else { 42 }),
        tid: Some(tid),
        time: Some(time),
        cpu: Some(cpu),
        identifier: Some(id),
        ..SampleId::default()
    };
    w.write(
        misc::KERNEL,
        &RecordBody::Mmap(Mmap { pid: u32::MAX, tid: 0, addr: TEXT, len: 0x4000, pgoff: TEXT, filename: b"[kernel.kallsyms]_text" }),
        &sid(0, 0, 0, 100),
    )
    .unwrap();
    w.write(misc::USER, &RecordBody::Comm(Comm { pid: 42, tid: 42, comm: b"poker" }), &sid(time, 0, 42, 200)).unwrap();
    w.write(misc::USER, &RecordBody::Fork(ForkExit { pid: 42, ppid: 42, tid: 43, ptid: 42, time }), &sid(time, 0, 43, 200)).unwrap();
    w.write(misc::USER | misc::COMM_EXEC, &RecordBody::Comm(Comm { pid: 42, tid: 43, comm: b"poke-worker" }), &sid(time + 1, 1, 43, 201)).unwrap();

    let mut pokes = 0;
    let mut state: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let sites: Vec<u64> = (1..0x100).map(|i| TEXT + 0x40 * i).filter(|a| *a < TEXT + 0x4000).collect();
    let poke = |w: &mut Writer<_>, time: &mut u64, rng: &mut Rng, addr: u64, new: Vec<u8>, state: &mut BTreeMap<u64, Vec<u8>>| {
        let old = state.get(&addr).cloned().unwrap_or(vec![0x0f, 0x1f, 0x44, 0x00, 0x00]);
        let old = old[..new.len().min(old.len())].to_vec();
        let cpu = rng.below(4) as u32;
        let tid = [0, 43, 77][rng.below(3) as usize];
        *time += 1 + rng.below(5000);
        w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr, old: &old, new: &new }), &sid(*time, cpu, tid, 100 + cpu as u64)).unwrap();
        state.insert(addr, new);
    };
    // The first kernel-text poke comes before any OOL KSYMBOL: perf drops OOL
    // maps registered before it loads kcore (see scripts/PERF-FORMATS.md).
    poke(&mut w, &mut time, &mut rng, sites[0], vec![0xe9, 0x10, 0x00, 0x00, 0x00], &mut state);
    pokes += 1;
    for i in 0..n_pokes {
        let addr = sites[rng.below(sites.len() as u64) as usize];
        let rel = (rng.below(0x1000) as u32).to_le_bytes();
        let new = match rng.below(7) {
            0 => vec![0x0f, 0x1f, 0x44, 0x00, 0x00],
            1 => vec![0xe9, rel[0], rel[1], 0, 0],
            2 => vec![0xe8, rel[0], rel[1], 0, 0],
            3 => vec![0xcc],
            4 => vec![0x66, 0x90],
            5 => vec![0xeb, rel[0] & 0x7f],
            _ => vec![0xc3, 0xcc, 0xcc, 0xcc, 0xcc],
        };
        poke(&mut w, &mut time, &mut rng, addr, new, &mut state);
        pokes += 1;
        if i % 7 == 6 {
            w.write(0, &RecordBody::FinishedRound, &SampleId::default()).unwrap();
        }
    }
    // A trampoline: KSYMBOL OOL, created by a poke with old_len 0, patched, removed, unregistered.
    time += 100;
    let tramp: Vec<u8> = (0..19).map(|i| 0x90 + i as u8).collect();
    w.write(
        misc::KERNEL,
        &RecordBody::Ksymbol(Ksymbol { addr: OOL, len: 0x1000, ksym_type: ksymbol_type::OOL, flags: 0, name: b"ftrace_trampoline" }),
        &sid(time, 2, 43, 102),
    )
    .unwrap();
    time += 10;
    w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: OOL, old: &[], new: &tramp }), &sid(time, 2, 43, 102)).unwrap();
    time += 10;
    w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: OOL + 8, old: &tramp[8..13], new: &[0xe8, 1, 2, 3, 4] }), &sid(time, 3, 0, 103))
        .unwrap();
    time += 10;
    w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: OOL, old: &tramp, new: &[] }), &sid(time, 2, 43, 102)).unwrap();
    time += 10;
    w.write(
        misc::KERNEL,
        &RecordBody::Ksymbol(Ksymbol {
            addr: OOL,
            len: 0x1000,
            ksym_type: ksymbol_type::OOL,
            flags: KSYMBOL_FLAG_UNREGISTER,
            name: b"ftrace_trampoline",
        }),
        &sid(time, 2, 43, 102),
    )
    .unwrap();
    pokes += 3;
    // A BPF program comes and goes.
    time += 10;
    w.write(
        misc::KERNEL,
        &RecordBody::Ksymbol(Ksymbol { addr: BPF, len: 0x40, ksym_type: ksymbol_type::BPF, flags: 0, name: b"bpf_prog_0123456789abcdef_test" }),
        &sid(time, 1, 43, 201),
    )
    .unwrap();
    w.write(
        misc::KERNEL,
        &RecordBody::BpfEvent(BpfEvent { event_type: 1, flags: 0, id: 7, tag: *b"\x01\x23\x45\x67\x89\xab\xcd\xef" }),
        &sid(time + 1, 1, 43, 201),
    )
    .unwrap();
    w.write(
        misc::KERNEL,
        &RecordBody::BpfEvent(BpfEvent { event_type: 2, flags: 0, id: 7, tag: *b"\x01\x23\x45\x67\x89\xab\xcd\xef" }),
        &sid(time + 2, 1, 43, 201),
    )
    .unwrap();
    w.write(misc::USER, &RecordBody::Exit(ForkExit { pid: 42, ppid: 42, tid: 43, ptid: 42, time: time + 3 }), &sid(time + 3, 1, 43, 201)).unwrap();
    w.write(0, &RecordBody::FinishedRound, &SampleId::default()).unwrap();
    w.finish().unwrap();
    Varied { dir: dir.to_path_buf(), pokes }
}

/// perf's TEXT_POKE/KSYMBOL lines and byte lines, normalised.
fn perf_script_pokes(home: &Path, dir: &Path) -> Vec<String> {
    let text = perf(home, &["script", "-i", dir.to_str().unwrap(), "--show-text-poke-events", "--ns"]);
    text.lines().filter(|l| !l.trim().is_empty()).map(norm).collect()
}

/// Our `pokes` output without the lines perf does not print.
fn our_pokes(dir: &Path) -> Vec<String> {
    poketrace(&["pokes", dir.to_str().unwrap()])
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(norm)
        .filter(|l| !l.starts_with("Old insn:") && !l.starts_with("New insn:") && !l.starts_with("Kind:"))
        .collect()
}

/// Record lines `[cpu] [time] 0xOFF [0xSIZE]: PERF_RECORD_...` keyed by offset,
/// for the types both print in full.
fn record_lines(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in text.lines() {
        let n = norm(l);
        let Some(at) = n.find(" [0x").or_else(|| n.starts_with("0x").then_some(0)) else { continue };
        if !n.contains("]: PERF_RECORD_") || n.contains("unhandled") || n.contains("PERF_RECORD_COMPRESSED") {
            continue;
        }
        let off = n[..at].rsplit(' ').next().unwrap_or("").to_string();
        m.entry(off).or_default().push(n);
    }
    m
}

fn stats(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let Some(start) = text.find("Aggregated stats:") else { return m };
    for l in text[start..].lines().skip(1) {
        let parts: Vec<&str> = l.split_whitespace().collect();
        if parts.len() < 3 || parts[1] != "events:" {
            break;
        }
        m.insert(parts[0].to_string(), parts[2].parse().unwrap());
    }
    m
}

/// Record types perf prints in detail but poketrace keeps raw (not in its typed set).
const UNTYPED: &[&str] = &["PERF_RECORD_THREAD_MAP", "PERF_RECORD_CPU_MAP", "PERF_RECORD_EVENT_UPDATE", "PERF_RECORD_STAT"];

fn assert_dump_agrees(home: &Path, input: &Path) {
    let perf_d = if input.ends_with("pipe.data") {
        // perf takes pipe-mode data only from a pipe.
        let out = testkit::perf_command(home).args(["report", "-D", "-i", "-"]).stdin(std::fs::File::open(input).unwrap()).output().unwrap();
        String::from_utf8(testkit::success(out, &format!("perf report -D < {}", input.display()))).unwrap()
    } else {
        perf(home, &["report", "-D", "-i", input.to_str().unwrap()])
    };
    let ours = poketrace(&["dump", input.to_str().unwrap()]);
    assert_eq!(stats(&ours), stats(&perf_d), "record counts per type differ for {}", input.display());
    let (mut theirs, mine) = (record_lines(&perf_d), record_lines(&ours));
    if input.ends_with("pipe.data") {
        // perf counts pipe offsets from after the 16-byte pipe header; we print file offsets.
        theirs = theirs
            .into_iter()
            .map(|(off, lines)| {
                let v = u64::from_str_radix(off.trim_start_matches("0x"), 16).unwrap_or(0) + 16;
                let new = format!("{v:#x}");
                (new.clone(), lines.into_iter().map(|l| l.replacen(&format!(" {off} ["), &format!(" {new} ["), 1)).collect())
            })
            .collect();
    }
    assert!(!theirs.is_empty());
    let mut compared = 0;
    for (off, lines) in &theirs {
        let ours = mine.get(off).unwrap_or_else(|| panic!("{}: perf prints a record at {off}, we do not: {lines:?}", input.display()));
        for l in lines.iter().filter(|l| !UNTYPED.iter().any(|u| l.contains(u))) {
            assert!(ours.contains(l), "{}: record at {off}:\n perf: {l}\n ours: {ours:?}", input.display());
            compared += 1;
        }
    }
    assert!(compared > 0);
}

#[test]
fn varied_written_files_agree_with_perf() {
    if !perf_available() {
        return;
    }
    for (seed, n) in [(1u64, 5usize), (7, 60), (1234, 400)] {
        let dir = scratch(&format!("varied-{seed}"));
        let v = write_varied(&dir, seed, n);
        let home = scratch(&format!("home-{seed}"));
        let theirs = perf_script_pokes(&home, &v.dir);
        let ours = our_pokes(&v.dir);
        let poke_lines = theirs.iter().filter(|l| l.contains("PERF_RECORD_TEXT_POKE")).count();
        assert_eq!(poke_lines, v.pokes, "perf shows every poke");
        assert!(theirs.iter().any(|l| l.contains("ftrace_trampoline+0x8")), "perf resolved the OOL trampoline");
        assert!(theirs.iter().any(|l| l.contains("poke-worker")), "perf named the thread from COMM");
        for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
            assert_eq!(t, o, "line {i} of pokes differs (seed {seed})");
        }
        assert_eq!(theirs.len(), ours.len(), "number of lines (seed {seed})");
        assert_dump_agrees(&home, &v.dir);
    }
}

#[test]
fn pokes_json_and_kinds() {
    if !perf_available() {
        return;
    }
    let dir = scratch("json");
    let v = write_varied(&dir, 99, 50);
    let out = poketrace(&["pokes", v.dir.to_str().unwrap(), "--json"]);
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let pokes: Vec<&serde_json::Value> = rows.iter().filter(|r| r["record"] == "TEXT_POKE").collect();
    assert_eq!(pokes.len(), v.pokes);
    for p in &pokes {
        for k in ["time", "cpu", "pid", "tid", "addr", "sym", "old_len", "new_len", "old", "new", "old_insn", "new_insn", "kind"] {
            assert!(p.get(k).is_some(), "missing {k} in {p}");
        }
        assert_eq!(p["old"].as_str().unwrap().len(), 2 * p["old_len"].as_u64().unwrap() as usize);
    }
    let kinds: std::collections::BTreeSet<&str> = pokes.iter().map(|p| p["kind"].as_str().unwrap()).collect();
    for k in ["jump-label", "ftrace", "kprobe", "trampoline-created", "trampoline-removed"] {
        assert!(kinds.contains(k), "kind {k} not seen in {kinds:?}");
    }
}

#[test]
fn real_perf_record_files_agree_with_perf() {
    if !perf_available() {
        return;
    }
    let out = scratch("real");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/record-real.sh");
    let status = Command::new("bash").arg(&script).arg(&out).status().unwrap();
    if !status.success() {
        testkit::have(false, "scripts/record-real.sh failed: cannot record here (needs root and perf_event_open)");
        return;
    }
    let home = scratch("real-home");
    for f in ["dummy.data", "task-clock.data", "compressed.data", "bpf.data", "switch.data", "switch-task.data", "pipe.data"] {
        assert_dump_agrees(&home, &out.join(f));
    }
    let pokes = poketrace(&["pokes", out.join("bpf.data").to_str().unwrap()]);
    assert_eq!(pokes.lines().filter(|l| l.contains("PERF_RECORD_KSYMBOL")).count(), 2, "{pokes}");
}

/// Every other typed record perf prints: AUX trace records with a real Intel PT
/// payload, switches, losses, MMAP2 both ways, ID_INDEX, TIME_CONV.
#[test]
fn aux_and_sideband_records_agree_with_perf() {
    if !perf_available() {
        return;
    }
    use perfdata::auxtrace::IntelPtInfo;
    let dir = scratch("aux");
    let side = st::TID | st::TIME | st::CPU | st::IDENTIFIER;
    let pt = EventAttr {
        type_: 8,
        size: ATTR_SIZE_VER7,
        config: 0x400,
        sample_type: side | st::IP,
        flags: attr_flag::SAMPLE_ID_ALL,
        ..EventAttr::default()
    };
    let dummy = EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        config: 9,
        sample_type: side | st::IP,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::CONTEXT_SWITCH | attr_flag::MMAP2,
        ..EventAttr::default()
    };
    let attrs = vec![AttrWithIds { attr: pt, ids: vec![10, 11] }, AttrWithIds { attr: dummy, ids: vec![20, 21] }];
    let mut w = Writer::create(dir.join("data"), attrs).unwrap();
    let sid = |time: u64, cpu: u32, id: u64| SampleId {
        pid: Some(42),
        tid: Some(43),
        time: Some(time),
        cpu: Some(cpu),
        identifier: Some(id),
        ..SampleId::default()
    };
    let info = IntelPtInfo {
        pmu_type: 8,
        time_shift: 10,
        time_mult: 1024,
        time_zero: 5,
        cap_user_time_zero: 1,
        tsc_bit: 0x400,
        noretcomp_bit: 0x800,
        per_cpu_mmaps: 1,
        ..IntelPtInfo::default()
    }
    .to_priv_bytes();
    w.write(0, &RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: 1, priv_data: &info }), &SampleId::default()).unwrap();
    w.write(
        0,
        &RecordBody::IdIndex(IdIndex {
            entries: vec![
                IdIndexEntry { id: 10, idx: 0, cpu: 0, tid: u64::MAX },
                IdIndexEntry { id: 11, idx: 1, cpu: 1, tid: u64::MAX },
                IdIndexEntry { id: 20, idx: 0, cpu: 0, tid: u64::MAX },
                IdIndexEntry { id: 21, idx: 1, cpu: 1, tid: u64::MAX },
            ],
        }),
        &SampleId::default(),
    )
    .unwrap();
    w.write(
        0,
        &RecordBody::TimeConv(TimeConv {
            time_shift: 10,
            time_mult: 1024,
            time_zero: 5,
            extended: Some(TimeConvExt { time_cycles: 0, time_mask: u64::MAX, cap_user_time_zero: true, cap_user_time_short: false }),
        }),
        &SampleId::default(),
    )
    .unwrap();
    let build_id: Vec<u8> = (0..20).collect();
    w.write(
        misc::USER,
        &RecordBody::Mmap2(Mmap2 {
            pid: 42,
            tid: 43,
            addr: 0x400000,
            len: 0x1000,
            pgoff: 0,
            file_id: Mmap2FileId::Inode { maj: 0xfe, min: 1, ino: 1234, ino_generation: 5 },
            prot: 5,
            flags: 2,
            filename: b"/usr/bin/true",
        }),
        &sid(100, 0, 20),
    )
    .unwrap();
    w.write(
        misc::USER,
        &RecordBody::Mmap2(Mmap2 {
            pid: 42,
            tid: 43,
            addr: 0x7f0000000000,
            len: 0x2000,
            pgoff: 0x1000,
            file_id: Mmap2FileId::BuildId(&build_id),
            prot: 7,
            flags: 1,
            filename: b"/lib/x.so",
        }),
        &sid(101, 1, 21),
    )
    .unwrap();
    w.write(misc::USER, &RecordBody::ItraceStart(ItraceStart { pid: 42, tid: 43 }), &sid(102, 0, 10)).unwrap();
    w.write(misc::USER, &RecordBody::Switch, &sid(103, 0, 20)).unwrap();
    w.write(misc::USER | misc::SWITCH_OUT | misc::SWITCH_OUT_PREEMPT, &RecordBody::Switch, &sid(104, 0, 20)).unwrap();
    w.write(misc::KERNEL | misc::SWITCH_OUT, &RecordBody::SwitchCpuWide(SwitchCpuWide { next_prev_pid: 7, next_prev_tid: 8 }), &sid(105, 1, 21))
        .unwrap();
    w.write(misc::KERNEL, &RecordBody::SwitchCpuWide(SwitchCpuWide { next_prev_pid: 9, next_prev_tid: 10 }), &sid(106, 1, 21)).unwrap();
    w.write(0, &RecordBody::Lost(Lost { id: 20, lost: 5 }), &sid(107, 0, 20)).unwrap();
    w.write(0, &RecordBody::LostSamples(LostSamples { lost: 6 }), &sid(108, 0, 20)).unwrap();
    w.write(0, &RecordBody::Aux(Aux { aux_offset: 0, aux_size: 0x20, flags: 0 }), &sid(109, 0, 10)).unwrap();
    w.write(0, &RecordBody::Aux(Aux { aux_offset: 0x20, aux_size: 0x20, flags: 0x7 }), &sid(110, 1, 11)).unwrap();
    // PSB, PSBEND: the smallest valid Intel PT.
    let mut trace: Vec<u8> = [0x02, 0x82].repeat(8);
    trace.extend_from_slice(&[0x02, 0x23]);
    w.write(0, &RecordBody::Auxtrace(Auxtrace { offset: 0, reference: 0x1234, idx: 0, tid: 43, cpu: 0, data: &trace }), &SampleId::default())
        .unwrap();
    w.write(0, &RecordBody::Auxtrace(Auxtrace { offset: 0, reference: 0x5678, idx: 1, tid: 43, cpu: 1, data: &trace }), &SampleId::default())
        .unwrap();
    w.write(0, &RecordBody::FinishedRound, &SampleId::default()).unwrap();
    w.finish().unwrap();

    let file = PerfFile::open(&dir).unwrap();
    assert_eq!(file.features().auxtrace_index.len(), 2, "HEADER_AUXTRACE written");
    let home = scratch("aux-home");
    assert_dump_agrees(&home, &dir);
    let perf_d = perf(&home, &["report", "-D", "-i", dir.to_str().unwrap()]);
    assert!(perf_d.contains("PSBEND"), "perf decoded our AUXTRACE payload as Intel PT:\n{perf_d}");
}

/// The simulator's Intel PT decodes in Linux perf with no errors, and perf and
/// `poketrace decode` report the same taken branches, CPU by CPU.
#[test]
fn simulated_intel_pt_decodes_the_same_in_perf_and_poketrace() {
    if !perf_available() {
        return;
    }
    let (dir, home) = simulated("sim-pt", &["--cpus", "2", "--pokes", "40", "--instructions", "20000", "--tsc-period", "20"]);
    let (perf_branches, our_branches) = (perf_branches(&home, &dir), our_branches(&dir));
    assert_eq!(perf_branches.keys().collect::<Vec<_>>(), our_branches.keys().collect::<Vec<_>>());
    for (cpu, theirs) in &perf_branches {
        let ours = &our_branches[cpu];
        assert!(theirs.len() > 1000, "cpu {cpu}: only {} branches", theirs.len());
        let first = theirs.iter().zip(ours).position(|(a, b)| a != b);
        assert_eq!(
            first,
            None,
            "cpu {cpu}: first difference at branch {first:?}: perf {:?} ours {:?}",
            first.map(|i| &theirs[i]),
            first.map(|i| &ours[i])
        );
        assert_eq!(theirs.len(), ours.len(), "cpu {cpu}: branch counts");
    }
}

/// The poke boundary matches perf's: for every instruction perf decodes from
/// a simulated trace, the bytes perf shows are what `poketrace image` answers
/// for that address at the time perf gives it (new bytes from T inclusive).
#[test]
fn instruction_bytes_at_perf_times_match_the_timeline() {
    if !perf_available() {
        return;
    }
    let (dir, home) = simulated("sim-insn", &["--cpus", "2", "--pokes", "60", "--instructions", "10000", "--tsc-period", "20", "--seed", "5"]);
    let theirs = perf(&home, &["script", "-i", dir.to_str().unwrap(), "--itrace=i1i", "-F", "time,ip,insn", "--ns"]);
    let file = PerfFile::open(&dir).unwrap();
    let tl = codeimage::from_perf_data(&file, codeimage::BaseImage::new()).unwrap().timeline;
    let (mut checked, mut poked_sites, mut differ) = (0, 0, Vec::new());
    for l in theirs.lines() {
        let Some((time, rest)) = l.split_once(':') else { continue };
        let Some((ip, insn)) = rest.split_once("insn:") else { continue };
        let (secs, ns) = time.trim().split_once('.').unwrap();
        let t: u64 = secs.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap();
        let ip = u64::from_str_radix(ip.trim(), 16).unwrap();
        let bytes: Vec<u8> = insn.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        checked += 1;
        poked_sites += (tl.pokes_at(ip).count() > 0) as usize;
        match tl.read(ip, bytes.len(), t) {
            codeimage::Read::Exact(b) if b == bytes => {}
            other => differ.push((t, ip, bytes, other)),
        }
    }
    assert!(checked > 15_000 && poked_sites > 100, "{checked} instructions, {poked_sites} at poked sites");
    assert!(differ.is_empty(), "{} of {checked} differ, first: {:x?}", differ.len(), differ.first());
}

/// perf script's branch lines, per CPU, without trace start/end lines.
fn perf_branches(home: &Path, dir: &Path) -> BTreeMap<u32, Vec<(String, u64, u64)>> {
    let theirs = perf(home, &["script", "-i", dir.to_str().unwrap(), "--itrace=be", "-F", "time,cpu,ip,addr,flags", "--ns"]);
    assert!(
        !theirs.contains("error"),
        "perf reports decode errors:\n{}",
        theirs.lines().filter(|l| l.contains("error")).take(5).collect::<Vec<_>>().join("\n")
    );
    let mut out: BTreeMap<u32, Vec<(String, u64, u64)>> = BTreeMap::new();
    for l in theirs.lines() {
        let Some((head, rest)) = l.split_once(": ") else { continue };
        let cpu: u32 = head.trim().trim_start_matches('[').split(']').next().unwrap().parse().unwrap();
        let (left, to) = rest.split_once("=>").unwrap();
        let words: Vec<&str> = left.split_whitespace().collect();
        let from = u64::from_str_radix(words.last().unwrap(), 16).unwrap();
        let flags = words[..words.len() - 1].join(" ");
        if !flags.starts_with("tr ") {
            out.entry(cpu).or_default().push((flags, from, u64::from_str_radix(to.trim(), 16).unwrap()));
        }
    }
    out
}

/// `poketrace decode --json` branches, per CPU, without trace start/end lines.
fn our_branches(dir: &Path) -> BTreeMap<u32, Vec<(String, u64, u64)>> {
    let mut out: BTreeMap<u32, Vec<(String, u64, u64)>> = BTreeMap::new();
    for l in poketrace(&["decode", dir.to_str().unwrap(), "--itrace=be", "--json"]).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v.get("error").is_none(), "poketrace decode error: {v}");
        let flags: Vec<&str> = v["flags"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        if flags.first() != Some(&"tr") {
            out.entry(v["cpu"].as_u64().unwrap() as u32).or_default().push((flags.join(" "), v["ip"].as_u64().unwrap(), v["addr"].as_u64().unwrap()));
        }
    }
    out
}

/// A user program compiled here with gcc, traced through its calls, returns,
/// loops, calls through function pointers and a jump table (random walks of
/// its real code): perf and poketrace agree branch for branch, and both agree
/// with what ran.
#[test]
fn gcc_program_trace_decodes_the_same_in_perf_and_poketrace() {
    if !perf_available() {
        return;
    }
    let dir = scratch("gcc-walk");
    let Some(exe) = compile_walkme(&dir) else { return };
    let trace = dir.join("trace");
    simulate(&trace, &["--elf", exe.to_str().unwrap(), "--cpus", "2", "--instructions", "30000", "--tsc-period", "50"]);
    let home = scratch("gcc-walk-home");
    let (theirs, ours) = (perf_branches(&home, &trace), our_branches(&trace));
    assert_eq!(theirs.keys().collect::<Vec<_>>(), ours.keys().collect::<Vec<_>>());
    let mut kinds = std::collections::BTreeSet::new();
    for (cpu, t) in &theirs {
        let o = &ours[cpu];
        let first = t.iter().zip(o).position(|(a, b)| a != b);
        assert_eq!(first, None, "cpu {cpu}: perf {:?} ours {:?}", first.map(|i| &t[i]), first.map(|i| &o[i]));
        assert_eq!(t.len(), o.len(), "cpu {cpu}");
        kinds.extend(t.iter().map(|b| b.0.clone()));
    }
    for k in ["call", "return", "jcc", "jmp"] {
        assert!(kinds.contains(k), "no {k} branch in {kinds:?}");
    }
    // And both are what ran.
    let check = poketrace(&["check", trace.to_str().unwrap(), "--json"]);
    let timeline: serde_json::Value =
        check.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find(|v| v["mode"] == "timeline").unwrap();
    assert_eq!(timeline["correct"], timeline["instructions"], "{timeline}");
    assert_eq!(timeline["errors"], 0);
}

/// Lines of `perf script`-style output grouped by their `[cpu]` column, in order.
fn by_cpu(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in text.lines() {
        let cpu = l.split_whitespace().find(|w| w.starts_with('[') && w.ends_with(']')).unwrap_or("?").to_string();
        out.entry(cpu).or_default().push(l.to_string());
    }
    out
}

/// `poketrace decode -F` prints perf script's layout: for a user program (ELF
/// symbols and dso from its MMAP2) and for simulated kernel code with pokes,
/// branch and instruction lines are byte for byte perf's, CPU by CPU, trace
/// starts and ends included. (Times, and so the order CPUs merge in, are
/// the next test's.)
#[test]
fn decode_fields_print_what_perf_script_prints() {
    if !perf_available() {
        return;
    }
    let dir = scratch("fields");
    let Some(exe) = compile_walkme(&dir) else { return };
    let (user, kernel) = (dir.join("user"), dir.join("kernel"));
    simulate(&user, &["--elf", exe.to_str().unwrap(), "--cpus", "2", "--instructions", "8000", "--tsc-period", "50"]);
    simulate(&kernel, &["--pokes", "40", "--seed", "3", "--cpus", "2", "--instructions", "8000", "--tsc-period", "50"]);
    let home = scratch("fields-home");
    let fields = "comm,tid,pid,cpu,flags,ip,sym,symoff,dso,addr,insn,insnlen";
    for trace in [&user, &kernel] {
        let t = trace.to_str().unwrap();
        for (theirs, ours) in [("--itrace=be", "--itrace=be"), ("--itrace=i1i", "--itrace=i")] {
            let perf_out = by_cpu(&perf(&home, &["script", "-i", t, theirs, "-F", fields]));
            let our_out = by_cpu(&poketrace(&["decode", t, ours, "-F", fields]));
            assert_eq!(perf_out.keys().collect::<Vec<_>>(), our_out.keys().collect::<Vec<_>>(), "{t} {theirs}");
            for (cpu, p) in &perf_out {
                let o = &our_out[cpu];
                assert!(p.len() > 500, "{t} {theirs} {cpu}: {} lines", p.len());
                let first = p.iter().zip(o).position(|(a, b)| a != b);
                assert_eq!(first, None, "{t} {theirs} {cpu}:\nperf: {:?}\nours: {:?}", first.map(|i| &p[i]), first.map(|i| &o[i]));
                assert_eq!(p.len(), o.len(), "{t} {theirs} {cpu}");
            }
        }
    }
    // perf's time layout: microseconds by default, nanoseconds with --ns.
    let k = kernel.to_str().unwrap();
    for ns in [&[][..], &["--ns"][..]] {
        let first = |text: String| text.lines().next().unwrap().to_string();
        let p = first(perf(&home, &[&["script", "-i", k, "--itrace=be", "-F", "cpu,time,flags,ip"][..], ns].concat()));
        let o = first(poketrace(&[&["decode", k, "--itrace=be", "-F", "cpu,time,flags,ip"][..], ns].concat()));
        assert_eq!(p, o, "first line with {ns:?}");
    }
}

/// Times as perf stamps them: a branch that takes a packet at the last
/// timing packet before that packet, one that needs none at the last
/// before the flow packet taken before it. Over perf's image of the code
/// (`--image perf`; the demo's first run: int3 pokes, a TSC every 20 ns)
/// the whole output, CPUs merged in time order, is perf's byte for byte.
#[test]
fn decode_times_and_merge_order_are_perfs() {
    if !perf_available() {
        return;
    }
    let (dir, home) = simulated("times", &["--cpus", "4", "--protocol", "int3", "--instructions", "200000", "--pokes", "400", "--tsc-period", "20"]);
    let d = dir.to_str().unwrap();
    let fields = ["-F", "cpu,time,flags,ip,addr", "--ns"];
    let theirs = perf(&home, &[&["script", "-i", d, "--itrace=be"][..], &fields].concat());
    let ours = poketrace(&[&["decode", d, "--itrace=be", "--image", "perf"][..], &fields].concat());
    let (theirs, ours): (Vec<&str>, Vec<&str>) = (theirs.lines().collect(), ours.lines().collect());
    assert!(theirs.len() > 200_000, "{} lines", theirs.len());
    let first = theirs.iter().zip(&ours).position(|(a, b)| a != b);
    assert_eq!(first, None, "line {first:?}:\nperf: {:?}\nours: {:?}", first.map(|i| theirs[i]), first.map(|i| ours[i]));
    assert_eq!(theirs.len(), ours.len());
}

/// A per-thread AUX buffer (perf record --per-thread: AUXTRACE cpu -1,
/// per_cpu_mmaps 0) is decoded as that thread's: `decode -F` names the
/// thread from the buffer and prints what perf prints.
#[test]
fn per_thread_buffers_are_the_threads_own() {
    if !perf_available() {
        return;
    }
    let dir = scratch("per-thread");
    let cpu_wide = dir.join("cpu-wide");
    simulate(&cpu_wide, &["--cpus", "1", "--pokes", "10", "--instructions", "5000"]);
    // The same trace, rewritten as thread 77's own buffer.
    let per_thread = dir.join("per-thread");
    common::as_thread_buffer(&cpu_wide, &per_thread);
    let t = per_thread.to_str().unwrap();
    let fields = "comm,tid,pid,flags,ip,sym,symoff,addr";
    let ours = poketrace(&["decode", t, "--itrace=be", "-F", fields]);
    let theirs = perf(&scratch("per-thread-home"), &["script", "-i", t, "--itrace=be", "-F", fields]);
    assert!(ours.lines().count() > 500);
    assert!(ours.lines().all(|l| l.starts_with("          worker    70/77   ")), "{}", ours.lines().next().unwrap());
    let (t, o): (Vec<&str>, Vec<&str>) = (theirs.lines().collect(), ours.lines().collect());
    let first = t.iter().zip(&o).position(|(a, b)| a != b);
    assert_eq!(first, None, "perf: {:?}\nours: {:?}", first.map(|i| t[i]), first.map(|i| o[i]));
    assert_eq!(t.len(), o.len());
}

/// `decode --itrace=i -F cpu,ip` of `dir`, per CPU, against its ground
/// truth without the BRKs that trapped (a trap is a `hw int` branch, not an
/// instruction): the index of the first difference per CPU, and the count.
fn cs_instructions_vs_truth(dir: &Path) -> Vec<(Option<usize>, usize)> {
    cs_instructions_vs_truth_uncertain(dir).into_iter().map(|(first, n, _)| (first, n)).collect()
}

/// The same, with the index of each CPU's first instruction printed uncertain.
fn cs_instructions_vs_truth_uncertain(dir: &Path) -> Vec<(Option<usize>, usize, Option<usize>)> {
    let d = dir.to_str().unwrap();
    let vectors: std::collections::BTreeSet<u64> = poketrace(&["decode", d, "--itrace=b", "-F", "flags,addr"])
        .lines()
        .filter(|l| l.contains("hw int"))
        .map(|l| u64::from_str_radix(l.rsplit("=> ").next().unwrap().trim(), 16).unwrap())
        .collect();
    let ours = by_cpu(&poketrace(&["decode", d, "--itrace=i", "-F", "cpu,ip"]));
    let mut out = Vec::new();
    for (cpu, lines) in &ours {
        let n: usize = cpu.trim_matches(|c| c == '[' || c == ']').parse().unwrap();
        let truth: Vec<u64> = sim::TruthReader::open(&dir.join(format!("truth/cpu{n}.bin"))).unwrap().map(|r| r.unwrap().1).collect();
        let want: Vec<u64> = truth
            .iter()
            .zip(truth.iter().skip(1).map(Some).chain([None]))
            .filter(|(_, next)| !next.is_some_and(|n| vectors.contains(n)))
            .map(|(a, _)| *a)
            .collect();
        let got: Vec<u64> = lines.iter().map(|l| u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap()).collect();
        let first = got.iter().zip(&want).position(|(a, b)| a != b).or((got.len() != want.len()).then_some(got.len().min(want.len())));
        let json = poketrace(&["decode", d, "--itrace=i", "--json"]);
        let cpu_field = format!("\"cpu\":{n},");
        let uncertain = json.lines().filter(|l| l.contains(&cpu_field)).position(|l| l.contains("\"uncertain\":true"));
        out.push((first, got.len(), uncertain));
    }
    out
}

/// CoreSight ETMv4 in perf.data (the simulator's AArch64 runs): `decode`
/// prints perf's branch lines CPU by CPU (perf 6.1 leaves off a CPU's last
/// few branches; we print them), and its instructions are exactly what ran.
#[test]
fn coresight_decode_prints_what_perf_prints() {
    if !perf_available() {
        return;
    }
    let dir = scratch("cs");
    simulate(&dir, &["--arch", "aarch64", "--cpus", "2", "--pokes", "0", "--instructions", "20000", "--seed", "7"]);
    let d = dir.to_str().unwrap();
    let fields = "comm,tid,cpu,flags,ip,sym,symoff,dso,addr,insn,insnlen";
    let theirs = by_cpu(&perf(&scratch("cs-home"), &["script", "-i", d, "--itrace=be", "-F", fields]));
    let ours = by_cpu(&poketrace(&["decode", d, "--itrace=be", "-F", fields]));
    assert_eq!(theirs.keys().collect::<Vec<_>>(), ours.keys().collect::<Vec<_>>());
    let mut kinds = std::collections::BTreeSet::new();
    for (cpu, p) in &theirs {
        let o = &ours[cpu];
        assert!(p.len() > 2000, "{cpu}: {} lines", p.len());
        let first = p.iter().zip(o).position(|(a, b)| a != b);
        assert_eq!(first, None, "{cpu}:\nperf: {:?}\nours: {:?}", first.map(|i| &p[i]), first.map(|i| &o[i]));
        assert!((p.len()..=p.len() + 16).contains(&o.len()), "{cpu}: perf {} lines, ours {}", p.len(), o.len());
        kinds.extend(p.iter().filter_map(|l| l.split_whitespace().nth(3).map(str::to_string)));
    }
    for k in ["tr", "call", "return", "jcc", "jmp"] {
        assert!(kinds.contains(k), "no {k} branch in {kinds:?}");
    }
    for (first, n) in cs_instructions_vs_truth(&dir) {
        assert!(first.is_none() && n > 15_000, "first difference at instruction {first:?} of {n}");
    }
    // With kprobes (BRK traps), jump labels, ftrace and static call sites
    // poked as the CPUs run: perf applies each poke when it reads the
    // record, we at its time, so we follow what ran further than perf does.
    let poked = scratch("cs-poked");
    simulate(&poked, &["--arch", "aarch64", "--cpus", "2", "--pokes", "60", "--instructions", "20000", "--seed", "7"]);
    let p = poked.to_str().unwrap();
    let theirs = by_cpu(&perf(&scratch("cs-home"), &["script", "-i", p, "--itrace=be", "-F", "cpu,ip,addr"]));
    let ours = by_cpu(&poketrace(&["decode", p, "--itrace=be", "-F", "cpu,ip,addr"]));
    assert!(poketrace(&["decode", p, "--itrace=b", "-F", "flags"]).contains("hw int"));
    for (cpu, t) in &theirs {
        let n: usize = cpu.trim_matches(|c| c == '[' || c == ']').parse().unwrap();
        let truth = truth_branches(&poked.join(format!("truth/cpu{n}.bin")));
        let (perf_right, our_right) = (right_branches(t, &truth), right_branches(&ours[cpu], &truth));
        eprintln!("{cpu}: {} branches ran; perf right for the first {perf_right}, poketrace for the first {our_right}", truth.len());
        assert!(our_right > perf_right && our_right > 1000, "{cpu}: perf {perf_right}, ours {our_right}");
    }
    // Where a change lands between two timestamps the trace decides which
    // code ran, or the instructions are printed uncertain: none is wrong
    // before the first uncertain one.
    for (first, n, uncertain) in cs_instructions_vs_truth_uncertain(&poked) {
        eprintln!("instructions: first difference {first:?} of {n}, first uncertain {uncertain:?}");
        assert!(
            first.is_some_and(|f| uncertain.is_some_and(|u| u <= f)) || first.is_none(),
            "first difference {first:?}, first uncertain {uncertain:?}"
        );
    }
}

/// The taken branches (from, to) of a ground truth file: where the next
/// instruction does not follow the last.
fn truth_branches(path: &Path) -> Vec<(u64, u64)> {
    let ips: Vec<u64> = sim::TruthReader::open(path).unwrap().map(|r| r.unwrap().1).collect();
    ips.windows(2).filter(|w| w[1] != w[0] + 4).map(|w| (w[0], w[1])).collect()
}

/// How many of `lines` (`-F cpu,ip,addr` branch lines; trace starts and
/// branches to the next instruction, which the truth cannot show, left out)
/// agree with `truth` before the first that does not.
fn right_branches(lines: &[String], truth: &[(u64, u64)]) -> usize {
    let hex = |s: &str| u64::from_str_radix(s.trim(), 16).unwrap();
    let got = lines.iter().filter_map(|l| {
        let (from, to) = l.split_once("=>")?;
        let (from, to) = (hex(from.split_whitespace().last()?), hex(to));
        (from != 0 && to != from + 4).then_some((from, to))
    });
    got.zip(truth).take_while(|(a, b)| a == *b).count()
}
