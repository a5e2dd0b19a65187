//! Recording on this machine's own kernel (it emits no TEXT_POKE; see
//! qemu.rs for that): a BPF program loaded while recording, a flood of
//! context switches, a flood of BPF loads, and the error an unprivileged
//! user gets. Needs root and perf; without them these skip, unless CI (or
//! POKETRACE_REQUIRE_PERF) is set: then they fail.
//!
//! The commands recorded are this test binary's own `helper_*` tests
//! (ignored, and doing nothing unless POKETRACE_HELPER is set).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use perfdata::abi::record_type as rt;
use perfdata::{PerfFile, RecordBody};
use record::{Options, Summary};

/// record() installs process-wide signal handlers: one recording at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn ready() -> bool {
    have(is_root(), "not root: recording needs CAP_PERFMON and CAP_BPF") && have(command_works("perf", "--version"), "perf missing")
}

/// Taken by each recording test for its whole run.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records while this test binary runs the ignored test `helper` with POKETRACE_HELPER=`arg`.
fn record_helper(name: &str, helper: &str, arg: &str) -> (Summary, std::path::PathBuf) {
    let dir = scratch(name);
    let exe = std::env::current_exe().unwrap();
    let mut opts = Options::new(dir.join("rec"));
    opts.command = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("POKETRACE_HELPER='{arg}' exec \"$0\" --exact {helper} --ignored --nocapture --test-threads=1 >/dev/null").into(),
        exe.into(),
    ];
    let summary = record::record(&opts).unwrap();
    eprintln!("{summary}");
    assert_eq!(summary.exit_code, Some(0), "the helper failed");
    (summary, dir.join("rec"))
}

/// Every record of the file, counted by type, checking none is unreadable.
fn counts(rec: &Path) -> BTreeMap<u32, u64> {
    let file = PerfFile::open(rec).unwrap();
    let mut n = BTreeMap::new();
    for r in file.records() {
        *n.entry(r.unwrap().record_type()).or_default() += 1;
    }
    n
}

fn bpf_syscall_load(name: &str) -> i32 {
    // mov r0, 0; exit
    let insns: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    let license = b"GPL\0";
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&1u32.to_le_bytes()); // BPF_PROG_TYPE_SOCKET_FILTER
    attr[4..8].copy_from_slice(&2u32.to_le_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_le_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_le_bytes());
    attr[48..48 + name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: attr is a BPF_PROG_LOAD bpf_attr prefix pointing at live buffers.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 5, attr.as_mut_ptr(), attr.len() as u32) };
    assert!(fd >= 0, "BPF_PROG_LOAD: {}", std::io::Error::last_os_error());
    fd as i32
}

/// The recorded commands. They run only as children of the tests below.
#[test]
#[ignore = "run by the other tests as the recorded command"]
fn helper() {
    let Ok(what) = std::env::var("POKETRACE_HELPER") else { return };
    match what.split_once(':').unwrap_or((&what, "")) {
        // load poketrace_test, save what bpftool (if any) says of it into FILE, unload
        ("bpf", file) => {
            let fd = bpf_syscall_load("poketrace_test");
            if let Ok(out) = Command::new("bpftool").args(["-j", "prog", "show", "name", "poketrace_test"]).output() {
                std::fs::write(file, out.stdout).unwrap();
            }
            // SAFETY: our own fd.
            unsafe { libc::close(fd) };
            std::thread::sleep(Duration::from_millis(100)); // the unload records are deferred
        }
        // N programs, at most 32 loaded at a time
        ("bpf-flood", n) => {
            let mut open = std::collections::VecDeque::new();
            for _ in 0..n.parse::<usize>().unwrap() {
                open.push_back(bpf_syscall_load("poketrace_flood"));
                if open.len() > 32 {
                    // SAFETY: our own fd.
                    unsafe { libc::close(open.pop_front().unwrap()) };
                }
            }
            for fd in open {
                // SAFETY: our own fd.
                unsafe { libc::close(fd) };
            }
        }
        // two threads handing a token back and forth N times: two context switches each way
        ("switch-flood", n) => {
            let n: u64 = n.parse().unwrap();
            let (to_peer, peer_rx) = std::sync::mpsc::sync_channel::<u64>(0);
            let (to_main, main_rx) = std::sync::mpsc::sync_channel::<u64>(0);
            let peer = std::thread::spawn(move || {
                while let Ok(i) = peer_rx.recv() {
                    if to_main.send(i).is_err() {
                        break;
                    }
                }
            });
            for i in 0..n {
                to_peer.send(i).unwrap();
                main_rx.recv().unwrap();
            }
            drop(to_peer);
            peer.join().unwrap();
        }
        // record into DIR for 5 seconds, unless killed first
        ("record", dir) => {
            let mut opts = Options::new(dir);
            opts.command = vec!["sleep".into(), "5".into()];
            record::record(&opts).unwrap();
        }
        (other, _) => panic!("unknown helper {other}"),
    }
}

