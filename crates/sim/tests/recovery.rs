//! How the Intel PT decode recovers from damaged flow packets: resuming at
//! the next TIP after an error that leaves the packets whole
//! ([`Recovery::NextTip`], as perf does) against resuming at the next PSB
//! ([`Recovery::NextPsb`], as libipt does), scored against the simulator's
//! truth (timeline mode). Resuming at the TIP gets back most of what the
//! PSB resync loses, for few wrong instructions.
//!
//! The numbers in `intel_pt::flow`'s docs: `cargo test --release -p sim
//! --test recovery -- --ignored --nocapture`.

use intel_pt::flow::Recovery;
use intel_pt::{Packet, PacketDecoder};
use sim::check::{check_with, Score};
use sim::{Protocol, SimConfig};
use testkit::Rng;
use tracedecode::ImageMode as Mode;

/// What is damaged: one bit of the payload of a TNT (a branch goes the
/// other way: the packets stay whole); one bit of a TIP's IP; one bit
/// anywhere in a flow packet (TNT, TIP, FUP, TIP.PGE, TIP.PGD), header
/// included, so some become bad packets.
#[derive(Clone, Copy, Debug)]
enum Damage {
    Tnt,
    TipIp,
    Flow,
}

/// Flips `per` bits of each CPU's trace, as `damage` says, the same for
/// the same `seed`.
fn damage(kind: Damage, per: u64, seed: u64) -> impl Fn(usize, &mut Vec<u8>) {
    move |cpu, t| {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((cpu as u64 + 1) * 0x1234_5678));
        let mut dec = PacketDecoder::new(t);
        let mut packets = Vec::new();
        while let Ok(Some((off, p))) = dec.next_packet() {
            let fits = match kind {
                Damage::Tnt => matches!(p, Packet::TntShort(x) if x.count >= 2),
                Damage::TipIp => matches!(p, Packet::Tip(ip) if ip.ip.is_some()),
                Damage::Flow => {
                    matches!(p, Packet::TntShort(_) | Packet::TntLong(_) | Packet::Tip(_) | Packet::Fup(_) | Packet::TipPge(_) | Packet::TipPgd(_))
                }
            };
            if fits {
                packets.push((off, dec.offset() - off, p));
            }
        }
        for _ in 0..per {
            let (off, len, p) = packets[rng.below(packets.len() as u64) as usize];
            let (byte, bit) = match (kind, p) {
                // Payload bits 1..=count of a short TNT (the stop bit above them).
                (Damage::Tnt, Packet::TntShort(x)) => (off, 1 + rng.below(x.count as u64)),
                (Damage::TipIp, _) => (off + 1 + rng.below(len as u64 - 1) as usize, rng.below(8)),
                _ => (off + rng.below(len as u64) as usize, rng.below(8)),
            };
            t[byte] ^= 1 << bit;
        }
    }
}

/// The timeline mode's score, summed over `seeds`.
fn timeline(dir: &std::path::Path, recovery: Recovery, kind: Damage, per: u64, seeds: u64) -> Score {
    let mut sum = Score::default();
    for seed in 1..=seeds {
        let r = check_with(dir, recovery, damage(kind, per, seed)).expect("check");
        let t = &r.iter().find(|m| m.mode == Mode::Timeline).expect("timeline mode").total;
        sum.instructions += t.instructions;
        sum.correct += t.correct;
        sum.wrong += t.wrong;
        sum.missing += t.missing;
        sum.errors += t.errors;
    }
    sum
}

/// Scores both recoveries on each damage and asserts that resuming at the
/// TIP decodes more right, misses at most half as many, and decodes at
/// most one wrong instruction more per 100 more right.
fn compare(name: &str, instructions: u64, seeds: u64, pers: &[u64]) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = SimConfig { cpus: 4, protocol: Protocol::Int3, pokes: 400, instructions, tsc_period: 20, ..SimConfig::default() };
    sim::simulate(&cfg, &dir).expect("simulate");
    println!("| damage | bits per CPU | recovery | correct | wrong | missing | errors |\n|---|---|---|---|---|---|---|");
    for kind in [Damage::Tnt, Damage::TipIp, Damage::Flow] {
        for &per in pers {
            let psb = timeline(&dir, Recovery::NextPsb, kind, per, seeds);
            let tip = timeline(&dir, Recovery::NextTip, kind, per, seeds);
            for (what, s) in [("next PSB", &psb), ("next TIP", &tip)] {
                println!("| {kind:?} | {per} | {what} | {} | {} | {} | {} |", s.correct, s.wrong, s.missing, s.errors);
            }
            let gained = tip.correct.saturating_sub(psb.correct);
            assert!(gained > 0 && 2 * tip.missing <= psb.missing, "{kind:?} {per}: PSB {psb:?}, TIP {tip:?}");
            assert!(tip.wrong <= psb.wrong + gained / 100, "{kind:?} {per}: PSB {psb:?}, TIP {tip:?}");
        }
    }
}

#[test]
fn resuming_at_the_next_tip_loses_less_than_at_the_next_psb() {
    compare("recovery-small", 50_000, 1, &[16]);
}

/// The measurement behind `intel_pt::flow`'s docs (4 CPUs, 200,000
/// instructions each, 3 seeds).
#[test]
#[ignore = "a measurement: run with --release"]
fn measure_recovery() {
    compare("recovery", 200_000, 3, &[4, 16, 64]);
}
