//! The ring buffer reader on made-up ring contents: records in one piece,
//! wrap-around at a record boundary and inside a record, a header across the
//! end of the ring, a full ring, bad sizes, and errors of the sink.

use record::ring::{for_each_record, unread, BadRecord, Drained};

/// A record of `size` bytes whose body bytes are `fill`.
fn record(ty: u32, size: u16, fill: u8) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&ty.to_le_bytes());
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&size.to_le_bytes());
    r.resize(size as usize, fill);
    r
}

/// Writes `records` into a ring of `size` bytes starting at absolute
/// position `tail`; returns the ring and the head.
fn ring_with(size: usize, tail: u64, records: &[Vec<u8>]) -> (Vec<u8>, u64) {
    let mut data = vec![0xeeu8; size];
    let mut pos = tail;
    for r in records {
        for &b in r {
            data[(pos % size as u64) as usize] = b;
            pos += 1;
        }
    }
    (data, pos)
}

fn collect(parts: [&[u8]; 2]) -> (Vec<Vec<u8>>, Drained) {
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    let d = for_each_record::<()>(parts, &mut scratch, |r| {
        out.push(r.to_vec());
        Ok(())
    })
    .unwrap();
    (out, d)
}

#[test]
fn records_in_one_piece() {
    let recs = vec![record(20, 40, 1), record(17, 64, 2), record(9, 8, 3)];
    let (data, head) = ring_with(256, 0, &recs);
    let (out, d) = collect(unread(&data, 0, head));
    assert_eq!(out, recs);
    assert_eq!(d, Drained { records: 3, bytes: 112, bad: None });
}

#[test]
fn wrap_around_at_a_record_boundary_and_inside_one() {
    // tail 200 in a 256-byte ring: the first record ends exactly at the
    // wrap, the second straddles it, the third is wholly after it.
    let recs = vec![record(20, 56, 1), record(17, 48, 2), record(3, 32, 3)];
    let (data, head) = ring_with(256, 200 + 256 * 7, &recs);
    let parts = unread(&data, 200 + 256 * 7, head);
    assert_eq!(parts[0].len(), 56);
    assert_eq!(parts[1].len(), 80);
    let (out, d) = collect(parts);
    assert_eq!(out, recs);
    assert_eq!(d.bytes, 136);
}

#[test]
fn header_that_straddles_the_wrap() {
    // Records need not be multiples of 8 for this reader: a 4-byte
    // offset puts the next header across the end of the ring.
    let recs = vec![record(1, 12, 1), record(2, 24, 2)];
    let (data, head) = ring_with(64, 48, &recs);
    let parts = unread(&data, 48, head);
    assert_eq!((parts[0].len(), parts[1].len()), (16, 20));
    let (out, d) = collect(parts);
    assert_eq!(out, recs);
    assert_eq!(d.records, 2);
}

#[test]
fn a_full_ring() {
    let recs: Vec<_> = (0..8).map(|i| record(10, 32, i)).collect();
    let (data, head) = ring_with(256, 96, &recs);
    assert_eq!(head - 96, 256);
    let (out, _) = collect(unread(&data, 96, head));
    assert_eq!(out, recs);
}

#[test]
fn bad_sizes_stop_the_pass() {
    let mut recs = vec![record(20, 16, 1)];
    recs.push(record(20, 0, 0)); // size 0: an 8-byte header claiming nothing
    recs[1].resize(8, 0);
    let (data, head) = ring_with(64, 0, &recs);
    let (out, d) = collect(unread(&data, 0, head));
    assert_eq!(out.len(), 1);
    assert_eq!(d.bad, Some(BadRecord { offset: 16, size: 0, available: 8 }));

    let recs = vec![record(20, 16, 1), record(20, 200, 1)[..16].to_vec()];
    let (data, head) = ring_with(256, 0, &recs);
    let (_, d) = collect(unread(&data, 0, head));
    assert_eq!(d.bad, Some(BadRecord { offset: 16, size: 200, available: 16 }));
}

#[test]
fn nothing_unread() {
    let data = vec![0u8; 64];
    let (out, d) = collect(unread(&data, 128, 128));
    assert!(out.is_empty());
    assert_eq!(d, Drained::default());
}

#[test]
fn errors_of_the_sink_stop_the_pass() {
    let recs = vec![record(1, 16, 1), record(2, 16, 2)];
    let (data, head) = ring_with(64, 0, &recs);
    let mut seen = 0;
    let r = for_each_record(unread(&data, 0, head), &mut Vec::new(), |_| {
        seen += 1;
        Err("disk full")
    });
    assert_eq!(r, Err("disk full"));
    assert_eq!(seen, 1);
}
