//! Intel Processor Trace decoding: the packets, and the instruction flow
//! they describe over code that changes while it runs.
//!
//! - **Packets** (the layer below flow): every packet of the Intel SDM's
//!   Intel PT chapter (Vol. 3C), from PAD to the event trace (CFE/EVD) and
//!   PEBS-via-PT (BBP/BIP/BEP) packets. [`PacketDecoder`] walks a `&[u8]`
//!   without allocating, keeping the two pieces of state the encodings
//!   depend on (the last IP, an open PEBS block); each call returns the
//!   next [`Packet`] with its offset, or a [`PacketError`] naming the offset
//!   and what is wrong, after which [`PacketDecoder::sync_forward`] moves to
//!   the next PSB ([`find_psb`] is the same search on its own).
//!   [`PacketDecoder::visit`] calls a [`PacketVisitor`] from inside each
//!   packet's branch instead, the faster way to scan a whole buffer.
//!   [`encode()`] and [`Encoder`] are the mirror image, for tests and the
//!   simulator: `decode(encode(p)) == p`.
//! - **Instruction flow** ([`flow`]): [`flow::FlowDecoder`] rebuilds every
//!   executed instruction from the packets and a [`flow::CodeSource`], the
//!   code asked for the interval of time the timing packets (TSC, MTC, CYC)
//!   give; where the code changed within it, the candidate contents are
//!   tried against the packets that follow. Events go to a
//!   [`flow::FlowSink`]. The code-window API and its three image modes over
//!   a `codeimage` timeline are `codeimage::window`'s, shared with the ETMv4
//!   decoder.
//! - **Block cache**: runs of instructions that need no packet are decoded
//!   once and kept with the window of time their bytes hold for, and used
//!   only where stepping would give the same events; decoders on several
//!   threads can share one table ([`flow::SharedBlocks`]).
//! - **Parallel decoding** ([`parallel`]): a buffer cut at its PSBs, the
//!   segments decoded on rayon's pool with the events handed out in trace
//!   order ([`parallel::ParallelFlow`]), or several segments walked at once
//!   on one thread ([`flow::FlowDecoder::run_interleaved`]).
//!
//! ```
//! use intel_pt::{Encoder, Packet, PacketDecoder, Tnt};
//! let mut enc = Encoder::new();
//! let mut trace = Vec::new();
//! for p in [Packet::Psb, Packet::PsbEnd, Packet::TntShort(Tnt { bits: 0b101, count: 3 })] {
//!     enc.encode(&p, &mut trace)?;
//! }
//! let mut dec = PacketDecoder::new(&trace);
//! let mut n = 0;
//! while let Some((_offset, _packet)) = dec.next_packet().expect("valid") {
//!     n += 1;
//! }
//! assert_eq!(n, 3);
//! # Ok::<(), intel_pt::EncodeError>(())
//! ```

mod blocks;
mod decode;
mod encode;
pub mod flow;
mod packet;
pub mod parallel;

/// The packet scans the `packets` bench times on their own (the flow walk
/// uses them inside): with the `bench-internals` feature only.
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use decode::scan as __scan;
pub use decode::visit::PacketVisitor;
pub use decode::{find_psb, PacketDecoder, PacketError, PacketErrorKind, Resync};
pub use encode::{encode, EncodeError, Encoder};
pub use packet::{compress_ip, Ip, IpCompression, Packet, PacketKind, PayloadSize, Tnt};

/// The 16 bytes of a PSB packet: `02 82` eight times.
pub const PSB: [u8; 16] = [0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82];
