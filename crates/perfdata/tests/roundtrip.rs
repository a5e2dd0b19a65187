//! Write, read, equal: every typed record, through the real file layout.

mod common;

use std::io::Cursor;

use perfdata::abi::{misc, sample_type as st};
use perfdata::*;
use proptest::prelude::*;

use common::{attr, SIDE_BAND};

fn write_all(attrs: Vec<AttrWithIds>, records: &[(u16, RecordBody<'_>, SampleId)]) -> Vec<u8> {
    let mut w = Writer::new(Cursor::new(Vec::new()), attrs).unwrap();
    w.features.hostname = Some("host".into());
    w.features.nrcpus = Some(NrCpus { available: 4, online: 2 });
    for (m, body, sid) in records {
        w.write(*m, body, sid).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}
fn name() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(1u8..=255, 0..40)
}

/// Every typed body except SAMPLE (tested separately), with owned backing data.
#[derive(Debug, Clone)]
struct Owned {
    kind: u8,
    a: u64,
    b: u64,
    c: u64,
    x: u32,
    y: u32,
    s: Vec<u8>,
    t: Vec<u8>,
}

fn owned() -> impl Strategy<Value = Owned> {
    (0u8..22, any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>(), name(), bytes(64)).prop_map(|(kind, a, b, c, x, y, s, t)| Owned {
        kind,
        a,
        b,
        c,
        x,
        y,
        s,
        t,
    })
}

fn body(o: &Owned) -> (u16, RecordBody<'_>) {
    let m = misc::KERNEL;
    match o.kind {
        0 => (m, RecordBody::Mmap(Mmap { pid: o.x, tid: o.y, addr: o.a, len: o.b, pgoff: o.c, filename: &o.s })),
        1 => (
            m,
            RecordBody::Mmap2(Mmap2 {
                pid: o.x,
                tid: o.y,
                addr: o.a,
                len: o.b,
                pgoff: o.c,
                file_id: Mmap2FileId::Inode { maj: o.x, min: o.y, ino: o.a, ino_generation: o.b },
                prot: o.x,
                flags: o.y,
                filename: &o.s,
            }),
        ),
        2 => (
            m | misc::MMAP_BUILD_ID,
            RecordBody::Mmap2(Mmap2 {
                pid: o.x,
                tid: o.y,
                addr: o.a,
                len: o.b,
                pgoff: o.c,
                file_id: Mmap2FileId::BuildId(&o.t[..o.t.len().min(20)]),
                prot: 5,
                flags: 2,
                filename: &o.s,
            }),
        ),
        3 => (m, RecordBody::Comm(Comm { pid: o.x, tid: o.y, comm: &o.s })),
        4 => (m, RecordBody::Fork(ForkExit { pid: o.x, ppid: o.y, tid: o.x ^ 1, ptid: o.y ^ 1, time: o.a })),
        5 => (m, RecordBody::Exit(ForkExit { pid: o.x, ppid: o.y, tid: 3, ptid: 4, time: o.a })),
        6 => (m, RecordBody::Lost(Lost { id: o.a, lost: o.b })),
        7 => (m, RecordBody::LostSamples(LostSamples { lost: o.a })),
        8 => (m, RecordBody::Throttle(Throttle { time: o.a, id: o.b, stream_id: o.c })),
        9 => (m, RecordBody::Unthrottle(Throttle { time: o.a, id: o.b, stream_id: o.c })),
        10 => (m, RecordBody::Aux(Aux { aux_offset: o.a, aux_size: o.b, flags: o.c })),
        11 => (m, RecordBody::ItraceStart(ItraceStart { pid: o.x, tid: o.y })),
        12 => (m | misc::SWITCH_OUT, RecordBody::Switch),
        13 => (m, RecordBody::SwitchCpuWide(SwitchCpuWide { next_prev_pid: o.x, next_prev_tid: o.y })),
        14 => (m, RecordBody::Ksymbol(Ksymbol { addr: o.a, len: o.x, ksym_type: o.y as u16 % 3, flags: (o.y >> 16) as u16 & 1, name: &o.s })),
        15 => (m, RecordBody::BpfEvent(BpfEvent { event_type: 1, flags: 0, id: o.x, tag: o.a.to_le_bytes() })),
        16 => {
            let split = o.t.len() * (o.x as usize % 5) / 4;
            let (old, new) = o.t.split_at(split.min(o.t.len()));
            (m, RecordBody::TextPoke(TextPoke { addr: o.a, old, new }))
        }
        17 => (
            0,
            RecordBody::IdIndex(IdIndex {
                entries: (0..o.x % 5).map(|i| IdIndexEntry { id: o.a + i as u64, idx: i as u64, cpu: 1, tid: o.b }).collect(),
            }),
        ),
        18 => (0, RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: 1, priv_data: &o.t[..o.t.len() / 8 * 8] })),
        19 => (0, RecordBody::Auxtrace(Auxtrace { offset: o.a, reference: o.b, idx: o.x, tid: o.y, cpu: 3, data: &o.t[..o.t.len() / 8 * 8] })),
        20 => (
            0,
            RecordBody::TimeConv(TimeConv {
                time_shift: o.a,
                time_mult: o.b,
                time_zero: o.c,
                extended: o.x.is_multiple_of(2).then_some(TimeConvExt {
                    time_cycles: o.a,
                    time_mask: o.b,
                    cap_user_time_zero: true,
                    cap_user_time_short: false,
                }),
            }),
        ),
        _ => (0, RecordBody::FinishedRound),
    }
}

