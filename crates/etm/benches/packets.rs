//! Deformatting plus packet decoding of bugfix-exact-match's trace buffer
//! (1 MiB of frames, 6 ETMv4 sources, 687,775 packets), and the same with
//! every packet formatted as a `trc_pkt_lister` line. Without the snapshot
//! (POKETRACE_OPENCSD_SNAPSHOTS or ../shared/opencsd-snapshots), a synthetic
//! 1 MiB buffer of six sources stands in.
//!
//!     cargo bench -p etm --bench packets
//!
//! scripts/bench-etm-packets.sh times the same against `trc_pkt_lister`.

use std::sync::OnceLock;

use divan::counter::BytesCount;
use divan::{black_box, Bencher};
use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::{ErrorRecovery, PacketReader};

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let (b, what) = buffer();
    eprintln!("{what}: {} bytes, {} sources", b.data.len(), b.configs.len());
    divan::main();
}

fn buffer() -> &'static (common::Buffer, &'static str) {
    static B: OnceLock<(common::Buffer, &'static str)> = OnceLock::new();
    B.get_or_init(|| {
        let dir = common::snapshots_dir().join("bugfix-exact-match");
        if dir.join("snapshot.ini").is_file() {
            return (common::first_buffer(&dir), "bugfix-exact-match");
        }
        let mut rng = common::Rng(1);
        let configs: Vec<etm::EtmV4Config> = (0..6).map(|i| etm::EtmV4Config { traceidr: 0x10 + 2 * i, ..etm::EtmV4Config::default() }).collect();
        let traces: Vec<(u8, Vec<u8>)> = configs.iter().map(|c| (c.trace_id(), common::synth::trace(&mut rng, c, 40_000, false))).collect();
        let data = common::synth::frames(&mut rng, &traces, &mut etm::FrameWriter::new());
        let framing = etm::Framing::Aligned { reset_on_4x_fsync: false };
        (common::Buffer { data, framing, container: etm::Container::Plain, configs }, "synthetic (no snapshot found)")
    })
}

#[divan::bench]
fn deformat_and_decode(bencher: Bencher) {
    let (b, _) = buffer();
    bencher.counter(BytesCount::new(b.data.len())).bench(|| {
        let mut r = PacketReader::with_container(&b.data, b.container, b.framing, &b.configs, ErrorRecovery::Continue);
        let mut n = 0u64;
        while let Some(item) = r.next() {
            n += item.is_ok() as u64;
        }
        black_box(n)
    });
}

#[divan::bench]
fn decode_and_format_opencsd_lines(bencher: Bencher) {
    let (b, _) = buffer();
    bencher.counter(BytesCount::new(b.data.len())).bench(|| {
        let mut r = PacketReader::with_container(&b.data, b.container, b.framing, &b.configs, ErrorRecovery::Continue);
        let mut printer = OpenCsdPrinter::new(Listing::Decode);
        let mut line = Vec::with_capacity(256);
        let mut bytes = 0usize;
        while let Some(item) = r.next() {
            if let Ok(p) = item {
                line.clear();
                printer.write_packet(&mut line, &p);
                bytes += line.len();
            }
        }
        black_box(bytes)
    });
}
