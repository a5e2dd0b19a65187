//! Bad input through the flow decoder: byte flips, cut buffers, random
//! bytes under several configurations, and memory dumps whose description
//! lies. Never a panic; a fault gives an error element, the source reports
//! NO_SYNC and decodes again after the next A-sync.

mod common;

use codeimage::window::Static;
use std::path::Path;

use codeimage::CodeTimeline;
use common::{synth, Buffer, Rng};
use etm::flow::{self, ElemKind, Element, FlowDecoder, FlowError, Item, UnsyncReason};
use etm::snapshot::Snapshot;
use etm::{Container, ErrorRecovery, EtmV4Config, Framing, PacketReader};

/// Elements of a buffer, each with the trace index of the packet being
/// decoded when it came out (None for the end-of-trace flush).
fn elements(data: &[u8], container: Container, framing: Framing, configs: &[EtmV4Config], code: &CodeTimeline) -> Vec<(Option<u64>, Element)> {
    let mut reader = PacketReader::with_container(data, container, framing, configs, ErrorRecovery::Continue);
    let mut d = FlowDecoder::for_buffer(Static(code), framing, configs);
    let mut out = Vec::new();
    let mut at = None;
    let mut ended = false;
    flow::run(&mut reader, &mut d, |item| match item {
        Item::Packet(p) => at = (!ended).then_some(p.index),
        Item::Element(e) => out.push((at, *e)),
        Item::End(_) => {
            ended = true;
            at = None;
        }
        Item::Frame(_) => {}
    });
    out
}

fn juno() -> Option<(Buffer, CodeTimeline)> {
    let dir = common::snapshot("juno_r1_1")?;
    let (code, notes) = Snapshot::load(&dir).unwrap().code_image();
    assert!(notes.is_empty(), "{notes:?}");
    Some((common::first_buffer(&dir), code))
}

/// Errors reset the source: its next element is NO_SYNC (or the end).
/// Returns whether decoding resumed (an instruction range or inaccessible
/// code reported) after some error.
fn check_resets(what: &str, elems: &[(Option<u64>, Element)]) -> bool {
    let mut resumed = false;
    for (i, (_, e)) in elems.iter().enumerate() {
        let ElemKind::Error(err) = e.kind else {
            continue;
        };
        if matches!(err, FlowError::UnsupportedIsa { .. }) {
            continue;
        }
        let mut same = elems[i + 1..].iter().map(|x| x.1).filter(|x| x.trace_id == e.trace_id);
        match same.next().map(|x| x.kind) {
            Some(ElemKind::NoSync(UnsyncReason::BadPacket | UnsyncReason::ResetDecoder)) | Some(ElemKind::EoTrace(_)) | None => {}
            other => panic!("{what}: after {err} at {:#x} comes {other:?}", e.index),
        }
        resumed |= same.any(|x| matches!(x.kind, ElemKind::InstrRange(_) | ElemKind::AddrNacc(_)));
    }
    resumed
}

#[test]
fn byte_flips_give_errors_then_resync() {
    let Some((b, code)) = juno() else { return };
    let full = elements(&b.data, b.container, b.framing, &b.configs, &code);
    let mut rng = Rng(0xf10f_e7a4);
    let (mut errors, mut resumed) = (0, 0);
    for _ in 0..48 {
        let mut data = b.data.clone();
        for _ in 0..1 + rng.below(8) {
            let at = rng.below(data.len() as u64) as usize;
            data[at] ^= 1 << rng.below(8);
        }
        let elems = elements(&data, b.container, b.framing, &b.configs, &code);
        for (_, e) in &elems {
            assert!(e.index < data.len() as u64, "element index {:#x} outside the trace", e.index);
        }
        errors += elems.iter().any(|e| matches!(e.1.kind, ElemKind::Error(_))) as usize;
        resumed += check_resets("flipped", &elems) as usize;
        assert!(elems.len() < full.len() * 2 + 1000);
    }
    eprintln!("48 flipped buffers: {errors} with error elements, {resumed} decoding again after one");
    assert!(errors > 0 && resumed > 0);
}

#[test]
fn cut_buffers_decode_the_same_up_to_the_cut() {
    let Some((b, code)) = juno() else { return };
    let full = elements(&b.data, b.container, b.framing, &b.configs, &code);
    let mut rng = Rng(0xc075);
    for _ in 0..24 {
        let cut = rng.below(b.data.len() as u64) as usize;
        let elems = elements(&b.data[..cut], b.container, b.framing, &b.configs, &code);
        // Packets well before the cut are whole in both: their elements agree.
        let bound = cut.saturating_sub(1024) as u64;
        let before = |v: &[(Option<u64>, Element)]| -> Vec<Element> { v.iter().filter(|x| x.0.is_some_and(|i| i < bound)).map(|x| x.1).collect() };
        assert_eq!(before(&elems), before(&full), "cut at {cut:#x}");
        // Every source ends.
        let ends = elems.iter().filter(|x| matches!(x.1.kind, ElemKind::EoTrace(_))).count();
        assert_eq!(ends, b.configs.len(), "cut at {cut:#x}");
    }
}

