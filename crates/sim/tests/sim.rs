//! The simulator's promises: determinism, and decode accuracy by image mode.

use std::path::{Path, PathBuf};

use isa::Arch;
use sim::check::{check, ModeReport};
use sim::{Protocol, SimConfig};
use tracedecode::ImageMode as Mode;

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn mode(r: &[ModeReport], m: Mode) -> &ModeReport {
    r.iter().find(|x| x.mode == m).unwrap()
}

#[test]
fn same_seed_same_bytes() {
    let cfg = SimConfig { instructions: 20_000, pokes: 40, ..SimConfig::default() };
    let (a, b) = (dir("same-a"), dir("same-b"));
    sim::simulate(&cfg, &a).unwrap();
    sim::simulate(&cfg, &b).unwrap();
    for f in ["data", "kcore_dir/kcore", "kcore_dir/kallsyms", "truth/cpu0.bin", "truth/cpu3.bin", "truth/meta.json"] {
        assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "{f} differs");
    }
    let c = dir("same-c");
    sim::simulate(&SimConfig { seed: 2, ..cfg }, &c).unwrap();
    assert_ne!(std::fs::read(a.join("truth/cpu0.bin")).unwrap(), std::fs::read(c.join("truth/cpu0.bin")).unwrap());
}

#[test]
fn int3_with_fine_timing_decodes_exactly_with_the_timeline() {
    let d = dir("int3-fine");
    let cfg = SimConfig { instructions: 50_000, pokes: 200, tsc_period: 20, ..SimConfig::default() };
    let s = sim::simulate(&cfg, &d).unwrap();
    assert!(s.pokes > 100, "{s:?}");
    let r = check(&d).unwrap();
    let tl = mode(&r, Mode::Timeline);
    assert_eq!(tl.total.instructions, s.instructions.iter().sum::<u64>());
    assert_eq!((tl.total.correct, tl.total.wrong, tl.total.missing, tl.total.errors), (tl.total.instructions, 0, 0, 0), "{tl:?}");
    // Without poke awareness the same trace cannot be decoded: errors, and
    // a tenth of the instructions or more wrong.
    let st = mode(&r, Mode::Static);
    assert!(st.total.errors > 100 && st.total.wrong * 10 > st.total.instructions, "{st:?}");
}

#[test]
fn coarse_timing_is_reported_as_uncertain_not_hidden() {
    let d = dir("int3-coarse");
    let cfg = SimConfig { instructions: 50_000, pokes: 200, tsc_period: 400, ..SimConfig::default() };
    sim::simulate(&cfg, &d).unwrap();
    let r = check(&d).unwrap();
    let tl = mode(&r, Mode::Timeline);
    let perf = mode(&r, Mode::PerfStyle);
    assert!(tl.total.uncertain > 0, "{tl:?}");
    // Every wrong instruction of the timeline follows an uncertain choice, never a silent one.
    assert!(tl.total.correct >= perf.total.correct, "timeline {tl:?} perf-style {perf:?}");
    assert!(tl.total.errors <= perf.total.errors);
}

#[test]
fn without_events_no_image_can_follow() {
    let d = dir("none");
    let cfg = SimConfig { instructions: 30_000, pokes: 100, protocol: Protocol::None, tsc_period: 20, ..SimConfig::default() };
    sim::simulate(&cfg, &d).unwrap();
    let r = check(&d).unwrap();
    assert_eq!(mode(&r, Mode::Timeline).total, mode(&r, Mode::Static).total, "no events: the timeline is the static image");
    assert!(mode(&r, Mode::Timeline).total.errors > 0);
}

#[test]
fn prepost_windows_are_uncertain() {
    let d = dir("prepost");
    let cfg = SimConfig { instructions: 50_000, pokes: 200, protocol: Protocol::PrePost, tsc_period: 20, ..SimConfig::default() };
    sim::simulate(&cfg, &d).unwrap();
    let r = check(&d).unwrap();
    let tl = mode(&r, Mode::Timeline);
    // Inside a PRE/POST window the image alone cannot say which code ran:
    // the timeline says so, where a single image cannot.
    assert!(tl.total.uncertain > 0, "{tl:?}");
    assert!(tl.total.correct > tl.total.instructions * 9 / 10, "{tl:?}");
    assert!(tl.total.errors <= mode(&r, Mode::PerfStyle).total.errors);
}

#[test]
fn bad_config_is_an_error() {
    let d = dir("bad");
    let e = sim::simulate(&SimConfig { arch: Arch::Aarch64, cpus: 99, ..SimConfig::default() }, &d).unwrap_err();
    assert!(e.to_string().contains("--cpus 99"), "{e}");
    assert!(sim::simulate(&SimConfig { cpus: 0, ..SimConfig::default() }, &d).is_err());
}

