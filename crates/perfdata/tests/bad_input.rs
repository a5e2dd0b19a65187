//! Bad input: truncated files, corrupt records, lying lengths, unknown records.
//!
//! The standard: every problem gives a `perfdata::Error` naming what and where
//! (a file offset), or a counted and reported skip. Never a panic, never an
//! allocation sized by a lying count, never silent loss, never an endless loop.
//!
//! Decisions documented here:
//! - A record whose `header.size` is not a multiple of 8 is accepted, as perf
//!   accepts it (perf only rejects sizes below the 8-byte header): the record is
//!   parsed from exactly `size` bytes and the next record starts right after it.
//! - Errors found while *opening* may name the offset a header field declares
//!   (e.g. "attrs section at 0xffff0000: needs 144 bytes, 0 left"), which can be
//!   past the end of the file; such an error is `Truncated` with 0 bytes left,
//!   or `Invalid` for the attrs section at the offset the header gives it. Errors
//!   found while *iterating* records always name an offset inside the file (at
//!   most its length).
//! - `sorted_records()` yields a record-level error at once, while records with
//!   timestamps may still be queued; those queued records are delivered after the
//!   error, so nothing read before the error is lost.
//! - COMPRESSED records form one zstd stream whose frame perf never ends, so a
//!   stream stopping inside a frame is not an error by itself; a record cut at
//!   the end of it is ("record in COMPRESSED data"). After one COMPRESSED record
//!   fails, every later one is an error too (the stream cannot resynchronise).
//! - Inputs with lying counts run under `bounded`, which watches the largest
//!   single allocation (a counting global allocator) and the time taken: a lying
//!   count must not turn into an allocation of its size.
//!
//! `fuzz_stable` (ignored by default) is a stable-toolchain mutation fuzzer over
//! the same files; crashers it finds go to `tests/regressions/`, which
//! `regressions_replay` runs on every `cargo test`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Cursor;
use std::time::{Duration, Instant};

use perfdata::abi::{feature, misc, record_type as rt, sample_type as st};
use perfdata::auxtrace::{CsEtmInfo, IntelPtInfo};
use perfdata::*;