/// `record` killed by SIGKILL 1.5 s into the recording: its header and its
/// rounds were written as it went, so the file reads up to its last round.
#[test]
fn a_recording_killed_by_sigkill_reads_up_to_its_last_round() {
    if !ready() {
        return;
    }
    let rec = scratch("killed").join("rec");
    let mut recorder = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper", "--ignored", "--nocapture", "--test-threads=1"])
        .env("POKETRACE_HELPER", format!("record:{}", rec.display()))
        .spawn()
        .unwrap();
    // The data file comes after the kernel's code is saved; then 1.5 s of recording.
    let started = Instant::now();
    while !rec.join("data").exists() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    recorder.kill().unwrap(); // SIGKILL
    recorder.wait().unwrap();

    let file = PerfFile::open(&rec).unwrap();
    assert!(file.unfinished().is_some(), "the header is the one written first");
    let mut records = file.records();
    let first = records.next().unwrap().unwrap_err().to_string();
    assert!(first.contains("data size is 0"), "{first}");
    let (mut n, mut rounds, mut errors) = (BTreeMap::<u32, u64>::new(), 0, Vec::new());
    for r in records {
        match r {
            Ok(r) => {
                assert!(errors.is_empty(), "a record read after an error: {errors:?}");
                rounds += (r.record_type() == rt::FINISHED_ROUND) as u64;
                *n.entry(r.record_type()).or_default() += 1;
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    // The kill may land inside a write: then the last record is cut short,
    // and that is the only error.
    assert!(errors.len() <= 1 && errors.iter().all(|e| e.contains("truncated")), "{errors:?}");
    assert!(n.get(&rt::MMAP).is_some_and(|&k| k > 0) && n.get(&rt::COMM).is_some_and(|&c| c > 0), "the synthesized maps and names: {n:?}");
    assert!(rounds > 0, "rounds of the 1.5 s of recording: {n:?}");
}

#[test]
fn bpf_program_loaded_while_recording() {
    if !ready() {
        return;
    }
    let _one = one_at_a_time();
    let bpftool = scratch("bpf-bpftool").join("show.json");
    let (summary, rec) = record_helper("bpf", "helper", &format!("bpf:{}", bpftool.display()));
    assert_eq!(summary.bpf.failed, 0, "{:?}", summary.bpf.reasons);
    assert_eq!(summary.lost, 0);
    let n = counts(&rec);
    assert!(n[&rt::KSYMBOL] >= 2 && n[&rt::BPF_EVENT] >= 2, "{n:?}");

    // KSYMBOL load and unload of our program, and its image where KSYMBOL says.
    let file = PerfFile::open(&rec).unwrap();
    let ksyms: Vec<(u64, u32, u16)> = file
        .records()
        .filter_map(|r| match r.unwrap().body {
            RecordBody::Ksymbol(k) if k.name.ends_with(b"_poketrace_test") => Some((k.addr, k.len, k.flags)),
            _ => None,
        })
        .collect();
    assert_eq!(ksyms.iter().map(|k| k.2).collect::<Vec<_>>(), [0, 1], "KSYMBOL register and unregister");
    let index = std::fs::read_to_string(rec.join("bpf/index.jsonl")).unwrap();
    let prog: serde_json::Value = index
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["name"] == "poketrace_test")
        .expect("poketrace_test's JIT image was not captured");
    assert_eq!(prog["loaded"], "during");
    assert_eq!(prog["funcs"][0]["addr"], ksyms[0].0);
    let elf = std::fs::read(rec.join("bpf").join(prog["file"].as_str().unwrap())).unwrap();
    let segments = perfdata::kcore::read_kcore_segments(&elf).unwrap();
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0].0, ksyms[0].0);
    let image = &elf[segments[0].1.clone()];
    assert_eq!(image.len(), ksyms[0].1 as usize, "image length differs from the KSYMBOL length");
    // Debian's bpftool cannot dump JIT bytes (no libbfd); it does tell the
    // length and the tag. (The qemu test checks the bytes against the
    // kernel's own JIT dump.)
    match std::fs::read_to_string(&bpftool).ok().and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok()) {
        Some(show) => {
            assert_eq!(show["bytes_jited"], image.len(), "bpftool's length differs");
            assert_eq!(show["tag"], prog["tag"], "bpftool's tag differs");
        }
        None => eprintln!("bpftool missing: the image is checked against the KSYMBOL length only"),
    }

    // Linux perf reads the recording and sees the program come and go.
    let home = scratch("bpf-perf-home");
    let rec_s = rec.to_str().unwrap();
    let (_, stderr) = perf(&home, &["report", "-D", "-i", rec_s]);
    assert!(!stderr.contains("failed"), "perf report -D: {stderr}");
    let (script, _) = perf(&home, &["script", "-i", rec_s, "--show-bpf-events", "--ns"]);
    let ours: Vec<&str> = script.lines().filter(|l| l.contains("poketrace_test") || l.contains("PERF_RECORD_BPF_EVENT")).collect();
    assert!(ours.iter().any(|l| l.contains("PERF_RECORD_KSYMBOL") && l.contains("flags 0x0")), "{script}");
    assert!(ours.iter().any(|l| l.contains("PERF_RECORD_BPF_EVENT type 1")), "{script}");
}

