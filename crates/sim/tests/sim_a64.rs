//! AArch64 runs: determinism; ETMv4 streams that the packet decoder accepts
//! whole; OpenCSD's trc_pkt_lister and Linux perf decoding them as the
//! ground truth says the CPUs ran.
//!
//! The trc_pkt_lister and perf tests skip when the tool is missing, unless
//! CI or POKETRACE_REQUIRE_PERF is set: then they fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, Framing, Packet, PacketReader};
use isa::Arch;
use perfdata::{PerfFile, RecordBody};
use sim::{Protocol, SimConfig};

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim-a64").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn a64(instructions: u64, pokes: u64, protocol: Protocol) -> SimConfig {
    SimConfig { arch: Arch::Aarch64, instructions, pokes, protocol, ..SimConfig::default() }
}

/// Whether `tool` runs; when it does not, fails if the tool is required
/// ([`testkit::required`]).
fn have(tool: &str, arg: &str) -> bool {
    let ok = Command::new(tool).arg(arg).output().is_ok_and(|o| o.status.success() || !o.stdout.is_empty());
    testkit::have(ok, &format!("{tool} not available (`{tool} {arg}` failed)"))
}

fn truth(d: &Path, cpu: u32) -> Vec<(u64, u64)> {
    sim::TruthReader::open(&d.join(format!("truth/cpu{cpu}.bin"))).unwrap().map(|r| r.unwrap()).collect()
}

/// Time of the first TEXT_POKE, if any.
fn first_poke(d: &Path) -> Option<u64> {
    let f = PerfFile::open(d).unwrap();
    f.records().filter_map(|r| r.ok()).find(|r| matches!(r.body, RecordBody::TextPoke(_))).and_then(|r| r.sample_id.time)
}

#[test]
fn same_seed_same_bytes() {
    let cfg = a64(20_000, 40, Protocol::Int3);
    let (a, b) = (dir("same-a"), dir("same-b"));
    sim::simulate(&cfg, &a).unwrap();
    sim::simulate(&cfg, &b).unwrap();
    for f in [
        "data",
        "kcore_dir/kcore",
        "kcore_dir/kallsyms",
        "truth/cpu0.bin",
        "truth/cpu3.bin",
        "truth/meta.json",
        "snapshot/trace.bin",
        "snapshot/kernel.bin",
        "snapshot/ETM_2.ini",
    ] {
        assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "{f} differs");
    }
    let c = dir("same-c");
    sim::simulate(&SimConfig { seed: 2, ..cfg }, &c).unwrap();
    assert_ne!(std::fs::read(a.join("snapshot/trace.bin")).unwrap(), std::fs::read(c.join("snapshot/trace.bin")).unwrap());
    // Only the outputs stay: the per-CPU trace files are gone.
    let names: Vec<String> = std::fs::read_dir(&a).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.starts_with(".trace")), "{names:?}");
}

