//! Hand-written packet sequences for the flow decoder's rule tests: the
//! packet builders they share, and decoding a list of packets of one source.

use codeimage::window::CodeSource;
use etm::flow::{Element, FlowDecoder};
use etm::packet::{AddrForm, Address, Atoms, Packet, Timestamp};
use etm::TracePacket;

/// The trace ID every hand-written sequence uses.
pub const TRACE_ID: u8 = 0x10;

/// A full 64-bit A64 address.
pub fn long_addr(value: u64) -> Address {
    Address { value, is: 0, form: AddrForm::Long64, update_bits: 64, valid_bits: 64, is64: true }
}

/// An atom packet from a pattern such as "EEN" (E: taken, N: not), oldest first.
pub fn atoms(pattern: &str) -> Packet {
    let bits = pattern.bytes().enumerate().fold(0, |b, (i, c)| b | ((c == b'E') as u32) << i);
    Packet::Atom { format: 6, atoms: Atoms::new(bits, pattern.len() as u8) }
}

/// A timestamp with every bit given.
pub fn ts(value: u64) -> Packet {
    Packet::Timestamp(Timestamp { value, updated_bits: 64, cycle_count: None })
}

/// Feeds `packets` to `d` as source [`TRACE_ID`]'s trace (a packet's index
/// is its position) and ends it: every element, the end of trace included.
pub fn decode_all<C: CodeSource>(d: &mut FlowDecoder<C>, packets: &[Packet]) -> Vec<Element> {
    let mut out = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        d.packet(&TracePacket { trace_id: TRACE_ID, index: i as u64, packet: *p, raw: &[] }, &mut out);
    }
    d.finish(TRACE_ID, &mut out);
    out
}
