//! Arm CoreSight ETMv4 instruction trace: input, packets and instruction flow.
//!
//! - [`snapshot`]: OpenCSD trace snapshots (devices, registers, memory
//!   dumps and the code image they make, trace buffers and which source
//!   writes where).
//! - [`frame`]: CoreSight formatter frames: splitting a buffer shared by
//!   several sources per trace ID (memory-aligned frames, TPIU/DSTREAM port
//!   captures with FSYNC/HSYNC), and writing such buffers.
//! - [`decode`] / [`encode`]: ETMv4 instruction-trace packets, every packet
//!   of the architecture, both ways.
//! - [`stream`]: a whole buffer's packets in buffer order, every source
//!   interleaved as OpenCSD interleaves them.
//! - [`flow`]: the instruction flow decoder: per source, a state machine
//!   over the packets that follows atoms through the code (AArch64) and
//!   produces generic trace elements equivalent to OpenCSD's (TRACE_ON,
//!   PE_CONTEXT, INSTR_RANGE, EXCEPTION, ...), speculation resolved, code
//!   read through a [`codeimage::window::CodeSource`] at the trace's latest timestamp,
//!   or over the window up to the next one, the trace deciding among the
//!   contents code had inside it.
//! - [`opencsd`]: packet and element lines in `trc_pkt_lister`'s layout, to
//!   diff against it.
//!
//! Decoding borrows the trace and never allocates per packet. Bad trace is
//! never an `Err` that stops decoding: a fault becomes an error packet (or a
//! [`FrameError`]) at its byte offset, and decoding resynchronises at the
//! next A-sync ([`ErrorRecovery::Continue`] instead carries on byte by byte,
//! as OpenCSD does, for listings that diff against `trc_pkt_lister`). The
//! flow decoder turns faults into error elements and waits for the next
//! A-sync.
//!
//! Each [`TracePacket`] is one source's packet, in buffer order, with
//! compressed fields already expanded as the architecture defines them (full
//! addresses from the address history and exact-match stack, full
//! timestamps, cycle counts with the TRACE_INFO threshold added).
//!
//! ```no_run
//! use etm::{snapshot::Snapshot, stream::PacketReader, ErrorRecovery};
//! let snap = Snapshot::load("juno_r1_1")?;
//! let setup = snap.buffer_setup(&snap.buffers[0].name)?;
//! let data = snap.read_buffer(&setup.buffer)?;
//! let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
//! let mut reader = PacketReader::new(&data, setup.framing, &configs, ErrorRecovery::Resync);
//! while let Some(item) = reader.next() {
//!     match item {
//!         Ok(p) => println!("{:#x} {:x} {:?}", p.index, p.trace_id, p.packet),
//!         Err(e) => eprintln!("{e}"),
//!     }
//! }
//! # Ok::<(), etm::Error>(())
//! ```
//!
//! Decoding the same buffer into elements, with the snapshot's memory dumps as the code:
//!
//! ```no_run
//! use codeimage::window::Static;
//! use etm::flow::{self, FlowDecoder, Item};
//! use etm::{snapshot::Snapshot, PacketReader, ErrorRecovery};
//! let snap = Snapshot::load("juno_r1_1")?;
//! let setup = snap.buffer_setup(&snap.buffers[0].name)?;
//! let data = snap.read_buffer(&setup.buffer)?;
//! let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
//! let (code, _notes) = snap.code_image();
//! let mut reader = PacketReader::new(&data, setup.framing, &configs, ErrorRecovery::Continue);
//! // A snapshot's code never changes: the image before any change is all of it.
//! let mut decoder = FlowDecoder::for_buffer(Static(&code), setup.framing, &configs);
//! flow::run(&mut reader, &mut decoder, |item| {
//!     if let Item::Element(e) = item {
//!         println!("{:#x} {:x} {:?}", e.index, e.trace_id, e.kind);
//!     }
//! });
//! # Ok::<(), etm::Error>(())
//! ```

pub mod config;
pub mod decode;
pub mod encode;
mod error;
pub mod flow;
pub mod frame;
pub mod opencsd;
pub mod packet;
pub mod snapshot;
pub mod stream;

pub use config::{EtmV4Config, Profile};
pub use decode::{ErrorRecovery, PacketDecoder};
pub use encode::{EncodeError, Encoder};
pub use error::{Error, Result};
pub use frame::{Container, FrameError, FrameErrorKind, FrameWriter, Framing};
pub use packet::{Packet, PacketType};
pub use stream::{Input, PacketReader, PacketStream};

/// A decoded packet of one trace source, where it was, and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracePacket<'a> {
    pub trace_id: u8,
    /// Trace index of the packet's first byte: its offset in the buffer for
    /// unframed data; for frames, OpenCSD's index (the start of the run of
    /// this ID's bytes in the frame, plus the bytes of the run before it).
    pub index: u64,
    pub packet: Packet,
    /// The packet's bytes (for frames: with their bit 0 restored, IDs removed).
    pub raw: &'a [u8],
}

impl TracePacket<'_> {
    /// The fault this packet reports, if it is an error packet.
    pub fn error(&self) -> Option<PacketError> {
        self.packet.is_error().then_some(PacketError { trace_id: self.trace_id, index: self.index, packet: self.packet })
    }
}

/// Bad trace found by the packet decoder: where, and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("trace ID {trace_id:#04x}, trace index {index:#x}: {}", describe(packet))]
pub struct PacketError {
    pub trace_id: u8,
    pub index: u64,
    pub packet: Packet,
}

fn describe(p: &Packet) -> String {
    match *p {
        Packet::Reserved { header } => format!("reserved packet header {header:#04x}"),
        Packet::ReservedConfig { header, would_be } => {
            format!("header {header:#04x} ({}) is not produced by this source's configuration", would_be.name())
        }
        Packet::BadSequence { during } => {
            format!("invalid byte sequence in a {} packet", during.name())
        }
        Packet::IncompleteEot { during } => format!("trace ends inside a {} packet", during.name()),
        other => format!("{other:?}"),
    }
}
