//! Decodes an OpenCSD snapshot's first trace buffer into generic trace
//! elements and prints them in `trc_pkt_lister -decode`'s layout (packet
//! lines and element lines interleaved), only the element lines
//! (`--elements`), or only counts them (`--count`); for diffs and timing
//! against OpenCSD (scripts/bench-etm-decode.sh).
//!
//!     cargo run --release -p etm --example etm_decode -- SNAPSHOT [--elements] [--count]

use codeimage::window::Static;
use std::io::Write;

use etm::flow::{self, FlowDecoder, Item};
use etm::opencsd::{write_element, Listing, OpenCsdPrinter};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: etm_decode SNAPSHOT [--elements] [--count]")?;
    let rest: Vec<String> = args.collect();
    let elements_only = rest.iter().any(|a| a == "--elements");
    let count_only = rest.iter().any(|a| a == "--count");

    let snap = Snapshot::load(&dir)?;
    let buffer = snap.buffers.first().ok_or("the snapshot has no trace buffer")?;
    let setup = snap.buffer_setup(&buffer.name)?;
    let data = snap.read_buffer(&setup.buffer)?;
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    let (code, notes) = snap.code_image();
    for n in notes {
        eprintln!("etm_decode: {n}");
    }
    let mut reader = PacketReader::with_container(&data, setup.container, setup.framing, &configs, ErrorRecovery::Continue);
    let mut decoder = FlowDecoder::for_buffer(Static(&code), setup.framing, &configs);
    let mut printer = OpenCsdPrinter::new(Listing::Decode);
    let mut text = Vec::with_capacity(1 << 17);
    let mut out = std::io::stdout().lock();
    let (mut packets, mut elements, mut instructions) = (0u64, 0u64, 0u64);
    let mut io_err = None;
    flow::run(&mut reader, &mut decoder, |item| {
        match item {
            Item::Packet(_) => packets += 1,
            Item::Element(e) => {
                elements += 1;
                if let etm::flow::ElemKind::Error(err) = e.kind {
                    eprintln!("etm_decode: trace ID {:#x}, index {}: {err}", e.trace_id, e.index);
                }
                if let etm::flow::ElemKind::InstrRange(r) = e.kind {
                    instructions += r.num_i as u64;
                }
                if elements_only && !count_only {
                    write_element(&mut text, e);
                }
            }
            Item::Frame(e) => eprintln!("etm_decode: {e}"),
            Item::End(_) => {}
        }
        if !count_only && !elements_only {
            printer.write_item(&mut text, &item);
        }
        if text.len() >= 1 << 16 {
            if let Err(e) = out.write_all(&text) {
                io_err.get_or_insert(e);
            }
            text.clear();
        }
    });
    if let Some(e) = io_err {
        return Err(e.into());
    }
    out.write_all(&text)?;
    if count_only {
        writeln!(out, "{packets} packets {elements} elements {instructions} instructions")?;
    }
    Ok(())
}
