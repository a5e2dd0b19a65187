//! `decode` on damaged input, with the inputs built here: a never-ending
//! loop in the code, a gap in the AUX data, a record that cannot be read,
//! lost records. Each is reported on stderr, counted in the summary line
//! (errors also with `--itrace=b`, which prints none), decoding goes on, and
//! the exit status is 1: the output is known to be incomplete.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use intel_pt::{Encoder, Ip, IpCompression, Packet, Tnt};
use perfdata::abi::{attr_flag, auxtrace_type, misc, sample_type as st};
use perfdata::auxtrace::IntelPtInfo;
use perfdata::*;

const PT_PMU_TYPE: u32 = 8;
const K: u64 = 0xffff_ffff_8100_0000;

/// `jz +2; nop; nop; jmp -6` at K+0x40: one TNT bit an iteration. `jmp .` at K.
fn code() -> Vec<(u64, Vec<u8>)> {
    vec![(K, vec![0xeb, 0xfe]), (K + 0x40, vec![0x74, 0x02, 0x90, 0x90, 0xeb, 0xfa])]
}

fn full(ip: u64) -> Ip {
    Ip { compression: IpCompression::Full, payload: ip, ip: Some(ip) }
}

/// Intel PT packets, encoded.
fn pt(packets: &[Packet]) -> Vec<u8> {
    let (mut enc, mut out) = (Encoder::new(), Vec::new());
    for p in packets {
        enc.encode(p, &mut out).unwrap();
    }
    out
}

/// A PSB+ at `ip`, then `bits` taken TNT bits (at most 6).
fn segment(ip: u64, bits: u8) -> Vec<Packet> {
    vec![Packet::Psb, Packet::Fup(full(ip)), Packet::PsbEnd, Packet::TntShort(Tnt { bits: (1 << bits) - 1, count: bits })]
}

/// What goes into a perf.data besides the trace.
#[derive(Default)]
struct Extra {
    /// Records lost, at time 5.
    lost: u64,
    /// A record whose body is too short for its type, before the trace.
    bad_record: bool,
    /// An AUX record with these flags, at time 6.
    aux_flags: u64,
}

/// A perf.data in `dir` with Intel PT on CPU 0: the code of [`code`] (as
/// text pokes that change nothing), and the AUXTRACE records `chunks`
/// (AUX offset, bytes) of one queue.
fn write_input(dir: &Path, chunks: &[(u64, Vec<u8>)], extra: Extra) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let flags = attr_flag::SAMPLE_ID_ALL;
    let sample_type = st::TID | st::TIME | st::CPU | st::IDENTIFIER;
    let side = EventAttr { type_: 1, size: ATTR_SIZE_VER7, sample_type, flags: flags | attr_flag::TEXT_POKE, ..EventAttr::default() };
    let pt_attr = EventAttr { type_: PT_PMU_TYPE, size: ATTR_SIZE_VER7, sample_type, flags, ..EventAttr::default() };
    let mut w =
        Writer::create(dir.join("data"), vec![AttrWithIds { attr: side, ids: vec![1] }, AttrWithIds { attr: pt_attr, ids: vec![2] }]).unwrap();
    let at = |time| SampleId { pid: Some(0), tid: Some(0), time: Some(time), cpu: Some(0), id: Some(1), ..SampleId::default() };
    let info = IntelPtInfo { pmu_type: PT_PMU_TYPE as u64, time_mult: 1, ..IntelPtInfo::default() }.to_priv_bytes();
    w.write(0, &RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: auxtrace_type::INTEL_PT, priv_data: &info }), &SampleId::default()).unwrap();
    for (addr, bytes) in code() {
        w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr, old: &bytes, new: &bytes }), &at(1)).unwrap();
    }
    if extra.lost > 0 {
        w.write(0, &RecordBody::Lost(Lost { id: 1, lost: extra.lost }), &at(5)).unwrap();
    }
    if extra.aux_flags != 0 {
        w.write(0, &RecordBody::Aux(Aux { aux_offset: 0, aux_size: 64, flags: extra.aux_flags }), &at(6)).unwrap();
    }
    if extra.bad_record {
        // An MMAP record of 16 bytes: too short for its fields.
        let mut raw = Vec::new();
        raw.extend_from_slice(&perfdata::abi::record_type::MMAP.to_le_bytes());
        raw.extend_from_slice(&0u16.to_le_bytes());
        raw.extend_from_slice(&16u16.to_le_bytes());
        raw.extend_from_slice(&[0; 8]);
        w.write_raw(&raw).unwrap();
    }
    for (offset, data) in chunks {
        let chunk = Auxtrace { offset: *offset, reference: 0, idx: 0, tid: u32::MAX, cpu: 0, data };
        w.write(0, &RecordBody::Auxtrace(chunk), &SampleId::default()).unwrap();
    }
    w.finish().unwrap();
}

/// Taken conditional branches printed (the flags field is `jcc` alone).
fn jccs(stdout: &str) -> usize {
    stdout.lines().filter(|l| l.split_whitespace().nth(2) == Some("jcc")).count()
}

fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("decode-damage").join(name)
}

fn decode(dir: &Path, itrace: &str) -> (Output, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["decode", itrace]).arg(dir).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out, stdout, stderr)
}

/// The summary line: the last of stderr.
fn summary(stderr: &str) -> &str {
    stderr.lines().last().unwrap_or("")
}

