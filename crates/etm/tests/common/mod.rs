//! Shared by the integration tests: where the OpenCSD snapshots are, a
//! deterministic RNG, and decoding a buffer into a list.

#![allow(dead_code)]

pub mod lister;
pub mod packets;
pub mod program;
pub mod synth;

use std::path::{Path, PathBuf};

use etm::snapshot::Snapshot;
use etm::{Container, ErrorRecovery, EtmV4Config, FrameError, Framing, Packet, PacketReader};

/// The real ETMv4 snapshots (../shared/opencsd-snapshots, or POKETRACE_OPENCSD_SNAPSHOTS).
pub fn snapshots_dir() -> PathBuf {
    match std::env::var_os("POKETRACE_OPENCSD_SNAPSHOTS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/opencsd-snapshots"),
    }
}

pub const SNAPSHOTS: [&str; 6] = ["juno_r1_1", "juno-uname-001", "bugfix-exact-match", "a57_single_step", "init-short-addr", "a55-test-tpiu"];

/// Whether missing oracles and data must fail the test rather than skip it.
pub use testkit::required;

/// The snapshot directory, or None (with a note) when it is absent and not required.
pub fn snapshot(name: &str) -> Option<PathBuf> {
    let d = snapshots_dir().join(name);
    if d.join("snapshot.ini").is_file() {
        return Some(d);
    }
    assert!(!required(), "snapshot {} is missing", d.display());
    eprintln!("skipping: no snapshot at {}", d.display());
    None
}

/// A buffer's bytes and what decoding it needs.
pub struct Buffer {
    pub data: Vec<u8>,
    pub framing: Framing,
    pub container: Container,
    pub configs: Vec<EtmV4Config>,
}

pub fn first_buffer(dir: &Path) -> Buffer {
    let snap = Snapshot::load(dir).unwrap();
    let setup = snap.buffer_setup(&snap.buffers[0].name).unwrap();
    Buffer {
        data: snap.read_buffer(&setup.buffer).unwrap(),
        framing: setup.framing,
        container: setup.container,
        configs: setup.sources.iter().map(|s| s.1).collect(),
    }
}

/// One item of a decoded buffer, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Packet { id: u8, index: u64, packet: Packet, raw: Vec<u8> },
    Frame(FrameError),
}

pub fn decode_all(data: &[u8], container: Container, framing: Framing, configs: &[EtmV4Config], recovery: ErrorRecovery) -> Vec<Item> {
    let mut r = PacketReader::with_container(data, container, framing, configs, recovery);
    let mut out = Vec::new();
    while let Some(item) = r.next() {
        out.push(match item {
            Ok(p) => Item::Packet { id: p.trace_id, index: p.index, packet: p.packet, raw: p.raw.to_vec() },
            Err(e) => Item::Frame(e),
        });
    }
    out
}

/// xorshift64*: small, deterministic, good enough to pick test cases.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
