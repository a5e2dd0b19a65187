//! Walking never allocates: a counting global allocator watches
//! `walk_to_branch` over code that takes both x86 paths (the fast length
//! decoder and iced-x86) and AArch64 code.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use isa::{walk_to_branch, Isa, KernelIdioms, WalkError};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Walks `code` block after block; returns the number of blocks.
fn walk_all(isa: Isa, base: u64, code: &[u8], idioms: &KernelIdioms) -> usize {
    let (mut pos, mut blocks) = (0usize, 0usize);
    while pos < code.len() {
        match walk_to_branch(isa, base + pos as u64, &code[pos..], idioms) {
            Ok(b) => {
                blocks += 1;
                pos = (b.branch_addr - base) as usize + usize::from(b.branch.len);
            }
            Err(WalkError::Undecodable { addr, .. }) => pos = (addr - base) as usize + 1,
            Err(_) => break,
        }
    }
    blocks
}

#[test]
fn walking_does_not_allocate() {
    // Fast path: push, mov, nop5, jcc, call, ret; iced: lock cmpxchg, pause,
    // SSE movups, vzeroupper, syscall with 0x66; invalid 0x06.
    let x86: Vec<u8> = [
        &[0x55, 0x48, 0x89, 0xe5, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x74, 0x02][..],
        &[0xf0, 0x48, 0x0f, 0xb1, 0x17, 0xf3, 0x90, 0x0f, 0x10, 0x07, 0xc5, 0xf8, 0x77],
        &[0x66, 0x0f, 0x05, 0x06, 0xe8, 0, 0, 0, 0, 0xc3],
    ]
    .concat()
    .repeat(1000);
    let a64: Vec<u8> = [0xa9bf_7bfdu32, 0xd503_201f, 0x5400_0040, 0xd65f_03c0].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>().repeat(1000);
    let idioms = KernelIdioms::from_symbols([("__x86_return_thunk", 0x1000)]);
    // iced-x86 builds its decoder tables once, on first use (~7700 allocations).
    walk_all(Isa::X86_64, 0x1000, &x86, &idioms);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let blocks = walk_all(Isa::X86_64, 0x1000, &x86, &idioms) + walk_all(Isa::A64, 0x1000, &a64, &idioms);
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert!(blocks > 5000, "{blocks}");
    assert_eq!(after - before, 0, "{} allocations", after - before);
}
