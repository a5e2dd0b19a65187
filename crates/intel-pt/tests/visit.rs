//! `PacketDecoder::visit` against repeated `next_packet`: the same packets at
//! the same offsets, the same errors, on valid streams (PEBS blocks
//! included) and on truncated and corrupted ones; through a visitor that
//! writes only `packet`, one that overrides every method, and one that
//! stops and is resumed.

mod common;

use std::ops::ControlFlow;

use intel_pt::{Ip, Packet, PacketDecoder, PacketError, PacketVisitor, Resync, Tnt};
use proptest::prelude::*;

/// What a decode of a buffer yields, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Packet(usize, Packet),
    Error(PacketError),
    Resync(Resync),
}

/// `next_packet` to the end, resyncing after each error.
fn by_next_packet(buf: &[u8]) -> Vec<Event> {
    let mut dec = PacketDecoder::new(buf);
    let mut out = Vec::new();
    loop {
        match dec.next_packet() {
            Ok(Some((offset, p))) => out.push(Event::Packet(offset, p)),
            Ok(None) => return out,
            Err(e) => {
                out.push(Event::Error(e));
                out.push(Event::Resync(dec.sync_forward()));
            }
        }
    }
}

/// Records every packet through `packet` alone.
struct Plain(Vec<Event>);

impl PacketVisitor for Plain {
    fn packet(&mut self, offset: usize, packet: Packet) -> ControlFlow<()> {
        self.0.push(Event::Packet(offset, packet));
        ControlFlow::Continue(())
    }
}

/// Overrides every method with a kind of its own, rebuilding the packet;
/// `packet` must see none of those kinds.
struct Each(Vec<Event>);

impl Each {
    fn push(&mut self, offset: usize, packet: Packet) -> ControlFlow<()> {
        self.0.push(Event::Packet(offset, packet));
        ControlFlow::Continue(())
    }
}

/// `Each`'s own methods: each records the packet its arguments make.
macro_rules! rebuild {
    ($($name:ident($($arg:ident: $ty:ty),*) => $packet:expr,)*) => {$(
        fn $name(&mut self, offset: usize, $($arg: $ty),*) -> ControlFlow<()> {
            self.push(offset, $packet)
        }
    )*};
}

impl PacketVisitor for Each {
    fn packet(&mut self, offset: usize, packet: Packet) -> ControlFlow<()> {
        assert!(
            !matches!(
                packet,
                Packet::Pad
                    | Packet::TntShort(_)
                    | Packet::Tip(_)
                    | Packet::TipPge(_)
                    | Packet::TipPgd(_)
                    | Packet::Fup(_)
                    | Packet::Tsc(_)
                    | Packet::Mtc(_)
                    | Packet::Cyc(_)
            ),
            "{packet:?} at {offset} has a method of its own"
        );
        self.push(offset, packet)
    }
    rebuild! {
        pad() => Packet::Pad,
        tnt_short(tnt: Tnt) => Packet::TntShort(tnt),
        tip(ip: Ip) => Packet::Tip(ip),
        tip_pge(ip: Ip) => Packet::TipPge(ip),
        tip_pgd(ip: Ip) => Packet::TipPgd(ip),
        fup(ip: Ip) => Packet::Fup(ip),
        tsc(tsc: u64) => Packet::Tsc(tsc),
        mtc(ctc: u8) => Packet::Mtc(ctc),
        cyc(cycles: u64) => Packet::Cyc(cycles),
    }
}

/// `visit` to the end with `v`, resyncing after each error; `events` reads
/// what `v` recorded.
fn by_visit<V: PacketVisitor>(buf: &[u8], v: &mut V, events: fn(&mut V) -> &mut Vec<Event>) {
    let mut dec = PacketDecoder::new(buf);
    loop {
        match dec.visit(v) {
            Ok(ControlFlow::Continue(())) => {
                assert_eq!(dec.offset(), buf.len(), "visit ends at the end");
                return;
            }
            Ok(ControlFlow::Break(())) => panic!("this visitor never stops"),
            Err(e) => {
                assert_eq!(e.offset, dec.offset(), "the decoder stays at the bad packet");
                events(v).push(Event::Error(e));
                let r = dec.sync_forward();
                events(v).push(Event::Resync(r));
            }
        }
    }
}

/// Stops after every `every`-th packet (counting from `phase`); after a stop
/// the caller decodes the next packet with `next_packet` or goes on
/// visiting, alternately, so that both see the state the other left.
struct Stopper {
    events: Vec<Event>,
    every: usize,
    seen: usize,
}

