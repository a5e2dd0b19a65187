//! Splitting the unread bytes of a perf ring buffer into records.
//!
//! The kernel appends records at `data_head`; a reader consumes them up to
//! there, then publishes `data_tail` so the kernel may reuse the space. The
//! unread bytes `[tail, head)` are one slice of the data area, or two when
//! they wrap past its end; a record that straddles the wrap is copied into a
//! scratch buffer, every other one is handed out in place. This part knows no
//! system calls, so it is tested on made-up ring contents.

/// A header that cannot be right: the size is below the 8-byte header or runs
/// past the unread bytes. The kernel never writes one; the rest of the
/// unread bytes are skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ring buffer record at unread byte {offset} has size {size}, but only {available} bytes are unread there")]
pub struct BadRecord {
    /// Offset of the header from the first unread byte.
    pub offset: usize,
    /// Its `header.size`.
    pub size: usize,
    /// Unread bytes from `offset` on.
    pub available: usize,
}

/// What one pass over the unread bytes found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Whole records handed out.
    pub records: usize,
    /// Their bytes.
    pub bytes: usize,
    /// The bad header that ended the pass early, if one did.
    pub bad: Option<BadRecord>,
}

/// Calls `f` with each whole record (header included) of the unread bytes
/// `parts[0]` followed by `parts[1]`, in order. A record that starts in the
/// first part and ends in the second is assembled in `scratch`. Stops at the
/// first error of `f` and returns it.
pub fn for_each_record<E>(
    parts: [&[u8]; 2],
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<Drained, E> {
    let [a, b] = parts;
    let total = a.len() + b.len();
    let byte = |i: usize| if i < a.len() { a[i] } else { b[i - a.len()] };
    let mut done = Drained::default();
    let mut off = 0;
    while off < total {
        let available = total - off;
        let size = if available >= 8 { u16::from_le_bytes([byte(off + 6), byte(off + 7)]) as usize } else { 0 };
        if size < 8 || size > available {
            done.bad = Some(BadRecord { offset: off, size, available });
            return Ok(done);
        }
        let end = off + size;
        if end <= a.len() {
            f(&a[off..end])?;
        } else if off >= a.len() {
            f(&b[off - a.len()..end - a.len()])?;
        } else {
            scratch.clear();
            scratch.extend_from_slice(&a[off..]);
            scratch.extend_from_slice(&b[..end - a.len()]);
            f(scratch)?;
        }
        done.records += 1;
        done.bytes += size;
        off = end;
    }
    Ok(done)
}

/// The unread bytes `[tail, head)` of a data area of `data.len()` bytes (a
/// power of two), as one or two slices. `head - tail` must not exceed the size.
pub fn unread(data: &[u8], tail: u64, head: u64) -> [&[u8]; 2] {
    let size = data.len() as u64;
    let len = head.wrapping_sub(tail).min(size) as usize;
    let start = (tail % size.max(1)) as usize;
    let first = len.min(data.len() - start);
    [&data[start..start + first], &data[..len - first]]
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
