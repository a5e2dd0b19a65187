//! Samples with branch stacks: written, read back entry by entry; a stack
//! whose `nr` does not match its bytes is refused when written and read.

mod common;

use std::io::Cursor;

use perfdata::abi::{feature, sample_type as st, BRANCH_SAMPLE_HW_INDEX};
use perfdata::*;

use common::{attr, SIDE_BAND};

const ID: u64 = 77;

fn attrs(hw_index: bool) -> Vec<AttrWithIds> {
    let mut a = attr(SIDE_BAND | st::IP | st::PERIOD | st::BRANCH_STACK);
    a.branch_sample_type = if hw_index { BRANCH_SAMPLE_HW_INDEX } else { 0 };
    vec![AttrWithIds { attr: a, ids: vec![ID] }]
}

fn entries(n: u64) -> Vec<BranchEntry> {
    (0..n).map(|i| BranchEntry { from: 0xffff_ffff_8100_0000 + 16 * i, to: 0xffff_ffff_8100_0008 + 16 * i, flags: 0 }).collect()
}

fn sample(stack: &[u8], ip: u64) -> Sample<'_> {
    Sample {
        identifier: Some(ID),
        ip: Some(ip),
        pid: Some(1),
        tid: Some(2),
        time: Some(ip),
        cpu: Some(3),
        period: Some(1000),
        branch_stack: Some(stack),
        ..Sample::default()
    }
}

/// The stacks written come back, in order, with the HEADER_BRANCH_STACK feature.
#[test]
fn samples_with_branch_stacks_round_trip() {
    for hw_index in [false, true] {
        let stacks: Vec<Vec<u8>> = [0, 1, 64]
            .iter()
            .map(|&n| {
                let mut raw = Vec::new();
                BranchStack::encode(&mut raw, hw_index.then_some(0), entries(n).into_iter());
                raw
            })
            .collect();
        let mut w = Writer::new(Cursor::new(Vec::new()), attrs(hw_index)).unwrap();
        w.features.branch_stack = true;
        for (i, s) in stacks.iter().enumerate() {
            w.write(misc_kernel(), &RecordBody::Sample(sample(s, 0x100 + i as u64)), &SampleId::default()).unwrap();
        }
        let file = PerfFile::from_vec(w.finish().unwrap().into_inner()).unwrap();
        assert!(file.features().sections.iter().any(|s| s.feature == feature::BRANCH_STACK));
        let mut got = Vec::new();
        for r in file.records() {
            let r = r.unwrap();
            let RecordBody::Sample(s) = r.body else { panic!("only samples were written") };
            let stack = BranchStack::parse(s.branch_stack.unwrap(), hw_index, r.offset).unwrap();
            assert_eq!(stack.hw_idx, hw_index.then_some(0));
            got.push(stack.entries().collect::<Vec<_>>());
        }
        assert_eq!(got, [entries(0), entries(1), entries(64)]);
    }
}

fn misc_kernel() -> u16 {
    perfdata::abi::misc::KERNEL
}

/// A stack laid out for another attr (hw_idx missing or extra), or with
/// an `nr` that is not its entries', is not written.
#[test]
fn writer_refuses_a_stack_that_does_not_match_its_attr() {
    let mut raw = Vec::new();
    BranchStack::encode(&mut raw, None, entries(2).into_iter());
    let mut w = Writer::new(Cursor::new(Vec::new()), attrs(true)).unwrap();
    let e = w.write(misc_kernel(), &RecordBody::Sample(sample(&raw, 1)), &SampleId::default()).unwrap_err().to_string();
    assert!(e.starts_with("cannot write sample: invalid branch stack"), "{e}");
    raw[0] = 5;
    let mut w = Writer::new(Cursor::new(Vec::new()), attrs(false)).unwrap();
    let e = w.write(misc_kernel(), &RecordBody::Sample(sample(&raw, 1)), &SampleId::default()).unwrap_err().to_string();
    assert!(e.contains("nr 5 entries of 24 bytes, but 48 bytes follow its head"), "{e}");
}

/// A file whose sample says more entries than it holds is read with an
/// error naming the sample's offset, not a short stack.
#[test]
fn reader_refuses_a_lying_nr() {
    let mut raw = Vec::new();
    BranchStack::encode(&mut raw, Some(0), entries(2).into_iter());
    let mut w = Writer::new(Cursor::new(Vec::new()), attrs(true)).unwrap();
    let at = w.write(misc_kernel(), &RecordBody::Sample(sample(&raw, 1)), &SampleId::default()).unwrap();
    let mut bytes = w.finish().unwrap().into_inner();
    // nr follows the header and identifier, ip, pid/tid, time, cpu, period.
    let nr_at = at as usize + 8 + 6 * 8;
    assert_eq!(bytes[nr_at], 2);
    bytes[nr_at] = 3;
    let file = PerfFile::from_vec(bytes).unwrap();
    let e = file.records().find_map(|r| r.err()).expect("the sample is refused");
    let offset = e.offset().expect("the error says where");
    assert!((at..at + 8 + 7 * 8 + 8 + 48).contains(&offset), "{e} (sample at {at:#x})");
    assert!(e.to_string().contains("count 3 of 24-byte items exceeds the 48 bytes left"), "{e}");
}
