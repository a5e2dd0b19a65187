//! `profile --format autofdo` read by llvm-profgen 19
//! (`--unsymbolized-profile`): the sample profile it writes ranks the
//! functions as the trace ran them (the simulation's ground truth), and
//! clang 19 builds the program with it (`-fprofile-sample-use`). Skips
//! when llvm-profgen-19 or clang-19 is missing, unless CI or
//! POKETRACE_REQUIRE_PERF is set: then it fails.

mod profile_prog;

use std::collections::HashMap;

use profile_prog::{function_of, functions};

#[test]
fn llvm_profgen_ranks_functions_as_the_trace_ran_them_and_clang_uses_its_profile() {
    let (Some(profgen), Some(clang)) = (profile_prog::llvm_tool("llvm-profgen"), profile_prog::llvm_tool("clang")) else { return };
    let dir = testkit::scratch!("profile-autofdo");
    let Some(bin) = profile_prog::build(&dir, clang.to_str().unwrap()) else { return };
    let trace = profile_prog::trace(&dir, &bin, 300_000, 5);
    let raw = dir.join("hot.afdo");
    profile_prog::profile(&trace, "autofdo", &bin, &raw);
    let prof = dir.join("hot.prof");
    let args = [
        "--binary".as_ref(),
        bin.as_os_str(),
        "--unsymbolized-profile".as_ref(),
        raw.as_os_str(),
        "--format=text".as_ref(),
        "--output".as_ref(),
        prof.as_os_str(),
    ];
    profile_prog::run(&profgen, &args);

    // Instructions run per function, from the simulation's ground truth.
    let fns = functions(&bin);
    let mut ran: HashMap<&str, u64> = HashMap::new();
    for r in sim::TruthReader::open(&trace.join("truth/cpu0.bin")).unwrap() {
        let (_, addr) = r.unwrap();
        if let Some(f) = function_of(&fns, addr.wrapping_sub(sim::PIE_BASE)) {
            *ran.entry(f).or_default() += 1;
        }
    }
    // llvm-profgen's totals: `name:total:head` lines.
    let text = std::fs::read_to_string(&prof).unwrap();
    let mut sampled: HashMap<&str, u64> = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with(' ')) {
        let f: Vec<&str> = line.split(':').collect();
        sampled.insert(f[0], f[1].parse().unwrap());
    }
    let ranked = |m: &HashMap<&str, u64>| {
        let mut v: Vec<(u64, String)> = m.iter().map(|(k, v)| (*v, k.to_string())).collect();
        v.sort_by(|a, b| b.cmp(a));
        v.into_iter().map(|e| e.1).take(3).collect::<Vec<_>>()
    };
    let (want, got) = (ranked(&ran), ranked(&sampled));
    assert_eq!(got[0], want[0], "hottest function: truth {ran:?}, llvm-profgen {sampled:?}");
    let mut top = (want.clone(), got.clone());
    top.0.sort();
    top.1.sort();
    assert_eq!(top.0, top.1, "the three hottest: truth {ran:?}, llvm-profgen {sampled:?}");

    let opt = dir.join("hot.afdo-opt");
    let use_profile = format!("-fprofile-sample-use={}", prof.display());
    let args =
        ["-O2".as_ref(), "-g".as_ref(), use_profile.as_ref(), "-Werror".as_ref(), profile_prog::SOURCE.as_ref(), "-o".as_ref(), opt.as_os_str()];
    profile_prog::run(&clang, &args);
    assert_eq!(profile_prog::run(&opt, &["1000".as_ref()]), profile_prog::run(&bin, &["1000".as_ref()]));
}