proptest! {
    #[test]
    fn every_typed_record_round_trips(recs in prop::collection::vec((owned(), any::<u32>(), any::<u64>()), 1..30)) {
        let attrs = vec![
            AttrWithIds { attr: attr(SIDE_BAND), ids: vec![11, 12] },
            AttrWithIds { attr: attr(SIDE_BAND | st::IP), ids: vec![21] },
        ];
        let written: Vec<(u16, RecordBody<'_>, SampleId)> = recs
            .iter()
            .map(|(o, cpu, time)| {
                let (m, b) = body(o);
                let user = b.record_type() >= abi::record_type::USER_TYPE_START;
                let sid = if user {
                    SampleId::default()
                } else {
                    SampleId { pid: Some(o.x), tid: Some(o.y), time: Some(*time), cpu: Some(*cpu), identifier: Some(if o.x % 2 == 0 { 12 } else { 21 }), ..SampleId::default() }
                };
                (m, b, sid)
            })
            .collect();
        let file = PerfFile::from_vec(write_all(attrs.clone(), &written)).unwrap();
        prop_assert_eq!(file.attrs(), &attrs[..]);
        prop_assert_eq!(file.features().hostname.as_deref(), Some("host"));
        let read: Vec<Record<'_>> = file.records().collect::<Result<_>>().unwrap();
        prop_assert_eq!(read.len(), written.len());
        for (r, (m, b, sid)) in read.iter().zip(&written) {
            prop_assert_eq!(&r.body, b);
            prop_assert_eq!(r.misc, *m);
            prop_assert_eq!(&r.sample_id, sid);
            prop_assert_eq!(r.offset % 8, 0);
        }
        let aux = written.iter().filter(|w| matches!(w.1, RecordBody::Auxtrace(_))).count();
        prop_assert_eq!(file.features().auxtrace_index.len(), aux);
    }

    #[test]
    fn samples_round_trip(ip in any::<u64>(), addr in any::<u64>(), period in any::<u64>(), chain in prop::collection::vec(any::<u64>(), 0..8), raw_words in 0usize..4) {
        let t = st::IP | st::TID | st::TIME | st::ADDR | st::ID | st::CPU | st::PERIOD | st::CALLCHAIN | st::RAW;
        let attrs = vec![AttrWithIds { attr: attr(t), ids: vec![7] }];
        let chain_bytes: Vec<u8> = chain.iter().flat_map(|v| v.to_le_bytes()).collect();
        let raw = vec![0xabu8; raw_words * 8 + 4];
        let s = Sample {
            ip: Some(ip), pid: Some(1), tid: Some(2), time: Some(3), addr: Some(addr), id: Some(7), cpu: Some(1),
            period: Some(period), callchain: Some(&chain_bytes), raw: Some(&raw), ..Sample::default()
        };
        let data = write_all(attrs, &[(misc::USER, RecordBody::Sample(s.clone()), SampleId::default())]);
        let file = PerfFile::from_vec(data).unwrap();
        let r = file.records().next().unwrap().unwrap();
        prop_assert_eq!(r.time(), Some(3));
        prop_assert_eq!(r.body, RecordBody::Sample(s));
    }
}

#[test]
fn sorted_order_follows_rounds() {
    let attrs = vec![AttrWithIds { attr: attr(SIDE_BAND), ids: vec![1] }];
    let poke = |t: u64| {
        (
            misc::KERNEL,
            RecordBody::LostSamples(LostSamples { lost: t }),
            SampleId { time: Some(t), identifier: Some(1), pid: Some(0), tid: Some(0), cpu: Some(0), ..SampleId::default() },
        )
    };
    let records = vec![
        poke(30),
        poke(10),
        (0, RecordBody::FinishedRound, SampleId::default()),
        poke(20),
        poke(5),
        (0, RecordBody::FinishedRound, SampleId::default()),
        poke(40),
        poke(35),
    ];
    let file = PerfFile::from_vec(write_all(attrs, &records)).unwrap();
    let order: Vec<Option<u64>> = file.sorted_records().map(|r| r.unwrap().time()).collect();
    // Round 1 flushes nothing (next_flush starts at 0); round 2 flushes up to 30,
    // the largest time seen before it; the end flushes the rest.
    assert_eq!(order, vec![None, Some(5), Some(10), Some(20), Some(30), None, Some(35), Some(40)]);
}

/// Without FINISHED_ROUND, the queue still stays bounded: past its limit the
/// oldest half goes out, and a record older than what went out is counted.
#[test]
fn sorted_queue_is_bounded_without_rounds() {
    let attrs = vec![AttrWithIds { attr: attr(SIDE_BAND), ids: vec![1] }];
    let lost = |t: u64| {
        (
            misc::KERNEL,
            RecordBody::LostSamples(LostSamples { lost: t }),
            SampleId { time: Some(t), identifier: Some(1), pid: Some(0), tid: Some(0), cpu: Some(0), ..SampleId::default() },
        )
    };
    // 1000 records in time order, then one from before all of them.
    let mut records: Vec<_> = (1..=1000).map(|t| lost(t + 10)).collect();
    records.push(lost(1));
    let file = PerfFile::from_vec(write_all(attrs, &records)).unwrap();
    let mut sorted = file.sorted_records().with_queue_limit(64);
    assert_eq!(sorted.queue_limit(), 64);
    let mut times = Vec::new();
    while let Some(r) = sorted.next() {
        assert!(sorted.queued() <= 64, "{} records queued", sorted.queued());
        times.push(r.unwrap().time().unwrap());
    }
    assert_eq!(times.len(), 1001, "no record lost");
    assert!(sorted.early_flushes() > 0);
    assert_eq!(sorted.unordered_records(), 1, "the late record is counted");
    assert_ne!(times[0], 1, "the late record could not go first");
    let others: Vec<u64> = times.iter().copied().filter(|&t| t != 1).collect();
    assert!(others.windows(2).all(|w| w[0] < w[1]));
    // The default limit is large enough for real rounds.
    assert!(file.sorted_records().queue_limit() >= 100_000);
}

/// perf.data and kcore_dir hold kernel addresses and code: owner-only, as perf makes them.
#[test]
fn written_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("private-files");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let w = Writer::create(d.join("data"), vec![AttrWithIds { attr: attr(SIDE_BAND), ids: vec![1] }]).unwrap();
    w.finish().unwrap();
    assert_eq!(mode(&d.join("data")), 0o600);
    let segs = [kcore::Segment { vaddr: 0xffff_ffff_8100_0000, bytes: vec![0xcc; 16] }];
    kcore::write_kcore_dir(&d.join("kcore_dir"), kcore::Machine::X86_64, &segs, "ffffffff81000000 T _text\n", "").unwrap();
    assert_eq!(mode(&d.join("kcore_dir")), 0o700);
    for f in ["kcore", "kallsyms", "modules"] {
        assert_eq!(mode(&d.join("kcore_dir").join(f)), 0o600, "{f}");
    }
    // Without kernel code: kallsyms and modules alone, as private.
    kcore::write_kcore_dir(&d.join("no-code"), kcore::Machine::X86_64, &[], "ffffffff81000000 T _text\n", "").unwrap();
    assert_eq!(mode(&d.join("no-code")), 0o700);
    assert!(!d.join("no-code/kcore").exists(), "an empty kcore would hide kallsyms from perf");
    for f in ["kallsyms", "modules"] {
        assert_eq!(mode(&d.join("no-code").join(f)), 0o600, "{f}");
    }
}
