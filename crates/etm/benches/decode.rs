//! Full ETMv4 decode of bugfix-exact-match (1 MiB of frames, 6 sources,
//! 1,740,344 instruction ranges, ~7.6M instructions): deformatting, packets
//! and the flow decoder walking the snapshot's code, counting elements; and
//! the same printing every packet and element line as `trc_pkt_lister
//! -decode` does. Needs the snapshot (POKETRACE_OPENCSD_SNAPSHOTS or
//! ../shared/opencsd-snapshots): a decode without its code would measure
//! nothing.
//!
//!     cargo bench -p etm --bench decode
//!
//! scripts/bench-etm-decode.sh times the same against `trc_pkt_lister -decode_only`.

use std::sync::OnceLock;

use codeimage::window::Static;
use codeimage::CodeTimeline;
use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use etm::flow::{self, ElemKind, FlowDecoder, Item};
use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader};

#[path = "../tests/common/mod.rs"]
mod common;

struct Input {
    buffer: common::Buffer,
    code: CodeTimeline,
    instructions: u64,
}

fn main() {
    let i = input();
    eprintln!("bugfix-exact-match: {} bytes, {} sources, {} instructions", i.buffer.data.len(), i.buffer.configs.len(), i.instructions);
    divan::main();
}

fn input() -> &'static Input {
    static I: OnceLock<Input> = OnceLock::new();
    I.get_or_init(|| {
        let dir = common::snapshots_dir().join("bugfix-exact-match");
        let snap = Snapshot::load(&dir).expect("the bugfix-exact-match snapshot (POKETRACE_OPENCSD_SNAPSHOTS)");
        let (code, _) = snap.code_image();
        let buffer = common::first_buffer(&dir);
        let mut i = Input { buffer, code, instructions: 0 };
        i.instructions = decode(&i).1;
        i
    })
}

/// (elements, instructions).
fn decode(i: &Input) -> (u64, u64) {
    let b = &i.buffer;
    let mut r = PacketReader::with_container(&b.data, b.container, b.framing, &b.configs, ErrorRecovery::Continue);
    let mut d = FlowDecoder::for_buffer(Static(&i.code), b.framing, &b.configs);
    let (mut elems, mut insns) = (0u64, 0u64);
    flow::run(&mut r, &mut d, |item| {
        if let Item::Element(e) = item {
            elems += 1;
            if let ElemKind::InstrRange(r) = e.kind {
                insns += r.num_i as u64;
            }
        }
    });
    (elems, insns)
}

#[divan::bench]
fn decode_elements(bencher: Bencher) {
    let i = input();
    bencher.counter(BytesCount::new(i.buffer.data.len())).counter(ItemsCount::new(i.instructions)).bench(|| black_box(decode(i)));
}

#[divan::bench]
fn decode_and_list(bencher: Bencher) {
    let i = input();
    let b = &i.buffer;
    let mut text = Vec::with_capacity(200 << 20);
    bencher.counter(BytesCount::new(b.data.len())).counter(ItemsCount::new(i.instructions)).bench_local(|| {
        text.clear();
        let mut r = PacketReader::with_container(&b.data, b.container, b.framing, &b.configs, ErrorRecovery::Continue);
        let mut d = FlowDecoder::for_buffer(Static(&i.code), b.framing, &b.configs);
        let mut printer = OpenCsdPrinter::new(Listing::Decode);
        flow::run(&mut r, &mut d, |item| printer.write_item(&mut text, &item));
        black_box(text.len())
    });
}
