//! `profile --cpu` and `--time` split a trace's counts: the profiles of the
//! parts add up to the whole one's, pair by pair (a branch counts when it
//! ran, a range when it started), and a part holds less than the whole.
//! `--threads` changes nothing but the time taken.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Counts by record (kind, from, to) of a pre-aggregated file.
fn counts(path: &Path) -> BTreeMap<(String, u64, u64), u64> {
    let mut m = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let key = (f[0].to_string(), u64::from_str_radix(f[1], 16).unwrap(), u64::from_str_radix(f[2], 16).unwrap());
        *m.entry(key).or_default() += f[3].parse::<u64>().unwrap();
    }
    m
}

fn profile(dir: &Path, filter: &[&str], out: &Path) -> BTreeMap<(String, u64, u64), u64> {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace"))
        .arg("profile")
        .arg(dir)
        .args(["--kernel", "--format", "bolt"])
        .args(filter)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    testkit::success(o, &format!("profile {filter:?}"));
    counts(out)
}

fn add(a: &BTreeMap<(String, u64, u64), u64>, b: &BTreeMap<(String, u64, u64), u64>) -> BTreeMap<(String, u64, u64), u64> {
    let mut sum = a.clone();
    for (k, n) in b {
        *sum.entry(k.clone()).or_default() += n;
    }
    sum
}

#[test]
fn parts_of_the_trace_add_up_to_the_whole() {
    let dir = testkit::scratch!("profile-filters");
    let run = dir.join("run");
    let args = ["simulate", "--cpus", "2", "--pokes", "50", "--instructions", "100000", "--seed", "3", "-o"];
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).arg(&run).output().unwrap();
    testkit::success(o, "simulate");
    let out = dir.join("p");
    let whole = profile(&run, &[], &out);
    let total: u64 = whole.values().sum();
    assert!(total > 10_000, "{total}");

    // Each buffer on one thread, or its PSB segments counted apart and put together.
    assert_eq!(profile(&run, &["--threads", "1"], &out), whole, "--threads 1");
    assert_eq!(profile(&run, &["--threads", "2"], &out), whole, "--threads 2");

    let cpu0 = profile(&run, &["--cpu", "0"], &out);
    let cpu1 = profile(&run, &["--cpu", "1"], &out);
    assert!(cpu0.values().sum::<u64>() < total && cpu1.values().sum::<u64>() < total);
    assert_eq!(add(&cpu0, &cpu1), whole, "--cpu 0 and --cpu 1");

    // The run starts at 1 s and lasts about 100 us.
    let early = profile(&run, &["--time", ",1.000050000"], &out);
    let late = profile(&run, &["--time", "1.000050001,"], &out);
    assert!(early.values().sum::<u64>() < total && late.values().sum::<u64>() < total);
    assert_eq!(add(&early, &late), whole, "--time split at 1.00005 s");
}
