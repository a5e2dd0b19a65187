//! Files cut short while they are mapped: reading past the new end gives
//! zeros and a mark, not SIGBUS (which killed the process with status 135).

mod common;

use std::path::{Path, PathBuf};

use perfdata::abi::misc;
use perfdata::mapped::{cut_short_files, MappedFile};
use perfdata::*;

use common::{attr, SIDE_BAND};

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cut-short").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_map_of_a_file_cut_short_reads_zeros_past_the_cut() {
    let path = tmp("raw").join("bytes");
    std::fs::write(&path, vec![0xab; 5 * 4096]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let map = MappedFile::map(&file, &path).unwrap();
    assert_eq!(map[3 * 4096], 0xab);
    assert!(!map.cut_short());
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
    assert_eq!(map[100], 0xab, "what the file still has is read");
    assert_eq!(map[3 * 4096 + 7], 0, "a page past the cut reads as zeros");
    assert!(map[4096..].iter().all(|&b| b == 0));
    assert!(map.cut_short());
    drop(map);
    assert!(cut_short_files().contains(&path), "the file is named after its map is gone");
}

#[test]
fn a_perf_data_file_cut_short_while_read_gives_errors_not_sigbus() {
    let path = tmp("perf-data").join("data");
    let attrs = vec![AttrWithIds { attr: attr(SIDE_BAND), ids: vec![1] }];
    let mut w = Writer::create(&path, attrs).unwrap();
    for t in 0..4000u64 {
        let sid = SampleId { time: Some(t), identifier: Some(1), pid: Some(0), tid: Some(0), cpu: Some(0), ..SampleId::default() };
        w.write(misc::KERNEL, &RecordBody::LostSamples(LostSamples { lost: t }), &sid).unwrap();
    }
    w.finish().unwrap();
    let file = PerfFile::open(&path).unwrap();
    let len = file.bytes().len() as u64;
    assert!(len > 8 * 4096);
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len((len / 2) & !4095).unwrap(); // on a page boundary: the next page faults
    let (mut ok, mut errors) = (0, Vec::new());
    for r in file.records() {
        match r {
            Ok(_) => ok += 1,
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert!(ok > 1000 && ok < 4000, "the records before the cut: {ok}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("below its 8-byte header"), "zeros read as a record of size 0: {errors:?}");
    assert!(file.cut_short());
}