// ---------------------------------------------------------------------------
// Allocation guard: the largest single allocation made by this thread.

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| {
        if size > l.get() {
            l.set(size)
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Largest allocation any input of these tests may cause (the zstd decoder
/// allocates its window and buffers, at most a few MiB for the frames here).
const ALLOC_LIMIT: usize = 16 << 20;

/// Runs `f`; panics if it made an allocation above `limit` bytes or ran
/// for 20 s (a hang, not a speed: speed is the benchmarks' to measure).
fn bounded<R>(what: &str, limit: usize, f: impl FnOnce() -> R) -> R {
    LARGEST.with(|l| l.set(0));
    let t = Instant::now();
    let r = f();
    let took = t.elapsed();
    let largest = LARGEST.with(|l| l.get());
    assert!(largest <= limit, "{what}: allocated {largest} bytes at once (limit {limit})");
    assert!(took < Duration::from_secs(20), "{what}: took {took:?}");
    r
}

// ---------------------------------------------------------------------------
// Building files.

use common::{attr, SIDE_BAND};

/// An attr without sample_id_all: records carry no trailer.
fn plain_attr(sample_type: u64) -> EventAttr {
    EventAttr { type_: 1, size: ATTR_SIZE_VER7, sample_type, ..EventAttr::default() }
}

fn sid(time: u64, id: u64) -> SampleId {
    SampleId { pid: Some(7), tid: Some(8), time: Some(time), cpu: Some(1), identifier: Some(id), ..SampleId::default() }
}

fn varied_attrs() -> Vec<AttrWithIds> {
    vec![
        AttrWithIds { attr: attr(SIDE_BAND | st::IP | st::PERIOD), ids: vec![11, 12] },
        AttrWithIds { attr: attr(SIDE_BAND | st::IP | st::CALLCHAIN), ids: vec![21] },
        AttrWithIds { attr: attr(SIDE_BAND), ids: vec![31, 32] },
    ]
}

fn write_records(attrs: Vec<AttrWithIds>, records: &[(u16, RecordBody<'_>, SampleId)], features: FeatureData) -> Vec<u8> {
    let mut w = Writer::new(Cursor::new(Vec::new()), attrs).unwrap();
    w.features = features;
    for (m, body, s) in records {
        w.write(*m, body, s).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// The data section of a file-mode perf.data.
fn data_section(file: &[u8]) -> &[u8] {
    let off = u64::from_le_bytes(file[40..48].try_into().unwrap()) as usize;
    let size = u64::from_le_bytes(file[48..56].try_into().unwrap()) as usize;
    &file[off..off + size]
}

fn data_offset(file: &[u8]) -> usize {
    u64::from_le_bytes(file[40..48].try_into().unwrap()) as usize
}

/// The raw bytes of records as the writer lays them out for `attrs`.
fn raw_records(attrs: Vec<AttrWithIds>, records: &[(u16, RecordBody<'_>, SampleId)]) -> Vec<u8> {
    data_section(&write_records(attrs, records, FeatureData::default())).to_vec()
}

/// A record: header then body.
fn rec(ty: u32, misc_bits: u16, body: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(8 + body.len());
    r.extend_from_slice(&ty.to_le_bytes());
    r.extend_from_slice(&misc_bits.to_le_bytes());
    r.extend_from_slice(&(8 + body.len() as u16).to_le_bytes());
    r.extend_from_slice(body);
    r
}

fn le(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A file-mode perf.data laid out by hand: header, id arrays, attrs, `data`,
/// feature table, feature payloads. Nothing is checked, so lengths can lie.
fn build(attrs: &[AttrWithIds], data: &[u8], features: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut f = vec![0u8; FILE_HEADER_SIZE as usize];
    let mut id_offs = Vec::new();
    for a in attrs {
        id_offs.push(f.len() as u64);
        f.extend(le(&a.ids));
    }
    let attrs_offset = f.len() as u64;
    let attr_size = attrs.first().map_or(ATTR_SIZE_VER7 as usize, |a| a.attr.to_bytes().len()) as u64 + 16;
    for (a, off) in attrs.iter().zip(&id_offs) {
        f.extend(a.attr.to_bytes());
        f.extend(le(&[*off, 8 * a.ids.len() as u64]));
    }
    let data_offset = f.len() as u64;
    f.extend_from_slice(data);
    let mut feats = features.to_vec();
    feats.sort_by_key(|s| s.0);
    let mut bitmap = [0u8; 32];
    let mut payload = f.len() as u64 + 16 * feats.len() as u64;
    for (bit, p) in &feats {
        bitmap[(*bit / 8) as usize] |= 1 << (bit % 8);
        f.extend(le(&[payload, p.len() as u64]));
        payload += p.len() as u64;
    }
    for (_, p) in &feats {
        f.extend_from_slice(p);
    }
    let mut h = MAGIC.to_vec();
    h.extend(le(&[FILE_HEADER_SIZE, attr_size, attrs_offset, attr_size * attrs.len() as u64, data_offset, data.len() as u64, 0, 0]));
    h.extend_from_slice(&bitmap);
    f[..FILE_HEADER_SIZE as usize].copy_from_slice(&h);
    f
}

fn put_u64(f: &mut [u8], at: usize, v: u64) {
    f[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// perf's header string: u32 length then NUL-padded bytes.
fn perf_string(s: &str) -> Vec<u8> {
    let len = (s.len() + 1).div_ceil(8) * 8;
    let mut b = (len as u32).to_le_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b.resize(4 + len, 0);
    b
}

/// A zstd frame of one raw (stored) block, built by hand.
fn zstd_raw_frame(content: &[u8]) -> Vec<u8> {
    let n = content.len();
    assert!((256..65536 + 256).contains(&n) || n < 256);
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd];
    if n < 256 {
        f.push(0x20); // Single_Segment, 1-byte Frame_Content_Size
        f.push(n as u8);
    } else {
        f.push(0x60); // Single_Segment, 2-byte Frame_Content_Size (minus 256)
        f.extend_from_slice(&((n - 256) as u16).to_le_bytes());
    }
    let block = 1 | ((n as u32) << 3); // Last_Block, Raw_Block, Block_Size
    f.extend_from_slice(&block.to_le_bytes()[..3]);
    f.extend_from_slice(content);
    f
}

/// Collects at most `cap` items; panics if the iterator does not end by then.
fn take_all<T>(it: impl Iterator<Item = T>, cap: usize, what: &str) -> Vec<T> {
    let mut v = Vec::new();
    for x in it {
        v.push(x);
        assert!(v.len() <= cap, "{what}: iteration did not end within {cap} items");
    }
    v
}

fn oks<'a>(items: &[Result<Record<'a>>]) -> Vec<Record<'a>> {
    items.iter().filter_map(|r| r.as_ref().ok().cloned()).collect()
}

fn errs<'r>(items: &'r [Result<Record<'_>>]) -> Vec<&'r Error> {
    items.iter().filter_map(|r| r.as_ref().err()).collect()
}

/// Every error from record iteration has an offset inside the file.
fn check_iter_error(e: &Error, len: usize, ctx: &str) {
    let off = e.offset().unwrap_or_else(|| panic!("{ctx}: error without offset: {e}"));
    assert!(off <= len as u64, "{ctx}: offset {off:#x} past the end {len:#x}: {e}");
    assert!(!e.to_string().is_empty());
}

/// An error from opening: has an offset; past the end only when it is the
/// offset the header declares for a region (attrs section, id array), which
/// the error then names.
fn check_open_error(e: &Error, len: usize, ctx: &str) {
    match e {
        Error::BadMagic { .. } | Error::BigEndian => return,
        _ => {}
    }
    let off = e.offset().unwrap_or_else(|| panic!("{ctx}: open error without offset: {e}"));
    if off > len as u64 {
        let declared = match e {
            Error::Truncated { available: 0, .. } => true,
            Error::Invalid { what, .. } => *what == "attrs section",
            _ => false,
        };
        assert!(declared, "{ctx}: offset {off:#x} past the end {len:#x}: {e}");
    }
}

/// Bytes a record takes in the file: header.size plus an AUXTRACE or
/// TRACING_DATA payload.
fn extent(r: &Record<'_>) -> u64 {
    r.size as u64
        + match &r.body {
            RecordBody::Auxtrace(a) => a.data.len() as u64,
            RecordBody::Other { record_type: rt::HEADER_TRACING_DATA, data } => (u32::from_le_bytes(data[..4].try_into().unwrap()) as u64 + 7) & !7,
            _ => 0,
        }
}

/// Where records are read from: the data section clamped to the file, or
/// everything after the pipe header.
fn data_range(file: &PerfFile) -> (u64, u64) {
    let len = file.bytes().len() as u64;
    match file.header() {
        Some(h) => (h.data_offset.min(len), h.data_offset.saturating_add(h.data_size).min(len)),
        None => (PIPE_HEADER_SIZE, len),
    }
}

/// Opens `bytes` and reads everything a user could: no panic, iteration ends,
/// errors have offsets, and nothing is skipped silently (records outside
/// COMPRESSED ones follow each other without gaps unless an error comes
/// between them, and without errors they cover the data section exactly).
/// Returns the records() items count (0 if it did not open).
fn exercise(bytes: Vec<u8>, ctx: &str) -> usize {
    let len = bytes.len();
    let file = match PerfFile::from_vec(bytes) {
        Ok(f) => f,
        Err(e) => {
            check_open_error(&e, len, ctx);
            return 0;
        }
    };
    let _ = format!("{:?} {:?} {:?}", file.header(), file.attrs(), file.features());
    // Records are at least 8 bytes; COMPRESSED ones can hold more, up to 256 MiB.
    let cap = len / 8 + (64 << 20) / 8;
    let mut n = 0;
    let (start, end) = data_range(&file);
    let mut expect = Some(start);
    let mut clean = true;
    for r in file.records() {
        n += 1;
        assert!(n <= cap, "{ctx}: records() did not end");
        match r {
            Ok(r) => {
                let _ = format!("{r:?}");
                if r.inner_offset.is_none() {
                    if let Some(e) = expect {
                        assert_eq!(r.offset, e, "{ctx}: bytes {e:#x}..{:#x} skipped without an error", r.offset);
                    }
                    expect = Some(r.offset + extent(&r));
                }
                if let RecordBody::AuxtraceInfo(info) = &r.body {
                    let _ = IntelPtInfo::parse(info).map(|i| i.tsc_to_perf_time(u64::MAX));
                    let _ = CsEtmInfo::parse(info);
                }
                if let RecordBody::Sample(s) = &r.body {
                    let _ = s.callchain_ips().count();
                }
            }
            Err(e) => {
                check_iter_error(&e, len, ctx);
                expect = None;
                clean = false;
            }
        }
    }
    if clean {
        assert_eq!(expect, Some(end), "{ctx}: records end before the data section does, without an error");
    }
    let mut m = 0;
    for r in file.sorted_records() {
        m += 1;
        assert!(m <= cap, "{ctx}: sorted_records() did not end");
        if let Err(e) = r {
            check_iter_error(&e, len, ctx);
        }
    }
    assert_eq!(n, m, "{ctx}: sorted_records() and records() yield different counts");
    n
}

// ---------------------------------------------------------------------------
// The varied file.

struct Varied {
    bytes: Vec<u8>,
}

fn varied() -> Varied {
    let attrs = varied_attrs();
    let chain = le(&[0xffff_ffff_8100_0010, 0x0040_1000, 0x0040_2000]);
    let text_old = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let text_new = [0xe9, 0x01, 0x02, 0x03, 0x04];
    let pt = IntelPtInfo { pmu_type: 8, time_shift: 10, time_mult: 600, tsc_bit: 10, ..IntelPtInfo::default() }.to_priv_bytes();
    let aux_a: Vec<u8> = (0u8..24).collect();
    let aux_b: Vec<u8> = (100u8..113).collect();
    let sample_a = Sample {
        identifier: Some(11),
        ip: Some(0x0040_1122),
        pid: Some(7),
        tid: Some(8),
        time: Some(150),
        cpu: Some(1),
        period: Some(1000),
        ..Sample::default()
    };
    let sample_b = Sample {
        identifier: Some(21),
        ip: Some(0xffff_ffff_8100_0010),
        pid: Some(7),
        tid: Some(8),
        time: Some(145),
        cpu: Some(0),
        callchain: Some(&chain),
        ..Sample::default()
    };
    // Records inside COMPRESSED records.
    let inner = raw_records(
        attrs.clone(),
        &[
            (misc::USER | misc::COMM_EXEC, RecordBody::Comm(Comm { pid: 9, tid: 9, comm: b"inner" }), sid(170, 31)),
            (misc::USER, RecordBody::Sample(Sample { time: Some(171), ..sample_a.clone() }), SampleId::default()),
            (0, RecordBody::FinishedRound, SampleId::default()),
        ],
    );
    // A record cut across two COMPRESSED records (perf carries the rest over).
    let split = raw_records(
        attrs.clone(),
        &[
            (misc::KERNEL, RecordBody::LostSamples(LostSamples { lost: 3 }), sid(180, 32)),
            (misc::USER, RecordBody::Comm(Comm { pid: 10, tid: 11, comm: b"straddles" }), sid(181, 31)),
            (misc::KERNEL, RecordBody::LostSamples(LostSamples { lost: 4 }), sid(182, 32)),
        ],
    );
    let cut = split.len() / 2 + 3;
    let compressed_1 = zstd_raw_frame(&inner);
    let compressed_2 = zstd::bulk::compress(&split[..cut], 1).unwrap();
    let compressed_3 = zstd_raw_frame(&split[cut..]);
    let id_index =
        IdIndex { entries: (0..5).map(|i| IdIndexEntry { id: [11, 12, 21, 31, 32][i], idx: i as u64, cpu: i as u64 % 2, tid: 8 }).collect() };
    let records: Vec<(u16, RecordBody<'_>, SampleId)> = vec![
        (0, RecordBody::TimeConv(TimeConv { time_shift: 10, time_mult: 600, time_zero: 5, extended: None }), SampleId::default()),
        (misc::USER, RecordBody::Comm(Comm { pid: 7, tid: 8, comm: b"prog" }), sid(100, 11)),
        (misc::USER, RecordBody::Fork(ForkExit { pid: 7, ppid: 1, tid: 8, ptid: 1, time: 99 }), sid(99, 31)),
        (
            misc::USER,
            RecordBody::Mmap2(Mmap2 {
                pid: 7,
                tid: 8,
                addr: 0x40_0000,
                len: 0x1000,
                pgoff: 0,
                file_id: Mmap2FileId::Inode { maj: 8, min: 1, ino: 1234, ino_generation: 1 },
                prot: 5,
                flags: 2,
                filename: b"/usr/bin/prog",
            }),
            sid(110, 31),
        ),
        (
            misc::USER,
            RecordBody::Mmap2(Mmap2 {
                pid: 7,
                tid: 8,
                addr: 0x7f00_0000_0000,
                len: 0x20_0000,
                pgoff: 0x1000,
                file_id: Mmap2FileId::BuildId(&[0xab; 20]),
                prot: 5,
                flags: 2,
                filename: b"/lib/libc.so.6",
            }),
            sid(120, 32),
        ),
        (
            misc::KERNEL,
            RecordBody::Ksymbol(Ksymbol { addr: 0xffff_ffff_c000_0000, len: 0x100, ksym_type: 1, flags: 0, name: b"bpf_prog_x" }),
            sid(130, 12),
        ),
        (misc::KERNEL, RecordBody::TextPoke(TextPoke { addr: 0xffff_ffff_8100_0000, old: &text_old, new: &text_new }), sid(140, 12)),
        (misc::USER, RecordBody::Sample(sample_a.clone()), SampleId::default()),
        (misc::KERNEL, RecordBody::Sample(sample_b), SampleId::default()),
        (0, RecordBody::FinishedRound, SampleId::default()),
        (0, RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: abi::auxtrace_type::INTEL_PT, priv_data: &pt }), SampleId::default()),
        (0, RecordBody::IdIndex(id_index), SampleId::default()),
        (0, RecordBody::Auxtrace(Auxtrace { offset: 0, reference: 77, idx: 0, tid: 8, cpu: 0, data: &aux_a }), SampleId::default()),
        (misc::KERNEL, RecordBody::Aux(Aux { aux_offset: 0, aux_size: 24, flags: 0 }), sid(155, 11)),
        (0, RecordBody::Auxtrace(Auxtrace { offset: 24, reference: 78, idx: 1, tid: 8, cpu: 1, data: &aux_b }), SampleId::default()),
        (misc::KERNEL, RecordBody::Lost(Lost { id: 12, lost: 5 }), sid(160, 12)),
        (0, RecordBody::Compressed(Compressed { data: &compressed_1 }), SampleId::default()),
        (0, RecordBody::Compressed(Compressed { data: &compressed_2 }), SampleId::default()),
        (0, RecordBody::Compressed(Compressed { data: &compressed_3 }), SampleId::default()),
        (misc::USER, RecordBody::Exit(ForkExit { pid: 7, ppid: 1, tid: 8, ptid: 1, time: 190 }), sid(190, 31)),
        (0, RecordBody::Other { record_type: 4000, data: &[1, 2, 3, 4, 5, 6, 7, 8] }, SampleId::default()),
        (0, RecordBody::FinishedRound, SampleId::default()),
    ];
    let features = FeatureData {
        hostname: Some("badhost".into()),
        osrelease: Some("6.1.0".into()),
        nrcpus: Some(NrCpus { available: 2, online: 2 }),
        cmdline: Some(vec!["perf".into(), "record".into(), "-e".into(), "intel_pt//".into()]),
        build_ids: vec![BuildIdEntry { misc: misc::USER, pid: 7, build_id: vec![0xab; 20], filename: "/lib/libc.so.6".into() }],
        event_names: Some(vec!["cycles".into(), "instructions".into(), "dummy".into()]),
        ..FeatureData::default()
    };
    Varied { bytes: write_records(attrs, &records, features) }
}

/// Where the bytes a record needs end: for records inside a COMPRESSED record,
/// the end of that COMPRESSED record.
fn container_ends(records: &[Record<'_>]) -> Vec<u64> {
    let own_end = |r: &Record<'_>| {
        r.offset
            + r.size as u64
            + match &r.body {
                RecordBody::Auxtrace(a) => a.data.len() as u64,
                _ => 0,
            }
    };
    records
        .iter()
        .map(|r| match r.inner_offset {
            None => own_end(r),
            Some(_) => {
                let c = records.iter().find(|c| c.offset == r.offset && c.inner_offset.is_none()).unwrap();
                own_end(c)
            }
        })
        .collect()
}

#[test]
fn varied_file_reads_back() {
    let v = varied();
    let file = PerfFile::from_vec(v.bytes.clone()).unwrap();
    let records: Vec<Record<'_>> = file.records().collect::<Result<_>>().unwrap();
    let f = file.features();
    assert!(f.errors.is_empty(), "{:?}", f.errors);
    assert_eq!(f.hostname.as_deref(), Some("badhost"));
    assert_eq!(f.cmdline.as_ref().unwrap().len(), 4);
    assert_eq!(f.auxtrace_index.len(), 2);
    assert_eq!(f.event_desc.len(), 3);
    assert_eq!(f.build_ids.len(), 1);
    // 22 written, 3 + 3 inside COMPRESSED records (one of them across two).
    assert_eq!(records.len(), 28);
    let inner: Vec<&Record<'_>> = records.iter().filter(|r| r.inner_offset.is_some()).collect();
    assert_eq!(inner.len(), 6);
    assert!(matches!(&inner[0].body, RecordBody::Comm(c) if c.comm == b"inner"));
    assert!(matches!(&inner[1].body, RecordBody::Sample(s) if s.time == Some(171) && s.period == Some(1000)));
    assert!(matches!(&inner[4].body, RecordBody::Comm(c) if c.comm == b"straddles"));
    assert_eq!(inner[4].time(), Some(181));
    assert!(matches!(&inner[5].body, RecordBody::LostSamples(l) if l.lost == 4));
    let pokes = records.iter().filter(|r| matches!(r.body, RecordBody::TextPoke(_))).count();
    assert_eq!(pokes, 1);
    let sorted: Vec<Record<'_>> = file.sorted_records().collect::<Result<_>>().unwrap();
    assert_eq!(sorted.len(), records.len());
}

// ---------------------------------------------------------------------------
// 1. Truncation at every byte offset.

#[test]
fn truncated_at_every_offset() {
    let full_bytes = varied().bytes;
    let full_file = PerfFile::from_vec(full_bytes.clone()).unwrap();
    let full: Vec<Record<'_>> = full_file.records().collect::<Result<_>>().unwrap();
    let ends = container_ends(&full);
    let h = *full_file.header().unwrap();
    let data_end = (h.data_offset + h.data_size) as usize;
    let len = full_bytes.len();
    let cap = len / 8 + 1000;
    for cut in 0..len {
        let ctx = format!("cut at {cut:#x}");
        let file = match PerfFile::from_vec(full_bytes[..cut].to_vec()) {
            Ok(f) => f,
            Err(e) => {
                assert!(cut < h.data_offset as usize, "{ctx}: cannot open: {e}");
                check_open_error(&e, cut, &ctx);
                continue;
            }
        };
        let items = take_all(file.records(), cap, &ctx);
        let good = oks(&items);
        let bad = errs(&items);
        let expected = ends.iter().take_while(|&&e| e <= cut as u64).count();
        assert_eq!(good.len(), expected, "{ctx}: {bad:?}");
        assert_eq!(good[..], full[..expected], "{ctx}: records before the cut differ");
        if cut < data_end {
            assert_eq!(bad.len(), 1, "{ctx}: {bad:?}");
            assert!(items.last().unwrap().is_err(), "{ctx}: the error must come last");
            let off = bad[0].offset().unwrap();
            let last_good = good.last().map_or(h.data_offset, |r| r.offset);
            assert!(last_good <= off && off <= cut as u64, "{ctx}: error at {off:#x}, last good record at {last_good:#x}: {}", bad[0]);
        } else {
            assert!(bad.is_empty(), "{ctx}: {bad:?}");
            assert_eq!(good, full);
            assert!(!file.features().errors.is_empty(), "{ctx}: a cut feature section must be reported");
        }
        // Timestamp order: the same records and the same errors, nothing lost.
        let sorted = take_all(file.sorted_records(), cap, &ctx);
        let mut sorted_good = oks(&sorted);
        let key = |r: &Record<'_>| (r.offset, r.inner_offset);
        sorted_good.sort_by_key(key);
        let mut file_order = good.clone();
        file_order.sort_by_key(key);
        assert_eq!(sorted_good, file_order, "{ctx}: sorted_records() lost or changed records");
        let e1: Vec<String> = bad.iter().map(|e| e.to_string()).collect();
        let e2: Vec<String> = errs(&sorted).iter().map(|e| e.to_string()).collect();
        assert_eq!(e1, e2, "{ctx}");
    }
}

// ---------------------------------------------------------------------------
// 2. Random byte flips.

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One mutation of `seed`: byte flips, interesting values, cuts, splices.
fn mutate(rng: &mut XorShift, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    let n = 1 + rng.below(8);
    for _ in 0..n {
        if b.is_empty() {
            break;
        }
        let at = rng.below(b.len());
        match rng.below(10) {
            0..=5 => b[at] ^= 1 + rng.below(255) as u8,
            6 => {
                let v: [u8; 8] = match rng.below(6) {
                    0 => u64::MAX.to_le_bytes(),
                    1 => 0u64.to_le_bytes(),
                    2 => (u32::MAX as u64).to_le_bytes(),
                    3 => 0xffffu64.to_le_bytes(),
                    4 => (rng.below(256) as u64).to_le_bytes(),
                    _ => (b.len() as u64 + rng.below(64) as u64).to_le_bytes(),
                };
                let w = [1, 2, 4, 8][rng.below(4)];
                let end = (at + w).min(b.len());
                b[at..end].copy_from_slice(&v[..end - at]);
            }
            7 => b.truncate(at),
            8 => {
                let from = rng.below(b.len());
                let n = rng.below(64).min(b.len() - from);
                let chunk = b[from..from + n].to_vec();
                b.splice(at..at, chunk);
            }
            _ => {
                let n = rng.below(64).min(b.len() - at);
                b.drain(at..at + n);
            }
        }
    }
    b
}

#[test]
fn random_byte_flips() {
    let seed = varied().bytes;
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut opened = 0;
    for i in 0..2000 {
        let mut b = seed.clone();
        for _ in 0..1 + rng.below(8) {
            let at = rng.below(b.len());
            b[at] ^= 1 + rng.below(255) as u8;
        }
        if exercise(b, &format!("flip variant {i}")) > 0 {
            opened += 1;
        }
    }
    assert!(opened > 1000, "most variants should still open ({opened})");
    // Structural mutations too (cuts, splices, interesting values).
    for i in 0..1000 {
        let b = mutate(&mut rng, &seed);
        exercise(b, &format!("mutation {i}"));
    }
}

// ---------------------------------------------------------------------------
// 3. Lying lengths.

/// A file with one attr (no sample_id trailer) and these raw records.
fn plain_file(sample_type: u64, data: &[u8]) -> Vec<u8> {
    build(&[AttrWithIds { attr: plain_attr(sample_type), ids: vec![1] }], data, &[])
}

fn comm(name: &[u8]) -> Vec<u8> {
    let mut b = le(&[(8u64 << 32) | 7]);
    b.extend_from_slice(name);
    b.resize((b.len() + 1).div_ceil(8) * 8, 0);
    rec(rt::COMM, misc::USER, &b)
}

fn read(file: &PerfFile) -> Vec<Result<Record<'_>>> {
    take_all(file.records(), 100_000, "records")
}

#[test]
fn text_poke_lengths_past_the_record() {
    let mut poke = le(&[0xffff_ffff_8100_0000]);
    poke.extend_from_slice(&40u16.to_le_bytes()); // old_len
    poke.extend_from_slice(&40u16.to_le_bytes()); // new_len: 80 bytes, 12 are there
    poke.extend_from_slice(&[0x90; 12]);
    let mut data = comm(b"before");
    let poke_at = data.len() as u64;
    data.extend(rec(rt::TEXT_POKE, misc::KERNEL, &poke));
    data.extend(comm(b"after"));
    let bytes = plain_file(0, &data);
    let base = data_offset(&bytes) as u64;
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), 3);
    match items[1].as_ref().unwrap_err() {
        e @ Error::Invalid { what: "TEXT_POKE", offset, .. } => {
            assert!((base + poke_at..base + poke_at + 32).contains(offset), "{e}");
            assert!(e.to_string().contains("TEXT_POKE") && e.to_string().contains("old_len 40"), "{e}");
        }
        other => panic!("expected Invalid TEXT_POKE, got {other:?}"),
    }
    assert!(matches!(&items[2].as_ref().unwrap().body, RecordBody::Comm(c) if c.comm == b"after"));
}

#[test]
fn header_size_below_8_stops() {
    for size in [0u16, 1, 7] {
        let mut data = comm(b"before");
        let bad_at = data.len();
        let mut bad = rec(rt::COMM, 0, &[0; 8]);
        bad[6..8].copy_from_slice(&size.to_le_bytes());
        data.extend(bad);
        data.extend(comm(b"never"));
        let bytes = plain_file(0, &data);
        let base = data_offset(&bytes) as u64;
        let file = PerfFile::from_vec(bytes).unwrap();
        let items = read(&file);
        assert_eq!(items.len(), 2, "size {size}: {items:?}");
        assert!(items[0].is_ok());
        let e = items[1].as_ref().unwrap_err();
        assert!(matches!(e, Error::Invalid { .. }), "{e}");
        assert_eq!(e.offset(), Some(base + bad_at as u64), "{e}");
        assert!(e.to_string().contains(&format!("size {size}")), "{e}");
        // Timestamp order stops the same way.
        assert_eq!(take_all(file.sorted_records(), 100, "sorted").len(), 2);
    }
}

#[test]
fn size_past_end_of_data() {
    let mut data = comm(b"before");
    let bad_at = data.len();
    let mut bad = comm(b"liar");
    bad[6..8].copy_from_slice(&0xfff8u16.to_le_bytes());
    data.extend(bad);
    // Bytes after the data section (the feature table) must not be read as the record.
    let bytes = build(&[AttrWithIds { attr: plain_attr(0), ids: vec![1] }], &data, &[(feature::HOSTNAME, perf_string("h"))]);
    let base = data_offset(&bytes) as u64;
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), 2);
    match items[1].as_ref().unwrap_err() {
        Error::Truncated { what: "COMM", offset, needed: 0xfff8, available, .. } => {
            assert_eq!(*offset, base + bad_at as u64);
            assert_eq!(*available, 24);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(file.features().hostname.as_deref(), Some("h"));
}

/// Decision: sizes that are not a multiple of 8 are accepted, as perf accepts
/// them; the record is read from exactly `size` bytes and the next record
/// starts right after, unaligned.
#[test]
fn size_not_a_multiple_of_8_is_accepted() {
    let mut body = le(&[(8u64 << 32) | 7]);
    body.extend_from_slice(b"odd\0\0"); // 13 bytes: size 21
    let mut data = rec(rt::COMM, misc::USER, &body);
    data.extend(rec(rt::FINISHED_ROUND, 0, &[]));
    data.extend(rec(rt::LOST, 0, &le(&[1, 2]))); // at an unaligned offset
    let mut broken = rec(rt::LOST, 0, &[0; 3]); // size 11: too short for LOST's fields
    broken.extend(comm(b"last"));
    data.extend(broken);
    let bytes = plain_file(0, &data);
    let base = data_offset(&bytes) as u64;
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), 5, "{items:?}");
    let r0 = items[0].as_ref().unwrap();
    assert_eq!(r0.size, 21);
    assert!(matches!(&r0.body, RecordBody::Comm(c) if c.comm == b"odd"));
    assert_eq!(items[1].as_ref().unwrap().offset, base + 21);
    assert!(matches!(items[2].as_ref().unwrap().body, RecordBody::Lost(Lost { id: 1, lost: 2 })));
    // A short odd-sized record is an error naming it, and reading goes on.
    let e = items[3].as_ref().unwrap_err();
    assert!(matches!(e, Error::Truncated { what: "LOST", .. }), "{e}");
    assert_eq!(e.offset(), Some(base + 21 + 8 + 24 + 8), "{e}");
    assert!(matches!(&items[4].as_ref().unwrap().body, RecordBody::Comm(c) if c.comm == b"last"));
}

#[test]
fn feature_sections_past_the_end() {
    let data = comm(b"x");
    let good = build(
        &[AttrWithIds { attr: plain_attr(0), ids: vec![1] }],
        &data,
        &[(feature::HOSTNAME, perf_string("host")), (feature::OSRELEASE, perf_string("6.1"))],
    );
    let table = data_offset(&good) + data.len();
    let len = good.len() as u64;
    let lies: [(&str, usize, u64); 4] = [
        ("offset past the end", table, len + 100),
        ("size past the end", table + 8, 1 << 40),
        ("offset + size overflows", table + 16, u64::MAX - 4),
        ("size u64::MAX", table + 24, u64::MAX),
    ];
    for (name, at, v) in lies {
        let mut b = good.clone();
        put_u64(&mut b, at, v);
        let file = bounded(name, ALLOC_LIMIT, || PerfFile::from_vec(b)).unwrap();
        let f = file.features();
        assert_eq!(f.errors.len(), 1, "{name}: {:?}", f.errors);
        assert!(f.errors[0].contains("HOSTNAME") || f.errors[0].contains("OSRELEASE"), "{name}: {:?}", f.errors);
        assert!(f.hostname.is_some() != f.osrelease.is_some(), "{name}: the other section is still read");
        assert_eq!(read(&file).len(), 1);
    }
    // The section table itself beyond the end (data_size lies by a little).
    let mut b = good.clone();
    put_u64(&mut b, 48, (len - data_offset(&good) as u64) - 8);
    let file = PerfFile::from_vec(b).unwrap();
    assert!(!file.features().errors.is_empty());
    assert!(file.features().errors[0].contains("feature section table"), "{:?}", file.features().errors);
}

#[test]
fn attr_sizes_inconsistent() {
    let attrs = [AttrWithIds { attr: plain_attr(0), ids: vec![1, 2] }, AttrWithIds { attr: plain_attr(0), ids: vec![3] }];
    let good = build(&attrs, &comm(b"x"), &[]);
    assert_eq!(PerfFile::from_vec(good.clone()).unwrap().attrs().len(), 2);
    let attrs_off = u64::from_le_bytes(good[24..32].try_into().unwrap());
    let first_entry = attrs_off as usize;
    let cases: [(&str, usize, u64); 8] = [
        ("attr_size does not divide attrs_size", 16, 150),
        ("attr_size below VER0 + 16", 16, 8),
        ("attr_size 0", 16, 0),
        ("attr_size u64::MAX", 16, u64::MAX),
        ("attrs_size past the end", 32, 144 * 1000),
        ("attrs_offset past the end", 24, 1 << 50),
        ("id array past the end", first_entry + 128, 1 << 40),
        ("id array size not a multiple of 8", first_entry + 136, 12),
    ];
    for (name, at, v) in cases {
        let mut b = good.clone();
        put_u64(&mut b, at, v);
        let len = b.len();
        let e = match bounded(name, ALLOC_LIMIT, || PerfFile::from_vec(b)) {
            Err(e) => e,
            Ok(_) => panic!("{name}: opened"),
        };
        check_open_error(&e, len, name);
        let s = e.to_string();
        assert!(s.contains("attr"), "{name}: {s}");
        assert!(matches!(e, Error::Invalid { .. } | Error::Truncated { .. }), "{name}: {e:?}");
    }
    // Two attrs sharing an id array is odd but harmless.
    let mut b = good.clone();
    put_u64(&mut b, first_entry + 144 + 128, FILE_HEADER_SIZE);
    put_u64(&mut b, first_entry + 144 + 136, 16);
    let file = PerfFile::from_vec(b).unwrap();
    assert_eq!(file.attrs()[1].ids, vec![1, 2]);
}

#[test]
fn many_attrs_sharing_one_big_id_array() {
    // 3000 attrs, each claiming the whole file as its id array: without a
    // bound the ids would take 3000 x the file size.
    let n = 3000;
    let attrs: Vec<AttrWithIds> = (0..n).map(|i| AttrWithIds { attr: plain_attr(st::IDENTIFIER), ids: vec![i] }).collect();
    let mut b = build(&attrs, &comm(b"x"), &[]);
    let len = b.len() as u64;
    let first_entry = u64::from_le_bytes(b[24..32].try_into().unwrap()) as usize;
    for i in 0..n as usize {
        put_u64(&mut b, first_entry + i * 144 + 128, 0);
        put_u64(&mut b, first_entry + i * 144 + 136, len / 8 * 8);
    }
    let e = bounded("shared id arrays", ALLOC_LIMIT, || PerfFile::from_vec(b)).err().expect("must not open");
    assert!(matches!(e, Error::Invalid { what: "attr id array", .. }), "{e:?}");
    assert!(e.offset().unwrap() < len, "{e}");
}

#[test]
fn many_attrs_are_not_quadratic() {
    // 40000 attrs (5.8 MB of attrs section), in a file and as pipe-mode
    // HEADER_ATTRs: every record found by its ID. (The lookup tables are
    // built in linear time; quadratic, each read took over 2 s in a debug
    // build. Speed is the benchmarks' to measure, not this test's.)
    let n = 40_000u64;
    let attrs: Vec<AttrWithIds> = (0..n).map(|i| AttrWithIds { attr: plain_attr(st::IDENTIFIER | st::IP), ids: vec![i] }).collect();
    let data = [rec(rt::SAMPLE, 0, &le(&[n - 1, 0x1234])), comm(b"x")].concat();
    let file = PerfFile::from_vec(build(&attrs, &data, &[])).unwrap();
    let items = read(&file);
    assert!(matches!(&items[0].as_ref().unwrap().body, RecordBody::Sample(s) if s.ip == Some(0x1234)));
    let mut pipe = MAGIC.to_vec();
    pipe.extend(le(&[PIPE_HEADER_SIZE]));
    for a in &attrs {
        pipe.extend(header_attr(&a.attr, &a.ids));
    }
    pipe.extend(&data);
    let file = PerfFile::from_vec(pipe).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), n as usize + 2);
}

