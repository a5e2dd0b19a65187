//! The timeline against a naive replay model, and its explicit uncertainty.

use std::collections::BTreeMap;

use codeimage::*;
use proptest::prelude::*;

const BASE: u64 = 0x1000;
const BASE_LEN: usize = 256;

/// The obvious model: replay every poke up to `t` over a byte map.
struct Naive {
    base: BTreeMap<u64, u8>,
    pokes: Vec<(Time, u64, Vec<u8>, Vec<u8>)>,
}

impl Naive {
    fn at(&self, t: Time) -> BTreeMap<u64, u8> {
        let mut m = self.base.clone();
        for (time, addr, old, new) in &self.pokes {
            if *time > t {
                break;
            }
            if new.is_empty() {
                for i in 0..old.len() as u64 {
                    m.remove(&(addr + i));
                }
            }
            for (i, b) in new.iter().enumerate() {
                m.insert(addr + i as u64, *b);
            }
        }
        m
    }
    fn read(&self, addr: u64, len: usize, t: Time) -> Vec<u8> {
        let m = self.at(t);
        (0..len as u64).map_while(|i| m.get(&(addr + i)).copied()).collect()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write { addr: u64, bytes: Vec<u8> },
    Create { addr: u64, bytes: Vec<u8> },
    Remove { addr: u64, len: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (BASE - 8..BASE + BASE_LEN as u64 + 8, prop::collection::vec(any::<u8>(), 1..9)).prop_map(|(addr, bytes)| Op::Write { addr, bytes }),
        2 => (0x9000u64..0x9040, prop::collection::vec(any::<u8>(), 1..24)).prop_map(|(addr, bytes)| Op::Create { addr, bytes }),
        1 => (0x9000u64..0x9040, 1usize..24).prop_map(|(addr, len)| Op::Remove { addr, len }),
    ]
}

/// Builds consistent histories: every poke's old bytes are what the model holds then.
fn build(base_bytes: &[u8], ops: &[(Time, Op)]) -> (CodeTimeline, Naive) {
    let mut base = BaseImage::new();
    base.add_bytes(BASE, base_bytes.to_vec(), "base");
    let mut naive = Naive { base: (0..BASE_LEN as u64).map(|i| (BASE + i, base_bytes[i as usize])).collect(), pokes: Vec::new() };
    let mut sorted: Vec<(Time, Op)> = ops.to_vec();
    sorted.sort_by_key(|(t, _)| *t);
    let mut b = TimelineBuilder::new(base);
    for (t, op) in sorted {
        let state = naive.at(t);
        let mapped = |a: u64, n: usize| (0..n as u64).all(|i| state.contains_key(&(a + i)));
        let (addr, old, new) = match op {
            Op::Write { addr, bytes } if mapped(addr, bytes.len()) => {
                let old: Vec<u8> = (0..bytes.len() as u64).map(|i| state[&(addr + i)]).collect();
                (addr, old, bytes)
            }
            Op::Create { addr, bytes } if (0..bytes.len() as u64).all(|i| !state.contains_key(&(addr + i))) => (addr, vec![], bytes),
            Op::Remove { addr, len } if mapped(addr, len) => (addr, (0..len as u64).map(|i| state[&(addr + i)]).collect(), vec![]),
            _ => continue,
        };
        b.poke(Poke { time: t, settled: None, addr, old: &old, new: &new, cpu: Some(0) });
        naive.pokes.push((t, addr, old, new));
    }
    (b.build(), naive)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn reads_match_naive_replay(
        base_bytes in prop::collection::vec(any::<u8>(), BASE_LEN),
        ops in prop::collection::vec((1u64..60, op()), 0..40),
        reads in prop::collection::vec((BASE - 4..BASE + BASE_LEN as u64 + 4, 1usize..20, 0u64..70), 1..40),
        far in prop::collection::vec((0x8ff0u64..0x9060, 1usize..20, 0u64..70), 1..20),
    ) {
        let (tl, naive) = build(&base_bytes, &ops);
        prop_assert!(tl.anomalies().is_empty(), "consistent history, anomalies {:?}", tl.anomalies());
        for (addr, len, t) in reads.into_iter().chain(far) {
            let want = naive.read(addr, len, t);
            let got = tl.read(addr, len, t);
            match &got {
                Read::Exact(b) => prop_assert_eq!(b, &want, "read {:#x}+{} at {}", addr, len, t),
                Read::Unmapped { .. } => prop_assert!(want.is_empty(), "unmapped but the model has {:?}", want),
                Read::Uncertain(_) => prop_assert!(false, "no pairs, no disagreement: nothing is uncertain"),
            }
            // The validity window is exact: same bytes at both of its ends, different just outside.
            let mut buf = vec![0u8; len];
            let info = tl.read_into(addr, &mut buf, t);
            prop_assert!(info.valid.contains(&t));
            prop_assert_eq!(naive.read(addr, len, info.valid.start), want.clone());
            prop_assert_eq!(naive.read(addr, len, info.valid.end - 1), want.clone());
            if info.valid.end != Time::MAX {
                // It ends where a poke touches the range (possibly rewriting the same bytes).
                let touched = tl.pokes().iter().any(|p| {
                    let n = tl.old_bytes(p).len().max(tl.new_bytes(p).len()) as u64;
                    p.time == info.valid.end && p.addr < addr + len as u64 && addr < p.addr + n
                });
                prop_assert!(touched, "window ends at {} without a poke there", info.valid.end);
            }
            // Backwards gives the same answer as forwards: reads are stateless.
            prop_assert_eq!(tl.read(addr, len, t), got);
        }
    }

    #[test]
    fn unchanging_runs_hold_at_every_time(
        base_bytes in prop::collection::vec(any::<u8>(), BASE_LEN),
        ops in prop::collection::vec((1u64..60, op()), 0..12),
        runs in prop::collection::vec((BASE - 4..BASE + BASE_LEN as u64 + 4, 1usize..300), 1..20),
    ) {
        let (tl, naive) = build(&base_bytes, &ops);
        for (addr, len) in runs {
            let got = tl.unchanging(addr, len);
            let mapped = (BASE..BASE + BASE_LEN as u64).contains(&addr);
            let rest = (BASE + BASE_LEN as u64).saturating_sub(addr) as usize;
            // The first byte any poke touches at or after `addr`.
            let first_poke = tl.pokes().iter().filter_map(|p| {
                let n = tl.old_bytes(p).len().max(tl.new_bytes(p).len()) as u64;
                (p.addr + n > addr).then_some(p.addr.max(addr))
            }).min();
            match got {
                Some(run) => {
                    prop_assert!(mapped && !run.is_empty() && run.len() <= len.min(rest));
                    for t in [0, 1, 20, 40, 59, 70] {
                        prop_assert_eq!(naive.read(addr, run.len(), t), run.to_vec(), "run {:#x}+{} at {}", addr, run.len(), t);
                    }
                    // Cut only at the region's end, the length asked, or within a granule of a poke.
                    if run.len() < len.min(rest) {
                        let cut = addr + run.len() as u64;
                        prop_assert!(first_poke.is_some_and(|p| p >= cut && p < cut + 64), "cut at {:#x}, first poke {:x?}", cut, first_poke);
                    }
                }
                None => {
                    // Unmapped, or a poke within a granule (64 bytes here) of `addr`.
                    let near = tl.pokes().iter().any(|p| {
                        let n = tl.old_bytes(p).len().max(tl.new_bytes(p).len()) as u64;
                        p.addr < addr + 64 && addr < p.addr + n + 64
                    });
                    prop_assert!(!mapped || near, "{:#x}: None, no poke near", addr);
                }
            }
        }
    }

    #[test]
    fn read_during_lists_every_content(
        base_bytes in prop::collection::vec(any::<u8>(), BASE_LEN),
        ops in prop::collection::vec((1u64..60, op()), 0..30),
        (addr, len) in (BASE..BASE + BASE_LEN as u64, 1usize..16),
        (t0, span) in (0u64..60, 0u64..30),
    ) {
        let (tl, naive) = build(&base_bytes, &ops);
        let t1 = t0 + span;
        let during = tl.read_during(addr, len, t0, t1);
        let mut want: Vec<Vec<u8>> = Vec::new();
        for t in t0..=t1 {
            let r = naive.read(addr, len, t);
            if !want.contains(&r) {
                want.push(r);
            }
        }
        let got: Vec<Vec<u8>> = during.iter().map(|(_, r)| match r { Read::Exact(b) => b.clone(), _ => Vec::new() }).collect();
        prop_assert_eq!(got, want);
        for (t, r) in &during {
            prop_assert!((t0..=t1).contains(t));
            prop_assert_eq!(&tl.read(addr, len, *t), r);
        }
    }
}

fn one_region(bytes: &[u8]) -> BaseImage {
    let mut b = BaseImage::new();
    b.add_bytes(BASE, bytes.to_vec(), "text");
    b
}

const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
const JMP: [u8; 5] = [0xe9, 0x10, 0x00, 0x00, 0x00];

#[test]
fn new_bytes_hold_from_the_poke_time_inclusive() {
    let mut b = TimelineBuilder::new(one_region(&NOP5));
    b.poke(Poke { time: 100, settled: None, addr: BASE, old: &NOP5, new: &JMP, cpu: None });
    let tl = b.build();
    assert_eq!(tl.read(BASE, 5, 99), Read::Exact(NOP5.to_vec()));
    assert_eq!(tl.read(BASE, 5, 100), Read::Exact(JMP.to_vec()));
    assert_eq!(tl.read_during(BASE, 5, 50, 150).len(), 2);
    assert_eq!(tl.read_during(BASE, 5, 100, 150).len(), 1);
    let h = tl.history(BASE);
    assert_eq!(h.len(), 2);
    assert_eq!((h[0].from, h[0].until), (0, Some(100)));
    assert_eq!(h[1].poke.unwrap().time, 100);
}

#[test]
fn a_pair_is_uncertain_between_begin_and_end() {
    let mut b = TimelineBuilder::new(one_region(&NOP5));
    b.poke(Poke { time: 100, settled: Some(200), addr: BASE, old: &NOP5, new: &JMP, cpu: None });
    let tl = b.build();
    assert_eq!(tl.read(BASE, 5, 99), Read::Exact(NOP5.to_vec()));
    assert_eq!(tl.read(BASE, 5, 150), Read::Uncertain(vec![NOP5.to_vec(), JMP.to_vec()]));
    assert_eq!(tl.read(BASE + 1, 2, 150), Read::Uncertain(vec![vec![0x10, 0], vec![0x1f, 0x44]]));
    assert_eq!(tl.read(BASE, 5, 200), Read::Exact(JMP.to_vec()));
    // The pair's two versions belong to one poke.
    assert_eq!(tl.pokes_at(BASE + 2).map(|p| (p.time, p.settled)).collect::<Vec<_>>(), [(100, Some(200))]);
    assert_eq!(tl.pokes_at(BASE + 5).count(), 0);
    let mut buf = [0u8; 5];
    let info = tl.read_into(BASE, &mut buf, 150);
    assert!(info.uncertain);
    assert_eq!(info.valid, 100..200);
}

#[test]
fn old_bytes_that_disagree_are_reported_and_followed() {
    let other = [0x66, 0x90, 0x66, 0x90, 0x90];
    let mut b = TimelineBuilder::new(one_region(&NOP5));
    // The first poke's old bytes disagree with the base: before it, the record wins.
    b.poke(Poke { time: 100, settled: None, addr: BASE, old: &other, new: &JMP, cpu: None });
    // The second disagrees with the first's new bytes: in between, either.
    b.poke(Poke { time: 200, settled: None, addr: BASE, old: &NOP5, new: &other, cpu: None });
    let tl = b.build();
    let a = tl.anomalies();
    assert_eq!(a.len(), 2);
    assert_eq!((a[0].addr, a[0].time, a[0].kind), (BASE, 100, AnomalyKind::OldBytesDiffer));
    assert_eq!((a[0].expected.as_slice(), a[0].found.as_slice()), (&NOP5[..], &other[..]));
    assert_eq!((a[1].time, a[1].expected.as_slice(), a[1].found.as_slice()), (200, &JMP[..], &NOP5[..]));
    assert_eq!(tl.read(BASE, 5, 50), Read::Exact(other.to_vec()));
    let mut both = vec![JMP.to_vec(), NOP5.to_vec()];
    both.sort();
    assert_eq!(tl.read(BASE, 5, 150), Read::Uncertain(both));
    assert_eq!(tl.read(BASE, 5, 200), Read::Exact(other.to_vec()));
}

#[test]
fn trampolines_come_and_go() {
    let tramp: Vec<u8> = (0..19).collect();
    let at = 0xa000;
    let mut b = TimelineBuilder::new(one_region(&NOP5));
    b.name_range(at, 0x1000, "out-of-line code ftrace_trampoline");
    b.poke(Poke { time: 10, settled: None, addr: at, old: &[], new: &tramp, cpu: None });
    b.poke(Poke { time: 20, settled: None, addr: at + 4, old: &tramp[4..9], new: &JMP, cpu: None });
    b.poke(Poke { time: 30, settled: None, addr: at, old: &[&tramp[..4], &JMP[..], &tramp[9..]].concat(), new: &[], cpu: None });
    let tl = b.build();
    assert!(tl.anomalies().is_empty(), "{:?}", tl.anomalies());
    match tl.read(at, 4, 5) {
        Read::Unmapped { nearest: Some(n) } => assert!(n.name.contains("ftrace_trampoline"), "{n:?}"),
        other => panic!("before creation: {other:?}"),
    }
    assert_eq!(tl.read(at, 19, 10), Read::Exact(tramp.clone()));
    assert_eq!(tl.read(at + 4, 5, 25), Read::Exact(JMP.to_vec()));
    assert!(matches!(tl.read(at, 4, 30), Read::Unmapped { .. }));
    let mut buf = [0u8; 4];
    assert_eq!(tl.read_into(at, &mut buf, 35).valid, 30..Time::MAX);
}

#[test]
fn reads_stop_at_the_end_of_mapped_code() {
    let tl = TimelineBuilder::new(one_region(&NOP5)).build();
    assert_eq!(tl.read(BASE + 3, 8, 0), Read::Exact(vec![0x00, 0x00]));
    match tl.read(BASE + 5, 1, 0) {
        Read::Unmapped { nearest: Some(n) } => assert_eq!((n.name.as_str(), n.start, n.end), ("text", BASE, BASE + 5)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn odd_input_is_defined() {
    let mut b = TimelineBuilder::new(one_region(&NOP5));
    // Crosses the region's end: the mapped part checks its old bytes, the rest is created.
    b.poke(Poke { time: 5, settled: None, addr: BASE + 3, old: &[0, 0, 7, 7], new: &[1, 2, 3, 4], cpu: None });
    // Zero-length: touches nothing.
    b.poke(Poke { time: 6, settled: None, addr: BASE, old: &[], new: &[], cpu: None });
    // Unmapped, with old bytes: reported, followed.
    b.poke(Poke { time: 7, settled: None, addr: 0x5000, old: &[9], new: &[8], cpu: None });
    // Out of time order, and lengths that differ.
    b.poke(Poke { time: 1, settled: None, addr: BASE, old: &[0x0f, 0x1f], new: &[0xcc], cpu: None });
    let tl = b.build();
    let kinds: Vec<AnomalyKind> = tl.anomalies().iter().map(|a| a.kind).collect();
    assert_eq!(kinds, vec![AnomalyKind::LengthsDiffer, AnomalyKind::NothingThere, AnomalyKind::NothingThere]);
    assert_eq!(tl.read(BASE, 1, 1), Read::Exact(vec![0xcc]));
    assert_eq!(tl.read(BASE + 3, 4, 5), Read::Exact(vec![1, 2, 3, 4]));
    assert_eq!(tl.read(BASE + 3, 4, 4), Read::Exact(vec![0, 0, 7, 7]));
    assert_eq!(tl.read(0x5000, 1, 6), Read::Exact(vec![9]));
    assert_eq!(tl.read(0x5000, 1, 7), Read::Exact(vec![8]));
}

#[test]
fn an_empty_poke_inside_another_changes_nothing() {
    let mut base = BaseImage::new();
    base.add_bytes(0x1000, vec![0x90; 16], "text");
    let mut b = TimelineBuilder::new(base);
    b.poke(Poke { time: 10, settled: None, addr: 0x1000, old: &[0x90; 4], new: &[0xcc; 4], cpu: None });
    b.poke(Poke { time: 20, settled: None, addr: 0x1001, old: &[], new: &[], cpu: None });
    let tl = b.build();
    assert_eq!(tl.read(0x1000, 4, 30), Read::Exact(vec![0xcc; 4]));
}
