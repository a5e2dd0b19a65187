//! On a trace over unpatched code, `profile` counts what perf's own decoder
//! does: `perf script --itrace=be` (every branch) aggregated into taken
//! branches and fall-through ranges as BOLT's pre-aggregated data gives
//! exactly our `--format bolt` file; and BOLT's own aggregation of it
//! (`llvm-bolt -pa --aggregate-only`, perf2bolt's path from branch
//! records to `.fdata`) gives our `--format fdata`, function by function.
//! Skips when perf, llvm-bolt-19 or gcc is missing, unless CI or
//! POKETRACE_REQUIRE_PERF is set: then it fails.

mod profile_prog;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;

/// perf's branch lines aggregated the profile's way: a range from where
/// tracing starts or a branch lands to the next branch's source; traps end
/// one and are no branch. Addresses less `bias`, pairs with an end outside
/// `[lo, hi)` left out.
fn aggregate(script: &str, bias: u64, (lo, hi): (u64, u64)) -> Vec<String> {
    let mut counts: HashMap<(char, u64, u64), u64> = HashMap::new();
    let mut start: Option<u64> = None;
    let inside = |a: u64| (lo..hi).contains(&a);
    for line in script.lines() {
        let mut words: Vec<&str> = line.split_whitespace().collect();
        assert!(words.len() >= 4 && words[words.len() - 2] == "=>", "not a branch line: {line}");
        let to = u64::from_str_radix(words.pop().unwrap(), 16).unwrap().wrapping_sub(bias);
        words.pop();
        let from = u64::from_str_radix(words.pop().unwrap(), 16).unwrap().wrapping_sub(bias);
        let flags = words.join(" ");
        let mut close = |at: u64, start: Option<u64>| {
            if let Some(s) = start.filter(|&s| inside(s) && inside(at)) {
                *counts.entry(('F', s, at)).or_default() += 1;
            }
        };
        match flags.as_str() {
            "tr strt" => start = Some(to),
            "call" | "return" | "jmp" | "jcc" => {
                close(from, start);
                if inside(from) && inside(to) {
                    *counts.entry(('B', from, to)).or_default() += 1;
                }
                start = Some(to);
            }
            f if f.starts_with("tr end") => {
                close(from, start);
                start = None;
            }
            _ => {
                close(from, start);
                start = Some(to);
            }
        }
    }
    let mut v: Vec<((char, u64, u64), u64)> = counts.into_iter().collect();
    v.sort();
    v.into_iter().map(|((k, a, b), n)| if k == 'B' { format!("B {a:x} {b:x} {n} 0") } else { format!("F {a:x} {b:x} {n}") }).collect()
}

/// `.fdata` lines by the function they start in.
fn by_function(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let name = line.split(' ').nth(1).unwrap_or_else(|| panic!("not an fdata line: {line}"));
        m.entry(name.to_string()).or_default().push(line.to_string());
    }
    m.values_mut().for_each(|v| v.sort());
    m
}

#[test]
fn perf_and_bolt_count_the_same_branches_and_fall_throughs() {
    if !testkit::perf_available() {
        return;
    }
    let Some(bolt) = profile_prog::llvm_tool("llvm-bolt") else { return };
    let dir = testkit::scratch!("profile-perf2bolt");
    let Some(bin) = profile_prog::build(&dir, "gcc") else { return };
    let trace = profile_prog::trace(&dir, &bin, 200_000, 11);
    let (ours_bolt, ours_fdata) = (dir.join("ours.preagg"), dir.join("ours.fdata"));
    profile_prog::profile(&trace, "bolt", &bin, &ours_bolt);
    profile_prog::profile(&trace, "fdata", &bin, &ours_fdata);

    let home = testkit::fresh_dir(dir.join("home"));
    let script = testkit::perf(&home, &["script", "-i", trace.join("data").to_str().unwrap(), "--itrace=be", "-F", "flags,ip,addr"]);
    let span = profile_prog::code_span(&bin);
    let perf_lines = aggregate(&script, sim::PIE_BASE, span);
    let ours_text = std::fs::read_to_string(&ours_bolt).unwrap();
    let mut ours: Vec<&str> = ours_text.lines().collect();
    ours.sort_by_key(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f[0].to_string(), u64::from_str_radix(f[1], 16).unwrap(), u64::from_str_radix(f[2], 16).unwrap())
    });
    assert!(perf_lines.len() > 50, "{} records from perf", perf_lines.len());
    assert_eq!(ours, perf_lines, "our pre-aggregated profile against perf script's branches aggregated");

    // BOLT's own aggregation of perf's counts into .fdata.
    let perf_preagg = dir.join("perf.preagg");
    std::fs::write(&perf_preagg, perf_lines.join("\n") + "\n").unwrap();
    let perf_fdata = dir.join("perf.fdata");
    let args: Vec<&OsStr> = vec![
        bin.as_os_str(),
        "-pa".as_ref(),
        "-p".as_ref(),
        perf_preagg.as_os_str(),
        "--aggregate-only".as_ref(),
        "-o".as_ref(),
        perf_fdata.as_os_str(),
    ];
    profile_prog::run(&bolt, &args);
    let want = by_function(&std::fs::read_to_string(&perf_fdata).unwrap());
    let got = by_function(&std::fs::read_to_string(&ours_fdata).unwrap());
    assert!(want.len() >= 5, "BOLT's fdata names {} functions", want.len());
    for (f, lines) in &want {
        assert_eq!(got.get(f), Some(lines), "function {f}");
    }
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
}