#[test]
fn a_never_ending_loop_is_one_error_and_counted_without_e() {
    let dir = scratch("loop");
    // Into `jmp .` at a PSB+, then TIPs into it (each used to start 2^20
    // instructions again); then a good segment.
    let mut packets = segment(K, 0);
    packets.pop();
    packets.extend([Packet::Tip(full(K)), Packet::Tip(full(K)), Packet::Tip(full(K))]);
    packets.extend(segment(K + 0x40, 2));
    packets.push(Packet::TipPgd(Ip { compression: IpCompression::Suppressed, payload: 0, ip: None }));
    write_input(&dir, &[(0, pt(&packets))], Extra::default());
    let (out, stdout, stderr) = decode(&dir, "--itrace=be");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.lines().count() < 3000, "{} lines", stdout.lines().count());
    let errors: Vec<&str> = stdout.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("never-ending loop") && errors[0].contains("ffffffff81000000"), "{}", errors[0]);
    assert!(summary(&stderr).contains(" 1 decode errors,"), "{stderr}");
    // The good segment after it is decoded: its two jcc.
    assert_eq!(jccs(&stdout), 2, "{stdout}");
    // Without `e`: no error line, but the error counts, and the status says so.
    let (out, stdout, stderr) = decode(&dir, "--itrace=b");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stdout.contains("never-ending"), "{stdout}");
    assert!(summary(&stderr).contains(" 1 decode errors,"), "{stderr}");
}

#[test]
fn a_gap_in_the_aux_data_is_reported_and_never_decoded_across() {
    // The first chunk stops where the walk needs a bit; the second starts
    // with bits that belong to data lost in the gap, then a PSB+.
    // (The last bit of each: no line, the trace ends before the branch
    // lands.)
    let first = pt(&segment(K + 0x40, 3));
    let mut second = pt(&[Packet::TntShort(Tnt { bits: 0b111111, count: 6 })]);
    second.extend(pt(&segment(K + 0x40, 3)));
    // Contiguous: the bits go on from the first chunk.
    let whole = scratch("contiguous");
    write_input(&whole, &[(0, first.clone()), (first.len() as u64, second.clone())], Extra::default());
    let (_, stdout, stderr) = decode(&whole, "--itrace=b");
    assert!(summary(&stderr).contains(" 0 AUX gaps,"), "{stderr}");
    assert_eq!(jccs(&stdout), 11, "{stdout}");
    // With a gap of 60 bytes: each chunk on its own, the second from its PSB.
    let gap = scratch("gap");
    let at = first.len() as u64 + 60;
    write_input(&gap, &[(0, first.clone()), (at, second)], Extra::default());
    let (out, stdout, stderr) = decode(&gap, "--itrace=b");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(jccs(&stdout), 4, "{stdout}");
    // (The writer pads each record's data to 8 bytes, as perf does: the
    // padding is not missing.)
    let end = first.len().next_multiple_of(8) as u64;
    let said = format!("AUX buffer 0 (cpu 0): {} bytes of trace missing between AUX offsets {end:#x} and {at:#x}", at - end);
    assert!(stderr.contains(&said), "{stderr}");
    assert!(summary(&stderr).contains(" 1 AUX gaps,"), "{stderr}");
    // An overlap is a break too.
    let overlap = scratch("overlap");
    write_input(&overlap, &[(0, first.clone()), (4, first)], Extra::default());
    let (out, _, stderr) = decode(&overlap, "--itrace=b");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("AUX offset 0x4 overlaps the data before it"), "{stderr}");
}

#[test]
fn a_bad_record_is_skipped_and_reported_as_by_the_other_commands() {
    let dir = scratch("bad-record");
    write_input(&dir, &[(0, pt(&segment(K + 0x40, 3)))], Extra { bad_record: true, ..Extra::default() });
    let (out, stdout, stderr) = decode(&dir, "--itrace=b");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(jccs(&stdout), 2, "{stdout}");
    assert!(summary(&stderr).contains(" 1 bad records,"), "{stderr}");
    // The record's error once, as `pokes` says it.
    let pokes = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("pokes").arg(&dir).output().unwrap();
    assert_eq!(pokes.status.code(), Some(1));
    let said = String::from_utf8_lossy(&pokes.stderr).lines().next().unwrap().replace("poketrace pokes: ", "");
    assert_eq!(stderr.matches(&said).count(), 1, "{said:?} in {stderr}");
}

#[test]
fn lost_records_and_truncated_aux_data_make_the_output_incomplete() {
    let dir = scratch("lost");
    write_input(&dir, &[(0, pt(&segment(K + 0x40, 3)))], Extra { lost: 7, ..Extra::default() });
    let (out, _, stderr) = decode(&dir, "--itrace=b");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the recording is incomplete: 7 records lost"), "{stderr}");
    assert!(summary(&stderr).contains(" 7 records lost,"), "{stderr}");
    // AUX data the kernel cut: the same.
    let cut = scratch("truncated");
    write_input(&cut, &[(0, pt(&segment(K + 0x40, 3)))], Extra { aux_flags: perfdata::abi::aux_flag::TRUNCATED, ..Extra::default() });
    let (out, _, stderr) = decode(&cut, "--itrace=b");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("AUX trace damaged: 1 records TRUNCATED"), "{stderr}");
    assert!(summary(&stderr).contains(" 1 AUX records truncated,"), "{stderr}");
    // The same trace without the loss: complete, exit 0.
    let good = scratch("good");
    write_input(&good, &[(0, pt(&segment(K + 0x40, 3)))], Extra::default());
    let (out, _, stderr) = decode(&good, "--itrace=be");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        summary(&stderr)
            .ends_with("0 decode errors, 0 bad records, 0 records lost, 0 AUX records truncated, 0 AUX gaps, 0 uncertain, image timeline"),
        "{stderr}"
    );
}
