//! Deferred TIPs (`simulate --deferred-tips`: an indirect jump's or call's
//! TIP held while the TNT fills with the conditional branches after it,
//! then sent after that TNT, as the SDM lets processors send them):
//! `poketrace decode` reads them as perf does, with no errors. Per CPU, the
//! branch lines and the instructions equal `perf script`'s, and those of
//! the run without deferral (same seed: same execution, other packets).
//!
//! Not compared: times. perf gives a branch whose deferred TIP it takes
//! while TNT bits are left the time of the sample before it (it updates a
//! sample's time only between TNTs), also where a TSC before that TNT says
//! the branch ran after it, as `decode` has it; so the CPUs' lines
//! interleave differently when sorted by time.
//!
//! Needs `perf` (Debian linux-perf). Without it the test skips, unless CI
//! or POKETRACE_REQUIRE_PERF is set: then it fails (`testkit::required`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{poketrace, simulate};
use testkit::{perf, perf_available};

/// The lines of each CPU (`[NNN]` first), in order.
fn per_cpu(out: &str) -> BTreeMap<String, Vec<String>> {
    let mut cpus: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in out.lines() {
        let cpu = line.split_whitespace().next().unwrap_or_default().to_string();
        cpus.entry(cpu).or_default().push(line.to_string());
    }
    cpus
}

/// perf's and our lines for `itrace` and `fields`, which must be the same
/// CPU by CPU, with no errors; ours.
fn assert_same(dir: &Path, home: &Path, itrace: (&str, &str), fields: &str) -> BTreeMap<String, Vec<String>> {
    let d = dir.to_str().unwrap();
    let theirs = perf(home, &["script", "-i", d, itrace.0, "-F", fields]);
    let ours = poketrace(&["decode", d, itrace.1, "-F", fields]);
    assert!(!theirs.contains("error") && !ours.contains("error"), "{d}: errors");
    let (theirs, ours) = (per_cpu(&theirs), per_cpu(&ours));
    assert_eq!(theirs.keys().collect::<Vec<_>>(), ours.keys().collect::<Vec<_>>(), "{d}: CPUs");
    for (cpu, t) in &theirs {
        let o = &ours[cpu];
        let first = t.iter().zip(o).position(|(a, b)| a != b);
        assert_eq!(first, None, "{d} cpu {cpu} line {first:?}:\nperf: {:?}\nours: {:?}", first.map(|i| &t[i]), first.map(|i| &o[i]));
        assert_eq!(t.len(), o.len(), "{d} cpu {cpu}");
    }
    ours
}

#[test]
fn deferred_tips_decode_as_perf_decodes_them() {
    if !perf_available() {
        return;
    }
    let fields = "cpu,flags,ip,sym,symoff,dso,addr";
    for (seed, pokes) in [(1, "0"), (3, "40")] {
        let args = ["--cpus", "2", "--pokes", pokes, "--seed", &seed.to_string(), "--instructions", "20000", "--tsc-period", "100"];
        let deferred = testkit::scratch!("perf-deferred-tips", format!("deferred{seed}"));
        simulate(&deferred, &[&args[..], &["--deferred-tips"]].concat());
        let plain = testkit::scratch!("perf-deferred-tips", format!("plain{seed}"));
        simulate(&plain, &args);
        let read = |dir: &Path| std::fs::read(dir.join("data")).unwrap();
        assert!(read(&deferred) != read(&plain), "seed {seed}: deferring changed no packet");
        let home = testkit::scratch!("perf-deferred-tips", format!("home{seed}"));
        let branches = assert_same(&deferred, &home, ("--itrace=be", "--itrace=be"), fields);
        let insns = assert_same(&deferred, &home, ("--itrace=i1i", "--itrace=i"), fields);
        // The same execution, traced without deferral, decodes the same.
        assert_eq!(branches, per_cpu(&poketrace(&["decode", plain.to_str().unwrap(), "--itrace=be", "-F", fields])), "seed {seed}");
        assert_eq!(insns, per_cpu(&poketrace(&["decode", plain.to_str().unwrap(), "--itrace=i", "-F", fields])), "seed {seed}");
        let calls = branches.values().flatten().filter(|l| l.contains(" call ")).count();
        let n = insns.values().map(Vec::len).sum::<usize>();
        assert!(calls > 100 && n > 30_000, "seed {seed}: {calls} calls, {n} instructions");
    }
}
