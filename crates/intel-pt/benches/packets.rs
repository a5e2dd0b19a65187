//! Packet decoding speed against libipt's packet decoder (`pt_pkt_next`) and
//! the `iptr-decoder` crate, on the same inputs in the same run; and the PSB
//! scan that splits a buffer for parallel decode.
//!
//!     cargo bench -p intel-pt --bench packets
//!     PACKETS_BENCH_INPUT=sim_kernel cargo bench -p intel-pt --bench packets   # one input only
//!     PACKETS_BENCH_INSNS=2000000 cargo bench -p intel-pt --bench packets      # simulated instructions per CPU
//!     PACKETS_BENCH_REPS=0 cargo bench ...   # no summary table (for callgrind)
//!
//! The inputs (every one decodes to the same packet count in each decoder,
//! checked before timing):
//!
//! - `random`: a 32 MiB random dense mix of every packet kind libipt and
//!   iptr-decoder both know (`tests/common/mod.rs` `random_stream`).
//! - `sim_kernel`: what the simulator traces on 4 CPUs walking its generated
//!   kernel (`--protocol none --pokes 0`, TSC every 200 ns, PSB+ every 4 KiB),
//!   the CPUs' buffers one after the other: mostly TNT and compressed TIPs.
//! - `sim_kernel_mtc_cyc`: the same with MTC (`--mtc-freq 3`) and CYC
//!   (`--cyc --cyc-thresh 1`) timing, as `perf record -e intel_pt/cyc/`.
//! - `usr_bin_perf`: random walks through /usr/bin/perf's code (`simulate
//!   --elf`; skipped without the file).
//!
//! The decoders (each in a function of its own, for `callgrind
//! --toggle-collect`; each runs once in the fixture's cross-check):
//!
//! - `ours` / `intel_pt`: `PacketDecoder::next_packet`, folding each
//!   packet's main fields as a flow decoder would;
//! - `ours_visit` / `intel_pt_visit`: `PacketDecoder::visit` with a visitor
//!   that writes only `packet`, folding the same fields;
//! - `intel_pt::__scan::quick`: the flow walk's way, `next_quick` for the
//!   common packets (no `Packet` built), `next_packet` for the rest;
//! - `intel_pt::__scan::skip`: packet boundaries only (`skip_packet`, the
//!   flow walk's look-ahead for the next TSC); less work than the others;
//! - `libipt`: `pt_pkt_next` into a `pt_packet`;
//! - `iptr`: `iptr_decoder::decode` with a handler whose every callback
//!   hands all its arguments to `black_box`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::mem::{size_of, zeroed};
use std::num::NonZero;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use intel_pt::{find_psb, Packet, PacketDecoder, PacketKind, PacketVisitor, PSB};
use iptr_decoder::{DecoderContext, IpReconstructionPattern, PtwPayload};

const SIZE: usize = 32 << 20;
const INPUTS: [&str; 4] = ["random", "sim_kernel", "sim_kernel_mtc_cyc", "usr_bin_perf"];
const PERF: &str = "/usr/bin/perf";

struct Fixture {
    trace: Vec<u8>,
    packets: usize,
}

fn main() {
    for input in INPUTS {
        if let Some(f) = fixture(input) {
            eprintln!(
                "{input}: {:.2} MB, {} packets, {:.2} bytes per packet; {}",
                f.trace.len() as f64 / 1e6,
                f.packets,
                f.trace.len() as f64 / f.packets as f64,
                mix(&f.trace)
            );
        }
    }
    divan::main();
    summary();
}

