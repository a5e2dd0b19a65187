//! The decode's hot loop does not allocate: a whole buffer's decode makes
//! a fixed number of allocations (decoder set-up), whatever the trace's
//! length. Counted with a global allocator wrapper.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use etm::flow::{self, FlowDecoder, Item};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// (allocations during the decode, elements).
fn count(name: &str) -> Option<(usize, u64)> {
    let dir = common::snapshot(name)?;
    let snap = Snapshot::load(&dir).unwrap();
    let setup = snap.buffer_setup(&snap.buffers[0].name).unwrap();
    let data = snap.read_buffer(&setup.buffer).unwrap();
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    let (code, _) = flow::snapshot_code(&snap);
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut reader = PacketReader::with_container(
        &data,
        setup.container,
        setup.framing,
        &configs,
        ErrorRecovery::Continue,
    );
    let mut d = FlowDecoder::for_buffer(&code, setup.framing, &configs);
    let mut elements = 0u64;
    flow::run(&mut reader, &mut d, |item| {
        if let Item::Element(_) = item {
            elements += 1;
        }
    });
    Some((ALLOCS.load(Ordering::Relaxed) - before, elements))
}

#[test]
fn allocations_do_not_grow_with_the_trace() {
    let (Some(small), Some(big)) = (count("juno_r1_1"), count("bugfix-exact-match")) else {
        return;
    };
    eprintln!(
        "juno_r1_1: {} allocations for {} elements; bugfix-exact-match: {} for {}",
        small.0, small.1, big.0, big.1
    );
    assert!(big.1 > 100 * small.1);
    // Set-up only: a few per source (6 in each), none per packet or element.
    assert!(big.0 <= 100 && small.0 <= 100, "{small:?} {big:?}");
}
