//! Linux perf as the oracle: a perf.data file whose AUXTRACE payload holds
//! every packet kind, dumped by `perf report -D`, must list the packets our
//! decoder finds, name for name and offset for offset.
//!
//! Needs `perf` (Debian linux-perf). Without it this test skips, unless CI
//! or POKETRACE_REQUIRE_PERF is set: then it fails (`testkit::required`).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use intel_pt::{Packet, PacketKind};
use perfdata::abi::{attr_flag, sample_type as st};
use perfdata::auxtrace::IntelPtInfo;
use perfdata::{AttrWithIds, Auxtrace, AuxtraceInfo, EventAttr, RecordBody, SampleId, Writer, ATTR_SIZE_VER7};

fn scratch(name: &str) -> PathBuf {
    testkit::scratch!("intel-pt-perf", name)
}

/// A perf.data file with one Intel PT AUXTRACE record carrying `trace`.
fn write_perf_data(path: &Path, trace: &[u8]) {
    let pt = EventAttr {
        type_: 8,
        size: ATTR_SIZE_VER7,
        config: 0x400,
        sample_type: st::TID | st::TIME | st::CPU | st::IDENTIFIER | st::IP,
        flags: attr_flag::SAMPLE_ID_ALL,
        ..EventAttr::default()
    };
    let mut w = Writer::create(path, vec![AttrWithIds { attr: pt, ids: vec![10] }]).unwrap();
    let info = IntelPtInfo {
        pmu_type: 8,
        time_shift: 10,
        time_mult: 1024,
        cap_user_time_zero: 1,
        tsc_bit: 0x400,
        per_cpu_mmaps: 1,
        ..IntelPtInfo::default()
    }
    .to_priv_bytes();
    w.write(0, &RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: 1, priv_data: &info }), &SampleId::default()).unwrap();
    w.write(0, &RecordBody::Auxtrace(Auxtrace { offset: 0, reference: 1, idx: 0, tid: 1, cpu: 0, data: trace }), &SampleId::default()).unwrap();
    w.finish().unwrap();
}

/// perf's packet lines: (offset, bytes, description).
fn perf_packets(path: &Path) -> Vec<(usize, Vec<u8>, String)> {
    // A private HOME per file (the tests run in parallel).
    let home = path.with_extension("home");
    std::fs::create_dir_all(&home).unwrap();
    let text = testkit::perf(&home, &["report", "-D", "-i", path.to_str().unwrap()]);
    let mut lines = Vec::new();
    for line in text.lines() {
        // `.  00000010:  02 23` padded to 16 bytes' width, then the description.
        let Some((offset, rest)) = line.strip_prefix(".  ").and_then(|l| l.split_once(":  ")) else { continue };
        if offset.len() != 8 {
            continue; // a raw record dump line, `.  0010:  ...`
        }
        let offset = usize::from_str_radix(offset, 16).unwrap();
        let (hex, desc) = rest.split_at(3 * 16);
        let bytes = hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        lines.push((offset, bytes, desc.trim().to_string()));
    }
    lines
}

