//! CoreSight frames: every source's bytes come through the frame layer
//! intact (memory-aligned frames, port captures with FSYNC and HSYNC,
//! DSTREAM blocks), OpenCSD's trace indexes, resets, faults, and input
//! split into blocks of any size.

mod common;

use common::{synth, Item, Rng};
use etm::packet::{Atoms, Packet};
use etm::stream::Input;
use etm::{Container, ErrorRecovery, EtmV4Config, FrameErrorKind, FrameWriter, Framing, PacketStream};

const FSYNC: [u8; 4] = [0xFF, 0xFF, 0xFF, 0x7F];

fn config(id: u8) -> EtmV4Config {
    EtmV4Config { traceidr: id as u32, ..synth::configs()[0].1 }
}

/// Per source: its packets and raw bytes, in order.
fn by_source(items: &[Item], id: u8) -> Vec<(Packet, Vec<u8>)> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Packet { id: i, packet, raw, .. } if *i == id => Some((*packet, raw.clone())),
            _ => None,
        })
        .collect()
}

fn alone(trace: &[u8], c: &EtmV4Config) -> Vec<(Packet, Vec<u8>)> {
    let items = common::decode_all(trace, Container::Plain, Framing::Raw { trace_id: c.trace_id() }, &[*c], ErrorRecovery::Resync);
    by_source(&items, c.trace_id())
}

/// Inserts an HSYNC at some even positions inside frames (after the FSYNC-free start).
fn with_hsyncs(rng: &mut Rng, port: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < port.len() {
        if port[i..].starts_with(&FSYNC) {
            out.extend_from_slice(&FSYNC);
            i += 4;
            continue;
        }
        // Inside a frame: 16 bytes in pairs.
        for pair in port[i..(i + 16).min(port.len())].chunks(2) {
            if rng.chance(10) {
                out.extend_from_slice(&[0xFF, 0x7F]);
            }
            out.extend_from_slice(pair);
        }
        i += 16;
    }
    out
}

