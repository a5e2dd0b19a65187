//! Files whose writer never finished: a recording killed mid-way leaves its
//! header with a data size of 0 and every record flushed before the kill.

mod common;

use perfdata::abi::misc;
use perfdata::*;

use common::{attr, SIDE_BAND};

fn attrs() -> Vec<AttrWithIds> {
    vec![AttrWithIds { attr: attr(SIDE_BAND), ids: vec![1] }]
}

fn lost(t: u64) -> (u16, RecordBody<'static>, SampleId) {
    let sid = SampleId { time: Some(t), identifier: Some(1), pid: Some(0), tid: Some(0), cpu: Some(0), ..SampleId::default() };
    (misc::KERNEL, RecordBody::LostSamples(LostSamples { lost: t }), sid)
}

fn data_size_field(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[48..56].try_into().unwrap())
}

/// The times of the records read, and the errors, in order.
fn read(file: &PerfFile) -> (Vec<Option<u64>>, Vec<Error>) {
    let (mut times, mut errors) = (Vec::new(), Vec::new());
    for r in file.records() {
        match r {
            Ok(r) => times.push(r.time()),
            Err(e) => errors.push(e),
        }
    }
    (times, errors)
}

/// Three rounds are written and flushed, a fourth is buffered when the
/// writer goes away without finishing and without flushing (what SIGKILL
/// does to it): the file holds the header and the three rounds, and reads
/// as unfinished.
#[test]
fn a_killed_writer_leaves_every_round_it_finished() {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("unfinished-killed");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("data");
    let mut w = Writer::create(&path, attrs()).unwrap();
    let header = std::fs::read(&path).unwrap();
    assert_eq!(&header[..8], MAGIC, "the header is on disk from the start");
    assert_eq!(header.len() as u64, w.position(), "and the attrs");
    assert_eq!(data_size_field(&header), 0);
    let mut t = 0;
    for _round in 0..3 {
        for _ in 0..5 {
            t += 10;
            let (m, body, sid) = lost(t);
            w.write(m, &body, &sid).unwrap();
        }
        w.finish_round().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), w.position(), "a round is on disk once it is finished");
    }
    for _ in 0..4 {
        let (m, body, sid) = lost(1000);
        w.write(m, &body, &sid).unwrap();
    }
    std::mem::forget(w); // no flush, no finish: the buffered round is lost, as when killed

    let file = PerfFile::open(&path).unwrap();
    assert!(file.unfinished().is_some());
    let (times, errors) = read(&file);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let why = errors[0].to_string();
    assert!(matches!(errors[0], Error::Unfinished { offset: 48, .. }) && why.contains("data size is 0"), "{why}");
    let mut want = Vec::new();
    for round in 0..3 {
        want.extend((1..=5).map(|i| Some(round * 50 + i * 10)));
        want.push(None);
    }
    assert_eq!(times, want, "every record of the three rounds, none of the fourth");
    let sorted: Vec<_> = file.sorted_records().filter_map(|r| r.ok()).collect();
    assert_eq!(sorted.len(), 18, "sorted reading sees the same records");
}

/// A writer killed in the middle of writing a record: the records before it
/// are read, then the cut one is reported with its offset.
#[test]
fn a_record_cut_by_the_kill_is_reported_after_the_others() {
    let mut bytes = Vec::new();
    let mut w = Writer::new(std::io::Cursor::new(&mut bytes), attrs()).unwrap();
    for t in [10, 20] {
        let (m, body, sid) = lost(t);
        w.write(m, &body, &sid).unwrap();
    }
    let cut_at = w.position();
    let (m, body, sid) = lost(30);
    w.write(m, &body, &sid).unwrap();
    let end = w.position();
    drop(w);
    bytes.truncate(end as usize - 5);
    let file = PerfFile::from_vec(bytes).unwrap();
    let (times, errors) = read(&file);
    assert_eq!(times, vec![Some(10), Some(20)]);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(matches!(errors[0], Error::Unfinished { .. }));
    assert!(matches!(errors[1], Error::Truncated { offset, .. } if offset == cut_at), "{}", errors[1]);
}

/// perf sets its feature bits in the header it writes first: a killed
/// `perf record` leaves bits whose sections were never written. They are
/// not read (the section table they point to would be records).
#[test]
fn feature_bits_of_an_unfinished_file_are_not_followed() {
    let mut w = Writer::new(std::io::Cursor::new(Vec::new()), attrs()).unwrap();
    w.features.hostname = Some("host".into());
    for t in [10, 20, 30] {
        let (m, body, sid) = lost(t);
        w.write(m, &body, &sid).unwrap();
    }
    let mut bytes = w.finish().unwrap().into_inner();
    let finished = PerfFile::from_vec(bytes.clone()).unwrap();
    assert_eq!(finished.unfinished(), None);
    assert_eq!(finished.features().hostname.as_deref(), Some("host"));
    let h = *finished.header().unwrap();
    assert!(h.data_size > 0 && h.features != [0; 32]);
    // As perf left it when killed: bits set, data size 0, no sections after the records.
    bytes.truncate((h.data_offset + h.data_size) as usize);
    bytes[48..56].copy_from_slice(&0u64.to_le_bytes());
    let killed = PerfFile::from_vec(bytes).unwrap();
    assert_eq!(killed.unfinished(), Some(Unfinished { data_offset: h.data_offset, file_len: h.data_offset + h.data_size }));
    assert_eq!(killed.features().hostname, None);
    assert!(killed.features().errors.is_empty(), "{:?}", killed.features().errors);
    let (times, errors) = read(&killed);
    assert_eq!(times, vec![Some(10), Some(20), Some(30)]);
    assert_eq!(errors.len(), 1);
}

/// A header with a data size of 0 and nothing after it, or only its feature
/// sections, is a finished file without records, not an unfinished one; a
/// finished file has its data size.
#[test]
fn finished_and_empty_files_are_not_unfinished() {
    let w = Writer::new(std::io::Cursor::new(Vec::new()), attrs()).unwrap();
    let empty = PerfFile::from_vec(w.finish().unwrap().into_inner()).unwrap();
    assert_eq!(empty.unfinished(), None);
    let (times, errors) = read(&empty);
    assert!(times.is_empty() && errors.is_empty(), "{errors:?}");
    let mut w = Writer::new(std::io::Cursor::new(Vec::new()), attrs()).unwrap();
    w.features.hostname = Some("host".into());
    w.features.cmdline = Some(vec!["poketrace".into(), "record".into()]);
    let empty = PerfFile::from_vec(w.finish().unwrap().into_inner()).unwrap();
    assert_eq!(empty.unfinished(), None);
    assert_eq!(empty.features().hostname.as_deref(), Some("host"));
    let (times, errors) = read(&empty);
    assert!(times.is_empty() && errors.is_empty(), "{errors:?}");
    let mut w = Writer::new(std::io::Cursor::new(Vec::new()), attrs()).unwrap();
    let (m, body, sid) = lost(5);
    w.write(m, &body, &sid).unwrap();
    w.finish_round().unwrap();
    let end = w.position();
    let bytes = w.finish().unwrap().into_inner();
    assert_eq!(data_size_field(&bytes), end - PerfFile::from_vec(bytes.clone()).unwrap().header().unwrap().data_offset);
    let file = PerfFile::from_vec(bytes).unwrap();
    assert_eq!(file.unfinished(), None);
    assert_eq!(read(&file).0, vec![Some(5), None]);
}