#[test]
fn huge_counts_in_records() {
    let cases: Vec<(&str, u64, Vec<u8>, &str)> = vec![
        ("ID_INDEX nr u64::MAX", 0, rec(rt::ID_INDEX, 0, &le(&[u64::MAX, 1, 2, 3, 4])), "ID_INDEX"),
        ("ID_INDEX nr 2^59", 0, rec(rt::ID_INDEX, 0, &le(&[1 << 59, 1, 2, 3, 4])), "ID_INDEX"),
        ("callchain nr u64::MAX", st::IP | st::CALLCHAIN, rec(rt::SAMPLE, 0, &le(&[0x1000, u64::MAX, 1, 2])), "SAMPLE"),
        ("callchain nr 2^61", st::IP | st::CALLCHAIN, rec(rt::SAMPLE, 0, &le(&[0x1000, 1 << 61, 1, 2])), "SAMPLE"),
        ("branch stack nr huge", st::BRANCH_STACK, rec(rt::SAMPLE, 0, &le(&[u64::MAX / 3, 0])), "SAMPLE"),
        ("stack_user size huge", st::STACK_USER, rec(rt::SAMPLE, 0, &le(&[u64::MAX, 0])), "SAMPLE"),
        ("aux sample size huge", st::AUX, rec(rt::SAMPLE, 0, &le(&[u64::MAX - 7, 0])), "SAMPLE"),
        ("read group nr huge", st::READ, rec(rt::SAMPLE, 0, &le(&[u64::MAX, 0])), "SAMPLE"),
        ("raw size u32::MAX", st::RAW, rec(rt::SAMPLE, 0, &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]), "SAMPLE"),
        ("HEADER_ATTR size u32::MAX", 0, rec(rt::HEADER_ATTR, 0, &le(&[u64::MAX, 0])), "ATTR"),
    ];
    for (name, sample_type, bad, what) in cases {
        let mut data = comm(b"before");
        let bad_at = data.len() as u64;
        data.extend(bad);
        data.extend(comm(b"after"));
        let mut a = plain_attr(sample_type);
        a.read_format = abi::read_format::GROUP;
        let bytes = build(&[AttrWithIds { attr: a, ids: vec![1] }], &data, &[]);
        let base = data_offset(&bytes) as u64;
        let file = PerfFile::from_vec(bytes).unwrap();
        let items = bounded(name, ALLOC_LIMIT, || read(&file));
        assert_eq!(items.len(), 3, "{name}: {items:?}");
        let e = items[1].as_ref().unwrap_err();
        let off = e.offset().unwrap();
        assert!((base + bad_at..base + bad_at + 40).contains(&off), "{name}: {e}");
        assert!(e.to_string().contains(what), "{name}: {e}");
        assert!(items[2].is_ok(), "{name}: the record after is still read");
    }
}

