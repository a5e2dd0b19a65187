//! `poketrace pokes` and `image` on files that lost records or break time order.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use perfdata::abi::{attr_flag, misc, sample_type as st};
use perfdata::*;

const SITE: u64 = 0xffff_ffff_8100_0040;
const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
const JMP: [u8; 5] = [0xe9, 0x10, 0x00, 0x00, 0x00];

enum Item {
    Poke(u64),
    Round,
}

/// A perf.data file of its own for each test, holding `items` in this order.
fn file(name: &str, items: &[Item]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pokes-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let attr = EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        sample_type: st::TID | st::TIME | st::CPU,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::TEXT_POKE,
        ..EventAttr::default()
    };
    let mut w = Writer::create(&path, vec![AttrWithIds { attr, ids: vec![1] }]).unwrap();
    let sid = |t| SampleId { pid: Some(0), tid: Some(0), time: Some(t), cpu: Some(2), ..SampleId::default() };
    for (i, item) in items.iter().enumerate() {
        let (old, new) = if i % 2 == 0 { (&NOP5, &JMP) } else { (&JMP, &NOP5) };
        match *item {
            Item::Poke(t) => w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: SITE, old, new }), &sid(t)).map(drop).unwrap(),
            Item::Round => w.write(0, &RecordBody::FinishedRound, &SampleId::default()).map(drop).unwrap(),
        }
    }
    w.finish().unwrap();
    path
}

fn poketrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap()
}

#[test]
fn pokes_reports_records_delivered_out_of_order() {
    // The second round flushes up to 30; the poke at 10 arrives after that.
    let f = file("unordered", &[Item::Poke(30), Item::Round, Item::Poke(40), Item::Round, Item::Poke(10)]);
    let out = poketrace(&["pokes", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("1 records arrived after later ones"), "{err}");
    let in_order = file("ordered", &[Item::Poke(10), Item::Round, Item::Poke(30), Item::Round, Item::Poke(40)]);
    assert_eq!(poketrace(&["pokes", in_order.to_str().unwrap()]).status.code(), Some(0));
}
