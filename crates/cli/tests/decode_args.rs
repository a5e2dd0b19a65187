//! `poketrace decode`'s arguments: what it cannot do is refused with a
//! message naming it, before any input is read when the input does not matter.

use std::process::Command;

mod common;

fn decode(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("decode").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn unknown_fields_itrace_letters_and_images_are_named() {
    let (ok, err) = decode(&["/nonexistent", "-F", "ip,bogus"]);
    assert!(!ok && err.contains("-F bogus") && err.contains("symoff"), "{err}");
    let (ok, err) = decode(&["/nonexistent", "--itrace=bx"]);
    assert!(!ok && err.contains("'x'"), "{err}");
    let (ok, err) = decode(&["/nonexistent", "--itrace=i100us"]);
    assert!(!ok && err.contains("100us") && err.contains("i1000i"), "{err}");
    let (ok, err) = decode(&["/nonexistent", "--image", "other"]);
    assert!(!ok && err.contains("'other'") && err.contains("--image") && err.contains("timeline"), "{err}");
    // Valid arguments get as far as the missing input, and say which.
    let (ok, err) = decode(&["/nonexistent", "-F", "time,ip,sym", "--ns"]);
    assert!(!ok && err.contains("/nonexistent"), "{err}");
}

/// perf's model is decoded for Intel PT only: CoreSight input with `--image perf` is refused,
/// naming both, rather than decoded over another image.
#[test]
fn coresight_with_the_perf_image_is_refused() {
    let dir = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/decode-cs-perf"));
    let run = dir.join("run");
    common::simulate(&run, &["--arch", "aarch64", "--cpus", "1", "--instructions", "2000", "--pokes", "2"]);
    let run = run.to_str().unwrap();
    let (ok, err) = decode(&[run, "--image", "perf"]);
    assert!(!ok && err.contains("--image perf") && err.contains("CoreSight"), "{err}");
    for image in ["timeline", "static"] {
        let (ok, err) = decode(&[run, "--image", image]);
        assert!(ok && err.contains(&format!("image {image}")), "{image}: {err}");
    }
}

/// `--itrace=iNi` gives every Nth instruction line of each CPU's buffer:
/// those of `--itrace=i`, CPU by CPU, at N, 2N, ...
#[test]
fn an_instruction_period_keeps_every_nth_line_of_each_cpu() {
    let dir = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/decode-period"));
    let run = dir.join("run");
    common::simulate(&run, &["--cpus", "2", "--instructions", "20000", "--pokes", "5", "--seed", "3"]);
    let run = run.to_str().unwrap();
    let per_cpu = |itrace: &str| {
        let mut cpus: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for line in common::poketrace(&["decode", run, itrace, "-F", "cpu,time,ip"]).lines() {
            cpus.entry(line.split_whitespace().next().unwrap().to_string()).or_default().push(line.to_string());
        }
        cpus
    };
    let all = per_cpu("--itrace=i");
    let sampled = per_cpu("--itrace=i7i");
    assert_eq!(all.len(), 2);
    assert_eq!(all.keys().collect::<Vec<_>>(), sampled.keys().collect::<Vec<_>>());
    for (cpu, lines) in &all {
        let every7: Vec<&String> = lines.iter().skip(6).step_by(7).collect();
        assert!(every7.len() > 1000, "{cpu}: {} lines", lines.len());
        assert_eq!(every7, sampled[cpu].iter().collect::<Vec<_>>(), "{cpu}");
    }
}
