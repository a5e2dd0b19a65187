//! The decode's hot loop does not allocate: a whole buffer's decode makes
//! a fixed number of allocations (decoder set-up), whatever the trace's
//! length. Counted with a global allocator wrapper.

mod common;

use codeimage::window::Interval;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use etm::flow::{self, FlowDecoder, Item};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader};

struct Counting;

thread_local! {
    /// Allocations by this thread (tests run on several threads at once).
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn allocs() -> usize {
    ALLOCS.with(|a| a.get())
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// (allocations during the decode, elements, timestamp elements); with
/// `windows`, code is read over the windows between timestamps (their
/// collection is set-up, not counted).
fn count(name: &str, windows: bool) -> Option<(usize, u64, u64)> {
    let dir = common::snapshot(name)?;
    let snap = Snapshot::load(&dir).unwrap();
    let setup = snap.buffer_setup(&snap.buffers[0].name).unwrap();
    let data = snap.read_buffer(&setup.buffer).unwrap();
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    let (code, _) = snap.code_image();
    let mut before = allocs();
    let mut reader = PacketReader::with_container(&data, setup.container, setup.framing, &configs, ErrorRecovery::Continue);
    let mut d = FlowDecoder::for_buffer(Interval(&code), setup.framing, &configs);
    if windows {
        d.window_timestamps(reader.clone());
        before = allocs();
    }
    let (mut elements, mut stamps) = (0u64, 0u64);
    flow::run(&mut reader, &mut d, |item| {
        if let Item::Element(e) = item {
            elements += 1;
            stamps += matches!(e.kind, flow::ElemKind::Timestamp { .. }) as u64;
        }
    });
    Some((allocs() - before, elements, stamps))
}

#[test]
fn allocations_do_not_grow_with_the_trace() {
    let (Some(small), Some(big)) = (count("juno_r1_1", false), count("bugfix-exact-match", false)) else {
        return;
    };
    eprintln!("juno_r1_1: {} allocations for {} elements; bugfix-exact-match: {} for {}", small.0, small.1, big.0, big.1);
    assert!(big.1 > 100 * small.1);
    // Set-up only: a few per source (6 in each), none per packet or element.
    assert!(big.0 <= 100 && small.0 <= 100, "{small:?} {big:?}");
}

/// A long synthetic trace with a timestamp every iteration of a loop, over
/// code poked before the first one: decoded over windows, a fixed number of
/// allocations however many packets (the copy of the source kept from
/// before each packet, whose stack holds the address packets, reuses its
/// memory).
#[test]
fn window_decode_of_a_long_trace_does_not_allocate_per_packet() {
    use codeimage::{BaseImage, Poke, TimelineBuilder};
    use common::packets::{atoms, long_addr, ts};
    use etm::packet::{Context, Packet, TraceInfo};
    use etm::{EtmV4Config, TracePacket};
    // 2000 nop; 2004 b.ne 2000; 2008 bl 2100; 200c b 2000; 2100 ret
    let mut words = vec![0xd503201f_u32; 0x44];
    words[1] = 0x54ffffe1;
    words[2] = 0x9400003e;
    words[3] = 0x17fffffd;
    words[0x40] = 0xd65f03c0;
    let mut base = BaseImage::new();
    base.add_bytes(0x2000, words.iter().flat_map(|w| w.to_le_bytes()).collect(), "program");
    let mut b = TimelineBuilder::new(base);
    b.poke(Poke { time: 10, settled: None, addr: 0x2000, old: &0xd503201f_u32.to_le_bytes(), new: &0xd503201f_u32.to_le_bytes(), cpu: None });
    let code = b.build();
    let ctx = Context { el: 1, aarch64: true, non_secure: true, vmid: None, context_id: None };
    let cfg = EtmV4Config { configr: 1, traceidr: 0x10, ..EtmV4Config::default() };
    let decode = |iterations: u64| {
        let mut p =
            vec![Packet::Async, Packet::TraceInfo(TraceInfo::default()), Packet::TraceOn, ts(100), Packet::AddressContext(long_addr(0x2000), ctx)];
        let mut stamps = vec![100];
        for i in 0..iterations {
            p.push(atoms("NEE"));
            p.push(Packet::Address(long_addr(0x200c)));
            p.push(atoms("E"));
            p.push(ts(200 + i));
            stamps.push(200 + i);
        }
        let mut d = FlowDecoder::new(Interval(&code), &[cfg]);
        d.set_timestamps(0x10, stamps);
        let mut out = Vec::with_capacity(16);
        let mut ranges = 0u64;
        let before = allocs();
        for (i, pk) in p.iter().enumerate() {
            let tp = TracePacket { trace_id: 0x10, index: i as u64, packet: *pk, raw: &[] };
            d.packet(&tp, &mut out);
            ranges += out.iter().filter(|e| matches!(e.kind, flow::ElemKind::InstrRange(_))).count() as u64;
            out.clear();
        }
        (allocs() - before, ranges)
    };
    let (small, big) = (decode(10), decode(10_000));
    eprintln!("10 iterations: {small:?}; 10,000: {big:?}");
    assert_eq!(big.1, 40_000, "four ranges per iteration");
    assert!(big.0 <= small.0 + 4, "{small:?} {big:?}");
}
