//! `poketrace etm`: an OpenCSD snapshot's ETMv4 trace, packet by packet.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader};
use serde_json::json;

use crate::hex::{plain, spaced};

pub fn run(dir: &Path, packets: bool, format: &str, out: &mut impl Write) -> Result<i32> {
    if !packets {
        bail!("decoded elements (INSTR_RANGE, EXCEPTION, ...) come with the ETMv4 flow decoder, not written yet; use --packets");
    }
    let snap = Snapshot::load(dir).with_context(|| format!("loading the snapshot {}", dir.display()))?;
    // trc_pkt_lister decodes the first buffer.
    let buffer = snap.buffers.first().context("the snapshot names no trace buffer")?;
    let setup = snap.buffer_setup(&buffer.name)?;
    for u in &setup.unsupported {
        eprintln!("poketrace etm: source {u:?} is not ETMv4: its bytes are skipped");
    }
    let data = snap.read_buffer(&setup.buffer)?;
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    // OpenCSD keeps going byte by byte after a fault: the same here for a diffable listing.
    let recovery = if format == "opencsd" { ErrorRecovery::Continue } else { ErrorRecovery::Resync };
    let mut reader = PacketReader::with_container(&data, setup.container, setup.framing, &configs, recovery);
    let mut printer = OpenCsdPrinter::new(Listing::Decode);
    let mut text = Vec::with_capacity(1 << 16);
    let mut faults = 0;
    while let Some(item) = reader.next() {
        match item {
            Ok(p) => match format {
                "opencsd" => printer.write_packet(&mut text, &p),
                "text" => {
                    let t = p.packet.packet_type();
                    writeln!(text, "{:>8} {:>3x} {:<30} {:<18} {:?}", p.index, p.trace_id, spaced(p.raw), t.name(), p.packet)?
                }
                "json" => {
                    let v = json!({
                        "idx": p.index,
                        "id": p.trace_id,
                        "bytes": plain(p.raw),
                        "packet": p.packet.packet_type().name(),
                        "fields": format!("{:?}", p.packet),
                    });
                    serde_json::to_writer(&mut text, &v)?;
                    text.push(b'\n');
                }
                other => bail!("--format {other}: opencsd, text or json"),
            },
            Err(e) => {
                faults += 1;
                eprintln!("poketrace etm: {e}");
            }
        }
        if text.len() >= 1 << 16 {
            out.write_all(&text)?;
            text.clear();
        }
    }
    out.write_all(&text)?;
    Ok(if faults > 0 { 1 } else { 0 })
}
