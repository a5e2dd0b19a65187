//! Lists the ETMv4 packets of an OpenCSD snapshot's first trace buffer in
//! `trc_pkt_lister`'s layout (as `poketrace etm SNAP --packets --format
//! opencsd` will), or only counts them; for diffs and timing against
//! OpenCSD (scripts/bench-etm-packets.sh).
//!
//!     cargo run --release -p etm --example etm_packets -- SNAPSHOT [--packets-only] [--count]

use std::io::Write;

use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: etm_packets SNAPSHOT [--packets-only] [--count]")?;
    let rest: Vec<String> = args.collect();
    let listing = if rest.iter().any(|a| a == "--packets-only") { Listing::PacketsOnly } else { Listing::Decode };
    let count_only = rest.iter().any(|a| a == "--count");

    let snap = Snapshot::load(&dir)?;
    let buffer = snap.buffers.first().ok_or("the snapshot has no trace buffer")?;
    let setup = snap.buffer_setup(&buffer.name)?;
    let data = snap.read_buffer(&setup.buffer)?;
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    let container = if rest.iter().any(|a| a == "--no-dstream-blocks") { etm::Container::Plain } else { setup.container };
    let mut reader = PacketReader::with_container(&data, container, setup.framing, &configs, ErrorRecovery::Continue);

    let (mut packets, mut errors) = (0u64, 0u64);
    let mut printer = OpenCsdPrinter::new(listing);
    let mut text = Vec::with_capacity(1 << 16);
    let mut out = std::io::stdout().lock();
    while let Some(item) = reader.next() {
        match item {
            Ok(p) => {
                packets += 1;
                if !count_only {
                    printer.write_packet(&mut text, &p);
                }
            }
            Err(e) => {
                errors += 1;
                if !count_only {
                    writeln!(text, "Frame error: {e}")?;
                }
            }
        }
        if text.len() >= 1 << 16 {
            out.write_all(&text)?;
            text.clear();
        }
    }
    out.write_all(&text)?;
    out.flush()?;
    if count_only {
        println!("{packets} packets, {errors} frame errors, {} bytes", data.len());
    }
    Ok(())
}
