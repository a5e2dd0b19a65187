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
use std::mem::MaybeUninit;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use isa::{BranchClass, Insn};

use codeimage::Time;

/// Entries at first; the table doubles while more than half full.
const MIN_ENTRIES: usize = 1 << 12;
/// Entries at most (fewer in unit tests, to reach the bound).
const MAX_ENTRIES: usize = if cfg!(test) { 1 << 13 } else { 1 << 20 };
/// Entries in a table that [`BlockCache::large`] calls large.
const LARGE: usize = 1 << 18;
/// Bytes of code [`BlockCache::size_for_code`] makes room for one block in.
const BYTES_PER_BLOCK: u64 = 48;
/// Entries looked at for one address.
const PROBES: usize = 8;
/// Bytes of spilled instruction lengths at most (and as many targets;
/// fewer in unit tests).
const MAX_SPILL: usize = if cfg!(test) { 1 << 16 } else { 1 << 22 };
/// Arena items a cache reserves at a time in a shared table's arenas.
const ARENA_CHUNK: usize = 1 << 12;
/// Blocks a cache adds to a shared table before counting them there.
const UNSAID: usize = 32;
/// Instructions in one block at most: longer straight runs are cut.
pub(crate) const MAX_BLOCK_INSNS: usize = 256;
/// Lengths of instructions before the last kept in the entry itself.
const INLINE: usize = 15;
/// Return addresses a spilled block keeps in its entry (as offsets from its
/// start, in `lens[3..]`), so that running it reads no arena.
const INLINE_PUSHES: usize = 3;
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
    /// targets and the return addresses after them in the target arena,
    /// `[2]` the return addresses kept instead in `[3..]` (at most
    /// [`INLINE_PUSHES`], each an `i32` from `start`, little-endian).
    lens: [u8; INLINE],
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

/// A block table that the decoded-block caches of several decoders share
/// (those of a parallel decode, or decoders of the CPUs' buffers of one
/// trace, given it with `FlowDecoder::with_shared_blocks`),
/// so that a block is built once, by whichever thread meets it first.
/// Entries are added, never changed: a later version of a block (after a
/// poke) goes to a table of the cache's own, which replaces it in place as
/// a cache alone does. A full shared table is replaced by a new one
/// (bigger, with the old one's blocks, or empty when at its bound), which
/// each cache takes at its next insert or segment, so with `n` caches up to
/// `n + 1` tables may be alive.
#[derive(Default)]
pub struct SharedBlocks {
    current: Mutex<Option<Arc<Table>>>,
    generation: AtomicU64,
}

/// Entries (a power of two of them) and the arenas their spilled blocks'
/// instructions are in.
///
/// An entry's `count` is 0 until the block is published (stored with
/// release ordering once all else is written) and its `start` 0 until a
/// writer claims it; both are read and written atomically, and nothing
/// else in an entry is written once published unless the table is not
/// shared (its one `Arc`), so readers of a published entry see it whole.
struct Table {
    slots: Slots,
    arenas: Arc<Arenas>,
    used: Padded<AtomicUsize>,
}

/// A table's entries, all empty (all-zero) at first. On Linux they are in
/// memory mapped for them, which the kernel zeroes on first touch, with huge
/// pages asked for (look-ups land anywhere in the table, and with 4 KiB
/// pages each would be a TLB miss): a large table that a short trace
/// touches little costs little.
struct Slots {
    ptr: NonNull<UnsafeCell<Block>>,
    len: usize,
    /// The mapping (its start and length), or `None` when allocated.
    map: Option<(usize, usize)>,
}

/// Huge pages' size and alignment.
const HUGE_PAGE: usize = 2 << 20;