#[test]
fn every_stream_decodes_without_error_packets() {
    let d = dir("packets");
    let s = sim::simulate(&a64(50_000, 300, Protocol::Int3), &d).unwrap();
    assert!(s.pokes > 200, "{s:?}");
    let snap = Snapshot::load(d.join("snapshot")).unwrap();
    let setup = snap.buffer_setup("ETB_0").unwrap();
    assert_eq!(setup.sources.len(), 4);
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    let data = snap.read_buffer(&setup.buffer).unwrap();
    // The snapshot's buffer: every CPU's stream, whole.
    let mut per_id: BTreeMap<u8, (u64, u64, u64)> = BTreeMap::new(); // (packets, atoms, exceptions)
    let mut reader = PacketReader::new(&data, setup.framing, &configs, ErrorRecovery::Resync);
    while let Some(item) = reader.next() {
        let p = item.unwrap_or_else(|e| panic!("frame error: {e}"));
        assert!(p.error().is_none(), "{}", p.error().unwrap());
        assert!(!matches!(p.packet, Packet::NotSync { .. }), "bytes before the first A-sync at {:#x}", p.index);
        let e = per_id.entry(p.trace_id).or_default();
        e.0 += 1;
        match p.packet {
            Packet::Atom { atoms, .. } => e.1 += atoms.count as u64,
            Packet::Exception(_) => e.2 += 1,
            _ => {}
        }
    }
    assert_eq!(per_id.keys().copied().collect::<Vec<_>>(), vec![0x10, 0x11, 0x12, 0x13]);
    assert!(per_id.values().all(|v| v.1 > 1000), "{per_id:?}");
    // Kprobes were hit: BRK traps are exception packets.
    assert!(per_id.values().map(|v| v.2).sum::<u64>() > 0, "{per_id:?}");
    // perf.data: each AUXTRACE buffer decodes on its own, from an A-sync.
    let file = PerfFile::open(&d).unwrap();
    let mut buffers = 0;
    for r in file.records() {
        if let RecordBody::Auxtrace(a) = r.unwrap().body {
            buffers += 1;
            let mut reader = PacketReader::new(a.data, Framing::Aligned { reset_on_4x_fsync: false }, &configs, ErrorRecovery::Resync);
            let mut first = true;
            while let Some(item) = reader.next() {
                let p = item.unwrap_or_else(|e| panic!("AUXTRACE cpu {}: frame error {e}", a.cpu));
                assert!(p.error().is_none(), "AUXTRACE cpu {}: {}", a.cpu, p.error().unwrap());
                assert_eq!(p.trace_id, 0x10 + a.cpu as u8);
                if first {
                    assert_eq!(p.packet, Packet::Async, "cpu {} buffer at {:#x} does not begin with an A-sync", a.cpu, a.offset);
                    first = false;
                }
            }
        }
    }
    assert!(buffers >= 4);
}

/// trc_pkt_lister's INSTR_RANGE elements per trace ID, as instruction addresses, and its error lines.
fn lister_ranges(snapshot: &Path) -> (BTreeMap<u8, Vec<u64>>, Vec<String>) {
    let log = snapshot.join("decode.ppl");
    let out = Command::new("trc_pkt_lister").arg("-ss_dir").arg(snapshot).arg("-decode").arg("-logfilename").arg(&log).output().unwrap();
    assert!(out.status.success(), "trc_pkt_lister: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&log).unwrap();
    let mut ranges: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
    let mut errors = Vec::new();
    for line in text.lines() {
        if line.contains("ERR") || line.contains("I_BAD_SEQUENCE") || line.contains("I_RESERVED") || line.contains("I_INCOMPLETE_EOT") {
            errors.push(line.to_string());
        }
        let Some(rest) = line.split_once("OCSD_GEN_TRC_ELEM_INSTR_RANGE(exec range=") else { continue };
        let id = line.split("ID:").nth(1).and_then(|s| s.split(';').next()).map(|s| u8::from_str_radix(s, 16).unwrap()).unwrap();
        let (from, to) = rest.1.split_once(":[").unwrap();
        let to = to.split(']').next().unwrap();
        let (from, to) = (u64::from_str_radix(&from[2..], 16).unwrap(), u64::from_str_radix(&to[2..], 16).unwrap());
        ranges.entry(id).or_default().extend((from..to).step_by(4));
    }
    (ranges, errors)
}

#[test]
fn trc_pkt_lister_decodes_the_snapshot_as_the_truth() {
    if !have("trc_pkt_lister", "-help") {
        return;
    }
    // No pokes: OpenCSD's instruction ranges are exactly what each CPU ran.
    let d = dir("lister-none");
    sim::simulate(&a64(30_000, 0, Protocol::None), &d).unwrap();
    let (ranges, errors) = lister_ranges(&d.join("snapshot"));
    assert!(errors.is_empty(), "{errors:?}");
    for cpu in 0..4u32 {
        let want: Vec<u64> = truth(&d, cpu).into_iter().map(|t| t.1).collect();
        let got = &ranges[&(0x10 + cpu as u8)];
        assert_eq!(got.len(), want.len(), "cpu {cpu}");
        assert!(got == &want, "cpu {cpu}: first difference at {:?}", got.iter().zip(&want).position(|(a, b)| a != b));
    }
    // With pokes the snapshot's memory is the code before them: OpenCSD
    // follows the truth up to the first poke at least, and reports no errors.
    let d = dir("lister-int3");
    sim::simulate(&a64(30_000, 100, Protocol::Int3), &d).unwrap();
    let t0 = first_poke(&d).unwrap();
    let (ranges, errors) = lister_ranges(&d.join("snapshot"));
    assert!(errors.is_empty(), "{errors:?}");
    for cpu in 0..4u32 {
        let want = truth(&d, cpu);
        let before = want.iter().take_while(|t| t.0 < t0).count();
        let got = &ranges[&(0x10 + cpu as u8)];
        let agree = got.iter().zip(&want).take_while(|(a, b)| **a == b.1).count();
        assert!(agree >= before, "cpu {cpu}: agrees for {agree} instructions, {before} ran before the first poke");
    }
}

/// Taken branches (from, to) per the truth: the instruction after is not
/// the next in memory, or the instruction always branches.
fn truth_branches(d: &Path, cpu: u32, text_base: u64, text: &[u8]) -> Vec<(u64, u64)> {
    let t = truth(d, cpu);
    t.windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0].1, w[1].1);
            let o = a.checked_sub(text_base)? as usize;
            let word = u32::from_le_bytes(text.get(o..o + 4)?.try_into().unwrap());
            use isa::BranchClass as B;
            let always = matches!(
                isa::classify_aarch64(a, word).class,
                B::DirectJump | B::DirectCall | B::IndirectJump | B::IndirectCall | B::Return | B::FarTransfer
            );
            (b != a + 4 || always).then_some((a, b))
        })
        .collect()
}