/// Our packet in the words of perf's `intel_pt_pkt_desc`.
fn perf_desc(p: &Packet) -> String {
    let b = u8::from;
    match *p {
        Packet::Pad => "PAD".into(),
        Packet::Psb => "PSB".into(),
        Packet::PsbEnd => "PSBEND".into(),
        Packet::Ovf => "OVF".into(),
        Packet::Stop => "TraceSTOP".into(),
        Packet::TntShort(t) | Packet::TntLong(t) => {
            let outcomes: String = (0..t.count).map(|i| if t.taken(i) { 'T' } else { 'N' }).collect();
            format!("TNT {outcomes} ({})", t.count)
        }
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => match ip.ip {
            None => format!("{} no ip", p.kind()),
            Some(_) => format!("{} {:#x}", p.kind(), ip.payload),
        },
        Packet::ModeExec { csl, csd, if_flag } => format!(
            "MODE.Exec IF:{} {}",
            b(if_flag),
            if csl {
                64
            } else if csd {
                32
            } else {
                16
            }
        ),
        Packet::ModeTsx { intx, abort } => format!("MODE.TSX TXAbort:{} InTX:{}", b(abort), b(intx)),
        Packet::Pip { cr3, nr } => format!("PIP {:#x} (NR={})", cr3 >> 5, b(nr)),
        Packet::Tsc(v) => format!("TSC {v:#x}"),
        Packet::Mtc(v) => format!("MTC {v:#x}"),
        Packet::Cyc(v) => format!("CYC {v:#x}"),
        Packet::Tma { ctc, fast_counter } => format!("TMA CTC {ctc:#x} FC {fast_counter:#x}"),
        Packet::Cbr(v) => format!("CBR {v:#x}"),
        Packet::Vmcs(v) => format!("VMCS {:#x}", v >> 12),
        Packet::Mnt(v) => format!("MNT {v:#x}"),
        Packet::Ptw { payload, ip, .. } => format!("PTWRITE {payload:#x} IP:{}", b(ip)),
        Packet::Exstop { ip } => format!("EXSTOP IP:{}", b(ip)),
        Packet::Mwait { hints, ext } => format!("MWAIT {:#x} Hints {hints:#x} Extensions {ext:#x}", u64::from(ext) << 32 | u64::from(hints)),
        Packet::Pwre { hw, cstate, sub_cstate } => {
            let payload = u16::from(hw) << 7 | u16::from(cstate) << 12 | u16::from(sub_cstate) << 8;
            format!("PWRE {payload:#x} HW:{} CState:{cstate} Sub-CState:{sub_cstate}", b(hw))
        }
        Packet::Pwrx { last_cstate, deepest_cstate, wake_reason } => {
            let payload = u32::from(wake_reason) << 8 | u32::from(last_cstate) << 4 | u32::from(deepest_cstate);
            format!("PWRX {payload:#x} Last CState:{last_cstate} Deepest CState:{deepest_cstate} Wake Reason {wake_reason:#x}")
        }
        Packet::Bbp { block_type, size } => format!("BBP SZ {}-byte Type {block_type:#x}", size.bytes()),
        Packet::Bip { id, payload, .. } => format!("BIP ID {id:#04x} Value {payload:#x}"),
        Packet::Bep { ip } => format!("BEP IP:{}", b(ip)),
        Packet::Cfe { ip, event_type, vector } => format!("CFE IP:{} Type {event_type:#04x} Vector {vector:#x}", b(ip)),
        Packet::Evd { event_type, payload } => format!("EVD Type {event_type:#04x} Payload {payload:#x}"),
        Packet::Trig { .. } => unreachable!("perf has no TRIG packet: the streams given to perf hold none"),
    }
}

/// Our decode of `trace` as perf's lines: perf folds the PAD bytes that
/// follow a packet into it, up to 8 bytes in all.
fn our_lines(trace: &[u8]) -> Vec<(usize, Vec<u8>, String)> {
    let got = common::decode_all(trace);
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    let ends = got.packets.iter().skip(1).map(|p| p.0).chain([trace.len()]);
    let mut lines: Vec<(usize, usize, String)> = Vec::new();
    for (&(offset, p), end) in got.packets.iter().zip(ends) {
        match lines.last_mut() {
            Some((start, len, _)) if p == Packet::Pad && *len < 8 => *len = end - *start,
            _ => lines.push((offset, end - offset, perf_desc(&p))),
        }
    }
    lines.into_iter().map(|(o, len, desc)| (o, trace[o..o + len].to_vec(), desc)).collect()
}

/// Writes `trace` (padded to 8 bytes, as perf.data stores it) and checks
/// perf's dump line by line against ours.
fn check_against_perf(name: &str, mut trace: Vec<u8>) -> usize {
    trace.resize(trace.len().next_multiple_of(8), 0);
    let dir = scratch(name);
    let path = dir.join("perf.data");
    write_perf_data(&path, &trace);
    let theirs = perf_packets(&path);
    let ours = our_lines(&trace);
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "{name}: line {i}, ours then perf's");
    }
    assert_eq!(ours.len(), theirs.len(), "{name}: as many lines");
    ours.len()
}

#[test]
fn perf_dumps_every_kind_as_we_decode_it() {
    if !testkit::perf_available() {
        return;
    }
    let (trace, packets) = common::every_kind();
    let kinds: BTreeSet<PacketKind> = packets.iter().map(Packet::kind).collect();
    // All but TRIG, which perf does not decode.
    assert_eq!(kinds.len(), PacketKind::ALL.len() - 1, "the stream holds every kind perf knows");
    check_against_perf("every-kind", trace);
}

#[test]
fn perf_dumps_random_streams_as_we_decode_them() {
    if !testkit::perf_available() {
        return;
    }
    let mut rng = common::Rng(0x6a09_e667_f3bc_c909);
    let trace = common::random_stream(&mut rng, 256 << 10, common::Kinds { pebs: true, event_trace: true });
    let lines = check_against_perf("random", trace);
    assert!(lines > 30_000, "{lines} lines compared");
}
