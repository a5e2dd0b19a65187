//! `poketrace pokes` and `image` on files that lost records or break time order.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use perfdata::abi::misc;
use perfdata::*;

use common::{at, JMP, NOP5};
use testkit::perf::sideband_writer;

const SITE: u64 = 0xffff_ffff_8100_0040;

enum Item {
    Poke(u64),
    Lost(u64, u64),
    Switch(u64),
    Round,
}

/// A perf.data file of its own for each test, holding `items` in this order.
fn file(name: &str, items: &[Item]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pokes-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let mut w = sideband_writer(&path);
    for (i, item) in items.iter().enumerate() {
        let (old, new) = if i % 2 == 0 { (&NOP5, &JMP) } else { (&JMP, &NOP5) };
        match *item {
            Item::Poke(t) => w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: SITE, old, new }), &at(t)).map(drop).unwrap(),
            Item::Lost(t, n) => w.write(0, &RecordBody::Lost(Lost { id: 1, lost: n }), &at(t)).map(drop).unwrap(),
            Item::Switch(t) => w.write(0, &RecordBody::Switch, &at(t)).map(drop).unwrap(),
            Item::Round => w.write(0, &RecordBody::FinishedRound, &SampleId::default()).map(drop).unwrap(),
        }
    }
    w.finish().unwrap();
    path
}

fn poketrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap()
}

/// Without FINISHED_ROUND records the time-order queue passes its limit
/// (about 135,000 records) and its oldest half goes out early: a poke older
/// than those is listed late, and pokes says so.
#[test]
fn pokes_reports_records_listed_late_after_the_queue_overflowed() {
    let mut items: Vec<Item> = (0..150_000).map(|t| Item::Switch(1_000 + t)).collect();
    items.push(Item::Poke(10));
    let f = file("overflow", &items);
    let out = poketrace(&["pokes", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the time-order queue passed its limit") && err.contains("1 records are listed after later ones"), "{err}");
    // The file's own rounds deliver late records as perf does, without a word.
    let rounds = file("rounds", &[Item::Poke(30), Item::Round, Item::Poke(40), Item::Round, Item::Poke(10)]);
    let out = poketrace(&["pokes", rounds.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn lost_records_are_reported_with_their_window() {
    let f = file("lost", &[Item::Poke(1_000_000_000), Item::Lost(3_000_000_000, 10), Item::Poke(4_000_000_000)]);
    let f = f.to_str().unwrap();
    let out = poketrace(&["pokes", f]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("10 records lost on cpu 2 between 1.000000000 and 3.000000000"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("PERF_RECORD_TEXT_POKE").count(), 2, "{stdout}");

    // image: a moment before the window is unaffected; one after it may be wrong.
    let early = poketrace(&["image", f, "--at", "0.5", "ffffffff81000040", "5"]);
    assert_eq!(early.status.code(), Some(0), "{}", String::from_utf8_lossy(&early.stderr));
    for args in [&["image", f, "--at", "2.0", "ffffffff81000040", "5"][..], &["image", f, "--history", "ffffffff81000040"]] {
        let late = poketrace(args);
        let err = String::from_utf8_lossy(&late.stderr);
        assert_eq!(late.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("10 records lost on cpu 2 between 1.000000000 and 3.000000000: pokes may be missing"), "{args:?}: {err}");
    }

    // dump lists the LOST record and says the recording is incomplete.
    let dump = poketrace(&["dump", f]);
    assert!(String::from_utf8_lossy(&dump.stderr).contains("the recording is incomplete: 10 records lost"));
}
