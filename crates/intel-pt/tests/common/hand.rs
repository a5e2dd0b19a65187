//! Shared by the flow tests on hand-made packet streams (flow_psb,
//! flow_semantics, flow_timing, flow_bad_input): tiny code images at a
//! kernel address, the decoder configuration, and a packet writer.
//!
//! Included with `#[path]`; each test adds its own `impl Trace` methods.
#![allow(dead_code)] // each test uses its own part

use codeimage::{BaseImage, CodeTimeline, Poke, TimelineBuilder};
use intel_pt::flow::{FlowConfig, Time, TimeConv};
use intel_pt::{Encoder, Packet};

/// Where the code images live: a kernel address, so that IPs take the
/// sign-extended and 16-bit compressions.
pub const K: u64 = 0xffff_ffff_8100_0000;

/// Code at `K + offset` for each piece, with pokes `(time, offset, old, new)`.
pub fn timeline(pieces: &[(u64, &[u8])], pokes: &[(Time, u64, &[u8], &[u8])]) -> CodeTimeline {
    let mut base = BaseImage::new();
    for &(off, bytes) in pieces {
        base.add_bytes(K + off, bytes.to_vec(), format!("code+{off:#x}"));
    }
    let mut b = TimelineBuilder::new(base);
    for &(time, off, old, new) in pokes {
        b.poke(Poke { time, settled: None, addr: K + off, old, new, cpu: None });
    }
    b.build()
}

/// Times equal to TSC, default kernel idioms, walks of at most 1000
/// instructions between packets.
pub fn config(noretcomp: bool, trial_insns: u64) -> FlowConfig {
    FlowConfig { time: TimeConv { shift: 0, mult: 1, zero: 0 }, noretcomp, idioms: isa::KernelIdioms::default(), max_walk: 1000, trial_insns }
}

/// A packet stream written through the encoder, IPs compressed as they go.
pub struct Trace {
    pub enc: Encoder,
    pub out: Vec<u8>,
}

impl Trace {
    pub fn new() -> Trace {
        Trace { enc: Encoder::new(), out: Vec::new() }
    }
    pub fn put(&mut self, p: Packet) -> &mut Trace {
        self.enc.encode(&p, &mut self.out).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        self
    }
}
