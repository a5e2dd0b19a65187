//! `dump`, `pokes` and `image` on a recording whose writer was killed: the
//! header (data size 0) and every round flushed before the kill are read.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use perfdata::abi::misc;
use perfdata::*;

use common::{at, JMP, NOP5};
use testkit::perf::sideband_writer;

const SITE: u64 = 0xffff_ffff_8100_0040;

/// Two rounds of two pokes each, finished (flushed), then a third round
/// still buffered when the writer goes away without flushing or finishing,
/// as `record` does when SIGKILL comes.
fn killed_recording() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("unfinished-cli");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    let mut w = sideband_writer(&path);
    let mut t = 1_000_000_000;
    for round in 0..3 {
        for i in 0..2 {
            let (old, new) = if i == 0 { (&NOP5, &JMP) } else { (&JMP, &NOP5) };
            w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: SITE, old, new }), &at(t)).unwrap();
            t += 1_000_000_000;
        }
        if round < 2 {
            w.finish_round().unwrap();
        }
    }
    std::mem::forget(w);
    path
}

fn poketrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap()
}

#[test]
fn a_killed_recording_reads_up_to_its_last_round() {
    let f = killed_recording();
    let f = f.to_str().unwrap();
    let warning = "the header's data size is 0, as a recording that was killed or is still running leaves it";

    let pokes = poketrace(&["pokes", f]);
    let (out, err) = (String::from_utf8_lossy(&pokes.stdout), String::from_utf8_lossy(&pokes.stderr));
    assert_eq!(pokes.status.code(), Some(1), "the listing may be incomplete: {err}");
    assert!(err.contains(warning), "{err}");
    assert_eq!(out.matches("PERF_RECORD_TEXT_POKE").count(), 4, "the two flushed rounds: {out}");

    let dump = poketrace(&["dump", f]);
    let (out, err) = (String::from_utf8_lossy(&dump.stdout), String::from_utf8_lossy(&dump.stderr));
    assert_eq!(dump.status.code(), Some(1), "{err}");
    assert!(err.contains(warning), "{err}");
    assert_eq!(out.lines().filter(|l| l.contains("PERF_RECORD_TEXT_POKE")).count(), 4, "{out}");
    assert_eq!(out.lines().filter(|l| l.contains("PERF_RECORD_FINISHED_ROUND")).count(), 2, "{out}");

    // image: the code after the last flushed poke (back to the NOP at 4 s).
    let image = poketrace(&["image", f, "--history", "ffffffff81000040"]);
    let (out, err) = (String::from_utf8_lossy(&image.stdout), String::from_utf8_lossy(&image.stderr));
    assert_eq!(image.status.code(), Some(1), "{err}");
    assert!(err.contains(warning), "{err}");
    assert!(out.contains("[4.000000000 .. on)"), "{out}");
}
