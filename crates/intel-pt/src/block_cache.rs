//! The flow decoder's decoded-block cache: runs of classified instructions
//! that need no trace (they fall through, or jump or call directly), ending
//! at one that may (a conditional or indirect branch, a return, a trap),
//! each valid over the window of time in which none of its bytes changes
//! (what [`crate::flow::CodeSource::fetch_window`] reports), so a poke
//! invalidates exactly the blocks it touches, at exactly its time.
//!
//! One block is one 64-byte entry of an open-addressed table (linear
//! probing): a lookup touches one cache line, which matters when the code
//! walked is a whole kernel's. The lengths of up to [`INLINE`] instructions
//! before the last are kept in the entry when none is a jump or call; other
//! blocks keep them, and the targets of their jumps and calls, in side
//! arenas. Memory is bounded: the table doubles up to [`MAX_ENTRIES`] (64 MB)
//! and the arenas hold at most [`MAX_SPILL`] lengths and as many targets
//! (36 MB), about 100 MB in all (130 MB while the table doubles); past that
//! everything is dropped and refilled, without allocating.

use std::ops::Range;

use isa::{BranchClass, Insn};

use crate::flow::Time;

/// Entries at first; the table doubles while more than half full.
const MIN_ENTRIES: usize = 1 << 12;
/// Entries at most.
const MAX_ENTRIES: usize = 1 << 20;
/// Entries looked at for one address.
const PROBES: usize = 8;
/// Bytes of spilled instruction lengths at most (and as many targets).
const MAX_SPILL: usize = 1 << 22;
/// Instructions in one block at most: longer straight runs are cut.
pub(crate) const MAX_BLOCK_INSNS: usize = 256;
/// Lengths of instructions before the last kept in the entry itself.
const INLINE: usize = 15;
/// In a length byte, over the length (bits 0-3): what the instruction is.
pub(crate) const NOP: u8 = 1 << 4;
pub(crate) const JUMP: u8 = 2 << 4;
pub(crate) const CALL: u8 = 3 << 4;
/// The classes of [`NOP`], [`JUMP`], [`CALL`] and plain instructions, by `byte >> 4`.
pub(crate) const CLASSES: [BranchClass; 4] = [BranchClass::None, BranchClass::Nop, BranchClass::DirectJump, BranchClass::DirectCall];

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
    /// Where the last instruction falls through to: the walk's next IP
    /// without adding up the lengths.
    pub fall: u64,
    /// Where the lengths are in the arena, when not inline.
    spill: u32,
    /// Where the jump and call targets are in theirs.
    targets: u32,
    /// The last instruction's direct target, if `has_target`, from `fall`
    /// (a rel8/rel32 branch's target is within 2 GiB of it).
    target_rel: i32,
    pub count: u16,
    last_len: u8,
    last_class: BranchClass,
    has_target: bool,
    /// Each instruction before the last: its length, `|` what it is. In a
    /// spilled block (lengths in the arena), `[0]` and `[1]` count its
    /// targets and the return addresses after them in the target arena.
    lens: [u8; INLINE],
}

const EMPTY: Block = Block {
    start: 0,
    window_start: 0,
    window_end: 0,
    fall: 0,
    spill: 0,
    targets: 0,
    target_rel: 0,
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

    pub fn last(&self) -> Insn {
        Insn { len: self.last_len, class: self.last_class, target: self.has_target.then(|| self.target()) }
    }

    /// The last instruction's direct target (when it has one).
    #[inline(always)]
    pub fn target(&self) -> u64 {
        self.fall.wrapping_add(self.target_rel as i64 as u64)
    }

    /// The last instruction's IP.
    #[inline(always)]
    pub fn last_ip(&self) -> u64 {
        self.fall.wrapping_sub(self.last_len as u64)
    }

    /// Whether the last instruction is a conditional branch with its target.
    #[inline(always)]
    pub fn ends_in_jcc(&self) -> bool {
        self.last_class == BranchClass::CondBranch && self.has_target
    }

    /// The first instruction (for stepping it alone).
    pub fn first(&self, cache: &BlockCache) -> Insn {
        let (lens, targets) = cache.insns(self);
        match lens.first() {
            Some(&l) => Insn { len: l & 15, class: CLASSES[(l >> 4) as usize], target: (l >= JUMP).then(|| targets[0]) },
            None => self.last(),
        }
    }

    /// Whether the instructions before the last are all in the entry.
    #[inline(always)]
    pub fn inline(&self) -> bool {
        self.targets == u32::MAX
    }

    /// Length bytes of the instructions before the last, and the targets of
    /// the jumps and calls among them, in order: in the entry, or in the
    /// arenas `spill` and `spill_targets` it was put in.
    #[inline(always)]
    pub fn insns<'c>(&'c self, spill: &'c [u8], spill_targets: &'c [u64]) -> (&'c [u8], &'c [u64]) {
        let n = self.count as usize - 1;
        if self.inline() {
            (&self.lens[..n], &[])
        } else {
            let (at, t) = (self.spill as usize, self.targets as usize);
            (&spill[at..at + n], &spill_targets[t..t + self.lens[0] as usize])
        }
    }

    /// This spilled block with its lengths at `spill` and its targets at
    /// `targets` in other arenas (which do not keep the return addresses).
    pub fn moved(&self, spill: u32, targets: u32) -> Block {
        debug_assert!(!self.inline());
        Block { spill, targets, lens: { let mut l = self.lens; l[1] = 0; l }, ..*self }
    }
}

pub(crate) struct BlockCache {
    table: Vec<Block>,
    used: usize,
    spill: Vec<u8>,
    spill_targets: Vec<u64>,
    building: Building,
}