#[test]
fn random_packets_under_every_configuration() {
    let Some((_, code)) = juno() else { return };
    let mut rng = Rng(0x5eed_f10f);
    let (mut total, mut ranges) = (0, 0);
    for (name, c) in synth::configs() {
        for round in 0..16u32 {
            // Speculation depth, return stack, cycle counts and WFI/WFE as P0 varied.
            let cfg = EtmV4Config {
                configr: c.configr ^ ((round & 1) << 12),
                idr8: [0, 1, 8, 32][(round >> 1 & 3) as usize],
                idr1: 0x4100F430,
                idr2: c.idr2 | (round >> 3 & 1) << 31,
                ..c
            };
            let len;
            let data = if round % 4 == 3 {
                len = 64 + rng.below(4096) as usize;
                (0..len).map(|_| rng.next() as u8).collect()
            } else {
                let t = synth::trace(&mut rng, &cfg, 300, round % 2 == 1);
                len = t.len();
                t
            };
            let framing = Framing::Raw { trace_id: cfg.trace_id() };
            let elems = elements(&data, Container::Plain, framing, &[cfg], &code);
            assert!(elems.len() <= 50 * len + 10, "{name}: {} elements from {len} bytes", elems.len());
            check_resets(name, &elems);
            total += elems.len();
            ranges += elems.iter().filter(|e| matches!(e.1.kind, ElemKind::AddrNacc(_) | ElemKind::InstrRange(_))).count();
        }
    }
    eprintln!("random packets: {total} elements, {ranges} ranges or inaccessible code");
    assert!(ranges > 0);
}

/// A copy of juno_r1_1 whose first core's dump description is `dump`.
fn juno_with_dump(name: &str, dump: &str) -> Option<std::path::PathBuf> {
    let src = common::snapshot("juno_r1_1")?;
    let dir = common::lister::tmp("etm-flow-bad-dumps", name);
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        let to = dir.join(f.file_name().unwrap());
        let _ = std::fs::remove_file(&to);
        std::fs::copy(&f, &to).unwrap();
    }
    let cpu0 = std::fs::read_to_string(src.join("cpu_0.ini")).unwrap();
    let cpu0 = cpu0.split("[dump1]").next().unwrap().to_string() + dump;
    std::fs::write(dir.join("cpu_0.ini"), cpu0).unwrap();
    // The other cores name the same dump: only the first core's counts.
    for i in 1..6 {
        let p = dir.join(format!("cpu_{i}.ini"));
        let t = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, t.split("[dump1]").next().unwrap()).unwrap();
    }
    Some(dir)
}

fn decode_dir(dir: &Path) -> (Vec<Element>, Vec<String>) {
    let snap = Snapshot::load(dir).unwrap();
    let (code, notes) = snap.code_image();
    let b = common::first_buffer(dir);
    let elems = elements(&b.data, b.container, b.framing, &b.configs, &code);
    (elems.into_iter().map(|x| x.1).collect(), notes)
}

#[test]
fn memory_dumps_that_lie() {
    let Some(src) = common::snapshot("juno_r1_1") else {
        return;
    };
    let (reference, _) = decode_dir(&src);
    // Longer than the file: cut to the file, with a note; the same decode.
    let dir = juno_with_dump("too-long", "[dump1]\nfile=kernel_dump.bin\naddress=0xFFFFFFC000081000\nlength=0x00100000\n").unwrap();
    let (elems, notes) = decode_dir(&dir);
    assert!(notes.len() == 1 && notes[0].contains("kernel_dump.bin") && notes[0].contains("0x100000"), "{notes:?}");
    assert_eq!(elems, reference);

    // A missing file: a note, and every atom meets inaccessible code.
    let dir = juno_with_dump("missing", "[dump1]\nfile=nothing.bin\naddress=0xFFFFFFC000081000\n").unwrap();
    let (elems, notes) = decode_dir(&dir);
    assert!(notes.len() == 1 && notes[0].contains("nothing.bin"), "{notes:?}");
    assert!(!elems.iter().any(|e| matches!(e.kind, ElemKind::InstrRange(_))));
    assert!(elems.iter().any(|e| matches!(e.kind, ElemKind::AddrNacc(_))));

    // Shorter than the code traced, and an offset past the end of the file.
    let dir = juno_with_dump(
        "short",
        "[dump1]\nfile=kernel_dump.bin\naddress=0xFFFFFFC000081000\nlength=0x2000\n[dump2]\nfile=kernel_dump.bin\naddress=0x1000\noffset=0x900000\n",
    )
    .unwrap();
    let (elems, notes) = decode_dir(&dir);
    assert!(notes.is_empty(), "{notes:?}"); // an offset past the end leaves nothing to map
                                            // A dump that would run past the top of the address space is cut there.
    let top = juno_with_dump("top", "[dump1]\nfile=kernel_dump.bin\naddress=0xFFFFFFFFFFFFF000\n").unwrap();
    let (_, top_notes) = decode_dir(&top);
    assert!(top_notes.len() == 1 && top_notes[0].contains("top of the address space"), "{top_notes:?}");
    let end = 0xFFFF_FFC0_0008_3000u64;
    for e in &elems {
        if let ElemKind::InstrRange(r) = e.kind {
            assert!(r.start >= 0xFFFF_FFC0_0008_1000 && r.end <= end, "{r:?}");
        }
    }
    assert!(elems.iter().any(|e| matches!(e.kind, ElemKind::InstrRange(_))));
    assert!(elems.iter().any(|e| matches!(e.kind, ElemKind::AddrNacc(a) if (end..0xFFFF_FFC0_000D_1000).contains(&a))));
}

/// A buffer that ends inside a frame lost those bytes only: no source is
/// reset (no error element), each still ends with EO_TRACE.
#[test]
fn a_frame_cut_short_at_the_end_resets_nothing() {
    let Some((b, code)) = juno() else { return };
    for cut in [7, 9, 15] {
        let data = &b.data[..b.data.len() - cut];
        let elems = elements(data, b.container, b.framing, &b.configs, &code);
        assert!(!elems.iter().any(|e| matches!(e.1.kind, ElemKind::Error(FlowError::Frame))), "cut {cut}");
        let ends = elems.iter().filter(|e| matches!(e.1.kind, ElemKind::EoTrace(_))).count();
        assert_eq!(ends, b.configs.len());
    }
}