impl Slots {
    fn zeroed(n: usize) -> Slots {
        let layout = std::alloc::Layout::array::<Block>(n).expect("at most MAX_ENTRIES entries");
        #[cfg(all(target_os = "linux", not(miri)))]
        if layout.size() >= HUGE_PAGE {
            // Room to start the entries on a huge page's boundary.
            let bytes = layout.size() + HUGE_PAGE;
            // SAFETY: a new private anonymous mapping; nothing else is
            // at the address the kernel picks.
            let at = unsafe {
                libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
            };
            if at != libc::MAP_FAILED {
                let start = (at as usize).next_multiple_of(HUGE_PAGE);
                // SAFETY: advice on pages of this mapping; it changes no content.
                unsafe { libc::madvise(start as *mut libc::c_void, layout.size().next_multiple_of(4096), libc::MADV_HUGEPAGE) };
                let ptr = NonNull::new(start as *mut UnsafeCell<Block>).expect("mapped");
                return Slots { ptr, len: n, map: Some((at as usize, bytes)) };
            }
        }
        // SAFETY: a layout of `n` (at least one) entries; all-zero is an
        // empty entry (`count == 0`, `start == 0`; every field of `Block` is
        // valid all-zero, `BranchClass`'s variant 0 being `None`).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut UnsafeCell<Block>;
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Slots { ptr, len: n, map: None }
    }
}

impl std::ops::Deref for Slots {
    type Target = [UnsafeCell<Block>];

    fn deref(&self) -> &[UnsafeCell<Block>] {
        // SAFETY: `len` entries, zeroed (a valid empty `Block`) at first and
        // only ever written as whole `Block`s, live until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        match self.map {
            // SAFETY: the mapping made in `zeroed`, unmapped once.
            Some((at, bytes)) => unsafe {
                libc::munmap(at as *mut libc::c_void, bytes);
            },
            // SAFETY: allocated in `zeroed` with this layout.
            None => unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, std::alloc::Layout::array::<Block>(self.len).expect("allocated")) },
        }
    }
}

// SAFETY: `Slots` owns its entries as a `Box<[UnsafeCell<Block>]>` would.
unsafe impl Send for Slots {}

/// A value on cache lines of its own, so that writing it slows no reader
/// of what is next to it.
#[repr(align(128))]
struct Padded<T>(T);

/// Spilled blocks' instruction bytes (`lens`) and their targets and return
/// addresses (`targets`), each written once, in a range its writer reserves.
struct Arenas {
    lens: Box<[UnsafeCell<MaybeUninit<u8>>]>,
    targets: Box<[UnsafeCell<MaybeUninit<u64>>]>,
    lens_used: Padded<AtomicUsize>,
    targets_used: Padded<AtomicUsize>,
}

// SAFETY: entries and arena ranges are written only before they are
// published (claimed by one writer: a compare-and-swap of `start`, or a
// range reserved with `fetch_add`), or with the table unshared; readers
// read only published ones (see `Table`).
unsafe impl Sync for Table {}
// SAFETY: as for `Table`, whose arenas these are.
unsafe impl Sync for Arenas {}
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

impl Table {
    /// The table of one empty entry (always full), shared by every cache
    /// that has no other yet.
    fn none() -> Arc<Table> {
        static NONE: OnceLock<Arc<Table>> = OnceLock::new();
        NONE.get_or_init(|| Arc::new(Table::new(1, Arc::new(Arenas::new(0))))).clone()
    }

    /// `n` empty entries over `arenas`.
    fn new(n: usize, arenas: Arc<Arenas>) -> Table {
        Table { slots: Slots::zeroed(n), arenas, used: Padded(AtomicUsize::new(0)) }
    }

    /// A table of `n` entries holding this one's published blocks (those
    /// that fit their probes), over the same arenas.
    fn grown(&self, n: usize) -> Table {
        let new = Table::new(n, self.arenas.clone());
        for slot in self.slots.iter() {
            // SAFETY: only published entries are read (see `Table`).
            if let Some(b) = unsafe { published(slot.get()) } {
                new.place(*b);
            }
        }
        new
    }

