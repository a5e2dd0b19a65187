//! Decodes arbitrary bytes as Intel PT, resyncing at the next PSB after each
//! error, as a trace reader would. Any panic, endless loop, error whose
//! offset is not where the decoder stands, resync that does not move
//! forward, or decoded packet that does not encode back to itself is a bug.
//! Then decodes them again with `PacketDecoder::visit`, to the end and
//! stopping at some packets: anything other than what `next_packet` gave,
//! in the same order, is a bug too.
#![no_main]

use std::ops::ControlFlow;

use intel_pt::{encode, Packet, PacketDecoder, PacketError, PacketVisitor, Resync};
use libfuzzer_sys::fuzz_target;

/// What a decode yields, in order.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Packet(usize, Packet),
    Error(PacketError),
    Resync(Resync),
}

/// Records each packet; stops after those whose offset is a multiple of
/// `stop_at` (0: never).
struct Record {
    events: Vec<Event>,
    stop_at: usize,
}

impl PacketVisitor for Record {
    fn packet(&mut self, offset: usize, packet: Packet) -> ControlFlow<()> {
        self.events.push(Event::Packet(offset, packet));
        if self.stop_at != 0 && offset % self.stop_at == 0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// `visit` to the end of `data`, resyncing after each error and going on
/// after each stop.
fn visited(data: &[u8], stop_at: usize) -> Vec<Event> {
    let mut dec = PacketDecoder::new(data);
    let mut v = Record { events: Vec::new(), stop_at };
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls <= 2 * data.len() + 2, "no progress at {}", dec.offset());
        match dec.visit(&mut v) {
            Ok(ControlFlow::Continue(())) => return v.events,
            Ok(ControlFlow::Break(())) => {}
            Err(e) => {
                assert_eq!(e.offset, dec.offset());
                v.events.push(Event::Error(e));
                v.events.push(Event::Resync(dec.sync_forward()));
            }
        }
    }
}

/// The packet as a fresh decoder would see it (IPs rebuilt from last IP 0).
fn fresh(p: Packet) -> Packet {
    let from_zero = |mut ip: intel_pt::Ip| {
        ip.ip = ip.compression.apply(ip.payload, 0);
        ip
    };
    match p {
        Packet::Tip(ip) => Packet::Tip(from_zero(ip)),
        Packet::TipPge(ip) => Packet::TipPge(from_zero(ip)),
        Packet::TipPgd(ip) => Packet::TipPgd(from_zero(ip)),
        Packet::Fup(ip) => Packet::Fup(from_zero(ip)),
        p => p,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut dec = PacketDecoder::new(data);
    let mut steps = 0;
    let mut bytes = Vec::new();
    let mut events = Vec::new();
    loop {
        steps += 1;
        assert!(steps <= data.len() + 2, "no progress at {}", dec.offset());
        match dec.next_packet() {
            Ok(Some((offset, p))) => {
                events.push(Event::Packet(offset, p));
                let used = dec.offset() - offset;
                bytes.clear();
                let n = encode(&p, &mut bytes).expect("a decoded packet encodes");
                // A CYC may have been written longer than it needs; nothing else may.
                assert!(n == used || (matches!(p, Packet::Cyc(_)) && n < used), "{p:?}: {n} bytes, {used} read");
                let again = match p {
                    // A BIP needs its block around it.
                    Packet::Bip { .. } => p,
                    _ => PacketDecoder::new(&bytes).next_packet().expect("decodes").expect("a packet").1,
                };
                assert_eq!(again, fresh(p));
            }
            Ok(None) => break,
            Err(e) => {
                assert_eq!(e.offset, dec.offset());
                assert!(e.offset < data.len());
                let _ = e.to_string();
                let r = dec.sync_forward();
                assert!(r.start == e.offset && r.end > r.start && r.end <= data.len());
                events.push(Event::Error(e));
                events.push(Event::Resync(r));
            }
        }
    }
    assert_eq!(visited(data, 0), events, "visit to the end");
    // Stops at offsets the input picks (its first byte), every one to one
    // in 256.
    let stop_at = 1 + usize::from(data.first().copied().unwrap_or(0));
    assert_eq!(visited(data, stop_at), events, "visit stopping at multiples of {stop_at}");
});