/// The trace is written as it is made, cut into AUXTRACE buffers that each
/// begin at a PSB, follow one another, and stay within 64 KiB (perf pads
/// each buffer's data to 8 bytes, with PAD packets; offsets count the trace).
#[test]
fn aux_buffers_begin_at_a_psb() {
    use perfdata::{PerfFile, RecordBody};
    const PSB: [u8; 16] = [0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82];
    let d = dir("aux-buffers");
    let s = sim::simulate(&SimConfig { cpus: 2, instructions: 400_000, pokes: 100, ..SimConfig::default() }, &d).unwrap();
    let file = PerfFile::open(&d).unwrap();
    let mut ends = [0u64; 2];
    let mut buffers = [0usize; 2];
    for r in file.records() {
        if let RecordBody::Auxtrace(a) = r.unwrap().body {
            let c = a.cpu as usize;
            assert!(
                a.offset <= ends[c] && ends[c] <= a.offset + 7 || buffers[c] == 0 && a.offset == 0,
                "cpu {c}: buffer at {:#x} after one ending at {:#x}",
                a.offset,
                ends[c]
            );
            assert!(a.data.starts_with(&PSB), "cpu {c} buffer at {:#x} does not begin with a PSB", a.offset);
            assert!(a.data.len() <= 1 << 16, "cpu {c} buffer at {:#x}: {} bytes", a.offset, a.data.len());
            ends[c] = a.offset + a.data.len() as u64;
            buffers[c] += 1;
        }
    }
    for (c, (&n, &end)) in s.trace_bytes.iter().zip(&ends).enumerate() {
        let n = n as u64;
        assert!(n <= end && end < n + 8, "cpu {c}: {n} bytes of trace, buffers end at {end}");
    }
    assert!(buffers.iter().all(|&b| b > 2), "{buffers:?}");
}

#[test]
fn mtc_timing_decodes_exactly_with_the_timeline() {
    use intel_pt::{Packet, PacketDecoder};
    use perfdata::{PerfFile, RecordBody};
    let d = dir("mtc");
    let cfg = SimConfig { cpus: 2, instructions: 50_000, pokes: 100, mtc_freq: Some(0), ..SimConfig::default() };
    let s = sim::simulate(&cfg, &d).unwrap();
    let file = PerfFile::open(&d).unwrap();
    let mut trace = [Vec::new(), Vec::new()];
    for r in file.records() {
        if let RecordBody::Auxtrace(a) = r.unwrap().body {
            trace[a.cpu as usize].extend_from_slice(a.data);
        }
    }
    for (cpu, t) in trace.iter().enumerate() {
        let (mut mtcs, mut tmas, mut in_psb) = (0, 0, false);
        let mut dec = PacketDecoder::new(t);
        while let Some((off, p)) = dec.next_packet().unwrap() {
            match p {
                Packet::Psb => in_psb = true,
                Packet::PsbEnd => in_psb = false,
                Packet::Tsc(_) => assert!(in_psb, "cpu {cpu}: TSC outside PSB+ at {off:#x}"),
                Packet::Tma { .. } => tmas += 1,
                Packet::Mtc(_) => mtcs += 1,
                _ => {}
            }
        }
        assert!(mtcs > 100 && tmas > 0, "cpu {cpu}: {mtcs} MTC, {tmas} TMA packets");
    }
    // Timed by MTC (25 ns here), the int3 protocol decodes exactly.
    let r = check(&d).unwrap();
    let tl = mode(&r, Mode::Timeline);
    assert_eq!(tl.total.instructions, s.instructions.iter().sum::<u64>());
    assert_eq!((tl.total.correct, tl.total.wrong, tl.total.errors), (tl.total.instructions, 0, 0), "{tl:?}");
}

#[test]
fn config_names_arch_and_protocol_as_the_command_line_does() {
    let cfg = SimConfig { arch: Arch::Aarch64, protocol: Protocol::PrePost, ..SimConfig::default() };
    let json = serde_json::to_string(&cfg).unwrap();
    assert!(json.contains(r#""arch":"aarch64""#) && json.contains(r#""protocol":"prepost""#), "{json}");
    assert_eq!(serde_json::from_str::<SimConfig>(&json).unwrap(), cfg);
    for (p, name) in [(Protocol::Int3, "int3"), (Protocol::PrePost, "prepost"), (Protocol::SingleAfter, "single-after"), (Protocol::None, "none")] {
        assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{name}\""));
        assert_eq!(p.to_string(), name);
    }
    let old = json.replace(r#""arch":"aarch64","#, "");
    assert_eq!(serde_json::from_str::<SimConfig>(&old).unwrap().arch, Arch::X86_64, "a config without arch is x86_64");
}

#[test]
fn decode_cpu_gives_the_truths_instructions_or_an_error() {
    let d = dir("decode-cpu");
    let cfg = SimConfig { cpus: 2, instructions: 5_000, pokes: 0, protocol: Protocol::None, tsc_period: 20, ..SimConfig::default() };
    sim::simulate(&cfg, &d).unwrap();
    let events = sim::check::decode_cpu(&d, 1).unwrap();
    let decoded: Vec<u64> = events.iter().filter_map(|e| if let intel_pt::flow::FlowEvent::Insn { ip, .. } = e { Some(*ip) } else { None }).collect();
    let truth: Vec<u64> = sim::TruthReader::open(&d.join("truth/cpu1.bin")).unwrap().map(|r| r.unwrap().1).collect();
    assert!(decoded.len() > 1000, "{} instructions", decoded.len());
    assert_eq!(decoded, truth[..decoded.len()], "no changes to the code: the decode is the truth");
    let e = sim::check::decode_cpu(&d, 2).unwrap_err();
    assert!(e.to_string().contains("cpu 2"), "{e}");
    let a = dir("decode-cpu-a64");
    sim::simulate(&SimConfig { arch: Arch::Aarch64, ..cfg }, &a).unwrap();
    let e = sim::check::decode_cpu(&a, 0).unwrap_err();
    assert!(e.to_string().contains("Intel PT"), "{e}");
}
