//! Cycle-accurate Intel PT from the simulator (`simulate --cyc`) in Linux
//! perf: perf decodes it without errors, the branches match `poketrace
//! decode`'s, and the times both give are set against what ran (the truth
//! files).
//!
//! Needs `perf` (Debian linux-perf): without it the tests skip, unless CI or
//! POKETRACE_REQUIRE_PERF is set: then they fail (`testkit::required`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{poketrace, simulate};
use testkit::{perf, perf_available};

fn scratch(name: &str) -> PathBuf {
    testkit::scratch!("perf-cyc", name)
}

/// `[cpu] secs.ns: rest` lines of perf script, per CPU: (time in ns, rest).
fn perf_lines(text: &str) -> BTreeMap<u32, Vec<(u64, String)>> {
    let mut out: BTreeMap<u32, Vec<(u64, String)>> = BTreeMap::new();
    for l in text.lines() {
        let Some((head, rest)) = l.split_once(": ") else { continue };
        let (cpu, time) = head.trim().trim_start_matches('[').split_once(']').unwrap();
        let (secs, ns) = time.trim().split_once('.').unwrap();
        let t = secs.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap();
        out.entry(cpu.parse().unwrap()).or_default().push((t, rest.trim().to_string()));
    }
    out
}

/// `poketrace decode --json` lines, per CPU.
fn our_lines(dir: &Path, itrace: &str) -> BTreeMap<u32, Vec<serde_json::Value>> {
    let mut out: BTreeMap<u32, Vec<serde_json::Value>> = BTreeMap::new();
    for l in poketrace(&["decode", dir.to_str().unwrap(), itrace, "--json"]).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v.get("error").is_none(), "poketrace decode error: {v}");
        out.entry(v["cpu"].as_u64().unwrap() as u32).or_default().push(v);
    }
    out
}

/// Every instruction CPU `cpu` ran: (time, address).
fn truth(dir: &Path, cpu: u32) -> Vec<(u64, u64)> {
    sim::TruthReader::open(&dir.join(format!("truth/cpu{cpu}.bin"))).unwrap().map(|r| r.unwrap()).collect()
}

/// Each decoded instruction's time beside the time it ran: the decoded
/// `(time, ip)`s in order are what ran, but for a few the truth has and the
/// decoder reports otherwise (an INT3 that traps is a trap, not an
/// instruction, in poketrace's output).
fn align(who: &str, cpu: u32, decoded: &[(u64, u64)], truth: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(decoded.len());
    let mut at = 0;
    for (i, &(t, ip)) in decoded.iter().enumerate() {
        let skip = truth[at..].iter().take(4).position(|x| x.1 == ip);
        let Some(skip) = skip else {
            panic!("cpu {cpu}: {who}'s instruction {i} at {ip:#x}; what ran next: {:x?}", &truth[at..(at + 4).min(truth.len())]);
        };
        at += skip;
        out.push((t, truth[at].0));
        at += 1;
    }
    assert!(out.len() + truth.len() / 100 >= truth.len(), "cpu {cpu}: {who} decodes {} of {} instructions", out.len(), truth.len());
    out
}