    /// Puts `b` in a table no one else reads: in the entry of an older
    /// block at its start, else the first empty one, else (all probed
    /// entries taken) the first probed.
    fn place(&self, b: Block) {
        let mask = self.slots.len() - 1;
        let h = hash(b.start);
        let mut at = h & mask;
        for i in 0..PROBES {
            let e = (h + i) & mask;
            // SAFETY: no one else reads or writes this table.
            let old = unsafe { &*self.slots[e].get() };
            if old.count == 0 || old.start == b.start {
                if old.count == 0 {
                    self.used.0.fetch_add(1, Ordering::Relaxed);
                }
                at = e;
                break;
            }
        }
        // SAFETY: as above; no borrow of an entry is left.
        unsafe { *self.slots[at].get() = b };
    }

    /// Adds `b` to a table others may be reading and adding to: in the
    /// first entry of its probes no one has claimed, unless one holds the
    /// same block already. False when all are taken by other blocks. The
    /// caller counts it in `used`.
    fn add(&self, b: &Block) -> bool {
        let mask = self.slots.len() - 1;
        let h = hash(b.start);
        for i in 0..PROBES {
            let p = self.slots[(h + i) & mask].get();
            // SAFETY: `start` of a live entry, accessed atomically only.
            let start = unsafe { AtomicU64::from_ptr(&raw mut (*p).start) };
            // (Claimed ones are passed over without a compare-and-swap,
            // which would take their line from the readers' caches.)
            let claimed = match start.load(Ordering::Relaxed) {
                0 => start.compare_exchange(0, b.start, Ordering::Relaxed, Ordering::Relaxed),
                s => Err(s),
            };
            match claimed {
                Ok(_) => {
                    // SAFETY: this entry is ours alone until published: no
                    // one else writes it, and readers read `count` only.
                    unsafe {
                        let e = &raw mut *p;
                        (&raw mut (*e).window_start).write(b.window_start);
                        (&raw mut (*e).window_end).write(b.window_end);
                        (&raw mut (*e).fall).write(b.fall);
                        (&raw mut (*e).spill).write(b.spill);
                        (&raw mut (*e).targets).write(b.targets);
                        (&raw mut (*e).target_rel).write(b.target_rel);
                        (&raw mut (*e).last_len).write(b.last_len);
                        (&raw mut (*e).last_class).write(b.last_class);
                        (&raw mut (*e).has_target).write(b.has_target);
                        (&raw mut (*e).lens).write(b.lens);
                        AtomicU16::from_ptr(&raw mut (*e).count).store(b.count, Ordering::Release);
                    }
                    return true;
                }
                Err(s) if s == b.start => {
                    // SAFETY: only a published entry is read (see `Table`).
                    if unsafe { published(p) }.is_some_and(|old| old.window() == b.window()) {
                        return true;
                    }
                }
                Err(_) => {}
            }
        }
        false
    }

    fn full(&self) -> bool {
        (self.used.0.load(Ordering::Relaxed) + 1) * 2 > self.slots.len()
    }
}

/// The entry at `p` if it is published: then it is never written again
/// while others may read it.
///
/// # Safety
/// `p` points into a live table.
#[inline(always)]
unsafe fn published<'t>(p: *mut Block) -> Option<&'t Block> {
    // SAFETY: `count` is accessed atomically while others may write it; a
    // non-zero count was stored last, with release ordering (see `Table`).
    let count = unsafe { AtomicU16::from_ptr(&raw mut (*p).count) }.load(Ordering::Acquire);
    // SAFETY: published, so not written while this borrow lives.
    (count != 0).then(|| unsafe { &*p })
}

impl Arenas {
    /// Arenas of `n` lengths and `n` targets, none touched yet.
    fn new(n: usize) -> Arenas {
        Arenas { lens: uninit(n), targets: uninit(n), lens_used: Padded(AtomicUsize::new(0)), targets_used: Padded(AtomicUsize::new(0)) }
    }

