//! The flow decoder's decoded-block cache: runs of classified instructions
//! that need no trace (they fall through, or jump or call directly), ending
//! at one that may (a conditional or indirect branch, a return, a trap),
//! each valid over the window of time in which none of its bytes changes
//! (what the code source's `fetch_window` reports), so a poke
//! invalidates exactly the blocks it touches, at exactly its time.
//!
//! One block is one 64-byte entry of an open-addressed table (linear
//! probing): a lookup touches one cache line, which matters when the code
//! walked is a whole kernel's. The lengths of up to [`INLINE`] instructions
//! before the last are kept in the entry when none is a jump or call; other
//! blocks keep them, and the targets of their jumps and calls, in side
//! arenas, but the return addresses their calls push in the entry when
//! they fit (up to [`INLINE_PUSHES`]): running a block reads no arena.
//! Memory is bounded: the table doubles up to [`MAX_ENTRIES`] (64 MB)
//! and the arenas hold at most [`MAX_SPILL`] lengths and as many targets
//! (36 MB, reserved up front, touched as used), about 100 MB in all (130 MB
//! while the table doubles); past that an empty table and arenas replace
//! them. The caches of decoders on several threads can share one table
//! ([`SharedBlocks`]), so each block is built once, not once a thread.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use codeimage::Time;
use isa::{BranchClass, Insn};

mod entry;
mod table;
#[cfg(test)]
mod tests;

pub(crate) use self::entry::{Block, CALL, CLASSES, JUMP, MAX_BLOCK_INSNS};
use self::entry::{CALLS_AT, INLINE, INLINE_PUSHES, NOP};
pub use self::table::SharedBlocks;
use self::table::{hash, published, Arenas, Table, PROBES};

/// Entries at first; the table doubles while more than half full.
const MIN_ENTRIES: usize = 1 << 12;
/// Entries at most (fewer in unit tests, to reach the bound).
const MAX_ENTRIES: usize = if cfg!(test) { 1 << 13 } else { 1 << 20 };
/// Entries in a table that [`BlockCache::large`] calls large.
const LARGE: usize = 1 << 18;
/// Bytes of code [`BlockCache::size_for_code`] makes room for one block in.
const BYTES_PER_BLOCK: u64 = 48;
/// Bytes of spilled instruction lengths at most (and as many targets;
/// fewer in unit tests).
const MAX_SPILL: usize = if cfg!(test) { 1 << 16 } else { 1 << 22 };
/// Blocks a cache adds to a shared table before counting them there.
const UNSAID: usize = 32;

pub(crate) struct BlockCache {
    /// The table looked in; while no other cache shares it, it is changed
    /// in place (replacing blocks), else only added to.
    table: Arc<Table>,
    /// `table`'s entries, their number less one, and its arenas, here so
    /// that a look-up reads no line that others write (`Table::used`).
    slots: *const UnsafeCell<Block>,
    mask: usize,
    lens: *const u8,
    targets: *const u64,
    /// Room this cache reserved in the arenas of a shared table.
    lens_room: Range<usize>,
    targets_room: Range<usize>,
    /// Blocks this cache added to a shared table and has not yet counted
    /// in its `used`, which is counted [`UNSAID`] at a time.
    unsaid: usize,
    /// The table this cache shares with others, if it does, and which of
    /// its tables `table` is.
    home: Option<Arc<SharedBlocks>>,
    generation: u64,
    /// A table of this cache's own for the blocks a shared table does not
    /// take: later versions of a block (in code that changes, where each
    /// thread's walk needs its own time's, and replacing one in place is
    /// what keeps them few), and blocks whose probes are full.
    own: Option<Box<BlockCache>>,
    building: Building,
    /// Entries of the first table this cache makes.
    first_entries: usize,
}

// SAFETY: the pointers are into `table`, which the cache keeps alive.
unsafe impl Send for BlockCache {}