/// perf decodes the simulator's CYC trace (MTC every 8 CTC ticks, 200 ns;
/// a CYC before each flow packet, or with a threshold) with no errors and
/// the same taken branches as poketrace.
#[test]
fn perf_decodes_simulated_cyc_traces_like_poketrace() {
    if !perf_available() {
        return;
    }
    for (name, extra) in [("cyc", &[][..]), ("cyc-thresh", &["--cyc-thresh", "4"][..])] {
        let dir = scratch(name);
        let mut args = vec!["--cpus", "2", "--pokes", "40", "--instructions", "20000", "--mtc-freq", "3", "--cyc"];
        args.extend_from_slice(extra);
        simulate(&dir, &args);
        let home = scratch(&format!("{name}-home"));
        let theirs = perf(&home, &["script", "-i", dir.to_str().unwrap(), "--itrace=be", "-F", "time,cpu,ip,addr", "--ns"]);
        let errors: Vec<&str> = theirs.lines().filter(|l| l.contains("error")).take(5).collect();
        assert!(errors.is_empty(), "{name}: perf reports decode errors:\n{}", errors.join("\n"));
        let theirs = perf_lines(&theirs);
        let ours = our_lines(&dir, "--itrace=be");
        assert_eq!(theirs.keys().collect::<Vec<_>>(), ours.keys().collect::<Vec<_>>());
        for (cpu, t) in &theirs {
            let t: Vec<(u64, u64)> = t
                .iter()
                .map(|(_, rest)| {
                    let (from, to) = rest.split_once("=>").unwrap();
                    (u64::from_str_radix(from.trim(), 16).unwrap(), u64::from_str_radix(to.trim(), 16).unwrap())
                })
                .collect();
            let o: Vec<(u64, u64)> = ours[cpu].iter().map(|v| (v["ip"].as_u64().unwrap(), v["addr"].as_u64().unwrap())).collect();
            assert!(t.len() > 2000, "{name} cpu {cpu}: {} branches", t.len());
            let first = t.iter().zip(&o).position(|(a, b)| a != b);
            assert_eq!(first, None, "{name} cpu {cpu}: perf {:x?}, ours {:x?}", first.map(|i| t[i]), first.map(|i| o[i]));
            assert_eq!(t.len(), o.len(), "{name} cpu {cpu}: branch counts");
        }
    }
}

/// Instruction by instruction, perf's CYC times and poketrace's (the start
/// of the window it decodes in) set against the truth: poketrace's never
/// later than what ran, and mostly exact; perf's (its estimate, cycles
/// counted on from the last MTC) reported beside, not asserted.
#[test]
fn cyc_times_against_the_truth_and_perf() {
    if !perf_available() {
        return;
    }
    let dir = scratch("times");
    simulate(&dir, &["--cpus", "2", "--pokes", "20", "--instructions", "10000", "--mtc-freq", "3", "--cyc", "--seed", "4"]);
    let home = scratch("times-home");
    let theirs = perf_lines(&perf(&home, &["script", "-i", dir.to_str().unwrap(), "--itrace=i1i", "-F", "time,cpu,ip", "--ns"]));
    let ours = our_lines(&dir, "--itrace=i");
    for cpu in [0, 1] {
        let truth = truth(&dir, cpu);
        let (p, o) = (&theirs[&cpu], &ours[&cpu]);
        let perf_seq: Vec<(u64, u64)> = p.iter().map(|(t, ip)| (*t, u64::from_str_radix(ip, 16).unwrap())).collect();
        let our_seq: Vec<(u64, u64)> = o.iter().map(|v| (v["time"].as_u64().unwrap(), v["ip"].as_u64().unwrap())).collect();
        let (ours, theirs) = (align("poketrace", cpu, &our_seq, &truth), align("perf", cpu, &perf_seq, &truth));
        let (mut our_exact, mut perf_exact, mut perf_early, mut perf_late) = (0, 0, 0, 0);
        let (mut our_lag, mut perf_off) = (0u64, 0u64);
        for (ot, t) in ours {
            assert!(ot <= t, "cpu {cpu}: poketrace's time {ot} after the instruction ran ({t})");
            our_exact += (ot == t) as usize;
            our_lag += t - ot;
        }
        for (pt, t) in theirs {
            perf_exact += (pt == t) as usize;
            perf_early += (pt < t) as usize;
            perf_late += (pt > t) as usize;
            perf_off += pt.abs_diff(t);
        }
        let n = truth.len();
        eprintln!(
            "cpu {cpu}: {n} instructions; poketrace's time exact for {our_exact}, mean lag {:.1} ns; perf's exact for {perf_exact}, early {perf_early}, late {perf_late}, mean |error| {:.1} ns",
            our_lag as f64 / n as f64,
            perf_off as f64 / n as f64
        );
        // The lower bound trails what ran by the time since the last branch
        // with a CYC (instructions are 1 to a few ns apart per CPU here), and
        // after each PSB+ by the cycles before its first CYC (counted from
        // its TSC) until an MTC pulls it up. An MTC period is 200 ns.
        assert!(our_lag < 40 * n as u64, "cpu {cpu}: mean lag {} ns", our_lag / n as u64);
    }
}
