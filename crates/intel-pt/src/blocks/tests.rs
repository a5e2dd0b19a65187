//! The block cache against made-up blocks: sharing, sizes, spilled return
//! addresses, versions and entries being written.

use super::table::{Slots, HUGE_PAGE};
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

/// A block's inner jumps and calls, read from its entry, are those its
/// instructions hold, however its return addresses are kept: none, some or
/// [`INLINE_PUSHES`] in the entry, in the arena (too many, too far), and with
/// calls to the next instruction, which push nothing.
#[test]
fn inner_jumps_and_calls_from_the_entry() {
    let start = 0x40_0000u64;
    for pattern in 0u32..(1 << 11) {
        let mut cache = BlockCache::default();
        let (mut ip, mut want) = (start, (0, 0));
        // Two bits an instruction: plain, jump, call, or call to the next
        // instruction; bit 10 makes a call in first place a far one (its return
        // addresses go to the arena).
        for i in 0..5 {
            let (class, to) = match pattern >> (2 * i) & 3 {
                0 => (BranchClass::None, None),
                1 => (BranchClass::DirectJump, Some(ip + 0x40)),
                2 if i == 0 && pattern & 0x400 != 0 => (BranchClass::DirectCall, Some(ip.wrapping_add(4 << 30))),
                2 => (BranchClass::DirectCall, Some(ip + 0x80)),
                _ => (BranchClass::DirectCall, Some(ip + 5)),
            };
            match class {
                BranchClass::DirectJump => want.0 += 1,
                BranchClass::DirectCall => want.1 += 1,
                _ => {}
            }
            let insn = Insn { len: 5, class, target: to };
            cache.push(ip, &insn);
            ip = to.unwrap_or(ip + 5);
        }
        assert!(cache.insert(start, 0..10, ip, Insn { len: 1, class: BranchClass::Return, target: None }));
        let b = cache.get(start, |_| true).expect("added");
        assert_eq!(b.inner_jumps_and_calls(), want, "pattern {pattern:#x}");
        let mut pushes = 0;
        cache.each_push(b, |_| pushes += 1);
        let (lens, _) = cache.insns(b);
        let zero_length = lens.iter().zip(0..).filter(|&(&l, i)| l & !15 == CALL && pattern >> (2 * i) & 3 == 3).count();
        assert_eq!(pushes, want.1 - zero_length, "pattern {pattern:#x}: return addresses");
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