    /// `data` copied to a range of `arena` no one else writes or reads
    /// until it is published, and where the range starts; `None` when the
    /// arena has no room for it. The range is taken from `room`, a range
    /// this cache reserved (with [`ARENA_CHUNK`] more), so that caches
    /// sharing an arena seldom write the line of `used`.
    fn put<T: Copy>(arena: &[UnsafeCell<MaybeUninit<T>>], used: &Padded<AtomicUsize>, room: &mut Range<usize>, data: &[&[T]]) -> Option<u32> {
        let n: usize = data.iter().map(|d| d.len()).sum();
        if room.len() < n {
            let size = n.max(ARENA_CHUNK);
            let at = used.0.fetch_add(size, Ordering::Relaxed);
            *room = at..at.checked_add(size).filter(|&end| end <= arena.len())?;
        }
        let at = room.start;
        room.start += n;
        let mut to = at;
        for d in data {
            for &x in *d {
                // SAFETY: `to` is in the range this call reserved.
                unsafe { (*arena[to].get()).write(x) };
                to += 1;
            }
        }
        Some(at as u32)
    }
}

/// `n` items of room, not touched.
fn uninit<T>(n: usize) -> Box<[UnsafeCell<MaybeUninit<T>>]> {
    let b: Box<[MaybeUninit<T>]> = Box::new_uninit_slice(n);
    // SAFETY: `UnsafeCell<X>` has the layout of `X`.
    unsafe { Box::from_raw(Box::into_raw(b) as *mut [UnsafeCell<MaybeUninit<T>>]) }
}

