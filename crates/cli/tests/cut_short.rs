//! A perf.data file cut short while `poketrace dump` reads it: an error
//! naming the file and exit 1, where SIGBUS used to kill it (status 135).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfdata::abi::misc;
use perfdata::*;

use common::at;
use testkit::perf::sideband_writer;

#[test]
fn a_file_cut_short_while_dump_reads_it_is_reported() {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cut-short-cli");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("data");
    let mut w = sideband_writer(&path);
    for t in 0..300_000u64 {
        w.write(misc::KERNEL, &RecordBody::LostSamples(LostSamples { lost: t }), &at(t)).unwrap();
    }
    w.finish().unwrap();

    let child = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("dump").arg(&path).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    // Once the file is mapped, stop the reader, cut the file, let it go on.
    let maps = format!("/proc/{pid}/maps");
    let started = Instant::now();
    let name = path.to_str().unwrap().to_string();
    while !std::fs::read_to_string(&maps).unwrap_or_default().contains(&name) {
        assert!(started.elapsed() < Duration::from_secs(30), "the file was never mapped");
        std::thread::sleep(Duration::from_micros(200));
    }
    let signal = |sig: &str| assert!(Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success());
    signal("-STOP");
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
    signal("-CONT");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{:?}: {err}", out.status);
    assert!(err.contains(&format!("{name} was cut short while it was read")), "{err}");
}
