//! One entry of the block table: a block of instructions and how its
//! instructions before the last are encoded.

use std::ops::Range;

use codeimage::Time;
use isa::{BranchClass, Insn};

/// Instructions in one block at most: longer straight runs are cut.
pub(crate) const MAX_BLOCK_INSNS: usize = 256;
/// Lengths of instructions before the last kept in the entry itself.
pub(super) const INLINE: usize = 15;
/// Return addresses a spilled block keeps in its entry (as offsets from its
/// start, in `lens[3..]`), so that running it reads no arena.
pub(super) const INLINE_PUSHES: usize = 3;
/// Where a spilled block with fewer than [`INLINE_PUSHES`] return addresses
/// in its entry counts its calls (past the return addresses' room in use),
/// so that counting them reads no arena. With that many in the entry, its
/// calls are as many (a block with a call that pushes nothing then keeps
/// its return addresses in the arena).
pub(super) const CALLS_AT: usize = INLINE - 1;
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
    pub(super) spill: u32,
    /// Where the jump and call targets are in theirs.
    pub(super) targets: u32,
    /// The last instruction's direct target, if `has_target`, from `fall`
    /// (a rel8/rel32 branch's target is within 2 GiB of it).
    pub(super) target_rel: i32,
    pub count: u16,
    pub(super) last_len: u8,
    pub(super) last_class: BranchClass,
    pub(super) has_target: bool,
    /// Each instruction before the last: its length, `|` what it is. In a
    /// spilled block (lengths in the arena), `[0]` and `[1]` count its
    /// targets and the return addresses after them in the target arena,
    /// `[2]` the return addresses kept instead in `[3..]` (at most
    /// [`INLINE_PUSHES`], each an `i32` from `start`, little-endian), and
    /// [`CALLS_AT`] its calls, unless `[2]` is [`INLINE_PUSHES`].
    pub(super) lens: [u8; INLINE],
}

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

    /// Whether the instructions before the last are all in the entry.
    #[inline(always)]
    pub fn inline(&self) -> bool {
        self.targets == u32::MAX
    }

    /// How many instructions before the last are direct jumps, and how
    /// many direct calls, from the entry alone.
    #[inline(always)]
    pub fn inner_jumps_and_calls(&self) -> (usize, usize) {
        if self.inline() {
            return (0, 0);
        }
        let calls = if self.lens[2] as usize == INLINE_PUSHES { INLINE_PUSHES } else { self.lens[CALLS_AT] as usize };
        (self.lens[0] as usize - calls, calls)
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
        Block {
            spill,
            targets,
            lens: {
                let mut l = self.lens;
                l[1] = 0;
                l
            },
            ..*self
        }
    }
}