/// The block being built: its instructions before the last, the targets of
/// its jumps and calls, and the return addresses its calls push. Fewer than
/// [`MAX_BLOCK_INSNS`] of each, in arrays, so that adding one is a store.
struct Building {
    lens: [u8; MAX_BLOCK_INSNS],
    targets: [u64; MAX_BLOCK_INSNS],
    pushes: [u64; MAX_BLOCK_INSNS],
    n_lens: usize,
    n_targets: usize,
    n_pushes: usize,
}

impl Building {
    fn lens(&self) -> &[u8] {
        &self.lens[..self.n_lens]
    }

    fn targets(&self) -> &[u64] {
        &self.targets[..self.n_targets]
    }

    fn pushes(&self) -> &[u64] {
        &self.pushes[..self.n_pushes]
    }
}

/// Empty, and allocates nothing until the first block.
impl Default for BlockCache {
    fn default() -> Self {
        let building = Building { lens: [0; MAX_BLOCK_INSNS], targets: [0; MAX_BLOCK_INSNS], pushes: [0; MAX_BLOCK_INSNS], n_lens: 0, n_targets: 0, n_pushes: 0 };
        BlockCache { table: Vec::new(), used: 0, spill: Vec::new(), spill_targets: Vec::new(), building }
    }
}

/// A table of `n` empty entries, asked to be backed by huge pages (before
/// any is touched) where the system allows it: look-ups land anywhere in
/// it, and with 4 KiB pages each would be a TLB miss.
fn table(n: usize) -> Vec<Block> {
    let mut t: Vec<Block> = Vec::with_capacity(n);
    #[cfg(target_os = "linux")]
    {
        // madvise takes whole pages: those inside the allocation.
        let (start, end) = (t.as_ptr() as usize, t.as_ptr() as usize + n * std::mem::size_of::<Block>());
        let (from, to) = (start.next_multiple_of(4096), end & !4095);
        if from < to {
            // SAFETY: advice on pages of memory this vector owns; it
            // changes no content.
            unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
        }
    }
    t.resize(n, EMPTY);
    t
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

    /// Length bytes of the instructions before the last, and the targets of
    /// the jumps and calls among them, in order.
    #[inline(always)]
    pub fn insns<'c>(&'c self, b: &'c Block) -> (&'c [u8], &'c [u64]) {
        b.insns(&self.spill, &self.spill_targets)
    }

    /// The return addresses the calls among a block's instructions before
    /// its last push, in order (a zero-length call pushes none).
    #[inline(always)]
    pub fn pushes(&self, b: &Block) -> &[u64] {
        if b.inline() {
            return &[];
        }
        let at = b.targets as usize + b.lens[0] as usize;
        &self.spill_targets[at..at + b.lens[1] as usize]
    }

    /// Adds the block `start` whose instructions before the last were pushed
    /// ([`BlockCache::push`]), replacing an older block at `start`; its last
    /// instruction is at `last_ip`. False (nothing added) when the last's
    /// target is more than 2 GiB from where it falls through.
    pub fn insert(&mut self, start: u64, window: Range<Time>, last_ip: u64, last: Insn) -> bool {
        let fall = last_ip.wrapping_add(last.len as u64);
        let Ok(target_rel) = i32::try_from(last.target.map_or(0, |t| t.wrapping_sub(fall) as i64)) else {
            self.discard();
            return false;
        };
        let new = &self.building;
        let n = new.n_lens;
        let inline = n <= INLINE && new.n_targets == 0;
        if self.table.is_empty() {
            self.table = table(MIN_ENTRIES);
        }
        if !inline && (self.spill.len() + n > MAX_SPILL || self.spill_targets.len() + new.n_targets + new.n_pushes > MAX_SPILL) {
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
            fall,
            spill: 0,
            targets: u32::MAX,
            target_rel,
            count: n as u16 + 1,
            last_len: last.len,
            last_class: last.class,
            has_target: last.target.is_some(),
            lens: [0; INLINE],
        };
        let new = &self.building;
        if inline {
            b.lens[..n].copy_from_slice(new.lens());
        } else {
            b.spill = self.spill.len() as u32;
            b.targets = self.spill_targets.len() as u32;
            // (At most MAX_BLOCK_INSNS - 1 of each.)
            b.lens[0] = new.n_targets as u8;
            b.lens[1] = new.n_pushes as u8;
            self.spill.extend_from_slice(new.lens());
            self.spill_targets.extend_from_slice(new.targets());
            self.spill_targets.extend_from_slice(new.pushes());
        }
        self.place(b);
        self.discard();
        true
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
        let bigger = table(self.table.len() * 2);
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
        self.spill_targets.clear();
    }

    /// Adds an instruction before the last to the block being built, at
    /// `ip`: one of class `None` or `Nop`, or a direct jump or call (with
    /// its target).
    pub fn push(&mut self, ip: u64, insn: &Insn) {
        let new = &mut self.building;
        let kind = match (insn.class, insn.target) {
            (BranchClass::Nop, _) => NOP,
            (BranchClass::DirectJump, Some(t)) => {
                new.targets[new.n_targets] = t;
                new.n_targets += 1;
                JUMP
            }
            (BranchClass::DirectCall, Some(t)) => {
                new.targets[new.n_targets] = t;
                new.n_targets += 1;
                let next = ip.wrapping_add(insn.len as u64);
                // A zero-length CALL (to the next IP) is not pushed (SDM).
                if t != next {
                    new.pushes[new.n_pushes] = next;
                    new.n_pushes += 1;
                }
                CALL
            }
            _ => 0,
        };
        new.lens[new.n_lens] = insn.len | kind;
        new.n_lens += 1;
    }

    pub fn discard(&mut self) {
        let new = &mut self.building;
        (new.n_lens, new.n_targets, new.n_pushes) = (0, 0, 0);
    }
}