#[inline(always)]
fn hash(ip: u64) -> usize {
    (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize
}

impl BlockCache {
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
            if new.n_pushes <= INLINE_PUSHES && new.pushes().iter().all(|&ret| rel(ret).is_some()) {
                b.lens[2] = new.n_pushes as u8;
                for (at, &ret) in b.lens[3..].chunks_exact_mut(4).zip(new.pushes()) {
                    at.copy_from_slice(&rel(ret).expect("checked").to_le_bytes());
                }
            } else {
                b.lens[1] = new.n_pushes as u8;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The block made up for `start`: up to 40 instructions before a
    /// conditional branch, some of them direct calls (so spilled), its
    /// window depending on `version`.
    fn made_up(start: u64, version: u64) -> (Vec<Insn>, Range<Time>) {
        let n = (start >> 4) as usize % 41;
        let calls = start.is_multiple_of(3);
        let insns = (0..n)
            .map(|i| match i % 4 {
                1 if calls => Insn { len: 5, class: BranchClass::DirectCall, target: Some(start ^ (i as u64) << 20) },
                _ => Insn { len: 1 + (start as usize + i) as u8 % 15, class: BranchClass::None, target: None },
            })
            .collect();
        (insns, version * 100..version * 100 + 50)
    }

    fn add(cache: &mut BlockCache, start: u64, version: u64) -> bool {
        let (insns, window) = made_up(start, version);
        let mut ip = start;
        for insn in &insns {
            cache.push(ip, insn);
            ip = insn.target.unwrap_or(ip + insn.len as u64);
        }
        cache.insert(start, window, ip, Insn { len: 2, class: BranchClass::CondBranch, target: Some(ip + 2 + (start & 0x7f)) })
    }

    /// Whether the cached block at `start` for `version` is the made-up
    /// one, instruction for instruction; `None` when not cached.
    fn check(cache: &BlockCache, start: u64, version: u64) -> Option<()> {
        let (insns, window) = made_up(start, version);
        let b = cache.get(start, |b| b.window() == window)?;
        let (lens, targets) = cache.insns(b);
        assert_eq!(b.count as usize, insns.len() + 1, "{start:#x}");
        let want_lens: Vec<u8> = insns.iter().map(|i| i.len | if i.class == BranchClass::DirectCall { CALL } else { 0 }).collect();
        assert_eq!(lens, want_lens, "{start:#x}: lengths");
        let want_targets: Vec<u64> = insns.iter().filter_map(|i| i.target).collect();
        assert_eq!(targets, want_targets, "{start:#x}: targets");
        let mut ip = start;
        let mut want_pushes = Vec::new();
        for i in &insns {
            if i.class == BranchClass::DirectCall {
                want_pushes.push(ip + 5);
            }
            ip = i.target.unwrap_or(ip + i.len as u64);
        }
        let mut pushes = Vec::new();
        cache.each_push(b, |ret| pushes.push(ret));
        assert_eq!(pushes, want_pushes, "{start:#x}: pushes");
        assert_eq!((b.last_ip(), b.target()), (ip, ip + 2 + (start & 0x7f)), "{start:#x}: last");
        Some(())
    }

    /// Threads sharing a table add and read the same blocks, in different
    /// orders, through growth and past the table's and the arenas' bounds
    /// (replaced while others read): whatever a look-up finds is the block
    /// added for it, and a block just added is found.
    #[test]
    fn shared_caches_find_what_was_added() {
        let home = Arc::new(SharedBlocks::default());
        // (Fewer under Miri, which is slow; then the bounds are not reached.)
        let n = if cfg!(miri) { 150 } else { 20_000 };
        let starts: Vec<u64> = (1..n).map(|i| 0xffff_ffff_8100_0000 + i * 37).collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (home, starts) = (home.clone(), &starts);
                s.spawn(move || {
                    let mut cache = BlockCache::shared(home);
                    let (mut found, mut added) = (0, 0);
                    // Chunks of 500 starts, each visited 4 times in turn,
                    // the chunks in an order of the thread's own.
                    for k in 0..4 * starts.len() {
                        let (chunk, j) = (k / 2000, k % 500);
                        let start = starts[((chunk * (2 * t + 1) + t) * 500 + j * 7) % starts.len()];
                        let version = (k / 500 % 2) as u64;
                        if check(&cache, start, version).is_some() {
                            found += 1;
                        } else if add(&mut cache, start, version) {
                            added += 1;
                            check(&cache, start, version).expect("just added");
                        }
                    }
                    assert!(found > n / 20 && added > n / 20, "thread {t}: {found} found, {added} added");
                });
            }
        });
        if !cfg!(miri) {
            let current = home.current.lock().unwrap().clone().expect("a table");
            assert_eq!(current.slots.len(), MAX_ENTRIES, "grown to the bound");
            assert!(home.generation.load(Ordering::Relaxed) > 8, "replaced at the bound");
        }
    }

    /// A table of huge-page size and more (mapped, not allocated) starts
    /// empty everywhere, holds what is put anywhere in it, and a cache sized
    /// for large code starts with such a table.
    #[test]
    fn large_tables_are_mapped_empty_and_sized_by_the_code() {
        let n = 4 * HUGE_PAGE / std::mem::size_of::<Block>();
        let slots = Slots::zeroed(n);
        assert!(slots.map.is_some() || cfg!(not(target_os = "linux")));
        // SAFETY: entries of a live table no one else reads.
        assert!(slots.iter().all(|e| unsafe { (*e.get()).count == 0 && (*e.get()).start == 0 }));
        for at in [0, n / 2, n - 1] {
            // SAFETY: as above.
            unsafe { (*slots[at].get()).start = at as u64 + 1 };
        }
        // SAFETY: as above.
        assert_eq!([0, n / 2, n - 1].map(|at| unsafe { (*slots[at].get()).start }), [1, n as u64 / 2 + 1, n as u64]);
        drop(slots);

        let mut cache = BlockCache::default();
        cache.size_for_code(48 << 20);
        assert_eq!(cache.first_entries, MAX_ENTRIES);
        cache.size_for_code(4096);
        assert_eq!(cache.first_entries, MIN_ENTRIES);
        cache.size_for_code(MIN_ENTRIES as u64 * BYTES_PER_BLOCK);
        assert_eq!(cache.first_entries, MAX_ENTRIES.min(MIN_ENTRIES * 2));
        assert!(add(&mut cache, 0x1000, 0));
        assert_eq!(cache.mask + 1, cache.first_entries);
    }

    /// Up to [`INLINE_PUSHES`] return addresses within 2 GiB of the start
    /// are kept in the entry; more, or one farther, go to the arena. Either
    /// way the block pushes them all, in order.
    #[test]
    fn return_addresses_in_the_entry_or_the_arena() {
        let start = 0xffff_ffff_8100_0000u64;
        for (calls, far, in_entry) in [(1, false, true), (3, false, true), (4, false, false), (2, true, false)] {
            let mut cache = BlockCache::default();
            let (mut ip, mut want) = (start, Vec::new());
            for i in 0..calls {
                // The first call of a `far` block goes 4 GiB away, where
                // the next pushes its return address.
                let to = if far && i == 0 { ip.wrapping_add(4 << 30) } else { ip + 0x100 };
                cache.push(ip, &Insn { len: 5, class: BranchClass::DirectCall, target: Some(to) });
                want.push(ip + 5);
                ip = to;
            }
            assert!(cache.insert(start, 0..10, ip, Insn { len: 1, class: BranchClass::Return, target: None }));
            let b = cache.get(start, |_| true).expect("added");
            let mut pushes = Vec::new();
            cache.each_push(b, |ret| pushes.push(ret));
            assert_eq!(pushes, want, "{calls} calls, far: {far}");
            assert_eq!((b.lens[2] as usize, b.lens[1] as usize), if in_entry { (calls, 0) } else { (0, calls) }, "{calls} calls, far: {far}");
        }
    }

    /// A table no one shares replaces an older block at the same start; a
    /// shared one keeps the first version for all, and each cache keeps
    /// the later ones in its own table, replaced there as versions change.
    #[test]
    fn later_versions_go_to_a_table_of_the_caches_own() {
        let start = 0x40_1000;
        let mut alone = BlockCache::default();
        assert!(add(&mut alone, start, 0) && add(&mut alone, start, 1));
        assert!(check(&alone, start, 1).is_some() && check(&alone, start, 0).is_none());
        assert!(alone.own.is_none());
        let home = Arc::new(SharedBlocks::default());
        let (mut a, mut b) = (BlockCache::shared(home.clone()), BlockCache::shared(home));
        // A block kept in its entry, and one spilled to the arenas.
        let inline = (start..).find(|s| !s.is_multiple_of(3) && (3..10).contains(&((s >> 4) % 41))).unwrap();
        let spilled = (start..).find(|s| s.is_multiple_of(3) && (s >> 4) % 41 > 20).unwrap();
        for start in [inline, spilled] {
            assert!(add(&mut a, start, 0) && add(&mut a, start, 1) && add(&mut a, start, 2));
            assert!(check(&a, start, 0).is_some() && check(&a, start, 2).is_some(), "{start:#x}: the first version shared, the last own");
            assert!(check(&a, start, 1).is_none(), "{start:#x}: replaced in the own table");
            b.refresh();
            assert!(check(&b, start, 0).is_some() && check(&b, start, 2).is_none(), "{start:#x}: the other cache sees the shared one only");
            assert!(add(&mut b, start, 2) && check(&b, start, 2).is_some());
            assert_eq!(b.get(start, |_| true).unwrap().inline(), start == inline);
        }
        assert!(a.own.is_some() && b.own.is_some());
    }

    /// An entry claimed but not yet published is passed over by look-ups
    /// and by adds, not taken as the end of the probes.
    #[test]
    fn entries_being_written_are_passed_over() {
        let home = Arc::new(SharedBlocks::default());
        let mut cache = BlockCache::shared(home);
        assert!(add(&mut cache, 0x1000, 0));
        let mask = cache.mask;
        let first = 0x2000u64;
        let second = (first + 1..).find(|&ip| hash(ip) & mask == hash(first) & mask).unwrap();
        // `first`'s entry claimed by a writer that has written all but its
        // count (so it is not published yet).
        let p = unsafe { (*cache.slots.add(hash(first) & mask)).get() };
        unsafe { AtomicU64::from_ptr(&raw mut (*p).start) }.store(first, Ordering::Relaxed);
        let window = made_up(first, 0).1;
        unsafe { ((*p).window_start, (*p).window_end) = (window.start, window.end) };
        assert!(check(&cache, first, 0).is_none());
        assert!(add(&mut cache, second, 0), "added past the claimed entry");
        assert!(check(&cache, second, 0).is_some(), "found past the claimed entry");
    }
}
