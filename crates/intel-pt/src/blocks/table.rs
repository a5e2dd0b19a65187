//! The block table: entries in one mapping, the arenas for what does not
//! fit in an entry, and the handle by which caches share a table.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::entry::Block;

/// Entries looked at for one address.
pub(super) const PROBES: usize = 8;
/// Arena items a cache reserves at a time in a shared table's arenas.
pub(super) const ARENA_CHUNK: usize = 1 << 12;

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
    pub(super) current: Mutex<Option<Arc<Table>>>,
    pub(super) generation: AtomicU64,
}

/// Entries (a power of two of them) and the arenas their spilled blocks'
/// instructions are in.
///
/// An entry's `count` is 0 until the block is published (stored with
/// release ordering once all else is written) and its `start` 0 until a
/// writer claims it; both are read and written atomically, and nothing
/// else in an entry is written once published unless the table is not
/// shared (its one `Arc`), so readers of a published entry see it whole.
pub(super) struct Table {
    pub(super) slots: Slots,
    pub(super) arenas: Arc<Arenas>,
    pub(super) used: Padded<AtomicUsize>,
}

/// A table's entries, all empty (all-zero) at first. On Linux they are in
/// memory mapped for them, which the kernel zeroes on first touch, with huge
/// pages asked for (look-ups land anywhere in the table, and with 4 KiB
/// pages each would be a TLB miss): a large table that a short trace
/// touches little costs little.
pub(super) struct Slots {
    pub(super) ptr: NonNull<UnsafeCell<Block>>,
    pub(super) len: usize,
    /// The mapping (its start and length), or `None` when allocated.
    pub(super) map: Option<(usize, usize)>,
}

/// Huge pages' size and alignment.
pub(super) const HUGE_PAGE: usize = 2 << 20;

impl Slots {
    pub(super) fn zeroed(n: usize) -> Slots {
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
pub(super) struct Padded<T>(pub(super) T);

/// Spilled blocks' instruction bytes (`lens`) and their targets and return
/// addresses (`targets`), each written once, in a range its writer reserves.
pub(super) struct Arenas {
    pub(super) lens: Box<[UnsafeCell<MaybeUninit<u8>>]>,
    pub(super) targets: Box<[UnsafeCell<MaybeUninit<u64>>]>,
    pub(super) lens_used: Padded<AtomicUsize>,
    pub(super) targets_used: Padded<AtomicUsize>,
}

// SAFETY: entries and arena ranges are written only before they are
// published (claimed by one writer: a compare-and-swap of `start`, or a
// range reserved with `fetch_add`), or with the table unshared; readers
// read only published ones (see `Table`).
unsafe impl Sync for Table {}
// SAFETY: as for `Table`, whose arenas these are.
unsafe impl Sync for Arenas {}

impl Table {
    /// The table of one empty entry (always full), shared by every cache
    /// that has no other yet.
    pub(super) fn none() -> Arc<Table> {
        static NONE: OnceLock<Arc<Table>> = OnceLock::new();
        NONE.get_or_init(|| Arc::new(Table::new(1, Arc::new(Arenas::new(0))))).clone()
    }

    /// `n` empty entries over `arenas`.
    pub(super) fn new(n: usize, arenas: Arc<Arenas>) -> Table {
        Table { slots: Slots::zeroed(n), arenas, used: Padded(AtomicUsize::new(0)) }
    }

    /// A table of `n` entries holding this one's published blocks (those
    /// that fit their probes), over the same arenas.
    pub(super) fn grown(&self, n: usize) -> Table {
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
    pub(super) fn place(&self, b: Block) {
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
    pub(super) fn add(&self, b: &Block) -> bool {
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

    pub(super) fn full(&self) -> bool {
        (self.used.0.load(Ordering::Relaxed) + 1) * 2 > self.slots.len()
    }
}

/// The entry at `p` if it is published: then it is never written again
/// while others may read it.
///
/// # Safety
/// `p` points into a live table.
#[inline(always)]
pub(super) unsafe fn published<'t>(p: *mut Block) -> Option<&'t Block> {
    // SAFETY: `count` is accessed atomically while others may write it; a
    // non-zero count was stored last, with release ordering (see `Table`).
    let count = unsafe { AtomicU16::from_ptr(&raw mut (*p).count) }.load(Ordering::Acquire);
    // SAFETY: published, so not written while this borrow lives.
    (count != 0).then(|| unsafe { &*p })
}

impl Arenas {
    /// Arenas of `n` lengths and `n` targets, none touched yet.
    pub(super) fn new(n: usize) -> Arenas {
        Arenas { lens: uninit(n), targets: uninit(n), lens_used: Padded(AtomicUsize::new(0)), targets_used: Padded(AtomicUsize::new(0)) }
    }

    /// `data` copied to a range of `arena` no one else writes or reads
    /// until it is published, and where the range starts; `None` when the
    /// arena has no room for it. The range is taken from `room`, a range
    /// this cache reserved (with [`ARENA_CHUNK`] more), so that caches
    /// sharing an arena seldom write the line of `used`.
    pub(super) fn put<T: Copy>(
        arena: &[UnsafeCell<MaybeUninit<T>>],
        used: &Padded<AtomicUsize>,
        room: &mut Range<usize>,
        data: &[&[T]],
    ) -> Option<u32> {
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
pub(super) fn uninit<T>(n: usize) -> Box<[UnsafeCell<MaybeUninit<T>>]> {
    let b: Box<[MaybeUninit<T>]> = Box::new_uninit_slice(n);
    // SAFETY: `UnsafeCell<X>` has the layout of `X`.
    unsafe { Box::from_raw(Box::into_raw(b) as *mut [UnsafeCell<MaybeUninit<T>>]) }
}

#[inline(always)]
pub(super) fn hash(ip: u64) -> usize {
    (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize
}