#[test]
fn auxtrace_size_u64_max() {
    for size in [u64::MAX, u64::MAX - 7, 1 << 40, 4096] {
        let mut data = comm(b"before");
        let bad_at = data.len() as u64;
        data.extend(rec(rt::AUXTRACE, 0, &le(&[size, 0, 0, 0, 0])));
        data.extend(comm(b"after"));
        let bytes = plain_file(0, &data);
        let base = data_offset(&bytes) as u64;
        let file = PerfFile::from_vec(bytes).unwrap();
        let items = bounded("AUXTRACE size", ALLOC_LIMIT, || read(&file));
        // The payload framing is broken: reading stops there.
        assert_eq!(items.len(), 2, "{size:#x}: {items:?}");
        match items[1].as_ref().unwrap_err() {
            Error::Truncated { what: "AUXTRACE", offset, needed, .. } => {
                assert_eq!(*offset, base + bad_at);
                assert_eq!(*needed, size);
            }
            other => panic!("{size:#x}: {other:?}"),
        }
    }
    // An AUXTRACE record too short to hold its size field.
    let mut data = comm(b"before");
    data.extend(rec(rt::AUXTRACE, 0, &[]));
    let file = PerfFile::from_vec(plain_file(0, &data)).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), 2);
    assert!(items[1].as_ref().unwrap_err().to_string().contains("AUXTRACE"));
}