/// The block being built: its instructions before the last, the targets of
/// its jumps and calls, and the return addresses its calls push. Fewer than
/// [`MAX_BLOCK_INSNS`] of each, in arrays, so that adding one is a store.
#[derive(Clone)]
struct Building {
    lens: [u8; MAX_BLOCK_INSNS],
    targets: [u64; MAX_BLOCK_INSNS],
    pushes: [u64; MAX_BLOCK_INSNS],
    n_lens: usize,
    n_targets: usize,
    n_pushes: usize,
    n_calls: usize,
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
        let building = Building {
            lens: [0; MAX_BLOCK_INSNS],
            targets: [0; MAX_BLOCK_INSNS],
            pushes: [0; MAX_BLOCK_INSNS],
            n_lens: 0,
            n_targets: 0,
            n_pushes: 0,
            n_calls: 0,
        };
        let mut c = BlockCache {
            table: Table::none(),
            slots: std::ptr::null(),
            mask: 0,
            lens: std::ptr::null(),
            targets: std::ptr::null(),
            lens_room: 0..0,
            targets_room: 0..0,
            unsaid: 0,
            home: None,
            generation: 0,
            own: None,
            building,
            first_entries: MIN_ENTRIES,
        };
        c.adopt(Table::none());
        c
    }
}

impl BlockCache {
    /// The first instruction of `b` (for stepping it alone).
    pub fn first(&self, b: &Block) -> Insn {
        let (lens, targets) = self.insns(b);
        match lens.first() {
            Some(&l) => Insn { len: l & 15, class: CLASSES[(l >> 4) as usize], target: (l >= JUMP).then(|| targets[0]) },
            None => b.last(),
        }
    }

    /// A cache that shares its blocks with the others made from `home`.
    pub fn shared(home: Arc<SharedBlocks>) -> Self {
        let mut c = BlockCache { home: Some(home), ..BlockCache::default() };
        c.refresh();
        c
    }

    /// Makes the first table big enough for the blocks of `code_bytes` of
    /// code (one a [`BYTES_PER_BLOCK`] bytes, at half load, within the
    /// bounds), so that a walk over large code does not grow the table
    /// step by step, moving every entry at each (as libipt sizes its block
    /// cache by the section). Untouched entries cost nothing (see `Slots`).
    pub fn size_for_code(&mut self, code_bytes: u64) {
        let blocks = usize::try_from(code_bytes / BYTES_PER_BLOCK).unwrap_or(usize::MAX);
        self.first_entries = blocks.saturating_mul(2).checked_next_power_of_two().unwrap_or(MAX_ENTRIES).clamp(MIN_ENTRIES, MAX_ENTRIES);
    }

    /// Takes the shared table in use now, if this cache shares one.
    pub fn refresh(&mut self) {
        let Some(home) = &self.home else { return };
        let generation = home.generation.load(Ordering::Acquire);
        if generation != self.generation {
            let current = home.current.lock().expect("no panic while held").clone();
            if let Some(t) = current {
                self.adopt(t);
            }
            self.generation = generation;
        }
    }

    /// The block starting at `ip` for which `valid` holds, if one is cached.
    #[inline(always)]
    pub fn get(&self, ip: u64, valid: impl Fn(&Block) -> bool) -> Option<&Block> {
        match self.probe(ip, &valid) {
            None if self.own.is_some() => self.get_own(ip, valid),
            found => found,
        }
    }

    /// Whether the table has outgrown the caches near the core (more than
    /// [`LARGE`] / 4 blocks, so more than 4 MB of entries), so that its
    /// entries come from farther: where asking for them ahead pays.
    #[inline(always)]
    pub fn large(&self) -> bool {
        self.mask >= LARGE - 1
    }

    /// Asks for the entry `ip` would be looked up in first to be brought
    /// into the cache (a hint: no effect on what is found).
    #[inline(always)]
    pub fn prefetch(&self, ip: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch reads nothing and cannot fault.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch(self.slots.wrapping_add(hash(ip) & self.mask) as *const i8, _MM_HINT_T0);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = ip;
    }

    /// [`Self::get`] in this cache's own table.
    #[cold]
    #[inline(never)]
    fn get_own(&self, ip: u64, valid: impl Fn(&Block) -> bool) -> Option<&Block> {
        self.own.as_ref()?.probe(ip, &valid)
    }

    /// [`Self::get`] in `table` alone.
    #[inline(always)]
    fn probe(&self, ip: u64, valid: &impl Fn(&Block) -> bool) -> Option<&Block> {
        let h = hash(ip);
        for i in 0..PROBES {
            // SAFETY: an entry of the live table (`mask` is its length less 1).
            let p = unsafe { (*self.slots.add((h + i) & self.mask)).get() };
            // SAFETY: an entry of this live table.
            match unsafe { published(p) } {
                Some(b) if b.start == ip && valid(b) => return Some(b),
                Some(_) => {}
                // An entry being written is passed over; an empty one ends
                // the probes. SAFETY: `start` is accessed atomically.
                None if unsafe { AtomicU64::from_ptr(&raw mut (*p).start) }.load(Ordering::Relaxed) == 0 => return None,
                None => {}
            }
        }
        None
    }