/// `None` when the input is skipped: not the one `PACKETS_BENCH_INPUT`
/// names, or no /usr/bin/perf.
fn fixture(input: &str) -> Option<&'static Fixture> {
    if std::env::var("PACKETS_BENCH_INPUT").is_ok_and(|only| only != input) {
        return None;
    }
    static F: [OnceLock<Option<Fixture>>; 4] = [const { OnceLock::new() }; 4];
    let i = INPUTS.iter().position(|&n| n == input).expect("an input");
    F[i].get_or_init(|| {
        let trace = match input {
            // No PEBS-via-PT packets, which libipt does not know, nor
            // CFE/EVD, some of whose types iptr-decoder rejects.
            "random" => common::random_stream(&mut common::Rng(0x243f_6a88_85a3_08d3), SIZE, common::Kinds { pebs: false, event_trace: false }),
            "sim_kernel" => simulated(input, None, None),
            "sim_kernel_mtc_cyc" => simulated(input, Some((3, 1)), None),
            "usr_bin_perf" => simulated(input, None, Some(Path::new(PERF).is_file().then_some(Path::new(PERF))?)),
            _ => unreachable!(),
        };
        let packets = ours(&trace);
        assert_eq!(packets, ours_visit(&trace), "{input}: visit sees every packet");
        assert_eq!(packets, intel_pt::__scan::quick(&trace).unwrap().0, "{input}: next_quick sees every packet");
        assert_eq!(packets, intel_pt::__scan::skip(&trace).unwrap().0, "{input}: skip_packet sees every packet");
        assert_eq!(packets, libipt(&trace), "{input}: libipt sees every packet");
        assert_eq!(packets, iptr(&trace), "{input}: iptr-decoder sees every packet");
        Some(Fixture { trace, packets })
    })
    .as_ref()
}

/// A simulated run's Intel PT (4 CPUs, static code), the CPUs' buffers
/// one after the other (each starts at a PSB); `elf`: walks through that
/// file's code; `timing`: MTC frequency and CYC threshold. The run is kept
/// in `CARGO_TARGET_TMPDIR/packets/NAME` and simulated again only when its
/// configuration changed (same seed, same bytes), so that a run under
/// callgrind does not simulate.
fn simulated(name: &str, timing: Option<(u8, u8)>, elf: Option<&Path>) -> Vec<u8> {
    let insns = std::env::var("PACKETS_BENCH_INSNS").ok().and_then(|s| s.parse().ok()).unwrap_or(8_000_000);
    let cfg = sim::SimConfig {
        cpus: 4,
        protocol: sim::Protocol::None,
        pokes: 0,
        instructions: insns,
        mtc_freq: timing.map(|t| t.0),
        cyc_thresh: timing.map(|t| t.1),
        ..Default::default()
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("packets").join(name);
    if sim::read_summary(&dir).map_or(true, |s| s.config != cfg) {
        let _ = std::fs::remove_dir_all(&dir);
        match elf {
            None => sim::simulate(&cfg, &dir),
            Some(elf) => sim::simulate_elf(&cfg, elf, &dir),
        }
        .expect("simulate");
    }
    let file = perfdata::PerfFile::open(&dir).expect("perf.data");
    let mut aux = vec![Vec::new(); cfg.cpus as usize];
    for r in file.records() {
        if let perfdata::RecordBody::Auxtrace(a) = r.expect("record").body {
            aux[a.cpu as usize].extend_from_slice(a.data);
        }
    }
    aux.concat()
}

/// The packet kinds over 1% of the packets, most common first, and how IP
/// packets are compressed.
fn mix(trace: &[u8]) -> String {
    let mut kinds: BTreeMap<PacketKind, usize> = BTreeMap::new();
    let mut ipbytes = [0usize; 8];
    let mut dec = PacketDecoder::new(trace);
    let mut n = 0;
    while let Some((_, p)) = dec.next_packet().unwrap() {
        *kinds.entry(p.kind()).or_default() += 1;
        if let Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) = p {
            ipbytes[usize::from(ip.compression.ipbytes())] += 1;
        }
        n += 1;
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    let pct = |c: usize, of: usize| 100.0 * c as f64 / of as f64;
    let mut s: Vec<String> = kinds.iter().filter(|k| pct(k.1, n) >= 1.0).map(|(k, c)| format!("{k} {:.1}%", pct(*c, n))).collect();
    let ips: usize = ipbytes.iter().sum();
    s.push(format!("IP packets by IPBytes 0/1/2/3/4/6: {}", [0, 1, 2, 3, 4, 6].map(|i| format!("{:.1}%", pct(ipbytes[i], ips))).join("/")));
    s.join(", ")
}

/// A packet's main fields, as a flow decoder would use them, folded into one
/// number.
#[inline(always)]
fn fold(p: Packet) -> u64 {
    match p {
        Packet::TntShort(t) | Packet::TntLong(t) => t.bits ^ u64::from(t.count),
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => ip.ip.unwrap_or(1),
        Packet::Tsc(v) | Packet::Cyc(v) | Packet::Mnt(v) | Packet::Vmcs(v) => v,
        Packet::Mtc(v) | Packet::Cbr(v) => u64::from(v),
        _ => 1,
    }
}

/// Decodes every packet and uses its main fields, as a flow decoder would.
#[inline(never)]
fn ours(trace: &[u8]) -> usize {
    let mut dec = PacketDecoder::new(trace);
    let (mut n, mut acc) = (0, 0u64);
    while let Some((_, p)) = dec.next_packet().unwrap() {
        acc = acc.wrapping_add(fold(p));
        n += 1;
    }
    black_box(acc);
    n
}

/// [`ours`] through `PacketDecoder::visit`: the same fold, in a visitor that
/// writes only `packet`.
#[inline(never)]
fn ours_visit(trace: &[u8]) -> usize {
    struct Fold {
        n: usize,
        acc: u64,
    }
    impl PacketVisitor for Fold {
        #[inline(always)]
        fn packet(&mut self, _: usize, p: Packet) -> ControlFlow<()> {
            self.acc = self.acc.wrapping_add(fold(p));
            self.n += 1;
            ControlFlow::Continue(())
        }
    }
    let mut f = Fold { n: 0, acc: 0 };
    assert!(PacketDecoder::new(trace).visit(&mut f).unwrap().is_continue());
    black_box(f.acc);
    f.n
}

#[inline(never)]
fn ours_quick(trace: &[u8]) -> usize {
    let (n, acc) = intel_pt::__scan::quick(trace).unwrap();
    black_box(acc);
    n
}

#[inline(never)]
fn ours_skip(trace: &[u8]) -> usize {
    let (n, acc) = intel_pt::__scan::skip(trace).unwrap();
    black_box(acc);
    n
}

#[inline(never)]
fn libipt(trace: &[u8]) -> usize {
    use libipt_sys::*;
    let mut n = 0;
    // SAFETY: the config points into `trace`, which outlives the decoder.
    unsafe {
        let mut config: pt_config = zeroed();
        config.size = size_of::<pt_config>();
        config.begin = trace.as_ptr() as *mut u8;
        config.end = trace.as_ptr().add(trace.len()) as *mut u8;
        let dec = pt_pkt_alloc_decoder(&config);
        assert_eq!(pt_pkt_sync_set(dec, 0), 0);
        let mut p: pt_packet = zeroed();
        while pt_pkt_next(dec, &mut p, size_of::<pt_packet>()) > 0 {
            black_box(&p);
            n += 1;
        }
        pt_pkt_free_decoder(dec);
    }
    n
}

/// Counts packets and hands every callback argument to `black_box`, so
/// that iptr-decoder computes all the fields it reports.
struct Count(usize);

macro_rules! count {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $name(&mut self, _: &DecoderContext, $($arg: $ty),*) -> Result<(), Self::Error> {
            black_box(($($arg,)*));
            self.0 += 1;
            Ok(())
        })*
    };
}