/// Linux grows header.size of KSYMBOL, BPF_EVENT and TEXT_POKE for each
/// side-band event on a CPU it writes them to, newest event first: a
/// `perf record` started after ours makes our records too long (and ours
/// makes its records too long when it starts first). We cut them back.
#[test]
fn records_grown_by_a_later_perf_record_are_repaired() {
    if !ready() {
        return;
    }
    let _one = one_at_a_time();
    let dir = scratch("beside-perf");
    let exe = std::env::current_exe().unwrap();
    let mut opts = Options::new(dir.join("rec"));
    opts.command = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "HOME='{0}' PERF_CONFIG=/dev/null perf record -q -e dummy -a -o '{0}/perf.data' -- \
             env POKETRACE_HELPER=bpf:/dev/null \"$0\" --exact helper --ignored >/dev/null",
            dir.display()
        )
        .into(),
        exe.into(),
    ];
    let summary = record::record(&opts).unwrap();
    eprintln!("{summary}");
    assert_eq!(summary.exit_code, Some(0));
    assert!(summary.resized >= 4, "KSYMBOL and BPF_EVENT of the load and the unload: {} resized", summary.resized);
    let file = PerfFile::open(dir.join("rec")).unwrap();
    let mut ours = 0;
    for r in file.records() {
        let r = r.unwrap();
        match &r.body {
            RecordBody::Ksymbol(k) if k.name.ends_with(b"_poketrace_test") => ours += 1,
            RecordBody::BpfEvent(_) => {}
            _ => continue,
        }
        assert!(r.time().is_some_and(|t| t > 0) && r.sample_id.pid.is_some_and(|p| p > 0), "{r:?}");
    }
    assert_eq!(ours, 2);
    let home = scratch("beside-perf-home");
    perf(&home, &["report", "-D", "-i", dir.join("rec").to_str().unwrap()]);
}