#[test]
fn huge_counts_in_features() {
    let data = comm(b"x");
    let mut cmdline = u32::MAX.to_le_bytes().to_vec();
    cmdline.extend(perf_string("perf"));
    let mut event_desc = u32::MAX.to_le_bytes().to_vec();
    let attr136 = EventAttr { size: 136, ..plain_attr(0) };
    event_desc.extend(136u32.to_le_bytes());
    event_desc.extend(attr136.to_bytes());
    event_desc.extend(1u32.to_le_bytes());
    event_desc.extend(perf_string("cycles"));
    event_desc.extend(le(&[1]));
    let mut desc_ids = 1u32.to_le_bytes().to_vec();
    desc_ids.extend(136u32.to_le_bytes());
    desc_ids.extend(attr136.to_bytes());
    desc_ids.extend(u32::MAX.to_le_bytes());
    desc_ids.extend(perf_string("cycles"));
    let mut desc_attr = 1u32.to_le_bytes().to_vec();
    desc_attr.extend(u32::MAX.to_le_bytes());
    let mut string = u32::MAX.to_le_bytes().to_vec();
    string.extend(b"abc\0");
    let mut build_id = rec(rt::HEADER_BUILD_ID, 0, &[0; 4]);
    build_id[6..8].copy_from_slice(&0xffffu16.to_le_bytes());
    let cases: Vec<(&str, u32, Vec<u8>)> = vec![
        ("CMDLINE nr u32::MAX", feature::CMDLINE, cmdline),
        ("EVENT_DESC nr u32::MAX", feature::EVENT_DESC, event_desc),
        ("EVENT_DESC nr_ids u32::MAX", feature::EVENT_DESC, desc_ids),
        ("EVENT_DESC attr_size u32::MAX", feature::EVENT_DESC, desc_attr),
        ("AUXTRACE index nr u64::MAX", feature::AUXTRACE, le(&[u64::MAX, 0, 48])),
        ("HOSTNAME length u32::MAX", feature::HOSTNAME, string),
        ("BUILD_ID entry size 0xffff", feature::BUILD_ID, build_id),
        ("NRCPUS too short", feature::NRCPUS, vec![1, 0, 0, 0]),
    ];
    for (name, bit, payload) in cases {
        let bytes = build(&[AttrWithIds { attr: plain_attr(0), ids: vec![1] }], &data, &[(bit, payload)]);
        let file = bounded(name, ALLOC_LIMIT, || PerfFile::from_vec(bytes)).unwrap();
        let f = file.features();
        assert_eq!(f.errors.len(), 1, "{name}: {:?}", f.errors);
        assert!(f.errors[0].contains(feature_name(bit)), "{name}: {:?}", f.errors);
        assert!(f.errors[0].contains("offset 0x"), "{name}: {:?}", f.errors);
        assert_eq!(read(&file).len(), 1, "{name}: records are still read");
    }
}

// ---------------------------------------------------------------------------
// 4. Magic, empty, pipe mode.

