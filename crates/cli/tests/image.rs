//! `poketrace image` on a perf.data directory with a kcore_dir and pokes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use perfdata::abi::misc;
use perfdata::kcore::{write_kcore_dir, Machine, Segment};
use perfdata::*;

use common::{at, JMP, NOP5};
use serde_json::Value;
use testkit::perf::sideband_writer;

const TEXT: u64 = 0xffff_ffff_8100_0000;

/// A perf.data directory of its own for each test (tests run in parallel).
fn fixture(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image-cli").join(name);
    let _ = std::fs::remove_dir_all(&d);
    let mut code = vec![0xcc; 0x100];
    code[0x40..0x45].copy_from_slice(&NOP5);
    write_kcore_dir(
        &d.join("kcore_dir"),
        Machine::X86_64,
        &[Segment { vaddr: TEXT, bytes: code }],
        "ffffffff81000000 T _text\nffffffff81000040 T site_fn\n",
        "",
    )
    .unwrap();
    let mut w = sideband_writer(d.join("data"));
    w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: TEXT + 0x40, old: &NOP5, new: &JMP }), &at(2_000_000_000)).unwrap();
    w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: TEXT + 0x40, old: &JMP, new: &NOP5 }), &at(3_000_000_000)).unwrap();
    w.finish().unwrap();
    d
}

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Vec<Value> {
    run(args).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn at_gives_the_bytes_of_that_moment() {
    let d = fixture("at");
    let d = d.to_str().unwrap();
    let before = json(&["image", d, "--at", "1.999999999", "site_fn", "5", "--json"]);
    assert_eq!(before[0]["state"], "exact");
    assert_eq!(before[0]["bytes"], "0f1f440000");
    assert_eq!(before[0]["valid_until"], 2_000_000_000u64);
    let at = json(&["image", d, "--at", "2000000000", "0xffffffff81000040", "5", "--json"]);
    assert_eq!(at[0]["bytes"], "e910000000");
    assert!(at[0]["insn"][0].as_str().unwrap().contains("jmp 0xffffffff81000055"), "{}", at[0]);
    let after = json(&["image", d, "--at", "3.5", "site_fn", "5", "--json"]);
    assert_eq!(after[0]["bytes"], "0f1f440000");
    assert_eq!(after[0]["valid_until"], Value::Null);
    let nothing = json(&["image", d, "--at", "1", "0xffffffff90000000", "--json"]);
    assert_eq!(nothing[0]["state"], "unmapped");
    assert!(nothing[0]["nearest"]["name"].as_str().unwrap().contains("kcore"));
}

#[test]
fn history_lists_every_version_with_its_kind() {
    let d = fixture("history");
    let h = json(&["image", d.to_str().unwrap(), "--history", "site_fn+2", "--json"]);
    let kinds: Vec<&str> = h.iter().map(|v| v["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["initial", "jump-label", "jump-label"]);
    assert_eq!(h[1]["time"], 2_000_000_000u64);
    assert_eq!(h[1]["until"], 3_000_000_000u64);
    assert_eq!(h[2]["bytes"], "0f1f440000");
    let text = run(&["image", d.to_str().unwrap(), "--history", "site_fn"]);
    assert!(text.contains("3 versions") && text.contains("[2.000000000 .. 3.000000000) jump-label (cpu 2)"), "{text}");
}

#[test]
fn len_over_the_limit_is_a_clear_error() {
    let d = fixture("len-limit");
    let d = d.to_str().unwrap();
    for len in ["18446744073709551615", "100000000000", "1048577"] {
        let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["image", d, "--at", "1", "site_fn", len]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{len}: {err}");
        assert!(err.contains("more than the limit of 1048576"), "{len}: {err}");
    }
    let out = run(&["image", d, "--at", "1", "site_fn", "1048576", "--json"]);
    let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(v["state"], "exact");
}
