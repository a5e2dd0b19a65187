//! `poketrace segments` lists a trace's units, and `decode --segment`
//! decodes them apart: the units of a buffer decoded one by one and put one
//! after the other give that buffer's lines of the whole decode, and all
//! units at once give the whole decode, byte for byte, also across a gap in
//! the AUX data. The IDs are the same
//! from run to run, and `--target-bytes` groups PSB segments as documented.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;

/// `poketrace ARGS`' stdout, which may end with status 0 or 1 (a decode
/// with errors is incomplete), never another.
fn poketrace_incomplete(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap();
    let code = out.status.code();
    assert!(matches!(code, Some(0 | 1)), "poketrace {args:?}: status {code:?}\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `poketrace segments DIR --json --target-bytes TARGET`, parsed.
fn units(dir: &str, target: usize) -> Vec<Value> {
    let listed = common::poketrace(&["segments", dir, "--json", "--target-bytes", &target.to_string()]);
    listed.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Moves the AUX offsets of buffer 0's AUXTRACE records from its middle one
/// on 64 bytes on: a gap in the AUX data there.
fn aux_gap(dir: &Path) {
    let path = dir.join("data");
    let mut data = std::fs::read(&path).unwrap();
    let u64_at = |d: &[u8], at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
    let (mut at, end) = (u64_at(&data, 40) as usize, (u64_at(&data, 40) + u64_at(&data, 48)) as usize);
    let mut records = Vec::new();
    while at < end {
        let (kind, size) = (u32::from_le_bytes(data[at..at + 4].try_into().unwrap()), u16::from_le_bytes([data[at + 6], data[at + 7]]) as usize);
        let mut next = at + size;
        // PERF_RECORD_AUXTRACE: size, offset, reference, idx, ...; its data follows.
        if kind == 71 {
            if u32::from_le_bytes(data[at + 32..at + 36].try_into().unwrap()) == 0 {
                records.push(at + 16);
            }
            next += u64_at(&data, at + 8) as usize;
        }
        at = next;
    }
    assert!(records.len() > 2, "{} AUXTRACE records of buffer 0", records.len());
    for &r in &records[records.len() / 2..] {
        let moved = u64_at(&data, r) + 64;
        data[r..r + 8].copy_from_slice(&moved.to_le_bytes());
    }
    std::fs::write(&path, data).unwrap();
}

/// A 2-CPU simulation with pokes at `dir`, its trace damaged and cut by
/// an AUX gap when asked: the inputs the unit tests decode.
fn unit_input(dir: &Path, instructions: &str, damaged: bool, gap: bool) -> std::path::PathBuf {
    common::simulate(dir, &["--cpus", "2", "--instructions", instructions, "--protocol", "int3", "--pokes", "200", "--seed", "7"]);
    if damaged {
        common::damage_trace(dir);
    }
    if gap {
        aux_gap(dir);
    }
    dir.to_path_buf()
}

#[test]
fn units_decoded_apart_give_the_whole_decode() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/segments-decode"));
    // (The simulator writes AUXTRACE records of 64 KiB: the gap's run needs a few.)
    for (name, damaged, gap, instructions, target) in
        [("pokes", false, false, "100000", 9000), ("damaged", true, false, "100000", 9000), ("gap", true, true, "400000", 36000)]
    {
        let dir = unit_input(&root.join(name), instructions, damaged, gap);
        let d = dir.to_str().unwrap();
        let units = units(d, target);
        assert!(units.len() >= 8, "{name}: {} units", units.len());
        // Over the static image the pokes' sites give errors too: lines to compare even where the trace is whole.
        for image in ["timeline", "static", "perf"] {
            for layout in [&["--json"][..], &[][..]] {
                let decode = |extra: &[&str]| poketrace_incomplete(&[&["decode", d, "--itrace=e", "--image", image][..], layout, extra].concat());
                let whole = decode(&[]);
                if gap {
                    let stderr = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["decode", d, "--itrace=e"]).output().unwrap().stderr;
                    assert!(String::from_utf8_lossy(&stderr).contains(" 1 AUX gaps,"), "{}", String::from_utf8_lossy(&stderr));
                }
                assert_eq!(whole, decode(&["--threads", "1"]), "{name} {image}: one thread");
                let what = format!("{name} --image {image} {layout:?}");
                assert!(
                    whole.lines().count() >= if image == "static" { 3 } else { damaged as usize },
                    "{what}: {} error lines",
                    whole.lines().count()
                );
                // All units at once: the whole decode.
                let all: Vec<String> = units.iter().flat_map(|u| ["--segment".to_string(), u["id"].as_str().unwrap().to_string()]).collect();
                assert_eq!(decode(&all.iter().map(String::as_str).collect::<Vec<_>>()), whole, "{what}: all units");
                // Each unit alone, a buffer's one after the other: its lines of the whole decode.
                for cpu in [0, 1] {
                    let apart: String = units.iter().filter(|u| u["cpu"] == cpu).map(|u| decode(&["--segment", u["id"].as_str().unwrap()])).collect();
                    let mark = if layout.is_empty() { format!("[{cpu:03}]") } else { format!("\"cpu\":{cpu},") };
                    let of_cpu: String = whole.lines().filter(|l| l.contains(&mark)).map(|l| format!("{l}\n")).collect();
                    assert_eq!(apart, of_cpu, "{what}: cpu {cpu}'s units one by one");
                }
            }
        }
    }
}

#[test]
fn ids_are_stable_and_target_bytes_groups_psb_segments() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/segments-list"));
    let dir = root.join("run");
    common::simulate(&dir, &["--cpus", "3", "--instructions", "60000", "--protocol", "int3", "--pokes", "50", "--seed", "3"]);
    let d = dir.to_str().unwrap();
    let text = common::poketrace(&["segments", d]);
    assert_eq!(text, common::poketrace(&["segments", d]), "the same listing from run to run");
    assert_eq!(units(d, 4096), units(d, 4096));
    // Target 1: every PSB segment a unit of its own.
    let psb_segments = units(d, 1);
    assert!(psb_segments.iter().all(|u| u["syncs"] == 1));
    let field = |u: &Value, k: &str| u[k].as_u64().unwrap();
    for target in [1, 5000, 12000, 30000, 1 << 30] {
        let grouped = units(d, target);
        assert_eq!(
            grouped.iter().map(|u| field(u, "syncs")).sum::<u64>(),
            psb_segments.len() as u64,
            "target {target}: each PSB segment in one unit"
        );
        let mut next = 0;
        for u in &grouped {
            let id = format!("{}.{}-{}", field(u, "buffer"), field(u, "start"), field(u, "end"));
            assert_eq!(u["id"], id.as_str());
            assert_eq!(field(u, "bytes"), field(u, "end") - field(u, "start"));
            let n = field(u, "syncs") as usize;
            let parts = &psb_segments[next..next + n];
            next += n;
            // A unit is consecutive PSB segments of one buffer, one after the other.
            assert_eq!(parts[0]["start"], u["start"], "target {target}: {id}");
            assert_eq!(parts[n - 1]["end"], u["end"], "target {target}: {id}");
            assert!(parts.iter().all(|p| p["buffer"] == u["buffer"]));
            assert!(parts.windows(2).all(|w| w[0]["end"] == w[1]["start"]));
            // As many as fit in the target, at least one; the one after it would not fit.
            assert!(n == 1 || field(u, "bytes") <= target as u64, "target {target}: {id} holds {} bytes", field(u, "bytes"));
            if let Some(after) = psb_segments.get(next).filter(|p| p["buffer"] == u["buffer"]) {
                assert!(field(after, "end") - field(u, "start") > target as u64, "target {target}: {id} could hold the next PSB segment");
            }
            // Times from the PSB+'s TSCs: from the unit's first to the one after it.
            assert_eq!(u["time_from"], parts[0]["time_from"]);
            assert!(field(u, "time_from") <= field(u, "time_to"));
        }
        assert_eq!(next, psb_segments.len());
    }
    // One unit a buffer when they all fit.
    assert_eq!(units(d, 1 << 30).len(), 3);
    // IDs that are not units are refused, naming what is wrong.
    let first = &psb_segments[0];
    let (start, end) = (field(first, "start"), field(first, "end"));
    for (id, why) in [
        (format!("0.{}-{end}", start + 1), "is not a PSB"),
        (format!("0.{start}-{}", end - 1), "neither a PSB nor the end"),
        (format!("9.{start}-{end}"), "no AUX buffer 9"),
        ("0.x-1".to_string(), "expected BUFFER.START-END"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["decode", d, "--itrace=e", "--segment", &id]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "--segment {id}: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace"))
        .args(["decode", d, "--itrace=i10i", "--segment", first["id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("each instruction only"), "an instruction period by unit is refused");
}

/// `decode` of `dir` with `args`, whole and unit by unit: all units at
/// once give the whole decode, and each CPU's units one after the other
/// its lines of it (`mark(cpu)` picks them out).
fn check_units_apart(what: &str, dir: &str, units: &[Value], args: &[&str], mark: impl Fn(u64) -> String) {
    let decode = |extra: &[&str]| poketrace_incomplete(&[&["decode", dir][..], args, extra].concat());
    let whole = decode(&[]);
    assert!(whole.lines().count() > 100, "{what}: {} lines", whole.lines().count());
    let all: Vec<String> = units.iter().flat_map(|u| ["--segment".to_string(), u["id"].as_str().unwrap().to_string()]).collect();
    assert_eq!(decode(&all.iter().map(String::as_str).collect::<Vec<_>>()), whole, "{what}: all units");
    let cpus: std::collections::BTreeSet<u64> = units.iter().map(|u| u["cpu"].as_u64().unwrap()).collect();
    for cpu in cpus {
        let apart: String = units.iter().filter(|u| u["cpu"] == cpu).map(|u| decode(&["--segment", u["id"].as_str().unwrap()])).collect();
        let of_cpu: String = whole.lines().filter(|l| l.contains(&mark(cpu))).map(|l| format!("{l}\n")).collect();
        assert!(!of_cpu.is_empty(), "{what}: no lines of cpu {cpu}");
        assert_eq!(apart, of_cpu, "{what}: cpu {cpu}'s units one by one");
    }
}

/// Branch and instruction lines by unit: the state that crosses a unit's
/// edges (the branch into its first instruction, where its last one went,
/// whether tracing was on) is that of the whole decode, with pokes, with
/// damage (errors end tracing mid-unit) and across a gap.
#[test]
fn units_give_branch_and_instruction_lines_of_the_whole_decode() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/segments-lines"));
    for (name, damaged, gap, instructions, target) in
        [("pokes", false, false, "60000", 3000), ("damaged", true, false, "100000", 6000), ("gap", true, true, "400000", 36000)]
    {
        let dir = unit_input(&root.join(name), instructions, damaged, gap);
        let d = dir.to_str().unwrap();
        let units = units(d, target);
        assert!(units.len() >= 8, "{name}: {} units", units.len());
        let text = |cpu: u64| format!("[{cpu:03}]");
        let json = |cpu: u64| format!("\"cpu\":{cpu},");
        check_units_apart(&format!("{name} b"), d, &units, &[], text);
        check_units_apart(&format!("{name} b --json"), d, &units, &["--json"], json);
        check_units_apart(&format!("{name} bie --image static --json"), d, &units, &["--itrace=bie", "--image", "static", "--json"], json);
        if !gap {
            check_units_apart(&format!("{name} i"), d, &units, &["--itrace=ie"], text);
            check_units_apart(&format!("{name} i --json"), d, &units, &["--itrace=i", "--json"], json);
        }
    }
}

/// CoreSight: a unit is a whole run without a gap, decoded as in the whole decode.
#[test]
fn coresight_units_are_whole_runs() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/segments-cs"));
    let dir = root.join("run");
    common::simulate(&dir, &["--arch", "aarch64", "--cpus", "3", "--instructions", "30000", "--pokes", "20", "--seed", "5"]);
    let d = dir.to_str().unwrap();
    let units = units(d, 1);
    assert_eq!(units.len(), 3, "one run a buffer");
    let json = |cpu: u64| format!("\"cpu\":{cpu},");
    check_units_apart("cs b", d, &units, &["--json"], json);
    check_units_apart("cs i", d, &units, &["--itrace=ie", "--json"], json);
    let id = units[0]["id"].as_str().unwrap();
    let (head, _) = id.split_once('-').unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["decode", d, "--segment", &format!("{head}-100")]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a whole run"), "{}", String::from_utf8_lossy(&out.stderr));
}
