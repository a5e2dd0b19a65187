//! Kernel traces that leave the traced code and trap on undefined
//! instructions (`simulate --exits`: direct calls and jumps into code kcore
//! does not hold, outside the trace's address filter, give TIP.PGD with the
//! target's IP or without it, an indirect call there a TIP.PGD with its
//! target, then TIP.PGE where the code comes back; UD2
//! and an invalid opcode give FUP + TIP into the #UD handler): `poketrace
//! decode` prints what `perf script` prints, line for line, with no errors.
//!
//! Instructions (`--itrace=i`, perf's `i1i`) are compared too. Not
//! compared: `insn`/`insnlen`, where perf 6.1 prints the bytes of the
//! branch before a `tr strt` line on it and a length of 1 for the invalid
//! opcode (its decoder does not apply the 64-bit invalid opcodes); a trace
//! start has no instruction, and 0x06 is none in 64-bit mode.
//!
//! Needs `perf` (Debian linux-perf). Without it the test skips, unless CI
//! or POKETRACE_REQUIRE_PERF is set: then it fails (`testkit::required`).

mod common;

use common::{poketrace, simulate};
use testkit::{perf, perf_available};

/// perf's and our lines for `fields`, which must be the same: branches and
/// errors, or (`insns`) every instruction.
fn assert_same(dir: &str, home: &std::path::Path, insns: bool, fields: &[&str]) -> Vec<String> {
    let (theirs, ours) = if insns { ("--itrace=i1i", "--itrace=i") } else { ("--itrace=be", "--itrace=be") };
    let theirs = perf(home, &[&["script", "-i", dir, theirs, "-F"][..], fields].concat());
    let ours = poketrace(&[&["decode", dir, ours, "-F"][..], fields].concat());
    let (t, o): (Vec<&str>, Vec<&str>) = (theirs.lines().collect(), ours.lines().collect());
    assert!(!t.iter().any(|l| l.contains("error")), "perf reports errors: {:?}", t.iter().find(|l| l.contains("error")));
    let first = t.iter().zip(&o).position(|(a, b)| a != b);
    assert_eq!(first, None, "{fields:?} line {first:?}:\nperf: {:?}\nours: {:?}", first.map(|i| t[i]), first.map(|i| o[i]));
    assert_eq!(t.len(), o.len(), "{fields:?}");
    o.iter().map(|l| l.to_string()).collect()
}

#[test]
fn exits_and_undefined_instructions_decode_as_perf_decodes_them() {
    if !perf_available() {
        return;
    }
    for (seed, pokes) in [(1, "0"), (3, "40")] {
        let dir = testkit::scratch!("perf-exits", format!("seed{seed}"));
        let args = ["--exits", "--cpus", "2", "--pokes", pokes, "--seed", &seed.to_string(), "--instructions", "20000", "--tsc-period", "50"];
        simulate(&dir, &args);
        let home = testkit::scratch!("perf-exits", format!("home{seed}"));
        let d = dir.to_str().unwrap();
        assert_same(d, &home, false, &["cpu,time,flags,ip,addr", "--ns"]);
        // perf_oracle's fields but insn and insnlen (see above).
        let fields = "comm,tid,pid,cpu,flags,ip,sym,symoff,dso,addr";
        let lines = assert_same(d, &home, false, &[fields]);
        // The instruction that leaves is a trace end too, to its target.
        let insns = assert_same(d, &home, true, &[fields, "--ns"]);
        assert!(insns.iter().filter(|l| l.contains("tr end")).count() > 20);
        let count = |f: &dyn Fn(&str) -> bool| lines.iter().filter(|l| f(l)).count();
        // Calls and jumps out of the text, with the target (also where the
        // TIP.PGD had no IP), and the #UD traps.
        let calls_out = count(&|l| l.contains("tr end  call") && l.contains("=> ffffffffc0"));
        let jumps_out = count(&|l| l.contains("tr end   ") && l.contains("=> ffffffffc0"));
        let restarts = count(&|l| l.contains("tr strt"));
        let ud = count(&|l| l.contains("hw int") && l.contains("=> ffffffff81000010"));
        eprintln!("seed {seed}: {} lines, {calls_out} calls out, {jumps_out} jumps out, {restarts} trace starts, {ud} #UD traps", lines.len());
        assert!(calls_out > 10 && jumps_out > 10 && ud > 10, "{calls_out} calls out, {jumps_out} jumps out, {ud} #UD traps");
        assert_eq!(restarts, calls_out + jumps_out + 2, "tracing resumes after each exit (and starts on each CPU)");
    }
}
