//! Intel Processor Trace packets: decode and encode every packet of the
//! Intel SDM's Intel PT chapter (Vol. 3C, "Intel Processor Trace"), from PAD
//! to the event trace (CFE/EVD) and PEBS-via-PT (BBP/BIP/BEP) packets.
//!
//! This is the layer below instruction flow: it knows packet encodings and
//! the two pieces of state that the encodings themselves depend on, the last
//! IP (compressed IPs build on it; a PSB resets it) and an open PEBS block
//! (inside one, a byte that would be a short TNT is a BIP).
//!
//! - [`PacketDecoder`] walks a `&[u8]` without allocating: each call returns
//!   the next [`Packet`] (a plain `Copy` value) with its offset, or a
//!   [`PacketError`] naming the offset and what is wrong. After an error,
//!   [`PacketDecoder::sync_forward`] moves to the next PSB and reports the
//!   bytes skipped; [`find_psb`] is the same vectorised search on its own,
//!   for cutting a buffer into segments to decode in parallel.
//! - [`PacketDecoder::visit`] decodes the same packets in one loop, calling a
//!   [`PacketVisitor`]'s method for each from inside the packet's own branch:
//!   the faster way to scan a whole buffer, as no `Packet` is returned and
//!   matched again.
//! - [`encode`] and [`Encoder`] are the mirror image, for tests and the
//!   simulator: `decode(encode(p)) == p`, with [`compress_ip`] choosing the
//!   shortest IP compression after the last IP.
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
pub mod sources;

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
