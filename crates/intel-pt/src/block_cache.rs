//! The flow decoder's decoded-block cache: straight runs of classified
//! instructions, each valid over the window of time in which none of its
//! bytes changes (what [`crate::flow::CodeSource::fetch_window`] reports), so
//! a poke invalidates exactly the blocks it touches, at exactly its time.
//!
//! One block is one 64-byte entry of an open-addressed table (linear
//! probing): a lookup touches one cache line, which matters when the code
//! walked is a whole kernel's. The lengths of up to [`INLINE`] instructions
//! before the last are kept in the entry; longer blocks keep them in a side
//! arena. Memory is bounded: the table doubles up to [`MAX_ENTRIES`] (64 MB)
//! and the arena holds at most [`MAX_SPILL`] bytes; past that everything is
//! dropped and refilled, without allocating.

use std::ops::Range;

use isa::{BranchClass, Insn};

use crate::flow::Time;

/// Entries at first; the table doubles while more than half full.
const MIN_ENTRIES: usize = 1 << 12;
/// Entries at most.
const MAX_ENTRIES: usize = 1 << 20;
/// Entries looked at for one address.
const PROBES: usize = 8;
/// Bytes of spilled instruction lengths at most.
const MAX_SPILL: usize = 1 << 24;
/// Instructions in one block at most: longer straight runs are cut.
pub(crate) const MAX_BLOCK_INSNS: usize = 256;
/// Lengths of instructions before the last kept in the entry itself.
const INLINE: usize = 19;
/// In a length byte: the instruction is a NOP (else it is of class `None`).
const NOP: u8 = 0x80;

/// A straight run from `start`: instructions that fall through, then one
/// that may not (a branch, a trap), or the run is cut short (too long, or
/// the next instruction's code is not exact). `count == 0`: an empty entry.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct Block {
    pub start: u64,
    /// When the bytes hold, as the code source judges.
    pub window_start: Time,
    pub window_end: Time,
    /// The last instruction's direct target, if `has_target`.
    target: u64,
    /// The last instruction's offset from `start`.
    last_off: u32,
    /// Where the lengths are in the arena, when not inline.
    spill: u32,
    pub count: u16,
    last_len: u8,
    last_class: BranchClass,
    has_target: bool,
    /// Each instruction before the last: its length, `| NOP` for a NOP.
    lens: [u8; INLINE],
}

const EMPTY: Block = Block {
    start: 0,
    window_start: 0,
    window_end: 0,
    target: 0,
    last_off: 0,
    spill: 0,
    count: 0,
    last_len: 0,
    last_class: BranchClass::None,
    has_target: false,
    lens: [0; INLINE],
};

const _: () = assert!(std::mem::size_of::<Block>() == 64);

impl Block {
    pub fn window(&self) -> Range<Time> {
        self.window_start..self.window_end
    }

    pub fn last_ip(&self) -> u64 {
        self.start.wrapping_add(self.last_off as u64)
    }

    pub fn last(&self) -> Insn {
        Insn { len: self.last_len, class: self.last_class, target: self.has_target.then_some(self.target) }
    }

    /// The first instruction (for stepping it alone).
    pub fn first(&self, cache: &BlockCache) -> Insn {
        match cache.lens(self).first() {
            Some(&l) => Insn { len: l & !NOP, class: class_of(l), target: None },
            None => self.last(),
        }
    }
}

#[inline(always)]
pub(crate) fn class_of(len_byte: u8) -> BranchClass {
    if len_byte & NOP != 0 {
        BranchClass::Nop
    } else {
        BranchClass::None
    }
}

/// What a block is built from: its instructions in order, with their offsets.
pub(crate) struct Builder {
    lens: Vec<u8>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder { lens: Vec::with_capacity(MAX_BLOCK_INSNS) }
    }
}

pub(crate) struct BlockCache {
    table: Vec<Block>,
    used: usize,
    spill: Vec<u8>,
    pub(crate) builder: Builder,
}

/// Empty, and allocates nothing until the first block.
impl Default for BlockCache {
    fn default() -> Self {
        BlockCache { table: Vec::new(), used: 0, spill: Vec::new(), builder: Builder::new() }
    }
}

#[inline(always)]
fn hash(ip: u64) -> usize {
    (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize
}

impl BlockCache {
    /// The block starting at `ip`, if one is cached (valid at some time).
    #[inline(always)]
    pub fn get(&self, ip: u64) -> Option<&Block> {
        let mask = self.table.len().wrapping_sub(1);
        let h = hash(ip);
        for i in 0..PROBES {
            let b = self.table.get((h + i) & mask)?;
            if b.count == 0 {
                return None;
            }
            if b.start == ip {
                return Some(b);
            }
        }
        None
    }

    /// Length bytes of the instructions before the last.
    #[inline(always)]
    pub fn lens<'c>(&'c self, b: &'c Block) -> &'c [u8] {
        let n = b.count as usize - 1;
        if n <= INLINE {
            &b.lens[..n]
        } else {
            &self.spill[b.spill as usize..b.spill as usize + n]
        }
    }

    /// Adds the block `start` whose instructions before the last are in
    /// `self.builder` (taken), replacing an older block at `start`.
    pub fn insert(&mut self, start: u64, window: Range<Time>, last_off: u32, last: Insn) {
        let lens = std::mem::take(&mut self.builder.lens);
        let n = lens.len();
        if self.table.is_empty() {
            self.table = vec![EMPTY; MIN_ENTRIES];
        }
        if n > INLINE && self.spill.len() + n > MAX_SPILL {
            self.clear();
        }
        if (self.used + 1) * 2 > self.table.len() {
            if self.table.len() < MAX_ENTRIES {
                self.grow();
            } else {
                self.clear();
            }
        }
        let mut b = Block {
            start,
            window_start: window.start,
            window_end: window.end,
            target: last.target.unwrap_or(0),
            last_off,
            spill: 0,
            count: n as u16 + 1,
            last_len: last.len,
            last_class: last.class,
            has_target: last.target.is_some(),
            lens: [0; INLINE],
        };
        if n <= INLINE {
            b.lens[..n].copy_from_slice(&lens);
        } else {
            b.spill = self.spill.len() as u32;
            self.spill.extend_from_slice(&lens);
        }
        self.place(b);
        self.builder.lens = lens;
        self.builder.lens.clear();
    }

    /// Puts `b` in the entry of an older block at its start, else the first
    /// empty one, else (all probed entries taken) the first probed.
    fn place(&mut self, b: Block) {
        let mask = self.table.len() - 1;
        let h = hash(b.start);
        let mut at = h & mask;
        for i in 0..PROBES {
            let e = (h + i) & mask;
            let old = &self.table[e];
            if old.count == 0 || old.start == b.start {
                if old.count == 0 {
                    self.used += 1;
                }
                at = e;
                break;
            }
        }
        self.table[at] = b;
    }

    fn grow(&mut self) {
        let bigger = vec![EMPTY; self.table.len() * 2];
        let old = std::mem::replace(&mut self.table, bigger);
        self.used = 0;
        for b in old.into_iter().filter(|b| b.count != 0) {
            self.place(b);
        }
    }

    fn clear(&mut self) {
        self.table.fill(EMPTY);
        self.used = 0;
        self.spill.clear();
    }

    pub fn push_len(&mut self, insn: &Insn) {
        self.builder.lens.push(insn.len | if insn.class == BranchClass::Nop { NOP } else { 0 });
    }

    pub fn discard(&mut self) {
        self.builder.lens.clear();
    }
}