#[test]
fn magic_and_empty() {
    let mut b = varied().bytes;
    b[..8].copy_from_slice(b"2ELIFREP");
    assert!(matches!(PerfFile::from_vec(b.clone()), Err(Error::BigEndian)));
    b[..8].copy_from_slice(b"GARBAGE!");
    assert!(matches!(PerfFile::from_vec(b.clone()), Err(Error::BadMagic { magic }) if &magic == b"GARBAGE!"));
    for n in 0..16 {
        let e = PerfFile::from_vec(MAGIC[..n.min(8)].iter().copied().chain(std::iter::repeat_n(0, n.saturating_sub(8))).collect());
        let e = e.err().unwrap_or_else(|| panic!("{n} bytes opened"));
        assert!(matches!(e, Error::Truncated { what: "perf.data header", offset: 0 | 8, .. }), "{n} bytes: {e:?}");
    }
    // Header size neither 104 nor 16.
    let mut b = MAGIC.to_vec();
    b.extend(le(&[105]));
    let e = PerfFile::from_vec(b).err().unwrap();
    assert_eq!(e.offset(), Some(8), "{e}");
    // An empty file on disk.
    let dir = std::env::temp_dir().join(format!("perfdata-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("empty.data");
    std::fs::write(&path, b"").unwrap();
    let e = PerfFile::open(&path).err().expect("an empty file must not open");
    assert!(matches!(e, Error::Truncated { offset: 0, .. }), "{e:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn header_attr(a: &EventAttr, ids: &[u64]) -> Vec<u8> {
    let mut body = a.to_bytes();
    body.extend(le(ids));
    rec(rt::HEADER_ATTR, 0, &body)
}

fn pipe_file() -> Vec<u8> {
    let a1 = EventAttr { sample_type: st::IDENTIFIER | st::IP | st::TID | st::TIME, ..attr(0) };
    let a2 = EventAttr { sample_type: st::IDENTIFIER | st::TID | st::TIME | st::PERIOD, ..attr(0) };
    let mut b = MAGIC.to_vec();
    b.extend(le(&[PIPE_HEADER_SIZE]));
    b.extend(header_attr(&a1, &[1]));
    b.extend(header_attr(&a2, &[2, 3]));
    b.extend(rec(rt::SAMPLE, misc::USER, &le(&[1, 0x4000, (8 << 32) | 7, 500])));
    b.extend(rec(rt::SAMPLE, misc::USER, &le(&[3, (8 << 32) | 7, 400, 12345])));
    // COMM with the trailer TID, TIME, IDENTIFIER.
    b.extend(rec(rt::COMM, misc::USER, &[le(&[(8 << 32) | 7]), b"pipe\0\0\0\0".to_vec(), le(&[(8 << 32) | 7, 300, 2])].concat()));
    b.extend(rec(rt::FINISHED_ROUND, 0, &[]));
    b.extend(rec(rt::HEADER_FEATURE, 0, &le(&[3, 0])));
    b
}

#[test]
fn pipe_mode_by_hand() {
    let a1 = EventAttr { sample_type: st::IDENTIFIER | st::IP | st::TID | st::TIME, ..attr(0) };
    let file = PerfFile::from_vec(pipe_file()).unwrap();
    assert!(file.is_pipe());
    assert!(file.header().is_none());
    assert!(file.attrs().is_empty());
    let mut it = file.records();
    let items: Vec<Record<'_>> = it.by_ref().collect::<Result<_>>().unwrap();
    assert_eq!(it.attrs().len(), 2);
    assert_eq!(items.len(), 7);
    assert!(matches!(&items[0].body, RecordBody::HeaderAttr(h) if h.attr.sample_type == a1.sample_type));
    match &items[2].body {
        RecordBody::Sample(s) => {
            assert_eq!((s.ip, s.pid, s.tid, s.time), (Some(0x4000), Some(7), Some(8), Some(500)));
        }
        other => panic!("{other:?}"),
    }
    match &items[3].body {
        RecordBody::Sample(s) => {
            assert_eq!((s.identifier, s.ip, s.time, s.period), (Some(3), None, Some(400), Some(12345)));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&items[4].body, RecordBody::Comm(c) if c.comm == b"pipe"));
    assert_eq!(items[4].time(), Some(300));
    assert_eq!(items[4].sample_id.identifier, Some(2));
    assert!(matches!(items[6].body, RecordBody::Other { record_type: rt::HEADER_FEATURE, .. }));
    assert_eq!(items[2].offset, PIPE_HEADER_SIZE + 2 * (8 + 128) + 8 * 3);
    let times: Vec<Option<u64>> = file.sorted_records().map(|r| r.unwrap().time()).collect();
    // ATTRs, FINISHED_ROUND (which flushes nothing yet) and FEATURE come at once;
    // the timed records at the end, in time order.
    assert_eq!(times, vec![None, None, None, None, Some(300), Some(400), Some(500)]);
    // Every cut of a pipe-mode stream: the records before the cut, then an error.
    let full = file.bytes().to_vec();
    for cut in 16..full.len() {
        let f = PerfFile::from_vec(full[..cut].to_vec()).unwrap();
        let items = take_all(f.records(), 100, "pipe cut");
        let good = oks(&items);
        assert_eq!(good[..], items_prefix(&items, &file)[..], "pipe cut at {cut}");
        let is_boundary = items.iter().all(|r| r.is_ok());
        if !is_boundary {
            assert!(items.last().unwrap().is_err());
            let off = items.last().unwrap().as_ref().unwrap_err().offset().unwrap();
            assert!(off <= cut as u64);
        }
    }
}

fn items_prefix<'a>(items: &[Result<Record<'_>>], file: &'a PerfFile) -> Vec<Record<'a>> {
    let n = items.iter().filter(|r| r.is_ok()).count();
    file.records().take(n).map(|r| r.unwrap()).collect()
}

#[test]
fn pipe_mode_sample_before_any_attr() {
    let mut b = MAGIC.to_vec();
    b.extend(le(&[PIPE_HEADER_SIZE]));
    b.extend(rec(rt::SAMPLE, 0, &le(&[1, 2])));
    b.extend(header_attr(&plain_attr(st::IP), &[1]));
    b.extend(rec(rt::SAMPLE, 0, &le(&[0x1234])));
    let file = PerfFile::from_vec(b).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), 3);
    let e = items[0].as_ref().unwrap_err();
    assert_eq!(e.offset(), Some(PIPE_HEADER_SIZE + 8), "{e}");
    assert!(e.to_string().contains("no attr"), "{e}");
    assert!(matches!(&items[2].as_ref().unwrap().body, RecordBody::Sample(s) if s.ip == Some(0x1234)));
}

#[test]
fn unknown_record_types_are_kept_whole() {
    let mut data = rec(5000, 3, &[1, 2, 3, 4, 5, 6, 7, 8]);
    data.extend(rec(63, 0, &[9; 16])); // unknown kernel type
    data.extend(rec(u32::MAX, 0, &[]));
    let file = PerfFile::from_vec(plain_file(0, &data)).unwrap();
    let items: Vec<Record<'_>> = read(&file).into_iter().collect::<Result<_>>().unwrap();
    assert_eq!(items.len(), 3);
    assert!(matches!(items[0].body, RecordBody::Other { record_type: 5000, data: [1, 2, 3, 4, 5, 6, 7, 8] }));
    assert!(matches!(items[1].body, RecordBody::Other { record_type: 63, data } if data.len() == 16));
    assert!(matches!(items[2].body, RecordBody::Other { record_type: u32::MAX, data: [] }));
}

// ---------------------------------------------------------------------------
// 5. COMPRESSED records.

fn compressed_file(frames: &[Vec<u8>]) -> (Vec<u8>, Vec<u64>) {
    let mut data = comm(b"before");
    let mut offs = Vec::new();
    for f in frames {
        offs.push(data.len() as u64);
        data.extend(rec(rt::COMPRESSED, 0, f));
    }
    data.extend(comm(b"after"));
    let bytes = plain_file(0, &data);
    let base = data_offset(&bytes) as u64;
    (bytes, offs.into_iter().map(|o| o + base).collect())
}

#[test]
fn compressed_garbage_is_a_decompress_error() {
    let cases =
        [("zeros", vec![0u8; 16]), ("text", b"not zstd at all!".to_vec()), ("reserved bit", vec![0x28, 0xb5, 0x2f, 0xfd, 0x08, 0x00, 0x00, 0x00])];
    for (name, garbage) in cases {
        let (bytes, offs) = compressed_file(&[garbage]);
        let file = PerfFile::from_vec(bytes).unwrap();
        let items = read(&file);
        assert_eq!(items.len(), 3, "{name}: {items:?}");
        match items[1].as_ref().unwrap_err() {
            Error::Decompress { offset, .. } => assert_eq!(*offset, offs[0], "{name}"),
            other => panic!("{name}: {other:?}"),
        }
        assert!(matches!(&items[2].as_ref().unwrap().body, RecordBody::Comm(c) if c.comm == b"after"), "{name}");
    }
}

