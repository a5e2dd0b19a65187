//! Random 16-byte reads at random times over a 30 MB base with 1,000,000
//! pokes, against a plain copy from a flat buffer.
//!
//!     cargo bench -p codeimage --bench read

use std::sync::OnceLock;

use codeimage::{BaseImage, CodeTimeline, Poke, TimelineBuilder};
use divan::black_box;
use testkit::Rng;

const BASE: u64 = 0xffff_ffff_8100_0000;
const SIZE: usize = 30 << 20;
const SITES: usize = 200_000;
const POKES_PER_SITE: usize = 5;
const READS: usize = 4096;

fn main() {
    let (tl, flat, _) = fixture();
    eprintln!(
        "timeline: {} pokes, {} MiB of base, {:.1} MiB besides the base",
        tl.pokes().len(),
        flat.len() >> 20,
        tl.heap_bytes() as f64 / (1 << 20) as f64
    );
    divan::main();
}

/// The timeline, the same bytes as one flat buffer, and the reads (addr, time).
type Fixture = (CodeTimeline, Vec<u8>, Vec<(u64, u64)>);

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let flat: Vec<u8> = (0..SIZE).map(|_| rng.next() as u8).collect();
        let mut base = BaseImage::new();
        base.add_bytes(BASE, flat.clone(), "text");
        let mut b = TimelineBuilder::new(base);
        let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
        let jmp = [0xe9, 0x10, 0x00, 0x00, 0x00];
        let mut time = 0u64;
        for s in 0..SITES {
            let addr = BASE + ((rng.next() as usize % (SIZE / 64)) * 64) as u64;
            let first = &flat[(addr - BASE) as usize..][..5];
            let mut old = first.to_vec();
            for k in 0..POKES_PER_SITE {
                let new = if k % 2 == 0 { jmp } else { nop5 };
                time += 1 + (rng.next() % 1000);
                b.poke(Poke { time: time + s as u64, settled: None, addr, old: &old, new: &new, cpu: None });
                old = new.to_vec();
            }
        }
        let tl = b.build();
        let max_t = time + SITES as u64;
        let reads = (0..READS).map(|_| (BASE + rng.next() % (SIZE as u64 - 16), rng.next() % max_t)).collect();
        (tl, flat, reads)
    })
}

#[divan::bench]
fn timeline_read_into(bencher: divan::Bencher) {
    let (tl, _, reads) = fixture();
    let mut buf = [0u8; 16];
    bencher.counter(divan::counter::ItemsCount::new(READS)).bench_local(|| {
        for &(addr, t) in reads {
            black_box(tl.read_into(addr, &mut buf, t));
        }
    });
}

/// Reads that land on poked sites only: the worst case (a version search each).
#[divan::bench]
fn timeline_read_into_poked_sites(bencher: divan::Bencher) {
    let (tl, _, reads) = fixture();
    let sites: Vec<(u64, u64)> = tl.pokes().iter().step_by(tl.pokes().len() / READS).zip(reads).map(|(p, &(_, t))| (p.addr, t)).collect();
    let mut buf = [0u8; 16];
    bencher.counter(divan::counter::ItemsCount::new(sites.len())).bench_local(|| {
        for &(addr, t) in &sites {
            black_box(tl.read_into(addr, &mut buf, t));
        }
    });
}

#[divan::bench]
fn flat_copy(bencher: divan::Bencher) {
    let (_, flat, reads) = fixture();
    let mut buf = [0u8; 16];
    bencher.counter(divan::counter::ItemsCount::new(READS)).bench_local(|| {
        for &(addr, _) in reads {
            let at = (addr - BASE) as usize;
            buf.copy_from_slice(&flat[at..at + 16]);
            black_box(&buf);
        }
    });
}
