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
pub fn for_each_record<E>(parts: [&[u8]; 2], scratch: &mut Vec<u8>, mut f: impl FnMut(&[u8]) -> Result<(), E>) -> Result<Drained, E> {
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
