//! `profile --format bolt` read by llvm-bolt 19 (`-pa -p`): it takes the
//! profile, uses at least 95% of its fall-through traces inside the
//! functions the trace covered, and the program it writes runs as the
//! original. Skips when llvm-bolt-19 or gcc is missing, unless CI or
//! POKETRACE_REQUIRE_PERF is set: then it fails.

mod profile_prog;

use std::ffi::OsStr;

use profile_prog::{function_of, functions};

/// The number after `label` in `text`.
fn count_after(text: &str, label: &str) -> u64 {
    let at = text.find(label).unwrap_or_else(|| panic!("no '{label}' in:\n{text}")) + label.len();
    text[at..].trim_start().split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

#[test]
fn llvm_bolt_uses_the_profile_and_the_optimized_program_runs_the_same() {
    let Some(bolt) = profile_prog::llvm_tool("llvm-bolt") else { return };
    let dir = testkit::scratch!("profile-bolt");
    let Some(bin) = profile_prog::build(&dir, "gcc") else { return };
    let trace = profile_prog::trace(&dir, &bin, 300_000, 3);
    let preagg = dir.join("hot.preagg");
    profile_prog::profile(&trace, "bolt", &bin, &preagg);

    // Our ranges inside one function, and those that are not (a random
    // walk crosses function ends and runs PLT stubs, which BOLT rejects).
    let fns = functions(&bin);
    let text = std::fs::read_to_string(&preagg).unwrap();
    let (mut inside, mut across, mut branches) = (0u64, 0u64, 0u64);
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
        match f[0] {
            "F" => {
                let (a, b, n) = (hex(f[1]), hex(f[2]), f[3].parse::<u64>().unwrap());
                match (function_of(&fns, a), function_of(&fns, b)) {
                    (Some(x), Some(y)) if x == y => inside += n,
                    _ => across += n,
                }
            }
            "B" => branches += f[3].parse::<u64>().unwrap(),
            other => panic!("not a pre-aggregated record: {other} in {line}"),
        }
    }
    assert!(inside > 10_000 && branches > 10_000, "{inside} ranges inside functions, {branches} branches");

    let out = dir.join("hot.bolt");
    let args: Vec<&OsStr> = vec![
        bin.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "-pa".as_ref(),
        "-p".as_ref(),
        preagg.as_os_str(),
        "--reorder-blocks=ext-tsp".as_ref(),
        "--reorder-functions=hfsort".as_ref(),
    ];
    let log = profile_prog::run(&bolt, &args);
    let mismatched = count_after(&log, "traces mismatching disassembled function contents:");
    let used_inside = inside.saturating_sub(mismatched.saturating_sub(across));
    assert!(
        used_inside * 100 >= inside * 95,
        "BOLT used {used_inside} of {inside} traces inside functions ({mismatched} mismatched, {across} across):\n{log}"
    );
    let line = log.lines().find(|l| l.contains("have non-empty execution profile")).unwrap_or_else(|| panic!("no profile summary:\n{log}"));
    let profiled = count_after(line, "BOLT-INFO:");
    assert!(profiled >= 5, "BOLT found a profile for {profiled} functions:\n{log}");

    for arg in ["1000", "123457"] {
        let want = profile_prog::run(&bin, &[arg.as_ref()]);
        assert_eq!(profile_prog::run(&out, &[arg.as_ref()]), want, "the optimized program's output for {arg}");
    }
}