impl iptr_decoder::HandlePacket for Count {
    type Error = std::convert::Infallible;
    fn at_decode_begin(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
    count! {
        on_short_tnt_packet(byte: NonZero<u8>, highest: u32);
        on_long_tnt_packet(bytes: NonZero<u64>, highest: u32);
        on_tip_packet(ip: IpReconstructionPattern);
        on_tip_pgd_packet(ip: IpReconstructionPattern);
        on_tip_pge_packet(ip: IpReconstructionPattern);
        on_fup_packet(ip: IpReconstructionPattern);
        on_pad_packet();
        on_cyc_packet(cyc: &[u8]);
        on_mode_packet(leaf: u8, mode: u8);
        on_mtc_packet(ctc: u8);
        on_tsc_packet(tsc: u64);
        on_cbr_packet(ratio: u8);
        on_tma_packet(ctc: u16, fc: u8, fc8: bool);
        on_vmcs_packet(vmcs: u64);
        on_ovf_packet();
        on_psb_packet();
        on_psbend_packet();
        on_trace_stop_packet();
        on_pip_packet(cr3: u64, nr: bool);
        on_mnt_packet(payload: u64);
        on_ptw_packet(ip: bool, payload: PtwPayload);
        on_exstop_packet(ip: bool);
        on_mwait_packet(hints: u8, ext: u8);
        on_pwre_packet(hw: bool, cstate: u8, sub_cstate: u8);
        on_pwrx_packet(last: u8, deepest: u8, wake: u8);
        on_evd_packet(event_type: u8, payload: u64);
        on_cfe_packet(ip: bool, event_type: u8, vector: u8);
        on_bbp_packet(sz: bool, block_type: u8);
        on_bep_packet(ip: bool);
        on_bip_packet(id: u8, payload: &[u8], block_type: u8);
    }
}

#[inline(never)]
fn iptr(trace: &[u8]) -> usize {
    let mut count = Count(0);
    iptr_decoder::decode(trace, iptr_decoder::DecodeOptions::default(), &mut count).unwrap();
    count.0
}

type Decode = fn(&[u8]) -> usize;

/// The decoders, by the names the summary gives them.
const DECODERS: [(&str, Decode); 6] = [
    ("intel-pt next_packet", ours),
    ("intel-pt visit", ours_visit),
    ("intel-pt next_quick (flow walk)", ours_quick),
    ("intel-pt skip_packet (boundaries)", ours_skip),
    ("libipt pt_pkt_next", libipt),
    ("iptr-decoder decode", iptr),
];

fn run(b: Bencher, input: &str, decode: Decode) {
    let Some(f) = fixture(input) else {
        eprintln!("{input}: skipped");
        return;
    };
    b.counter(BytesCount::new(f.trace.len())).counter(ItemsCount::new(f.packets)).bench(|| decode(black_box(&f.trace)));
}

#[divan::bench(args = INPUTS)]
fn intel_pt(b: Bencher, input: &str) {
    run(b, input, ours);
}

#[divan::bench(args = INPUTS)]
fn intel_pt_visit(b: Bencher, input: &str) {
    run(b, input, ours_visit);
}

#[divan::bench(args = INPUTS)]
fn intel_pt_quick(b: Bencher, input: &str) {
    run(b, input, ours_quick);
}

#[divan::bench(args = INPUTS)]
fn intel_pt_skip(b: Bencher, input: &str) {
    run(b, input, ours_skip);
}

#[divan::bench(args = INPUTS)]
fn libipt_pt_pkt_next(b: Bencher, input: &str) {
    run(b, input, libipt);
}

#[divan::bench(args = INPUTS)]
fn iptr_decoder(b: Bencher, input: &str) {
    run(b, input, iptr);
}

/// Every PSB offset of the random trace (about one per 4 KiB).
#[divan::bench]
fn psb_scan(b: Bencher) {
    let Some(f) = fixture("random") else { return };
    b.counter(BytesCount::new(f.trace.len())).bench(|| {
        let mut at = 0;
        let mut n = 0;
        while let Some(i) = find_psb(&f.trace[at..]) {
            n += 1;
            at += i + PSB.len();
        }
        n
    });
}

/// After divan: `PACKETS_BENCH_REPS` rounds (default 20; 0: none) in which
/// every decoder decodes each input once, in turn, so that the machine's
/// load falls on all of them alike; the fastest of each, as a table with
/// the ratios to iptr-decoder and libipt.
fn summary() {
    let reps: usize = std::env::var("PACKETS_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    if reps == 0 {
        return;
    }
    println!("\n| input | decoder | time (fastest of {reps}) | MB/s | Mpackets/s | vs iptr-decoder | vs libipt |\n|---|---|---|---|---|---|---|");
    for input in INPUTS {
        let Some(f) = fixture(input) else { continue };
        let mut best = [Duration::MAX; DECODERS.len()];
        for _ in 0..reps {
            for (i, (_, decode)) in DECODERS.iter().enumerate() {
                let t = Instant::now();
                assert_eq!(black_box(decode(black_box(&f.trace))), f.packets);
                best[i] = best[i].min(t.elapsed());
            }
        }
        let (iptr_t, libipt_t) = (best[5].as_secs_f64(), best[4].as_secs_f64());
        for (i, (name, _)) in DECODERS.iter().enumerate() {
            let secs = best[i].as_secs_f64();
            println!(
                "| {input} | {name} | {:.2} ms | {:.0} | {:.1} | {:.2}x | {:.2}x |",
                secs * 1e3,
                f.trace.len() as f64 / secs / 1e6,
                f.packets as f64 / secs / 1e6,
                iptr_t / secs,
                libipt_t / secs
            );
        }
    }
}