    /// Length bytes of the instructions before the last, and the targets of
    /// the jumps and calls among them, in order.
    #[inline(always)]
    pub fn insns<'c>(&'c self, b: &'c Block) -> (&'c [u8], &'c [u64]) {
        let n = b.count as usize - 1;
        if b.inline() {
            return (&b.lens[..n], &[]);
        }
        if !self.holds(b) {
            return self.own_insns(b);
        }
        self.spilled_insns(b)
    }

    /// [`Self::insns`] of a spilled block of this cache's own table.
    #[cold]
    #[inline(never)]
    fn own_insns<'c>(&'c self, b: &'c Block) -> (&'c [u8], &'c [u64]) {
        self.own.as_ref().expect("a block of this cache's own table").spilled_insns(b)
    }

    /// [`Self::insns`] of a spilled block of `table`.
    #[inline(always)]
    fn spilled_insns<'c>(&'c self, b: &'c Block) -> (&'c [u8], &'c [u64]) {
        // SAFETY: the ranges of a published block: written before it was
        // published, and not since.
        unsafe {
            (
                std::slice::from_raw_parts(self.lens.add(b.spill as usize), b.count as usize - 1),
                std::slice::from_raw_parts(self.targets.add(b.targets as usize), b.lens[0] as usize),
            )
        }
    }

    /// Gives `each` the return addresses the calls among a block's
    /// instructions before its last push, in order (a zero-length call
    /// pushes none).
    #[inline(always)]
    pub fn each_push(&self, b: &Block, mut each: impl FnMut(u64)) {
        if b.inline() {
            return;
        }
        for rel in b.lens[3..3 + 4 * b.lens[2] as usize].chunks_exact(4) {
            each(b.start.wrapping_add(i32::from_le_bytes(rel.try_into().expect("4 bytes")) as i64 as u64));
        }
        if b.lens[1] > 0 {
            let spilled = if self.holds(b) { self.spilled_pushes(b) } else { self.own_pushes(b) };
            spilled.iter().for_each(|&ret| each(ret));
        }
    }

    /// The return addresses of a spilled block of this cache's own table
    /// that are in its arena.
    #[cold]
    #[inline(never)]
    fn own_pushes(&self, b: &Block) -> &[u64] {
        self.own.as_ref().expect("a block of this cache's own table").spilled_pushes(b)
    }

    /// The return addresses of a spilled block of `table` that are in its
    /// arena.
    #[inline(always)]
    fn spilled_pushes(&self, b: &Block) -> &[u64] {
        // SAFETY: the range of a published block (see `insns`).
        unsafe { std::slice::from_raw_parts(self.targets.add(b.targets as usize + b.lens[0] as usize), b.lens[1] as usize) }
    }

    /// Whether `b` is an entry of `table` (else of `own`'s).
    #[inline(always)]
    fn holds(&self, b: &Block) -> bool {
        (b as *const Block as usize).wrapping_sub(self.slots as usize) < (self.mask + 1) * std::mem::size_of::<Block>()
    }

    /// Adds the block `start` whose instructions before the last were pushed
    /// ([`BlockCache::push`]); its last instruction is at `last_ip`. In a
    /// table no other cache shares, it replaces an older block at `start`;
    /// a shared table takes only the first version of a block, the others
    /// go to this cache's own table (as do blocks whose probes are full).
    /// False (nothing added) when the last's target is more than 2 GiB from
    /// where it falls through, or when `start` is 0.
    pub fn insert(&mut self, start: u64, window: Range<Time>, last_ip: u64, last: Insn) -> bool {
        let added = self.try_insert(start, window, last_ip, last);
        self.discard();
        added
    }

    fn try_insert(&mut self, start: u64, window: Range<Time>, last_ip: u64, last: Insn) -> bool {
        let fall = last_ip.wrapping_add(last.len as u64);
        let Ok(target_rel) = i32::try_from(last.target.map_or(0, |t| t.wrapping_sub(fall) as i64)) else {
            return false;
        };
        if start == 0 {
            return false;
        }
        self.refresh();
        let new = &self.building;
        let n = new.n_lens;
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
        let inline = n <= INLINE && new.n_targets == 0;
        if inline {
            b.lens[..n].copy_from_slice(new.lens());
        } else {
            // (At most MAX_BLOCK_INSNS - 1 of each.)
            b.lens[0] = new.n_targets as u8;
            let rel = |ret: u64| i32::try_from(ret.wrapping_sub(start) as i64).ok();
            let fits = new.n_pushes < INLINE_PUSHES || new.n_pushes == INLINE_PUSHES && new.n_calls == INLINE_PUSHES;
            if fits && new.pushes().iter().all(|&ret| rel(ret).is_some()) {
                b.lens[2] = new.n_pushes as u8;
                for (at, &ret) in b.lens[3..].chunks_exact_mut(4).zip(new.pushes()) {
                    at.copy_from_slice(&rel(ret).expect("checked").to_le_bytes());
                }
            } else {
                b.lens[1] = new.n_pushes as u8;
            }
            if (b.lens[2] as usize) < INLINE_PUSHES {
                b.lens[CALLS_AT] = new.n_calls as u8;
            }
        }
        // Twice at most: the table or its arenas may be full, and replaced.
        for _ in 0..2 {
            if self.table.full() {
                self.replace(false);
            }
            if Arc::strong_count(&self.table) > 1 {
                // Another version of the block is shared already: this one
                // is this cache's own (or it is the same block, there).
                match self.probe(start, &|_| true) {
                    Some(old) if old.window() == b.window() => return true,
                    Some(_) => return self.insert_own(start, window, last_ip, last),
                    None => {}
                }
            }
            if !inline {
                let (new, a) = (&self.building, &self.table.arenas);
                let spilled = Arenas::put(&a.lens, &a.lens_used, &mut self.lens_room, &[new.lens()]).zip(Arenas::put(
                    &a.targets,
                    &a.targets_used,
                    &mut self.targets_room,
                    &[new.targets(), if b.lens[1] > 0 { new.pushes() } else { &[] }],
                ));
                let Some((spill, targets)) = spilled else {
                    self.replace(true);
                    continue;
                };
                (b.spill, b.targets) = (spill, targets);
            }
            // Only this cache holds the table: it is read and written here
            // alone (the cache is not `Sync`).
            if Arc::strong_count(&self.table) == 1 {
                self.table.place(b);
                return true;
            }
            if !self.table.add(&b) {
                return self.insert_own(start, window, last_ip, last);
            }
            self.unsaid += 1;
            if self.unsaid == UNSAID {
                self.table.used.0.fetch_add(UNSAID, Ordering::Relaxed);
                self.unsaid = 0;
            }
            return true;
        }
        false
    }

    /// [`Self::insert`] into this cache's own table (made at the first).
    #[cold]
    fn insert_own(&mut self, start: u64, window: Range<Time>, last_ip: u64, last: Insn) -> bool {
        let own = self.own.get_or_insert_with(Box::default);
        own.building.clone_from(&self.building);
        own.insert(start, window, last_ip, last)
    }

    /// Puts a new table in place of the one in use: twice as big with its
    /// blocks, or (at [`MAX_ENTRIES`], or when its `arenas_full`) an empty
    /// one. In a shared table, only the first cache to find it full makes
    /// the new one; the others take that.
    fn replace(&mut self, arenas_full: bool) {
        let first = self.first_entries;
        let make = |old: &Table| {
            let n = old.slots.len();
            if n < MIN_ENTRIES || arenas_full || n >= MAX_ENTRIES {
                Table::new(n.max(first), Arc::new(Arenas::new(MAX_SPILL)))
            } else {
                old.grown(n * 2)
            }
        };
        let Some(home) = self.home.clone() else {
            let new = Arc::new(make(&self.table));
            self.adopt(new);
            return;
        };
        let mut current = home.current.lock().expect("no panic while held");
        if current.as_ref().is_none_or(|t| Arc::ptr_eq(t, &self.table)) {
            *current = Some(Arc::new(make(&self.table)));
            home.generation.fetch_add(1, Ordering::Release);
        }
        let new = current.as_ref().expect("just set").clone();
        drop(current);
        self.adopt(new);
        self.generation = home.generation.load(Ordering::Acquire);
    }

    /// Looks in `table` from now on.
    fn adopt(&mut self, table: Arc<Table>) {
        self.slots = table.slots.as_ptr();
        self.mask = table.slots.len() - 1;
        self.lens = table.arenas.lens.as_ptr() as *const u8;
        self.targets = table.arenas.targets.as_ptr() as *const u64;
        (self.lens_room, self.targets_room, self.unsaid) = (0..0, 0..0, 0);
        self.table = table;
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
                new.n_calls += 1;
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
        (new.n_lens, new.n_targets, new.n_pushes, new.n_calls) = (0, 0, 0, 0);
    }
}
