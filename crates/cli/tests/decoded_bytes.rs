//! The instruction bytes `decode` prints are those the decoder decoded,
//! not the code read again at the line's time: with `--image static` over
//! a run whose code is poked, the code before any change.

use codeimage::{BaseImage, CodeTimeline, PokeEvents};
use perfdata::PerfFile;
use serde_json::Value;

mod common;

/// `poketrace decode ARGS`'s stdout; exit status 1 (decode errors, as a
/// static image over poked code has) is fine, not another.
fn decode(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("decode").args(args).output().unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "decode {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A 1-CPU simulation with pokes under `dir`, and its code timeline.
fn poked_run(dir: &str) -> (std::path::PathBuf, CodeTimeline) {
    let run = testkit::fresh_dir(dir).join("run");
    common::simulate(&run, &["--cpus", "1", "--instructions", "20000", "--pokes", "20", "--seed", "7"]);
    let file = PerfFile::open(&run).unwrap();
    let mut base = BaseImage::new();
    codeimage::add_base(&file, &mut base).unwrap();
    let tl = codeimage::over_base(&file, base, PokeEvents::Single).unwrap().timeline;
    (run, tl)
}

/// `--image static`: every instruction line (JSON `insn`, perf's `-F insn`)
/// shows the code before any change at its IP, also where the timeline
/// holds other bytes at the line's time (poked sites the run executed).
#[test]
fn a_static_decode_prints_the_static_bytes_it_decoded() {
    let (run, tl) = poked_run(concat!(env!("CARGO_TARGET_TMPDIR"), "/decoded-bytes-static"));
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let code = |ip: u64, len: usize, time: u64| {
        let mut b = vec![0u8; len];
        tl.read_into(ip, &mut b, time);
        hex(&b)
    };
    let run = run.to_str().unwrap();
    let json = decode(&[run, "--image", "static", "--itrace=i", "--json"]);
    let perf = decode(&[run, "--image", "static", "--itrace=i", "-F", "ip,insnlen,insn", "--ns"]);
    let (mut lines, mut poked) = (0, 0);
    for (j, p) in json.lines().zip(perf.lines()) {
        let v: Value = serde_json::from_str(j).unwrap();
        let (ip, time, insn) = (v["ip"].as_u64().unwrap(), v["time"].as_u64().unwrap(), v["insn"].as_str().unwrap());
        let len = insn.len() / 2;
        assert_eq!(insn, code(ip, len, 0), "{j}");
        let printed: String = p.split("insn:").nth(1).unwrap_or("").split_whitespace().collect();
        assert_eq!(printed, insn, "{p} vs {j}");
        lines += 1;
        poked += (code(ip, len, time) != insn) as usize;
    }
    assert_eq!(json.lines().count(), perf.lines().count());
    assert!(lines > 10_000, "{lines} instruction lines");
    // The run executed poked code: there, the bytes read again would differ.
    assert!(poked > 0, "no instruction line where the code at its time differs from the static code");
}

/// `--image static`: a trap line (`hw int`) shows the instruction the
/// decoder decoded where the trap stopped it, the code before any change,
/// not the INT3 the timeline holds there at the line's time.
#[test]
fn a_static_decode_prints_the_static_bytes_of_trap_lines() {
    let (run, tl) = poked_run(concat!(env!("CARGO_TARGET_TMPDIR"), "/decoded-bytes-traps"));
    let code = |ip: u64, len: usize, time: u64| {
        let mut b = vec![0u8; len];
        tl.read_into(ip, &mut b, time);
        b.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let perf = decode(&[run.to_str().unwrap(), "--image", "static", "--itrace=b", "-F", "time,flags,ip,insnlen,insn", "--ns"]);
    let (mut traps, mut poked) = (0, 0);
    for line in perf.lines().filter(|l| l.contains("hw int")) {
        // "   1.000002032:   hw int   ffffffff81001425 ilen: 3 insn: 48 89 c3" (or "tr end  hw int")
        let (time, rest) = line.trim().split_once(':').unwrap();
        let time: u64 = time.replace('.', "").parse().unwrap();
        let ip = u64::from_str_radix(rest.split("ilen:").next().unwrap().split_whitespace().last().unwrap(), 16).unwrap();
        let len: usize = line.split("ilen:").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
        let printed: String = line.split("insn:").nth(1).unwrap_or("").split_whitespace().collect();
        assert_eq!(printed, code(ip, len, 0), "{line}");
        assert!(len > 0, "{line}");
        traps += 1;
        poked += (code(ip, 1, time) != code(ip, 1, 0)) as usize;
    }
    assert!(traps > 10, "{traps} trap lines");
    assert!(poked > 0, "no trap line where the code at its time differs from the static code");
}