impl PacketVisitor for Stopper {
    fn packet(&mut self, offset: usize, packet: Packet) -> ControlFlow<()> {
        self.events.push(Event::Packet(offset, packet));
        self.seen += 1;
        if self.seen.is_multiple_of(self.every) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

fn by_stopping_visit(buf: &[u8], every: usize, phase: usize) -> Vec<Event> {
    let mut dec = PacketDecoder::new(buf);
    let mut v = Stopper { events: Vec::new(), every, seen: phase };
    let mut stops = 0usize;
    loop {
        match dec.visit(&mut v) {
            Ok(ControlFlow::Continue(())) => return v.events,
            Ok(ControlFlow::Break(())) => {
                let (offset, packet) = match v.events.last() {
                    Some(&Event::Packet(o, p)) => (o, p),
                    other => panic!("stopped after {other:?}"),
                };
                assert!(dec.offset() > offset, "a stop leaves the decoder after {packet:?} at {offset}");
                stops += 1;
                if stops.is_multiple_of(2) {
                    match dec.next_packet() {
                        Ok(Some((o, p))) => v.events.push(Event::Packet(o, p)),
                        Ok(None) => return v.events,
                        Err(e) => {
                            v.events.push(Event::Error(e));
                            v.events.push(Event::Resync(dec.sync_forward()));
                        }
                    }
                }
            }
            Err(e) => {
                assert_eq!(e.offset, dec.offset());
                v.events.push(Event::Error(e));
                v.events.push(Event::Resync(dec.sync_forward()));
            }
        }
    }
}

/// Every way of visiting `buf` gives what `next_packet` gives.
fn check(buf: &[u8]) -> Result<(), TestCaseError> {
    let want = by_next_packet(buf);
    let mut plain = Plain(Vec::new());
    by_visit(buf, &mut plain, |v| &mut v.0);
    prop_assert_eq!(&plain.0, &want, "visitor with `packet` only");
    let mut each = Each(Vec::new());
    by_visit(buf, &mut each, |v| &mut v.0);
    prop_assert_eq!(&each.0, &want, "visitor with every method");
    for (every, phase) in [(1, 0), (3, 1), (17, 5)] {
        prop_assert_eq!(&by_stopping_visit(buf, every, phase), &want, "stopping every {}", every);
    }
    Ok(())
}

/// A random valid stream, then damaged: cut, bytes overwritten, bytes
/// inserted.
fn damaged(seed: u64, pebs: bool, len: usize, cut: Option<usize>, writes: &[(usize, u8)], inserts: &[(usize, u8)]) -> Vec<u8> {
    let mut rng = common::Rng(seed | 1);
    let mut buf = common::random_stream(&mut rng, len, common::Kinds { pebs, event_trace: true });
    for &(at, byte) in writes {
        let i = at % buf.len();
        buf[i] = byte;
    }
    for &(at, byte) in inserts {
        let i = at % (buf.len() + 1);
        buf.insert(i, byte);
    }
    if let Some(cut) = cut {
        buf.truncate(cut % (buf.len() + 1));
    }
    buf
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn visit_agrees_with_next_packet_on_valid_streams(seed in any::<u64>(), pebs in any::<bool>(), len in 1usize..6000) {
        let buf = damaged(seed, pebs, len, None, &[], &[]);
        check(&buf)?;
    }

    #[test]
    fn visit_agrees_with_next_packet_on_damaged_streams(
        seed in any::<u64>(),
        pebs in any::<bool>(),
        len in 1usize..3000,
        cut in proptest::option::of(any::<usize>()),
        writes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        inserts in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    ) {
        let buf = damaged(seed, pebs, len, cut, &writes, &inserts);
        check(&buf)?;
    }

    #[test]
    fn visit_agrees_with_next_packet_on_random_bytes(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&buf)?;
    }
}

/// Every tail of the every-kind stream (each packet cut at each length, as
/// the last bytes of the buffer, where the fast path gives way to the full
/// decoder).
#[test]
fn visit_agrees_on_every_cut_of_every_kind() {
    let (bytes, _) = common::every_kind();
    for cut in 0..=bytes.len() {
        check(&bytes[..cut]).unwrap();
        check(&bytes[cut..]).unwrap();
    }
}

/// The damaged streams do reach errors and PEBS blocks, so that the
/// property above checks them.
#[test]
fn damaged_streams_have_errors_and_blocks() {
    let (mut errors, mut bips) = (0, 0);
    for seed in 0..200u64 {
        let buf = damaged(seed, true, 2000, Some(seed as usize * 7919), &[(seed as usize * 104_729, seed as u8)], &[]);
        for e in by_next_packet(&buf) {
            match e {
                Event::Error(_) => errors += 1,
                Event::Packet(_, Packet::Bip { .. }) => bips += 1,
                _ => {}
            }
        }
    }
    assert!(errors > 50 && bips > 500, "{errors} errors, {bips} BIPs");
}