#[test]
fn context_switch_flood_is_drained_and_accounted() {
    if !ready() {
        return;
    }
    let _one = one_at_a_time();
    let started = Instant::now();
    let (summary, rec) = record_helper("switch-flood", "helper", "switch-flood:200000");
    let n = counts(&rec);
    let switches = n.get(&rt::SWITCH_CPU_WIDE).copied().unwrap_or(0);
    eprintln!(
        "{} records drained in {:.2} s ({:.0}/s), {} lost, {} bytes; test {:.1} s",
        summary.total_records(),
        summary.elapsed.as_secs_f64(),
        summary.total_records() as f64 / summary.elapsed.as_secs_f64(),
        summary.lost,
        summary.bytes,
        started.elapsed().as_secs_f64()
    );
    // 200000 round trips are at least 400000 switches, each recorded twice (out and in).
    assert!(switches + summary.lost >= 800_000, "{switches} switches recorded, {} lost", summary.lost);
    // What the summary says is what the file holds: the records from the
    // rings (LOST included), the synthesized ones, one FINISHED_ROUND per round.
    for ty in [rt::SWITCH_CPU_WIDE, rt::LOST, rt::MMAP2, rt::FORK, rt::EXIT] {
        assert_eq!(n.get(&ty), summary.records.get(&ty), "record type {ty}");
    }
    let rounds = n.get(&rt::FINISHED_ROUND).copied().unwrap_or(0);
    assert_eq!(n.values().sum::<u64>(), summary.total_records() + summary.synthesized + rounds);
    let lost_in_file: u64 = PerfFile::open(&rec)
        .unwrap()
        .records()
        .filter_map(|r| match r.unwrap().body {
            RecordBody::Lost(l) => Some(l.lost),
            _ => None,
        })
        .sum();
    assert_eq!(lost_in_file, summary.lost);
    assert!(std::fs::metadata(rec.join("data")).unwrap().len() >= summary.bytes);
    let home = scratch("flood-perf-home");
    let (stats, _) = perf(&home, &["report", "--stats", "-i", rec.to_str().unwrap()]);
    assert!(stats.contains(&format!("SWITCH_CPU_WIDE events: {switches:>10}")), "{stats}");
}

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()).unwrap().parse().unwrap()
}

#[test]
fn memory_stays_bounded_under_a_bpf_flood() {
    if !ready() {
        return;
    }
    let _one = one_at_a_time();
    // reset the peak to the current size (clear_refs 5)
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = peak_rss_kib();
    let loads = 1000;
    let (summary, rec) = record_helper("bpf-flood", "helper", &format!("bpf-flood:{loads}"));
    let growth = peak_rss_kib().saturating_sub(before);
    let b = &summary.bpf;
    eprintln!(
        "{loads} loads: {} images, {} gone before capture, {} lost, {} lost at the end; peak RSS grew {growth} KiB",
        b.during, b.gone, summary.lost, summary.lost_unreported
    );
    assert_eq!(b.failed, 0, "{:?}", b.reasons);
    // every load is saved, or counted: unloaded first, or its BPF_EVENT lost
    // (a LOST record, or lost with no record left to report it before the end)
    let lost = summary.lost + summary.lost_unreported;
    assert!(b.during + b.gone + lost >= loads, "{b:?}, {lost} lost");
    let index = std::fs::read_to_string(rec.join("bpf/index.jsonl")).unwrap();
    assert_eq!(index.lines().filter(|l| l.contains("\"poketrace_flood\"")).count() as u64, b.during);
    // Two 1 MiB rings, the write buffer and the images one at a time: far below 64 MiB.
    assert!(growth < 64 * 1024, "peak RSS grew {growth} KiB while recording {loads} BPF loads");
}

/// Run as an unprivileged user by the test below: prints record()'s error.
#[test]
#[ignore = "run by unprivileged_user_is_told_the_fix"]
fn helper_unprivileged() {
    let Ok(dir) = std::env::var("POKETRACE_HELPER") else { return };
    match record::record(&Options::new(Path::new(&dir).join("rec"))) {
        Ok(_) => println!("RECORDED"),
        Err(e) => println!("ERROR: {e}"),
    }
}

#[test]
fn unprivileged_user_is_told_the_fix() {
    use std::os::unix::process::CommandExt;
    let paranoid: i64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap().trim().parse().unwrap();
    if !is_root() || paranoid < 1 {
        eprintln!("skipping: needs root to become another user, and perf_event_paranoid >= 1");
        return;
    }
    let dir = std::env::temp_dir().join(format!("poketrace-unprivileged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper_unprivileged", "--ignored", "--nocapture"])
        .env("POKETRACE_HELPER", &dir)
        .uid(65534)
        .gid(65534)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        other => {
            eprintln!("skipping: this test binary cannot run as nobody here ({other:?})");
            return;
        }
    };
    let line = out.lines().find(|l| l.starts_with("ERROR: ") || l == &"RECORDED").unwrap_or_default();
    assert!(line.contains("perf_event_paranoid") && line.contains("CAP_PERFMON"), "{out}");
}
