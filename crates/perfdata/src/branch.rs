//! Branch stacks of samples (PERF_SAMPLE_BRANCH_STACK): `nr`, then `hw_idx`
//! when the attr's branch_sample_type has HW_INDEX, then `nr` entries of
//! from, to and a flags word, the newest branch first.

use crate::cursor::le_u64;
use crate::error::{Error, Result};

/// Bytes of one entry (`struct perf_branch_entry`).
pub const BRANCH_ENTRY_SIZE: usize = 24;

/// One branch: where from, where to, and the flags word (mispredicted,
/// predicted, in transaction, abort, cycles, type; 0 when nothing is known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BranchEntry {
    pub from: u64,
    pub to: u64,
    pub flags: u64,
}

/// A sample's branch stack, borrowed from its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchStack<'a> {
    /// The hardware's index of the newest entry, when the attr asks for it.
    pub hw_idx: Option<u64>,
    entries: &'a [u8],
}

impl<'a> BranchStack<'a> {
    /// Reads a stack from exactly its bytes (a [`crate::Sample`]'s
    /// `branch_stack`); `hw_index` as the attr's branch_sample_type says;
    /// `offset` is the sample record's, for errors.
    pub fn parse(raw: &'a [u8], hw_index: bool, offset: u64) -> Result<BranchStack<'a>> {
        let head = if hw_index { 16 } else { 8 };
        let invalid = |reason: String| Error::invalid("branch stack", offset, reason);
        if raw.len() < head {
            return Err(invalid(format!("{} bytes, less than its {head}-byte head", raw.len())));
        }
        let nr = le_u64(raw, 0);
        let entries = &raw[head..];
        let needed = nr.checked_mul(BRANCH_ENTRY_SIZE as u64);
        if needed != Some(entries.len() as u64) {
            return Err(invalid(format!("nr {nr} entries of {BRANCH_ENTRY_SIZE} bytes, but {} bytes follow its head", entries.len())));
        }
        Ok(BranchStack { hw_idx: hw_index.then(|| le_u64(raw, 8)), entries })
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len() / BRANCH_ENTRY_SIZE
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, newest first.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = BranchEntry> + 'a {
        self.entries.chunks_exact(BRANCH_ENTRY_SIZE).map(|e| BranchEntry { from: le_u64(e, 0), to: le_u64(e, 8), flags: le_u64(e, 16) })
    }

    /// Appends the bytes of a stack of `entries` (newest first) to `out`,
    /// with `hw_idx` when the attr asks for it.
    pub fn encode(out: &mut Vec<u8>, hw_idx: Option<u64>, entries: impl ExactSizeIterator<Item = BranchEntry>) {
        out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        if let Some(i) = hw_idx {
            out.extend_from_slice(&i.to_le_bytes());
        }
        for e in entries {
            for v in [e.from, e.to, e.flags] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: usize) -> impl ExactSizeIterator<Item = BranchEntry> {
        (0..n).map(|i| i as u64).map(|i| BranchEntry { from: 0x1000 + i, to: 0x2000 + i, flags: i & 1 })
    }

    /// Encoded stacks read back, with and without hw_idx.
    #[test]
    fn stacks_round_trip() {
        for (hw_idx, n) in [(None, 0), (Some(7), 0), (None, 3), (Some(0), 64)] {
            let mut raw = Vec::new();
            BranchStack::encode(&mut raw, hw_idx, entries(n));
            let s = BranchStack::parse(&raw, hw_idx.is_some(), 0x40).unwrap();
            assert_eq!(s.hw_idx, hw_idx);
            assert_eq!(s.len(), n);
            assert!(s.entries().eq(entries(n)));
        }
    }

    /// An `nr` that does not match the bytes, or a head cut short, is refused by name and offset.
    #[test]
    fn lying_nr_is_refused() {
        let mut raw = Vec::new();
        BranchStack::encode(&mut raw, Some(0), entries(2));
        raw[0] = 3;
        let e = BranchStack::parse(&raw, true, 0x40).unwrap_err().to_string();
        assert_eq!(e, "invalid branch stack at offset 0x40: nr 3 entries of 24 bytes, but 48 bytes follow its head");
        raw[0..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(BranchStack::parse(&raw, true, 0x40).unwrap_err().to_string().contains("nr 18446744073709551615 entries"));
        // Read without hw_idx, the same bytes are one word off.
        raw[0] = 2;
        raw[1..8].fill(0);
        assert!(BranchStack::parse(&raw, false, 0x40).is_err());
        let e = BranchStack::parse(&raw[..12], true, 0x40).unwrap_err().to_string();
        assert_eq!(e, "invalid branch stack at offset 0x40: 12 bytes, less than its 16-byte head");
    }
}
