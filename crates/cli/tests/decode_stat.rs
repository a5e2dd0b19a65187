//! `poketrace decode --stat` counts what `--itrace=bie` prints, without
//! printing it: instructions, taken branches by kind, traps, trace starts
//! and ends, errors, on runs with pokes, MTC and CYC timing, and a trace
//! damaged in the middle. And a buffer cut at its PSBs and decoded on
//! several threads gives what one thread gives, byte for byte.

use serde_json::Value;

mod common;

/// `poketrace decode ARGS`: its stdout, and whether it exited 1 (output
/// known incomplete: decode errors) rather than 0; any other status fails.
fn decode(args: &[&str]) -> (String, bool) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("decode").args(args).output().unwrap();
    let code = out.status.code();
    assert!(matches!(code, Some(0 | 1)), "decode {args:?}: {code:?}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), code == Some(1))
}

/// The counts `--stat` gives, from the lines of `--itrace=bie --json`.
fn counted_from_lines(dir: &str) -> Value {
    let (lines, _) = decode(&[dir, "--itrace=bie", "--json"]);
    let mut c = std::collections::BTreeMap::<&str, u64>::new();
    for l in lines.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if v.get("insn").is_some() {
            *c.entry("instructions").or_default() += 1;
            *c.entry("uncertain").or_default() += v["uncertain"].as_bool().unwrap() as u64;
            continue;
        }
        let Some(flags) = v.get("flags") else {
            *c.entry("errors").or_default() += 1;
            continue;
        };
        let flags: Vec<&str> = flags.as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        let kind = match flags.as_slice() {
            ["tr", "strt"] => "trace_starts",
            ["tr", "end", ..] => "trace_ends",
            ["jcc"] => "cond_taken",
            ["jmp"] => "jmp",
            ["call"] => "call",
            ["return"] => "returns",
            ["iret"] | ["syscall"] | ["sysret"] | ["far"] => "far",
            ["hw", "int"] | ["int"] => "traps",
            other => panic!("a branch line with flags {other:?}"),
        };
        *c.entry(kind).or_default() += 1;
    }
    serde_json::to_value(c).unwrap()
}

#[test]
fn stat_counts_what_the_lines_show_and_threads_change_nothing() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/decode-stat"));
    let runs: [(&str, &[&str], bool); 4] = [
        ("int3", &["--protocol", "int3", "--pokes", "200", "--seed", "7", "--tsc-period", "100"], false),
        ("prepost-mtc", &["--protocol", "prepost", "--pokes", "200", "--seed", "8", "--mtc-freq", "3"], false),
        ("cyc", &["--protocol", "int3", "--pokes", "200", "--seed", "9", "--mtc-freq", "5", "--cyc", "--cyc-thresh", "3"], false),
        ("damaged", &["--protocol", "int3", "--pokes", "200", "--seed", "10"], true),
    ];
    for (name, args, damaged) in runs {
        let dir = root.join(name);
        common::simulate(&dir, &[&["--cpus", "2", "--instructions", "100000"], args].concat());
        if damaged {
            common::damage_trace(&dir);
        }
        let d = dir.to_str().unwrap();
        let (stat, incomplete) = decode(&[d, "--stat", "--json"]);
        let stat: Value = serde_json::from_str(&stat).unwrap();
        let lines = counted_from_lines(d);
        let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
        for k in ["instructions", "uncertain", "cond_taken", "returns", "far", "traps", "trace_starts", "trace_ends", "errors"] {
            assert_eq!(n(&stat, k), n(&lines, k), "{name}: {k}");
        }
        assert_eq!(n(&stat, "jumps") + n(&stat, "indirect_jumps"), n(&lines, "jmp"), "{name}: jumps");
        assert_eq!(n(&stat, "calls") + n(&stat, "indirect_calls"), n(&lines, "call"), "{name}: calls");
        assert_eq!(n(&stat, "buffers"), 2, "{name}");
        assert!(n(&stat, "instructions") > 150_000 && n(&stat, "cond_not_taken") > 0, "{name}: {stat}");
        assert!(n(&stat, "errors") > 0 || !damaged, "{name}: {stat}");
        assert_eq!(incomplete, n(&stat, "errors") > 0, "{name}: exit 1 exactly when there are decode errors");
        // The simulator pokes while the CPUs run: the decode crosses most
        // pokes (with prepost, two records a poke).
        assert!(n(&stat, "pokes_crossed") > 100 && n(&stat, "pokes_crossed") <= 400, "{name}: {stat}");
        // PSB segments on 1 and 3 threads: the same lines, the same counts
        // (the segments cut pokes' windows and the damage).
        let errors_on = |threads: &str| decode(&[d, "--itrace=e", "--threads", threads]).0;
        let stat_on = |threads: &str| decode(&[d, "--stat", "--json", "--threads", threads]).0;
        let one = errors_on("1");
        assert_eq!(one.lines().count() as u64, n(&stat, "errors"), "{name}");
        assert!(one == errors_on("3"), "{name}: --itrace=e on 3 threads differs");
        assert_eq!(stat_on("1"), stat_on("3"), "{name}: --stat on 3 threads");
        // The text table says the same.
        let (table, _) = decode(&[d, "--stat"]);
        let row = |name: &str| table.lines().find_map(|l| l.strip_prefix(name)).map(|r| r.trim().parse::<u64>().unwrap());
        assert_eq!(row("instructions"), Some(n(&stat, "instructions")), "{table}");
        assert_eq!(row("decode errors"), Some(n(&stat, "errors")), "{table}");
    }
}

/// `--stat` is refused with lines' options, and on CoreSight, by name.
#[test]
fn stat_with_lines_or_coresight_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["decode", "/nonexistent", "--stat", "--itrace=b"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--itrace"));
    let dir = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/decode-stat-cs"));
    let run = dir.join("run");
    common::simulate(&run, &["--arch", "aarch64", "--cpus", "1", "--instructions", "2000", "--pokes", "2"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["decode", run.to_str().unwrap(), "--stat"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--stat") && err.contains("Intel PT"), "{err}");
}
