//! Bad trace: every real buffer cut at every byte, random byte flips,
//! random bytes. Never a panic; every fault is reported at a place inside
//! the trace; with `ErrorRecovery::Resync`, after a fault a source yields
//! nothing but skipped bytes until its next A-sync.

mod common;

use common::{synth, Item, Rng};
use etm::packet::Packet;
use etm::stream::Input;
use etm::{Container, ErrorRecovery, EtmV4Config, FrameErrorKind, Framing, PacketStream};

/// The trace bytes of a buffer as (bytes, trace index) pieces: DSTREAM
/// footers are not trace.
fn pieces(data: &[u8], container: Container) -> Vec<(&[u8], u64)> {
    match container {
        Container::Plain => vec![(data, 0)],
        Container::Dstream => data.chunks(512).enumerate().map(|(k, b)| (&b[..b.len().min(504)], k as u64 * 504)).collect(),
    }
}

fn drain(s: &mut PacketStream, input: &mut Input<'_>, out: &mut Vec<Item>) {
    while let Some(item) = s.next(input) {
        out.push(match item {
            Ok(p) => Item::Packet { id: p.trace_id, index: p.index, packet: p.packet, raw: p.raw.to_vec() },
            Err(e) => Item::Frame(e),
        });
    }
}

fn finish(s: &mut PacketStream) -> Vec<Item> {
    let mut out = Vec::new();
    while let Some(item) = s.finish() {
        out.push(match item {
            Ok(p) => Item::Packet { id: p.trace_id, index: p.index, packet: p.packet, raw: p.raw.to_vec() },
            Err(e) => Item::Frame(e),
        });
    }
    out
}

/// Cuts the trace at every byte: what was decoded before the cut is what an
/// uncut decode gives, and the end reports only a frame cut short and
/// packets cut short, once each, inside the trace.
fn cut_everywhere(name: &str, data: &[u8], container: Container, framing: Framing, configs: &[EtmV4Config]) -> usize {
    const STEP: usize = 16;
    let mut main = PacketStream::new(framing, configs, ErrorRecovery::Resync);
    let mut full: Vec<Item> = Vec::new();
    let mut cuts = 0;
    for (bytes, base) in pieces(data, container) {
        for at in (0..bytes.len()).step_by(STEP) {
            let step = &bytes[at..(at + STEP).min(bytes.len())];
            // What the uncut decode gives next.
            let mut next = Vec::new();
            drain(&mut main.clone(), &mut Input::new(step, base + at as u64), &mut next);
            for k in 0..step.len() {
                let mut s = main.clone();
                let mut out = Vec::new();
                drain(&mut s, &mut Input::new(&step[..k], base + at as u64), &mut out);
                let end_index = base + (at + k) as u64;
                assert!(next.starts_with(&out), "{name}: cut at trace index {end_index}: {out:?} is not a prefix of {next:?}");
                let tail = finish(&mut s);
                let mut last_id = None;
                for (i, item) in tail.iter().enumerate() {
                    match item {
                        Item::Frame(e) => {
                            assert!(i == 0 && matches!(e.kind, FrameErrorKind::PartialFrame(_)) && e.offset <= end_index, "{name}: {e}")
                        }
                        Item::Packet { id, index, packet: Packet::IncompleteEot { .. }, raw } => {
                            assert!(last_id < Some(*id) && *index <= end_index && !raw.is_empty(), "{name}: {item:?}");
                            last_id = Some(*id);
                        }
                        other => panic!("{name}: cut at {end_index}: {other:?} after the end"),
                    }
                }
                cuts += 1;
            }
            drain(&mut main, &mut Input::new(step, base + at as u64), &mut full);
            assert!(full.ends_with(&next));
        }
    }
    cuts
}

#[test]
fn every_real_buffer_cut_at_every_byte() {
    let mut total = 0;
    for name in common::SNAPSHOTS {
        let Some(dir) = common::snapshot(name) else {
            continue;
        };
        let b = common::first_buffer(&dir);
        total += cut_everywhere(name, &b.data, b.container, b.framing, &b.configs);
    }
    eprintln!("{total} cuts");
}

/// Checks the invariants of a decode of possibly bad trace.
fn check(what: &str, items: &[Item], trace_len: u64, recovery: ErrorRecovery) {
    // Per trace ID: whether we are between a fault and the next A-sync.
    let mut lost = [false; 128];
    for item in items {
        match item {
            Item::Frame(e) => {
                assert!(e.offset <= trace_len, "{what}: {e} past the end ({trace_len})");
                lost = [true; 128];
            }
            Item::Packet { id, index, packet, raw } => {
                assert!(*index <= trace_len && !raw.is_empty() && raw.len() <= etm::decode::MAX_PACKET_LEN, "{what}: {item:?}");
                let id = *id as usize & 0x7F;
                if recovery == ErrorRecovery::Resync {
                    match packet {
                        Packet::Async => lost[id] = false,
                        Packet::NotSync { .. } | Packet::IncompleteEot { .. } => {}
                        p if lost[id] && !p.is_error() => {
                            panic!("{what}: {p:?} at {index} before an A-sync after a fault")
                        }
                        _ => {}
                    }
                    if packet.is_error() {
                        lost[id] = true;
                    }
                }
            }
        }
    }
}