/// Taken branches (from, to) per CPU.
type Branches = BTreeMap<u32, Vec<(u64, u64)>>;

/// perf's branches per CPU ("tr strt"/"tr end" left out), and its other lines.
fn perf_branches(d: &Path) -> (Branches, Vec<String>) {
    let out = Command::new("perf").arg("script").arg("-i").arg(d).args(["--itrace=be", "-F", "cpu,time,ip,addr,flags", "--ns"]).output().unwrap();
    assert!(out.status.success(), "perf script: {}", String::from_utf8_lossy(&out.stderr));
    let mut per = Branches::new();
    let mut other = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let parsed = (|| {
            let cpu: u32 = line.trim_start().strip_prefix('[')?.split(']').next()?.parse().ok()?;
            let (left, to) = line.rsplit_once("=>")?;
            let from = left.split_whitespace().last()?;
            Some((
                cpu,
                u64::from_str_radix(from, 16).ok()?,
                u64::from_str_radix(to.trim(), 16).ok()?,
                line.contains(" tr strt") || line.contains(" tr end"),
            ))
        })();
        match parsed {
            Some((_, _, _, true)) => {}
            Some((cpu, from, to, false)) => per.entry(cpu).or_default().push((from, to)),
            None => other.push(line.to_string()),
        }
    }
    (per, other)
}

#[test]
fn perf_decodes_the_coresight_perf_data() {
    if !have("perf", "--version") {
        return;
    }
    let d = dir("perf-none");
    sim::simulate(&SimConfig { cpus: 2, ..a64(20_000, 0, Protocol::None) }, &d).unwrap();
    let text = std::fs::read(d.join("snapshot/kernel.bin")).unwrap();
    let base = 0xffff_8000_0801_0000;
    let (per, other) = perf_branches(&d);
    assert!(other.is_empty(), "{other:?}");
    for cpu in 0..2 {
        let want = truth_branches(&d, cpu, base, &text);
        let got = &per[&cpu];
        // perf's branches are the truth's, in order; perf 6.1 leaves out
        // the last few (it emits nothing after the final range of a CPU
        // whose timestamps it has caught up with): at most 1%.
        let agree = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        assert_eq!(agree, got.len(), "cpu {cpu}: perf and truth part at branch {agree}: {:x?} vs {:x?}", got.get(agree), want.get(agree));
        assert!(got.len() * 100 >= want.len() * 99, "cpu {cpu}: perf {} of {} branches", got.len(), want.len());
        eprintln!("cpu {cpu}: perf {} branches of the truth's {}, all in order", got.len(), want.len());
    }
}