/// perf compresses with ZSTD_compressStream + ZSTD_flushStream and never ends
/// the frame, so a stream that stops inside a frame is normal. A frame cut
/// inside a record still shows: the cut record is reported at the end.
#[test]
fn compressed_stream_ending_mid_frame() {
    let frame = zstd_raw_frame(&[comm(b"whole"), comm(b"cut here")].concat());
    let (bytes, offs) = compressed_file(&[frame[..frame.len() - 5].to_vec()]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = read(&file);
    let names: Vec<&[u8]> = oks(&items)
        .into_iter()
        .filter_map(|r| match r.body {
            RecordBody::Comm(c) => Some(c.comm),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec![&b"before"[..], b"whole", b"after"]);
    let errors = errs(&items);
    assert_eq!(errors.len(), 1, "{items:?}");
    assert!(matches!(errors[0], Error::Truncated { what: "record in COMPRESSED data", available: 27, .. }), "{:?}", errors[0]);
    assert!(errors[0].offset().unwrap() > offs[0]);
    // Only a frame header, no block: nothing to decode and nothing reported.
    let (bytes, _) = compressed_file(&[vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38]]);
    let file = PerfFile::from_vec(bytes).unwrap();
    assert_eq!(read(&file).into_iter().filter(|r| r.is_ok()).count(), 3);
}

#[test]
fn compressed_failure_poisons_the_rest_of_the_stream() {
    // After a failed COMPRESSED record the stream cannot be resynchronised:
    // every later one is an error too, naming its own offset.
    let (bytes, offs) = compressed_file(&[vec![0u8; 16], zstd_raw_frame(&comm(b"later"))]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let errors: Vec<Option<u64>> = errs(&read(&file)).iter().map(|e| e.offset()).collect();
    assert_eq!(errors, vec![Some(offs[0]), Some(offs[1])]);
}

#[test]
fn compressed_auxtrace_with_lying_payload() {
    // An AUXTRACE inside decompressed data whose payload size is past the end:
    // an error at its inner offset; the following COMPRESSED records still read.
    let inner = [comm(b"one"), rec(rt::AUXTRACE, 0, &le(&[u64::MAX - 7, 0, 0, 0, 0])), comm(b"gone")].concat();
    let (bytes, offs) = compressed_file(&[zstd_raw_frame(&inner), zstd_raw_frame(&comm(b"next"))]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = bounded("compressed AUXTRACE", ALLOC_LIMIT, || read(&file));
    let errors = errs(&items);
    assert_eq!(errors.len(), 1, "{items:?}");
    assert!(matches!(errors[0], Error::Truncated { what: "AUXTRACE", inner: Some(24), .. }), "{:?}", errors[0]);
    assert_eq!(errors[0].offset(), Some(offs[0]));
    let names: Vec<&[u8]> = oks(&items)
        .into_iter()
        .filter_map(|r| match r.body {
            RecordBody::Comm(c) => Some(c.comm),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec![&b"before"[..], b"one", b"next", b"after"]);
}

#[test]
fn compressed_frames_yield_their_records() {
    let inner = [comm(b"one"), rec(rt::LOST, 0, &le(&[5, 6])), comm(b"two")].concat();
    let fast = zstd::bulk::compress(&inner, 1).unwrap();
    let best = zstd::bulk::compress(&inner, 19).unwrap();
    for (name, frame) in [("by hand", zstd_raw_frame(&inner)), ("zstd level 1", fast), ("zstd level 19", best)] {
        let (bytes, offs) = compressed_file(std::slice::from_ref(&frame));
        let file = PerfFile::from_vec(bytes).unwrap();
        let items: Vec<Record<'_>> = read(&file).into_iter().collect::<Result<_>>().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(items.len(), 6, "{name}");
        assert!(matches!(items[1].body, RecordBody::Compressed(_)));
        assert!(matches!(&items[2].body, RecordBody::Comm(c) if c.comm == b"one"), "{name}");
        assert_eq!((items[2].offset, items[2].inner_offset), (offs[0], Some(0)));
        assert!(matches!(items[3].body, RecordBody::Lost(Lost { id: 5, lost: 6 })));
        assert_eq!(items[3].inner_offset, Some(inner.len() as u64 - 24 - 24));
        assert!(matches!(&items[4].body, RecordBody::Comm(c) if c.comm == b"two"));
        assert!(matches!(&items[5].body, RecordBody::Comm(c) if c.comm == b"after"));
    }
    // Two frames back to back in one COMPRESSED record.
    let two = [zstd_raw_frame(&comm(b"a")), zstd_raw_frame(&comm(b"b"))].concat();
    let (bytes, _) = compressed_file(&[two]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items: Vec<Record<'_>> = read(&file).into_iter().collect::<Result<_>>().unwrap();
    assert_eq!(items.len(), 5);
    // One zstd frame continued from one COMPRESSED record into the next (perf
    // compresses one stream), with a record cut between their outputs.
    let inner = [comm(b"one"), comm(b"two"), comm(b"three")].concat();
    let frame = zstd_raw_frame(&inner);
    let (a, b) = frame.split_at(frame.len() / 2);
    let (bytes, offs) = compressed_file(&[a.to_vec(), b.to_vec()]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items: Vec<Record<'_>> = read(&file).into_iter().collect::<Result<_>>().unwrap();
    let names: Vec<(&[u8], u64)> = items
        .iter()
        .filter_map(|r| match &r.body {
            RecordBody::Comm(c) => Some((c.comm, r.offset)),
            _ => None,
        })
        .collect();
    let base = offs[0] - 24;
    assert_eq!(
        names,
        vec![(&b"before"[..], base), (b"one", offs[0]), (b"two", offs[1]), (b"three", offs[1]), (b"after", offs[1] + 8 + b.len() as u64)]
    );
}

#[test]
fn compressed_inner_errors_name_the_inner_offset() {
    // A bad record inside decompressed data: the error names the COMPRESSED
    // record and the offset inside; the next inner record is still read.
    let mut poke = le(&[0]);
    poke.extend([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    let inner = [comm(b"one"), rec(rt::TEXT_POKE, 0, &poke), comm(b"two")].concat();
    let (bytes, offs) = compressed_file(&[zstd_raw_frame(&inner)]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), 6);
    match items[3].as_ref().unwrap_err() {
        e @ Error::Invalid { what: "TEXT_POKE", offset, inner: Some(i), .. } => {
            assert_eq!(*offset, offs[0]);
            assert!((24..48).contains(i), "{e}");
            assert!(e.to_string().contains("decompressed"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&items[4].as_ref().unwrap().body, RecordBody::Comm(c) if c.comm == b"two"));
    // A bad header size inside: the rest of that COMPRESSED record is dropped
    // with an error, and reading goes on after it.
    let mut bad = comm(b"x");
    bad[6..8].copy_from_slice(&3u16.to_le_bytes());
    let inner = [comm(b"one"), bad, comm(b"lost")].concat();
    let (bytes, offs) = compressed_file(&[zstd_raw_frame(&inner)]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = read(&file);
    assert_eq!(items.len(), 5, "{items:?}");
    let e = items[3].as_ref().unwrap_err();
    assert_eq!(e.offset(), Some(offs[0]));
    assert!(matches!(e, Error::Invalid { inner: Some(24), .. }), "{e:?}");
    assert!(matches!(&items[4].as_ref().unwrap().body, RecordBody::Comm(c) if c.comm == b"after"));
    // A partial record at the end of the last COMPRESSED record is reported.
    let inner = [comm(b"one"), comm(b"cut")[..12].to_vec()].concat();
    let (bytes, _) = compressed_file(&[zstd_raw_frame(&inner)]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = read(&file);
    let e = items.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(e, Error::Truncated { what: "record in COMPRESSED data", available: 12, .. }), "{e:?}");
}

/// A zstd frame of `blocks` RLE blocks of 128 KiB each; `declared` sets the
/// 8-byte Frame_Content_Size.
fn zstd_rle_bomb(blocks: usize, declared: Option<u64>) -> Vec<u8> {
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd];
    match declared {
        Some(n) => {
            f.push(0xc0); // 8-byte Frame_Content_Size, with a window descriptor
            f.push(7 << 3); // window 128 KiB
            f.extend_from_slice(&n.to_le_bytes());
        }
        None => {
            f.push(0x00);
            f.push(7 << 3);
        }
    }
    for i in 0..blocks {
        let last = (i + 1 == blocks) as u32;
        let h = last | (1 << 1) | (128 << 10 << 3);
        f.extend_from_slice(&h.to_le_bytes()[..3]);
        f.push(b'A');
    }
    f
}

#[test]
fn zstd_bomb_declared() {
    // Declares 1 TiB; must fail without decoding it all.
    let (bytes, offs) = compressed_file(&[zstd_rle_bomb(4, Some(1 << 40))]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let items = bounded("declared bomb", ALLOC_LIMIT, || read(&file));
    match items[1].as_ref().unwrap_err() {
        Error::Decompress { offset, .. } => assert_eq!(*offset, offs[0]),
        other => panic!("{other:?}"),
    }
    assert!(items.last().unwrap().is_ok());
}

#[test]
fn zstd_bomb_undeclared() {
    // 2049 RLE blocks of 128 KiB: 256 MiB + 128 KiB from 8 KiB, no size declared.
    let (bytes, offs) = compressed_file(&[zstd_rle_bomb(2049, None)]);
    let file = PerfFile::from_vec(bytes).unwrap();
    let t = Instant::now();
    let items = read(&file);
    match items[1].as_ref().unwrap_err() {
        e @ Error::Decompress { offset, .. } => {
            assert_eq!(*offset, offs[0]);
            assert!(e.to_string().contains("more than"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&items[2].as_ref().unwrap().body, RecordBody::Comm(c) if c.comm == b"after"));
    eprintln!("undeclared zstd bomb rejected in {:?}", t.elapsed());
}

// ---------------------------------------------------------------------------
// 6. Crashers found by fuzzing, and the stable-toolchain fuzzer.

/// A SAMPLE with every sample_type field, variable-size ones included.
fn every_sample_field_file() -> Vec<u8> {
    use abi::read_format as rf;
    let all = st::IP
        | st::TID
        | st::TIME
        | st::ADDR
        | st::READ
        | st::CALLCHAIN
        | st::ID
        | st::CPU
        | st::PERIOD
        | st::STREAM_ID
        | st::RAW
        | st::BRANCH_STACK
        | st::REGS_USER
        | st::STACK_USER
        | st::WEIGHT
        | st::DATA_SRC
        | st::IDENTIFIER
        | st::TRANSACTION
        | st::REGS_INTR
        | st::PHYS_ADDR
        | st::AUX
        | st::CGROUP
        | st::DATA_PAGE_SIZE
        | st::CODE_PAGE_SIZE;
    let a = EventAttr {
        read_format: rf::TOTAL_TIME_ENABLED | rf::ID | rf::GROUP,
        branch_sample_type: abi::BRANCH_SAMPLE_HW_INDEX,
        sample_regs_user: 0b11,
        sample_regs_intr: 0b1,
        ..attr(all)
    };
    let other = EventAttr { read_format: rf::TOTAL_TIME_RUNNING | rf::LOST, ..attr(SIDE_BAND | st::READ | st::REGS_USER) };
    let attrs = vec![AttrWithIds { attr: a, ids: vec![1] }, AttrWithIds { attr: other, ids: vec![2] }];
    let read = le(&[1, 100, 5, 1]);
    let chain = le(&[0x1000, 0x2000]);
    let raw = [1u8, 2, 3, 4];
    let branch = le(&[1, 0, 0x10, 0x20, 0]);
    let regs_user = le(&[2, 7, 8]);
    let stack = le(&[16, 0xaa, 0xbb, 16]);
    let regs_intr = le(&[2, 9]);
    let aux = [5u8; 8];
    let full = Sample {
        identifier: Some(1),
        ip: Some(0x4000),
        pid: Some(7),
        tid: Some(8),
        time: Some(10),
        addr: Some(0xdead),
        id: Some(1),
        stream_id: Some(1),
        cpu: Some(3),
        period: Some(1),
        read: Some(&read),
        callchain: Some(&chain),
        raw: Some(&raw),
        branch_stack: Some(&branch),
        regs_user: Some(&regs_user),
        stack_user: Some(&stack),
        weight: Some(4),
        data_src: Some(5),
        transaction: Some(6),
        regs_intr: Some(&regs_intr),
        phys_addr: Some(7),
        aux: Some(&aux),
        cgroup: Some(8),
        data_page_size: Some(4096),
        code_page_size: Some(4096),
    };
    let read2 = le(&[50, 60, 0]);
    let regs0 = le(&[0]);
    let small = Sample {
        identifier: Some(2),
        pid: Some(7),
        tid: Some(8),
        time: Some(9),
        cpu: Some(0),
        read: Some(&read2),
        regs_user: Some(&regs0),
        ..Sample::default()
    };
    let cs = CsEtmInfo {
        version: 1,
        pmu_type: 9,
        snapshot: 0,
        cpus: vec![perfdata::auxtrace::CsEtmCpu { magic: abi::cs_etm_magic::ETMV4, cpu: 0, params: vec![1, 0x10, 3] }],
    };
    let cs = cs.to_priv_bytes();
    write_records(
        attrs,
        &[
            (misc::USER, RecordBody::Sample(full), SampleId::default()),
            (misc::USER, RecordBody::Sample(small), SampleId::default()),
            (0, RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: abi::auxtrace_type::CS_ETM, priv_data: &cs }), SampleId::default()),
            (misc::KERNEL, RecordBody::Throttle(Throttle { time: 11, id: 1, stream_id: 1 }), sid(11, 2)),
            (misc::KERNEL, RecordBody::BpfEvent(BpfEvent { event_type: 1, flags: 0, id: 3, tag: [1; 8] }), sid(12, 2)),
            (misc::KERNEL | misc::SWITCH_OUT, RecordBody::Switch, sid(13, 2)),
            (misc::KERNEL, RecordBody::SwitchCpuWide(SwitchCpuWide { next_prev_pid: 1, next_prev_tid: 2 }), sid(14, 2)),
            (misc::KERNEL, RecordBody::ItraceStart(ItraceStart { pid: 7, tid: 8 }), sid(15, 2)),
            (misc::KERNEL, RecordBody::Mmap(Mmap { pid: 7, tid: 8, addr: 0x1000, len: 0x1000, pgoff: 0, filename: b"[vdso]" }), sid(16, 2)),
            (0, RecordBody::FinishedInit, SampleId::default()),
        ],
        FeatureData {
            arch: Some("x86_64".into()),
            cpudesc: Some("cpu".into()),
            cpuid: Some("GenuineIntel,6,85,4".into()),
            version: Some("6.1".into()),
            ..FeatureData::default()
        },
    )
}

/// A long run of records in one zstd stream, split over COMPRESSED records
/// the way perf writes them.
fn compressed_stream_file() -> Vec<u8> {
    let attrs = varied_attrs();
    let names: Vec<Vec<u8>> = (0..200).map(|i| format!("thread-{i}").into_bytes()).collect();
    let records: Vec<(u16, RecordBody<'_>, SampleId)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (misc::USER, RecordBody::Comm(Comm { pid: i as u32, tid: i as u32, comm: n }), sid(1000 + i as u64, 31)))
        .collect();
    let raw = raw_records(attrs.clone(), &records);
    let stream = zstd::bulk::compress(&raw, 3).unwrap();
    let chunks: Vec<&[u8]> = stream.chunks(300).collect();
    let mut body: Vec<(u16, RecordBody<'_>, SampleId)> =
        chunks.iter().map(|c| (0, RecordBody::Compressed(Compressed { data: c }), SampleId::default())).collect();
    body.push((0, RecordBody::FinishedRound, SampleId::default()));
    write_records(attrs, &body, FeatureData::default())
}

/// The valid files the fuzzers start from.
fn seed_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("varied", varied().bytes),
        ("pipe", pipe_file()),
        ("every_sample_field", every_sample_field_file()),
        ("compressed_stream", compressed_stream_file()),
    ]
}

#[test]
fn seed_files_read_cleanly() {
    for (name, bytes) in seed_files() {
        let file = PerfFile::from_vec(bytes).unwrap();
        assert!(file.features().errors.is_empty(), "{name}: {:?}", file.features().errors);
        let records: Vec<Record<'_>> = file.records().collect::<Result<_>>().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(records.len() >= 7, "{name}");
        for r in &records {
            if let RecordBody::AuxtraceInfo(info) = &r.body {
                match info.auxtrace_type {
                    abi::auxtrace_type::INTEL_PT => assert_eq!(IntelPtInfo::parse(info).unwrap().pmu_type, 8),
                    _ => assert_eq!(CsEtmInfo::parse(info).unwrap().cpus[0].trace_id(), Some(0x10)),
                }
            }
        }
        if name == "every_sample_field" {
            let RecordBody::Sample(s) = &records[0].body else { panic!("{:?}", records[0]) };
            assert_eq!((s.code_page_size, s.aux.map(|a| a.len())), (Some(4096), Some(8)));
            assert_eq!(s.callchain_ips().collect::<Vec<_>>(), vec![0x1000, 0x2000]);
            let RecordBody::Sample(s) = &records[1].body else { panic!() };
            assert_eq!(s.read.map(|r| r.len()), Some(24));
        }
        if name == "compressed_stream" {
            let comms = records.iter().filter(|r| matches!(r.body, RecordBody::Comm(_))).count();
            assert_eq!(comms, 200);
        }
    }
}

/// Writes the seed files for `cargo fuzz run read fuzz/seeds/read`:
/// `cargo test -p perfdata --test bad_input -- --ignored write_fuzz_seeds`.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/read");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seed_files() {
        std::fs::write(dir.join(format!("{name}.data")), bytes).unwrap();
    }
}

fn regressions_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions")
}

#[test]
fn regressions_replay() {
    let Ok(dir) = std::fs::read_dir(regressions_dir()) else { return };
    let mut n = 0;
    for entry in dir {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        exercise(bytes, &path.display().to_string());
        n += 1;
    }
    eprintln!("replayed {n} regression inputs");
}

/// Stable-toolchain fuzzing: `PERFDATA_FUZZ_ITERS=200000 cargo test --release
/// -p perfdata --test bad_input -- --ignored fuzz_stable --nocapture`.
/// Mutates the varied file and the regression inputs; any panic is saved to
/// `tests/regressions/crash-<hash>` and fails the test.
#[test]
#[ignore]
fn fuzz_stable() {
    let iters: u64 = std::env::var("PERFDATA_FUZZ_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let seed: u64 = std::env::var("PERFDATA_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x2545_f491_4f6c_dd1d);
    let mut corpus: Vec<Vec<u8>> = seed_files().into_iter().map(|(_, b)| b).collect();
    // Regression inputs, and a libFuzzer corpus if given (PERFDATA_FUZZ_CORPUS=fuzz/corpus/read).
    let extra = std::env::var_os("PERFDATA_FUZZ_CORPUS").map(std::path::PathBuf::from);
    for dir in std::iter::once(regressions_dir()).chain(extra) {
        if let Ok(dir) = std::fs::read_dir(dir) {
            for e in dir.flatten() {
                if e.path().is_file() && e.path().extension().is_none_or(|x| x != "md") {
                    corpus.push(std::fs::read(e.path()).unwrap());
                }
            }
        }
    }
    let seeds = corpus.len();
    eprintln!("fuzz_stable: {seeds} seed inputs");
    let mut rng = XorShift(seed | 1);
    std::panic::set_hook(Box::new(|_| {}));
    let mut crashes = Vec::new();
    let t = Instant::now();
    for i in 0..iters {
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, base);
        let copy = input.clone();
        let r = std::panic::catch_unwind(move || exercise(copy, "fuzz"));
        if let Err(p) = r {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
            let path = regressions_dir().join(format!("crash-{hash:016x}"));
            std::fs::create_dir_all(regressions_dir()).unwrap();
            std::fs::write(&path, &input).unwrap();
            crashes.push(format!("{}: {msg:?}", path.display()));
        } else if rng.below(50) == 0 && corpus.len() < seeds + 64 {
            corpus.push(input);
        }
        if i % 20_000 == 0 {
            eprintln!("fuzz_stable: {i} iterations, {:?}, {} crashes", t.elapsed(), crashes.len());
        }
    }
    let _ = std::panic::take_hook();
    eprintln!("fuzz_stable: {iters} iterations in {:?}", t.elapsed());
    assert!(crashes.is_empty(), "crashers saved:\n{}", crashes.join("\n"));
}
