//! The code-window API: what each of the three sources gives for an address
//! and a window of time, and until when it holds.

use codeimage::window::{CodeSource, Content, Fetch, Interval, PerfStyle, Static};
use codeimage::{BaseImage, CodeTimeline, Poke, TimelineBuilder};

const BASE: u64 = 0x1000;
/// A poke at time 100 changes the 4 bytes here.
const POKED: u64 = 0x1010;
/// A begin/end pair changes the 4 bytes here: uncertain from 200 to 300.
const PAIR: u64 = 0x1020;

/// 64 bytes of base code (byte i is i) with the two changes.
fn timeline() -> CodeTimeline {
    let mut base = BaseImage::new();
    base.add_bytes(BASE, (0..64).collect(), "code");
    let mut b = TimelineBuilder::new(base);
    b.poke(Poke { time: 100, settled: None, addr: POKED, old: &[0x10, 0x11, 0x12, 0x13], new: &[0xa0, 0xa1, 0xa2, 0xa3], cpu: None });
    b.poke(Poke { time: 200, settled: Some(300), addr: PAIR, old: &[0x20, 0x21, 0x22, 0x23], new: &[0xb0, 0xb1, 0xb2, 0xb3], cpu: None });
    b.build()
}

/// The 16 bytes at `addr` with `patch` over their first 4.
fn bytes(addr: u64, patch: Option<[u8; 4]>) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (addr - BASE) as u8 + i as u8;
    }
    if let Some(p) = patch {
        b[..4].copy_from_slice(&p);
    }
    b
}

const OLD: Option<[u8; 4]> = None;
const NEW: Option<[u8; 4]> = Some([0xa0, 0xa1, 0xa2, 0xa3]);
const PAIR_NEW: Option<[u8; 4]> = Some([0xb0, 0xb1, 0xb2, 0xb3]);

fn fetch(src: &impl CodeSource, addr: u64, lo: u64, hi: u64, which: usize) -> (Fetch, [u8; 16]) {
    let mut buf = [0u8; 16];
    (src.fetch(addr, lo, hi, which, &mut buf), buf)
}

fn window(src: &impl CodeSource, addr: u64, lo: u64, hi: u64) -> Option<([u8; 16], usize, std::ops::Range<u64>)> {
    let mut buf = [0u8; 16];
    src.fetch_window(addr, lo, hi, &mut buf).map(|(n, w)| (buf, n, w))
}

fn candidates(src: &impl CodeSource, addr: u64, lo: u64, hi: u64) -> Vec<Content> {
    let count = match fetch(src, addr, lo, hi, 0).0 {
        Fetch::Exact(_) => 1,
        Fetch::Candidate { count, .. } => count,
        Fetch::Unmapped => 0,
    };
    let mut out = Vec::new();
    src.candidates(addr, lo, hi, count, &mut out);
    out
}

fn content(addr: u64, patch: Option<[u8; 4]>, from: u64, to: u64) -> Content {
    Content { bytes: bytes(addr, patch), len: 16, from, to }
}

#[test]
fn static_is_the_code_before_any_change_at_every_time() {
    let tl = timeline();
    let s = Static(&tl);
    assert_eq!(fetch(&s, POKED, 150, 150, 0), (Fetch::Exact(16), bytes(POKED, OLD)));
    assert_eq!(fetch(&s, POKED, 50, 150, 0), (Fetch::Exact(16), bytes(POKED, OLD)));
    assert_eq!(window(&s, POKED, 500, 600), Some((bytes(POKED, OLD), 16, 0..u64::MAX)));
    assert!(s.admits(&(0..u64::MAX), 1, u64::MAX));
    assert!(!s.reads_hi());
    assert_eq!(s.code_bytes(), 64);
    assert_eq!(candidates(&s, POKED, 50, 150), [content(POKED, OLD, 50, 150)]);
}

#[test]
fn perf_style_reads_at_lo_and_holds_while_lo_is_in_the_window() {
    let tl = timeline();
    let s = PerfStyle(&tl);
    // `hi` past the poke changes nothing: the image is read at `lo`.
    assert_eq!(fetch(&s, POKED, 50, 150, 0), (Fetch::Exact(16), bytes(POKED, OLD)));
    assert_eq!(fetch(&s, POKED, 100, 100, 0), (Fetch::Exact(16), bytes(POKED, NEW)));
    assert_eq!(window(&s, POKED, 50, 150), Some((bytes(POKED, OLD), 16, 0..100)));
    // The window of the bytes after the poke ends where the pair at PAIR (in the 16 bytes read from 0x1018) begins.
    assert_eq!(window(&s, POKED, 150, 150).map(|w| w.2), Some(100..u64::MAX));
    assert_eq!(window(&s, PAIR - 8, 150, 150).map(|w| w.2), Some(0..200));
    assert!(s.admits(&(0..100), 99, u64::MAX));
    assert!(!s.admits(&(0..100), 100, 100));
    assert!(!s.reads_hi());
    // Inside a pair's window: the older bytes, held over the pair's window.
    assert_eq!(window(&s, PAIR, 250, 250), Some((bytes(PAIR, OLD), 16, 200..300)));
}