fn mode(r: &[sim::check::ModeReport], m: tracedecode::ImageMode) -> &sim::check::Score {
    &r.iter().find(|x| x.mode == m).unwrap().total
}

#[test]
fn check_decodes_etm_with_three_images() {
    use tracedecode::ImageMode as Mode;
    // No pokes: every image is the code that ran.
    let d = dir("check-none");
    let s = sim::simulate(&a64(30_000, 0, Protocol::None), &d).unwrap();
    let r = sim::check::check(&d).unwrap();
    for m in Mode::ALL {
        let t = mode(&r, m);
        assert_eq!(t.instructions, s.instructions.iter().sum::<u64>());
        assert_eq!((t.correct, t.wrong, t.missing, t.errors), (t.instructions, 0, 0, 0), "{m:?} {t:?}");
    }
    // Pokes announced at the write (the kernel's single-instruction writes):
    // the image at each timestamp is right, the static image is not.
    let d = dir("check-int3");
    sim::simulate(&SimConfig { tsc_period: 20, ..a64(30_000, 200, Protocol::Int3) }, &d).unwrap();
    let r = sim::check::check(&d).unwrap();
    let tl = mode(&r, Mode::Timeline);
    assert_eq!((tl.wrong, tl.missing, tl.errors), (0, 0, 0), "{tl:?}");
    let st = mode(&r, Mode::Static);
    assert!(st.wrong > 0 && st.correct < tl.correct, "{st:?}");
}

/// perf against the truth: (index of the first difference, perf's branches
/// that the truth never takes at all: decoded from code that was not there).
fn compare(perf: &[(u64, u64)], truth: &[(u64, u64)]) -> (usize, usize) {
    let first = perf.iter().zip(truth).take_while(|(a, b)| a == b).count();
    let taken: std::collections::HashSet<&(u64, u64)> = truth.iter().collect();
    (first, perf.iter().filter(|b| !taken.contains(b)).count())
}

/// perf 6.1 applies every TEXT_POKE before it decodes CoreSight trace (the
/// AUX data is decoded when its PERF_RECORD_AUX comes, after the run), so
/// with events its branches part from the truth before the first poke;
/// with no events it follows the truth up to the first poke. This measures
/// by how much, and pins those two facts.
#[test]
fn perf_with_pokes_is_measured() {
    if !have("perf", "--version") {
        return;
    }
    // int3 and none make the same writes at the same ticks (int3 only adds
    // the events), so int3's first TEXT_POKE is the time of none's first write.
    let mut first_write = u64::MAX;
    for protocol in [Protocol::Int3, Protocol::PrePost, Protocol::None] {
        let d = dir(&format!("perf-{protocol}"));
        sim::simulate(&SimConfig { cpus: 2, ..a64(50_000, 100, protocol) }, &d).unwrap();
        let t0 = if protocol == Protocol::None { first_write } else { first_poke(&d).unwrap() };
        if protocol == Protocol::Int3 {
            first_write = t0;
        }
        let text = std::fs::read(d.join("snapshot/kernel.bin")).unwrap();
        let (per, _) = perf_branches(&d);
        for cpu in 0..2 {
            let want = truth_branches(&d, cpu, 0xffff_8000_0801_0000, &text);
            let got = &per[&cpu];
            let (first, impossible) = compare(got, &want);
            // Branches taken before the first poke: those whose source ran before it.
            let truth = truth(&d, cpu);
            let ran_before = truth.iter().take_while(|t| t.0 < t0).count();
            let before = truth[..ran_before.min(truth.len())].windows(2).filter(|w| want.contains(&(w[0].1, w[1].1))).count();
            eprintln!(
                "{protocol} cpu {cpu}: truth {} branches ({before} before the first poke), perf {}: first difference at {first}, {impossible} that the truth never takes",
                want.len(),
                got.len()
            );
            if protocol == Protocol::None {
                assert!(first >= before, "{protocol} cpu {cpu}: perf parts at {first}, before the first poke ({before})");
            } else {
                assert!(first < before, "{protocol} cpu {cpu}: perf agreed up to {first}, {before} branches ran before the first poke");
            }
        }
    }
}
