//! Packet decoding speed over a 32 MiB synthetic valid trace, against
//! libipt's packet decoder (`pt_pkt_next`) and the `iptr-decoder` crate in
//! the same run; and the PSB scan that splits a buffer for parallel decode.
//!
//!     cargo bench -p intel-pt --bench packets

#[path = "../tests/common/mod.rs"]
mod common;

use std::mem::{size_of, zeroed};
use std::num::NonZero;
use std::sync::OnceLock;

use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use intel_pt::{find_psb, Packet, PacketDecoder, PSB};
use iptr_decoder::{DecoderContext, IpReconstructionPattern, PtwPayload};

const SIZE: usize = 32 << 20;

fn main() {
    let (trace, packets) = fixture();
    eprintln!("trace: {} MiB, {} packets, {:.2} bytes per packet", trace.len() >> 20, packets, trace.len() as f64 / *packets as f64);
    divan::main();
}

/// A valid stream without PEBS-via-PT packets, which libipt does not know,
/// nor CFE/EVD, some of whose types iptr-decoder rejects; and its packet
/// count.
fn fixture() -> &'static (Vec<u8>, usize) {
    static F: OnceLock<(Vec<u8>, usize)> = OnceLock::new();
    F.get_or_init(|| {
        let trace = common::random_stream(&mut common::Rng(0x243f_6a88_85a3_08d3), SIZE, common::Kinds { pebs: false, event_trace: false });
        let packets = ours(&trace);
        assert_eq!(packets, libipt(&trace), "libipt sees every packet");
        assert_eq!(packets, iptr(&trace), "iptr-decoder sees every packet");
        (trace, packets)
    })
}

/// Decodes every packet and uses its main fields, as a flow decoder would.
/// (Each decoder runs in a function of its own, for `callgrind --toggle-collect`.)
#[inline(never)]
fn ours(trace: &[u8]) -> usize {
    let mut dec = PacketDecoder::new(trace);
    let (mut n, mut acc) = (0, 0u64);
    while let Some((_, p)) = dec.next_packet().unwrap() {
        acc = acc.wrapping_add(match p {
            Packet::TntShort(t) | Packet::TntLong(t) => t.bits ^ u64::from(t.count),
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => ip.ip.unwrap_or(1),
            Packet::Tsc(v) | Packet::Cyc(v) | Packet::Mnt(v) | Packet::Vmcs(v) => v,
            Packet::Mtc(v) | Packet::Cbr(v) => u64::from(v),
            _ => 1,
        });
        n += 1;
    }
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

#[divan::bench]
fn intel_pt(b: Bencher) {
    let (trace, packets) = fixture();
    b.counter(BytesCount::new(trace.len())).counter(ItemsCount::new(*packets)).bench(|| ours(trace));
}

#[divan::bench]
fn libipt_pt_pkt_next(b: Bencher) {
    let (trace, packets) = fixture();
    b.counter(BytesCount::new(trace.len())).counter(ItemsCount::new(*packets)).bench(|| libipt(trace));
}

#[divan::bench]
fn iptr_decoder(b: Bencher) {
    let (trace, packets) = fixture();
    b.counter(BytesCount::new(trace.len())).counter(ItemsCount::new(*packets)).bench(|| iptr(trace));
}

/// Every PSB offset of the trace (about one per 4 KiB).
#[divan::bench]
fn psb_scan(b: Bencher) {
    let (trace, _) = fixture();
    b.counter(BytesCount::new(trace.len())).bench(|| {
        let mut at = 0;
        let mut n = 0;
        while let Some(i) = find_psb(&trace[at..]) {
            n += 1;
            at += i + PSB.len();
        }
        n
    });
}