#[test]
fn interval_is_exact_when_no_change_lands_inside() {
    let tl = timeline();
    let s = Interval(&tl);
    assert_eq!(fetch(&s, POKED, 10, 99, 0), (Fetch::Exact(16), bytes(POKED, OLD)));
    assert_eq!(fetch(&s, POKED, 100, 199, 0), (Fetch::Exact(16), bytes(POKED, NEW)));
    assert_eq!(window(&s, POKED, 10, 99), Some((bytes(POKED, OLD), 16, 0..100)));
    assert_eq!(window(&s, POKED, 10, 100), None, "the poke at 100 lands inside");
    // The window is good for every interval it admits, and no other.
    assert!(s.admits(&(0..100), 0, 99));
    assert!(!s.admits(&(0..100), 50, 100));
    assert!(!s.admits(&(50..100), 10, 60));
    assert!(s.admits(&(0..u64::MAX), 10, u64::MAX), "forever admits an unbounded hi");
    assert!(s.reads_hi());
    assert_eq!(candidates(&s, POKED, 10, 99), [content(POKED, OLD, 10, 99)]);
}

#[test]
fn interval_gives_each_content_a_change_inside_allows_with_its_times() {
    let tl = timeline();
    let s = Interval(&tl);
    assert_eq!(fetch(&s, POKED, 50, 150, 0), (Fetch::Candidate { filled: 16, count: 2 }, bytes(POKED, OLD)));
    assert_eq!(fetch(&s, POKED, 50, 150, 1), (Fetch::Candidate { filled: 16, count: 2 }, bytes(POKED, NEW)));
    assert_eq!(fetch(&s, POKED, 50, 150, 2).0, Fetch::Unmapped, "no third candidate");
    assert_eq!(candidates(&s, POKED, 50, 150), [content(POKED, OLD, 50, 99), content(POKED, NEW, 100, 150)]);
    // Unbounded: the new bytes hold to the end of the interval.
    assert_eq!(candidates(&s, POKED, 50, u64::MAX), [content(POKED, OLD, 50, 99), content(POKED, NEW, 100, u64::MAX - 1)]);
}

#[test]
fn interval_counts_each_side_of_an_uncertain_span() {
    let tl = timeline();
    let s = Interval(&tl);
    assert_eq!(window(&s, PAIR, 250, 250), None, "uncertain: not exact");
    // At one moment inside the pair's window: both contents.
    let c = candidates(&s, PAIR, 250, 250);
    assert_eq!(c.iter().map(|c| c.bytes).collect::<Vec<_>>(), [bytes(PAIR, OLD), bytes(PAIR, PAIR_NEW)]);
    // Into the settled time: the new bytes hold on after it.
    let c = candidates(&s, PAIR, 250, 400);
    assert_eq!(c, [content(PAIR, OLD, 250, 299), content(PAIR, PAIR_NEW, 250, 400)]);
    // Before the pair begins and after it settles: exact.
    assert_eq!(fetch(&s, PAIR, 0, 199, 0), (Fetch::Exact(16), bytes(PAIR, OLD)));
    assert_eq!(fetch(&s, PAIR, 300, 400, 0), (Fetch::Exact(16), bytes(PAIR, PAIR_NEW)));
}

#[test]
fn unmapped_code_is_unmapped_in_every_source() {
    let tl = timeline();
    for s in [&Static(&tl) as &dyn CodeSource, &PerfStyle(&tl), &Interval(&tl)] {
        assert_eq!(fetch(&s, 0x9000, 0, 500, 0).0, Fetch::Unmapped);
        assert_eq!(window(&s, 0x9000, 0, 500), None);
        assert!(candidates(&s, 0x9000, 0, 500).is_empty());
        assert_eq!(s.code_run(0x9000, 0, 500), None);
    }
}

#[test]
fn a_read_that_runs_out_of_code_is_cut_short() {
    let tl = timeline();
    let end = BASE + 64;
    for s in [&Static(&tl) as &dyn CodeSource, &PerfStyle(&tl), &Interval(&tl)] {
        let (f, buf) = fetch(&s, end - 8, 400, 500, 0);
        assert_eq!(f, Fetch::Exact(8));
        assert_eq!(buf[..8], bytes(end - 8, OLD)[..8]);
    }
    // Interval: the 8 bytes hold, but not "forever" (16 bytes were asked):
    // exact for a bounded window, not for an unbounded one.
    let s = Interval(&tl);
    assert_eq!(window(&s, end - 8, 400, 500).map(|w| (w.1, w.2)), Some((8, 0..u64::MAX - 1)));
    assert_eq!(window(&s, end - 8, 400, u64::MAX), None);
}

#[test]
fn code_runs_are_the_code_no_change_touches() {
    let tl = timeline();
    for s in [&Static(&tl) as &dyn CodeSource, &PerfStyle(&tl), &Interval(&tl)] {
        let (run, w) = s.code_run(BASE, 0, 500).expect("base code before the first change");
        assert!(!run.is_empty() && BASE + run.len() as u64 <= POKED, "{}", run.len());
        assert_eq!(run, &bytes(BASE, OLD)[..run.len()]);
        assert_eq!(w, 0..u64::MAX);
        assert_eq!(s.code_run(POKED, 0, 500), None, "a change touches it");
    }
}

#[test]
fn a_borrowed_source_is_the_source() {
    let tl = timeline();
    let s = Interval(&tl);
    let r = &s;
    assert_eq!(fetch(&r, POKED, 50, 150, 1), fetch(&s, POKED, 50, 150, 1));
    assert_eq!(candidates(&r, POKED, 50, 150), candidates(&s, POKED, 50, 150));
    assert_eq!(window(&r, POKED, 10, 99), window(&s, POKED, 10, 99));
    assert_eq!(r.admits(&(0..100), 50, 100), s.admits(&(0..100), 50, 100));
    assert_eq!(r.reads_hi(), s.reads_hi());
    assert_eq!(r.code_bytes(), s.code_bytes());
}