#[test]
fn every_source_comes_through_the_frame_layer_intact() {
    let mut rng = Rng(7);
    for round in 0..24 {
        let n = 1 + rng.below(4) as usize;
        let mut ids: Vec<u8> = Vec::new();
        while ids.len() < n {
            let id = 1 + rng.below(0x6E) as u8;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let configs: Vec<EtmV4Config> = ids.iter().map(|&id| config(id)).collect();
        let traces: Vec<(u8, Vec<u8>)> = configs.iter().map(|c| (c.trace_id(), synth::trace(&mut rng, c, 150, round % 2 == 1))).collect();
        let aligned = synth::frames(&mut rng, &traces, &mut FrameWriter::new());
        let mut port_writer = FrameWriter::with_fsync_every(1 + rng.below(5) as u32);
        let port = synth::frames(&mut rng, &traces, &mut port_writer);
        let cases = [
            ("aligned", Framing::Aligned { reset_on_4x_fsync: false }, Container::Plain, aligned.clone()),
            ("aligned, reset on 4 FSYNCs", Framing::Aligned { reset_on_4x_fsync: true }, Container::Plain, aligned),
            ("port", Framing::Synced { hsyncs: false }, Container::Plain, port.clone()),
            ("port with HSYNCs", Framing::Synced { hsyncs: true }, Container::Plain, with_hsyncs(&mut rng, &port)),
            ("DSTREAM", Framing::Synced { hsyncs: false }, Container::Dstream, synth::dstream_blocks(&port)),
        ];
        for (what, framing, container, buffer) in cases {
            let items = common::decode_all(&buffer, container, framing, &configs, ErrorRecovery::Resync);
            assert!(!items.iter().any(|i| matches!(i, Item::Frame(_))), "round {round} {what}: {items:?}");
            for (c, (_, t)) in configs.iter().zip(&traces) {
                assert_eq!(by_source(&items, c.trace_id()), alone(t, c), "round {round} {what}: source {:#x}", c.trace_id());
            }
        }
    }
}

/// Feeding a buffer in blocks of any size gives exactly what one block gives.
#[test]
fn input_blocks_of_any_size_give_the_same_packets() {
    let mut rng = Rng(11);
    let configs = [config(0x10), config(0x22)];
    let traces: Vec<(u8, Vec<u8>)> = configs.iter().map(|c| (c.trace_id(), synth::trace(&mut rng, c, 400, true))).collect();
    // Aligned frames with runs of 1 to 8 FSYNCs between some of them (resets and faults).
    let mut aligned = Vec::new();
    for frame in synth::frames(&mut rng, &traces, &mut FrameWriter::new()).chunks(16) {
        if rng.chance(3) {
            aligned.extend(FSYNC.repeat(1 + rng.below(8) as usize));
        }
        aligned.extend_from_slice(frame);
    }
    aligned.extend(FSYNC.repeat(3));
    let buffers = [
        (Framing::Raw { trace_id: 0x10 }, traces[0].1.clone()),
        (Framing::Aligned { reset_on_4x_fsync: true }, aligned),
        (Framing::Synced { hsyncs: true }, synth::frames(&mut rng, &traces, &mut FrameWriter::with_fsync_every(3))),
    ];
    for (framing, buffer) in buffers {
        let whole = common::decode_all(&buffer, Container::Plain, framing, &configs, ErrorRecovery::Resync);
        for _ in 0..30 {
            let mut s = PacketStream::new(framing, &configs, ErrorRecovery::Resync);
            let mut items = Vec::new();
            let mut at = 0;
            while at < buffer.len() {
                let n = (1 + rng.below(40) as usize).min(buffer.len() - at);
                let mut input = Input::new(&buffer[at..at + n], at as u64);
                while let Some(item) = s.next(&mut input) {
                    items.push(owned(item));
                }
                at += n;
            }
            while let Some(item) = s.finish() {
                items.push(owned(item));
            }
            assert_eq!(items, whole, "{framing:?}");
            if framing == (Framing::Aligned { reset_on_4x_fsync: true }) {
                assert!(whole.iter().any(|i| matches!(i, Item::Frame(etm::FrameError { kind: FrameErrorKind::FsyncCount(_), .. }))));
            }
        }
    }
}

fn owned(item: Result<etm::TracePacket<'_>, etm::FrameError>) -> Item {
    match item {
        Ok(p) => Item::Packet { id: p.trace_id, index: p.index, packet: p.packet, raw: p.raw.to_vec() },
        Err(e) => Item::Frame(e),
    }
}

/// OpenCSD's trace index: a run of one ID's bytes is indexed from the frame
/// start or from the ID byte that began it; an ID byte flagged in byte 15
/// leaves the byte after it to the previous ID.
#[test]
fn frame_runs_are_indexed_as_opencsd_indexes_them() {
    let e = 0xF7; // atom E, one byte: each byte is a packet
    let n = 0xF6; // atom N: bit 0 clear, so on an even byte it needs the flag
    let mut frame = [0u8; 16];
    frame[0] = (0x10 << 1) | 1; // ID 0x10
    frame[1] = e;
    frame[2] = n & 0xFE; // data, bit 0 from byte 15 (0)
    frame[3] = e;
    frame[4] = (0x11 << 1) | 1; // ID 0x11, flagged: byte 5 is still 0x10's
    frame[5] = e;
    frame[6] = e & 0xFE; // data for 0x11, bit 0 restored from byte 15
    frame[7] = n;
    frame[8] = (0x10 << 1) | 1; // back to 0x10, not flagged
    frame[9] = e;
    for b in frame.iter_mut().take(15).skip(10) {
        *b = 0xF6;
    }
    frame[15] = (1 << 2) | (1 << 3); // flags: byte 4 (pair 2) flagged, byte 6 (pair 3) bit 0 = 1
    let mut data = Vec::new();
    // An A-sync for each source first, so that the atoms decode.
    let mut w = FrameWriter::new();
    w.write(0x10, &[0; 11], &mut data);
    w.write(0x10, &[0x80], &mut data);
    w.write(0x11, &[0; 11], &mut data);
    w.write(0x11, &[0x80], &mut data);
    w.flush(&mut data);
    let sof = data.len() as u64;
    data.extend_from_slice(&frame);
    let items = common::decode_all(
        &data,
        Container::Plain,
        Framing::Aligned { reset_on_4x_fsync: false },
        &[config(0x10), config(0x11)],
        ErrorRecovery::Resync,
    );
    let atoms: Vec<(u8, u64, bool)> = items
        .iter()
        .filter_map(|i| match i {
            Item::Packet { id, index, packet: Packet::Atom { atoms, .. }, .. } => Some((*id, *index, atoms == &Atoms::new(1, 1))),
            _ => None,
        })
        .collect();
    assert_eq!(
        atoms,
        vec![
            (0x10, sof, true),
            (0x10, sof + 1, false),
            (0x10, sof + 2, true),
            (0x10, sof + 3, true),
            (0x11, sof + 4, true),
            (0x11, sof + 5, false),
            (0x10, sof + 8, true),
            (0x10, sof + 9, false),
            (0x10, sof + 10, false),
            (0x10, sof + 11, false),
            (0x10, sof + 12, false),
            (0x10, sof + 13, false),
        ]
    );
}

fn async_then_atoms(atoms: usize) -> Vec<u8> {
    let mut t = vec![0; 11];
    t.push(0x80);
    t.extend(std::iter::repeat_n(0xF7, atoms));
    t
}

#[test]
fn four_fsyncs_start_every_source_again() {
    let c = config(0x10);
    let mut w = FrameWriter::new();
    let mut data = Vec::new();
    w.write(0x10, &async_then_atoms(5), &mut data);
    w.write(0x10, &[0x9D, 1, 2], &mut data); // cut off by the reset
    w.flush(&mut data);
    let reset_at = data.len();
    data.extend(FSYNC.repeat(4));
    let mut w = FrameWriter::new();
    w.write(0x10, &[0xF7, 0xF7], &mut data); // before any A-sync: not decodable
    w.write(0x10, &async_then_atoms(3), &mut data);
    w.flush(&mut data);
    let items = common::decode_all(&data, Container::Plain, Framing::Aligned { reset_on_4x_fsync: true }, &[c], ErrorRecovery::Resync);
    let kinds: Vec<String> = items
        .iter()
        .map(|i| match i {
            Item::Packet { packet, .. } => packet.packet_type().name().to_string(),
            Item::Frame(e) => e.to_string(),
        })
        .collect();
    let mut want = vec!["I_ASYNC"];
    want.extend(["I_ATOM_F1"; 5]);
    want.extend(["I_NOT_SYNC", "I_ASYNC", "I_ATOM_F1", "I_ATOM_F1", "I_ATOM_F1"]);
    assert_eq!(kinds, want);
    // Three FSYNCs: not a reset, a fault, named where it is.
    let mut bad = data.clone();
    bad.drain(reset_at..reset_at + 4);
    let items = common::decode_all(&bad, Container::Plain, Framing::Aligned { reset_on_4x_fsync: true }, &[c], ErrorRecovery::Resync);
    assert!(items.contains(&Item::Frame(etm::FrameError { offset: reset_at as u64, kind: FrameErrorKind::FsyncCount(3) })), "{items:?}");
}

#[test]
fn port_capture_faults_are_reported_and_survived() {
    let c = config(0x10);
    let mut w = FrameWriter::with_fsync_every(1);
    let mut port = Vec::new();
    w.write(0x10, &async_then_atoms(40), &mut port);
    w.flush(&mut port);
    let frame_len = 20; // FSYNC + frame
    assert_eq!(port.len() % frame_len, 0);
    // Garbage before the first FSYNC is skipped; an FSYNC inside the second frame is a fault.
    let mut data = vec![0x12, 0x34, 0x56];
    data.extend_from_slice(&port[..frame_len + 4 + 8]);
    let fault = data.len();
    data.extend_from_slice(&FSYNC);
    data.extend_from_slice(&port[frame_len..]);
    let mut r = etm::PacketReader::new(&data, Framing::Synced { hsyncs: false }, &[c], ErrorRecovery::Resync);
    let mut items = Vec::new();
    while let Some(i) = r.next() {
        items.push(owned(i));
    }
    assert_eq!(r.stats().unsynced_bytes, 3);
    let first_fault = items.iter().position(|i| matches!(i, Item::Frame(_))).unwrap();
    assert_eq!(items[first_fault], Item::Frame(etm::FrameError { offset: fault as u64, kind: FrameErrorKind::FsyncInFrame }));
    // After the fault nothing says whose bytes follow until an ID byte, nor
    // where packets start until an A-sync: no atom is decoded from them.
    assert!(items[first_fault + 1..].iter().all(|i| !matches!(i, Item::Packet { packet: Packet::Atom { .. }, .. })), "{items:?}");
    assert!(r.stats().unrouted_bytes > 0);
    // An HSYNC in a capture without them is a fault too.
    let mut h = port.clone();
    h[4 + 6] = 0xFF;
    h[4 + 7] = 0x7F;
    let items = common::decode_all(&h, Container::Plain, Framing::Synced { hsyncs: false }, &[c], ErrorRecovery::Resync);
    assert!(items.contains(&Item::Frame(etm::FrameError { offset: 10, kind: FrameErrorKind::HsyncInFrame })), "{items:?}");
}

#[test]
fn a_buffer_ending_inside_a_frame_says_so() {
    let c = config(0x10);
    let mut w = FrameWriter::new();
    let mut data = Vec::new();
    w.write(0x10, &async_then_atoms(30), &mut data);
    w.flush(&mut data);
    let whole = data.len();
    data.extend_from_slice(&[0x21, 0xF7, 0xF7, 0xF7, 0xF7]);
    let items = common::decode_all(&data, Container::Plain, Framing::Aligned { reset_on_4x_fsync: false }, &[c], ErrorRecovery::Resync);
    assert_eq!(items.last(), Some(&Item::Frame(etm::FrameError { offset: whole as u64, kind: FrameErrorKind::PartialFrame(5) })));
}

/// Found by the etm_packets fuzz target: a port capture whose block ends
/// just after an HSYNC that opens a frame. The frame had begun at the
/// HSYNC; decoding in two blocks restarted it after the HSYNC (its cut-off
/// tail reported 2 bytes later, and an FSYNC there would have been skipped
/// instead of reported as a fault), so the halves disagreed with the whole.
#[test]
fn a_frame_opened_by_an_hsync_survives_a_block_boundary() {
    let mut buffer = FSYNC.to_vec();
    buffer.extend_from_slice(&[0x49, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x61, 0x61, 0x0A, 0x41, 0xFF, 0x7F, 0x49]);
    // The next frame opens with an HSYNC, then is cut short; and a variant with an FSYNC after the HSYNC.
    let tails: [&[u8]; 2] = [&[0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x61, 0x0B], &[0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0x7F, 0x61, 0x0B]];
    let configs = [config(0x10)];
    let framing = Framing::Synced { hsyncs: true };
    for tail in tails {
        let trace = [buffer.as_slice(), tail].concat();
        let whole = common::decode_all(&trace, Container::Plain, framing, &configs, ErrorRecovery::Continue);
        assert!(whole.iter().any(|i| matches!(i, Item::Frame(_))), "{whole:?}");
        for cut in 0..=trace.len() {
            let mut s = PacketStream::new(framing, &configs, ErrorRecovery::Continue);
            let mut items = Vec::new();
            for (bytes, base) in [(&trace[..cut], 0), (&trace[cut..], cut as u64)] {
                let mut input = Input::new(bytes, base);
                while let Some(item) = s.next(&mut input) {
                    items.push(owned(item));
                }
            }
            while let Some(item) = s.finish() {
                items.push(owned(item));
            }
            assert_eq!(items, whole, "cut at {cut}");
        }
    }
}
