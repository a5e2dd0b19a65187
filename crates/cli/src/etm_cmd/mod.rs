//! `poketrace etm`: an OpenCSD snapshot's ETMv4 trace, packet by packet
//! (`--packets`) or decoded into trace elements (instruction ranges,
//! exceptions, contexts, ...), the code read from the snapshot's memory dumps.

mod lines;

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::ValueEnum;
use codeimage::window::Static;
use etm::flow::{self, ElemKind, Element, FlowDecoder, Item};
use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader, TracePacket};

use crate::text::Text;

/// How `etm` writes what it decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EtmFormat {
    /// trc_pkt_lister's layout, line for line.
    Opencsd,
    /// One readable line per packet or element.
    Text,
    /// One JSON object per packet or element.
    Json,
}

/// Bytes of output kept before they are written out.
const FLUSH: usize = 1 << 16;

pub fn run(dir: &Path, packets: bool, format: EtmFormat, out: &mut impl Write) -> Result<i32> {
    let snap = Snapshot::load(dir).with_context(|| format!("loading the snapshot {}", dir.display()))?;
    // trc_pkt_lister decodes the first buffer.
    let buffer = snap.buffers.first().context("the snapshot names no trace buffer")?;
    let setup = snap.buffer_setup(&buffer.name)?;
    for u in &setup.unsupported {
        eprintln!("poketrace etm: source {u:?} is not ETMv4: its bytes are skipped");
    }
    // Like trc_pkt_lister: skip what cannot be read, decode the rest, and say so.
    for d in &snap.skipped_devices {
        eprintln!("poketrace etm: {d}");
    }
    for m in &setup.missing {
        eprintln!("poketrace etm: trace source {m} has no device file: its bytes are skipped");
    }
    let data = snap.read_buffer(&setup.buffer)?;
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    // OpenCSD keeps going byte by byte after a fault: the same here for a diffable listing.
    let recovery = if format == EtmFormat::Opencsd { ErrorRecovery::Continue } else { ErrorRecovery::Resync };
    let mut reader = PacketReader::with_container(&data, setup.container, setup.framing, &configs, recovery);
    let mut printer = OpenCsdPrinter::new(Listing::Decode);
    let mut text = Text::with_capacity(2 * FLUSH);
    let mut faults = snap.skipped_devices.len() + setup.missing.len();
    if packets {
        while let Some(item) = reader.next() {
            match item {
                Ok(p) => write_packet(&mut text, &mut printer, format, &p),
                Err(e) => {
                    faults += 1;
                    eprintln!("poketrace etm: {e}");
                }
            }
            if text.as_bytes().len() >= FLUSH {
                out.write_all(text.as_bytes())?;
                text.clear();
            }
        }
        out.write_all(text.as_bytes())?;
        return Ok(if faults > 0 { 1 } else { 0 });
    }

    // Missing or short memory dumps: the code image is incomplete.
    let (code, notes) = snap.code_image();
    faults += notes.len();
    for n in notes {
        eprintln!("poketrace etm: {n}");
    }
    let mut decoder = FlowDecoder::for_buffer(Static(&code), setup.framing, &configs);
    let mut result = Ok(());
    flow::run(&mut reader, &mut decoder, |item| {
        if result.is_err() {
            return;
        }
        match item {
            Item::Frame(e) => {
                faults += 1;
                eprintln!("poketrace etm: {e}");
            }
            Item::Element(Element { kind: ElemKind::Error(e), index, trace_id }) => {
                faults += 1;
                eprintln!("poketrace etm: trace ID {trace_id:#04x}, trace index {index:#x}: {e}");
            }
            _ => {}
        }
        match (format, item) {
            (EtmFormat::Opencsd, item) => printer.write_item(text.bytes_mut(), &item),
            (EtmFormat::Text, Item::Element(e)) => lines::text_element(&mut text, e),
            (EtmFormat::Json, Item::Element(e)) => lines::json_element(&mut text, e),
            _ => {}
        }
        if text.as_bytes().len() >= FLUSH {
            result = out.write_all(text.as_bytes());
            text.clear();
        }
    });
    result?;
    out.write_all(text.as_bytes())?;
    Ok(if faults > 0 { 1 } else { 0 })
}

fn write_packet(text: &mut Text, printer: &mut OpenCsdPrinter, format: EtmFormat, p: &TracePacket<'_>) {
    match format {
        EtmFormat::Opencsd => printer.write_packet(text.bytes_mut(), p),
        EtmFormat::Text => lines::text_packet(text, p),
        EtmFormat::Json => lines::json_packet(text, p),
    }
}