#[test]
fn random_byte_flips_in_real_buffers() {
    let mut rng = Rng(0xF11B);
    let mut runs = 0;
    for name in common::SNAPSHOTS {
        let Some(dir) = common::snapshot(name) else {
            continue;
        };
        let b = common::first_buffer(&dir);
        for _ in 0..150 {
            // A window starting on a frame (and DSTREAM block) boundary.
            let start = if b.data.len() > 8192 { rng.below((b.data.len() - 8192) as u64 / 512) as usize * 512 } else { 0 };
            let mut w = b.data[start..(start + 8192).min(b.data.len())].to_vec();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(w.len() as u64) as usize;
                w[i] ^= 1 << rng.below(8);
            }
            let trace_len = pieces(&w, b.container).iter().map(|p| p.0.len() as u64).sum();
            for recovery in [ErrorRecovery::Resync, ErrorRecovery::Continue] {
                let items = common::decode_all(&w, b.container, b.framing, &b.configs, recovery);
                check(name, &items, trace_len, recovery);
                runs += 1;
            }
        }
    }
    eprintln!("{runs} decodes of flipped buffers");
}

#[test]
fn random_bytes_in_every_framing() {
    let mut rng = Rng(0xBAD);
    let configs: Vec<EtmV4Config> = synth::configs().into_iter().map(|c| c.1).collect();
    for round in 0..400 {
        let len = rng.below(3000) as usize;
        // Mostly packet-like bytes: valid trace with damage, or plain noise.
        let mut data =
            if round % 2 == 0 { synth::trace(&mut rng, &configs[round % 4], len / 4, true) } else { (0..len).map(|_| rng.next() as u8).collect() };
        for _ in 0..rng.below(20) {
            if !data.is_empty() {
                let i = rng.below(data.len() as u64) as usize;
                data[i] = rng.next() as u8;
            }
        }
        let framing = match round % 4 {
            0 => Framing::Raw { trace_id: 0x10 },
            1 => Framing::Aligned { reset_on_4x_fsync: round % 8 == 1 },
            _ => Framing::Synced { hsyncs: round % 8 == 2 },
        };
        let container = if round % 16 == 3 { Container::Dstream } else { Container::Plain };
        let trace_len = pieces(&data, container).iter().map(|p| p.0.len() as u64).sum();
        for recovery in [ErrorRecovery::Resync, ErrorRecovery::Continue] {
            let items = common::decode_all(&data, container, framing, &configs, recovery);
            assert!(items.len() <= data.len() + 130, "round {round}: {} items from {} bytes", items.len(), data.len());
            check(&format!("round {round}"), &items, trace_len, recovery);
        }
    }
}

/// A reserved header in good trace: reported at its index under its trace
/// ID; the source skips to the next A-sync and decodes as before from there.
#[test]
fn a_fault_is_named_and_decoding_resumes_at_the_next_async() {
    let c = synth::configs()[0].1;
    let mut rng = Rng(3);
    let mut clean = synth::trace(&mut rng, &c, 200, false);
    let mut enc = etm::Encoder::new(&c);
    let second_half = synth::trace(&mut rng, &c, 200, false);
    enc.encode(&Packet::Async, &mut clean).unwrap();
    let resume_at = clean.len() - 12;
    clean.extend_from_slice(&second_half[second_half.iter().position(|&b| b == 0x80).unwrap() + 1..]);
    let fault = resume_at - 40;
    let mut bad = clean.clone();
    bad.insert(fault, 0x08);
    let framing = Framing::Raw { trace_id: 0x10 };
    let good = common::decode_all(&clean, Container::Plain, framing, &[c], ErrorRecovery::Resync);
    let items = common::decode_all(&bad, Container::Plain, framing, &[c], ErrorRecovery::Resync);
    let err = items.iter().find_map(|i| match i {
        Item::Packet { id, index, packet, .. } if packet.is_error() => Some((*id, *index, *packet)),
        _ => None,
    });
    // The fault may fall inside a packet, which then breaks there instead.
    let (id, index, _) = err.expect("no fault reported");
    assert_eq!(id, 0x10);
    assert!(index <= fault as u64);
    let msg = etm::TracePacket { trace_id: id, index, packet: Packet::Reserved { header: 8 }, raw: &[8] }.error().unwrap().to_string();
    assert!(msg.starts_with("trace ID 0x10, trace index"), "{msg}");
    // From the A-sync after the fault on, the same packets (one byte later).
    let tail = |items: &[Item], from: u64| -> Vec<Packet> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Packet { index, packet, .. } if *index >= from => Some(*packet),
                _ => None,
            })
            .collect()
    };
    let after_good = tail(&good, resume_at as u64);
    let after_bad = tail(&items, resume_at as u64 + 1);
    assert_eq!(after_good.first(), Some(&Packet::Async));
    assert_eq!(after_bad, after_good);
}
