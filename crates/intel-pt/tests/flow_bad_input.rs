//! The flow decoder on bad input: corrupt packets, truncated AUX data, bad
//! IP compression, TNT bits where the code has no conditional branch, loops
//! in the image, random damage. Every case gives error events naming the
//! offset, decoding resumes exactly as the clean trace decodes from there
//! (at the next PSB after a bad packet, else at the next TIP's target),
//! nothing panics, and the work stays bounded.
//!
//! The traces come from a small generator over a hand-assembled program,
//! which also writes the truth: every instruction and trap, in order.

use std::cell::Cell;

use codeimage::window::{Interval, Static};
use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};
use intel_pt::flow::{CodeSource, Fetch, FlowConfig, FlowDecoder, FlowErrorKind, FlowEvent, Time};
use intel_pt::{Encoder, Ip, IpCompression, Packet, PacketErrorKind, PacketKind, Tnt, PSB};

#[path = "common/hand.rs"]
mod hand;
use hand::K;

/// The program: one iteration starts at 00.
///
/// ```text
/// 00: jz 04          a
/// 02: nop; nop
/// 04: call rax       -> 40
/// 06: jnz 00         b
/// 08: nop
/// 09: jmp 00
/// 40: jz 43          c
/// 42: int3           -> 60 (the handler), when c is not taken
/// 43: ret            -> 06
/// 60: iretq          -> 43
/// 80: jmp 80         a loop without packets
/// 90: (invalid)
/// ```
const PROGRAM: &[(u64, &[u8])] = &[
    (0x00, &[0x74, 0x02, 0x90, 0x90, 0xff, 0xd0, 0x75, 0xf8, 0x90, 0xeb, 0xf5]),
    (0x40, &[0x74, 0x01, 0xcc, 0xc3]),
    (0x60, &[0x48, 0xcf]),
    (0x80, &[0xeb, 0xfe]),
    (0x90, &[0x06, 0x06]),
];

fn image() -> CodeTimeline {
    image_with(&[])
}

fn image_with(pokes: &[(Time, u64, &[u8], &[u8])]) -> CodeTimeline {
    hand::timeline(PROGRAM, pokes)
}

fn cfg(noretcomp: bool) -> FlowConfig {
    hand::config(noretcomp, 32)
}

/// An event in short, IPs as offsets from `K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum E {
    I(u64),
    Trap(u64, u64),
    End(Option<u64>),
    Err(FlowErrorKind),
}

fn decode(trace: &[u8], code: &impl CodeSource, cfg: FlowConfig) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    FlowDecoder::new(trace, code, cfg).run(|e| out.push(e));
    out
}

fn short(events: &[FlowEvent]) -> Vec<E> {
    events
        .iter()
        .map(|e| match *e {
            FlowEvent::Insn { ip, .. } => E::I(ip.wrapping_sub(K)),
            FlowEvent::Trap { from, to, .. } => E::Trap(from.wrapping_sub(K), to.wrapping_sub(K)),
            FlowEvent::End { at, .. } => E::End(at.map(|a| a.wrapping_sub(K))),
            FlowEvent::Error { kind, .. } => E::Err(kind),
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => unreachable!("state events are off"),
        })
        .collect()
}

fn errors(events: &[FlowEvent]) -> Vec<(usize, FlowErrorKind, Option<u64>)> {
    events
        .iter()
        .filter_map(|e| match *e {
            FlowEvent::Error { offset, kind, ip, .. } => Some((offset, kind, ip.map(|ip| ip.wrapping_sub(K)))),
            _ => None,
        })
        .collect()
}

#[path = "common/alt.rs"]
mod alt;
use alt::AltAt;
use testkit::Rng;

/// Runs the program and writes its trace, as the processor would: TNT
/// flushed before any other packet, a TSC every 3 iterations, a PSB+ every
/// 8, the return compressed unless `noretcomp`.
struct Gen {
    enc: Encoder,
    out: Vec<u8>,
    bits: u64,
    count: u8,
    noretcomp: bool,
    time: u64,
    truth: Vec<E>,
    /// Every packet written, with its offset.
    packets: Vec<(usize, Packet)>,
    /// Each PSB's offset and the truth's length there (where decoding resumes).
    psbs: Vec<(usize, usize)>,
    /// The same for each TIP (the truth from its target on) and each FUP
    /// of an event (from the event on: a FUP and TIP after an error are
    /// where execution went).
    tips: Vec<(usize, usize)>,
}

impl Gen {
    fn new(noretcomp: bool) -> Gen {
        Gen {
            enc: Encoder::new(),
            out: Vec::new(),
            bits: 0,
            count: 0,
            noretcomp,
            time: 1000,
            truth: Vec::new(),
            packets: Vec::new(),
            psbs: Vec::new(),
            tips: Vec::new(),
        }
    }
    fn put(&mut self, p: Packet) {
        self.packets.push((self.out.len(), p));
        self.enc.encode(&p, &mut self.out).unwrap();
    }
    fn flush(&mut self) {
        if self.count > 0 {
            self.put(Packet::TntShort(Tnt { bits: self.bits, count: self.count }));
            self.bits = 0;
            self.count = 0;
        }
    }
    fn bit(&mut self, taken: bool) {
        self.bits = self.bits << 1 | taken as u64;
        self.count += 1;
        if self.count == 6 {
            self.flush();
        }
    }
    fn tip(&mut self, off: u64) {
        self.flush();
        let ip = self.enc.compress(K + off);
        self.tips.push((self.out.len(), self.truth.len()));
        self.put(Packet::Tip(ip));
    }
    fn i(&mut self, off: u64) {
        self.truth.push(E::I(off));
    }
    fn psb(&mut self) {
        self.flush();
        self.psbs.push((self.out.len(), self.truth.len()));
        self.put(Packet::Psb);
        self.put(Packet::Tsc(self.time));
        self.put(Packet::ModeExec { csl: true, csd: false, if_flag: true });
        let ip = self.enc.compress(K);
        self.put(Packet::Fup(ip));
        self.put(Packet::PsbEnd);
    }
    /// One iteration from 00 back to 00; `last` ends it at 00 (b taken).
    fn iteration(&mut self, rng: &mut Rng, last: bool) {
        let (a, b, c) = (rng.bool(), rng.bool() || last, rng.bool());
        self.i(0x00);
        self.bit(a);
        if !a {
            self.i(0x02);
            self.i(0x03);
        }
        self.i(0x04);
        self.tip(0x40);
        self.i(0x40);
        self.bit(c);
        if !c {
            self.flush();
            self.tips.push((self.out.len(), self.truth.len()));
            self.truth.push(E::Trap(0x42, 0x60));
            let ip = self.enc.compress(K + 0x42);
            self.put(Packet::Fup(ip));
            self.tip(0x60);
            self.i(0x60);
            self.tip(0x43);
        }
        self.i(0x43);
        if self.noretcomp {
            self.tip(0x06);
        } else {
            self.bit(true);
        }
        self.i(0x06);
        self.bit(b);
        if !b {
            self.i(0x08);
            self.i(0x09);
        }
        self.time += 10;
    }
}

/// A trace of `iterations` and its truth.
fn program_trace(seed: u64, iterations: usize, noretcomp: bool) -> Gen {
    let mut rng = Rng(seed);
    let mut g = Gen::new(noretcomp);
    for n in 0..iterations {
        if n % 8 == 0 {
            g.psb();
        } else if n % 3 == 0 {
            g.flush();
            g.put(Packet::Tsc(g.time));
        }
        g.iteration(&mut rng, n + 1 == iterations);
    }
    g.flush();
    g.truth.push(E::End(Some(0)));
    g
}

fn is_prefix(got: &[E], truth: &[E]) -> bool {
    got.len() <= truth.len() && got == &truth[..got.len()]
}

/// Checks what every decode must satisfy, whatever the input: errors name
/// offsets inside the buffer, in order; and no more events than the work bound.
fn sane(trace: &[u8], events: &[FlowEvent], cfg: &FlowConfig) {
    let mut last = 0;
    for (offset, kind, _) in errors(events) {
        assert!(offset <= trace.len(), "{kind:?} at {offset} past {}", trace.len());
        assert!(offset >= last, "{kind:?} at {offset} before an earlier error at {last}");
        last = offset;
    }
    // Each instruction either uses a packet (at most 6 TNT bits a byte) or
    // is one of at most max_walk in a row without one.
    let bound = (trace.len() as u64 * 6 + 2) * (cfg.max_walk + 1);
    assert!((events.len() as u64) <= bound, "{} events for {} bytes", events.len(), trace.len());
}

#[test]
fn clean_traces_decode_to_the_truth() {
    for noretcomp in [true, false] {
        for seed in 1..6 {
            let g = program_trace(seed * 0x9e37_79b9, 40, noretcomp);
            let got = short(&decode(&g.out, &Static(&image()), cfg(noretcomp)));
            assert_eq!(got, g.truth, "seed {seed} noretcomp {noretcomp}");
        }
    }
}

/// Where decoding must resume after damage at `offset` that gives an error
/// of `kind`: the truth from the first PSB after it; or, when the packets
/// are whole (not a bad packet, not an overflow), from the first TIP's
/// target (or event: FUP and TIP) if that comes first.
fn resumes(g: &Gen, offset: usize, kind: FlowErrorKind) -> &[E] {
    let psb = g.psbs.iter().find(|&&(at, _)| at > offset);
    let tip = match kind {
        FlowErrorKind::Packet(_) | FlowErrorKind::Overflow => None,
        _ => g.tips.iter().find(|&&(at, _)| at > offset),
    };
    match psb.into_iter().chain(tip).min() {
        Some(&(_, k)) => &g.truth[k..],
        None => &[],
    }
}

/// `got` is a prefix of the truth, one error of `kind` at `offset`, then
/// exactly the truth from where decoding resumes ([`resumes`]).
fn check_resync(g: &Gen, got: &[FlowEvent], offset: usize, kind: FlowErrorKind) {
    let s = short(got);
    let at = s.iter().position(|e| matches!(e, E::Err(_))).unwrap_or_else(|| panic!("no error for {kind:?} at {offset}: {s:?}"));
    assert!(is_prefix(&s[..at], &g.truth), "{kind:?} at {offset}: before the error {:?}", &s[..at]);
    assert_eq!(errors(got)[0].0, offset, "{kind:?}: {:?}", errors(got));
    assert_eq!(s[at], E::Err(kind), "at {offset}");
    check_resumed(&s[at + 1..], resumes(g, offset, kind), &format!("{kind:?} at {offset}"));
}

/// What follows an error is `want`; except that, resumed at a TIP, the
/// walk has lost the calls before it: a compressed return of one of them
/// is another error (NoTip) and the walk resumes at the TIP after, each
/// stretch between errors a piece of `want` in order, the last its end.
fn check_resumed(rest: &[E], want: &[E], what: &str) {
    let Some(last) = rest.iter().rposition(|e| matches!(e, E::Err(_))) else {
        assert_eq!(rest, want, "{what}: after the resync");
        return;
    };
    assert!(rest.iter().filter(|e| matches!(e, E::Err(_))).all(|e| *e == E::Err(FlowErrorKind::NoTip)), "{what}: {rest:?}");
    let first = rest.iter().position(|e| matches!(e, E::Err(_))).unwrap();
    assert!(is_prefix(&rest[..first], want), "{what}: {rest:?}");
    assert!(want.ends_with(&rest[last + 1..]) && rest.len() - last > 8, "{what}: {rest:?}");
}

#[test]
fn a_corrupt_packet_is_reported_at_its_offset_and_decoding_resumes_at_the_next_psb() {
    let code = image();
    for noretcomp in [true, false] {
        let g = program_trace(0x1234_5678, 30, noretcomp);
        // Every packet in turn gets a first byte no packet starts with.
        for &(offset, _) in &g.packets {
            let mut bad = g.out.clone();
            bad[offset] = 0x05;
            let got = decode(&bad, &Static(&code), cfg(noretcomp));
            sane(&bad, &got, &cfg(noretcomp));
            if offset == 0 {
                // Bytes before the first PSB are where an AUX buffer may
                // start mid-stream: skipped without an error.
                assert_eq!(short(&got), resumes(&g, 0, FlowErrorKind::Packet(PacketErrorKind::BadOpcode(0x05))));
                continue;
            }
            check_resync(&g, &got, offset, FlowErrorKind::Packet(PacketErrorKind::BadOpcode(0x05)));
        }
    }
}

#[test]
fn truncated_aux_at_every_offset() {
    let code = image();
    for noretcomp in [true, false] {
        let g = program_trace(0xfeed, 12, noretcomp);
        let starts: Vec<usize> = g.packets.iter().map(|p| p.0).collect();
        for cut in 0..=g.out.len() {
            let trace = &g.out[..cut];
            let got = decode(trace, &Static(&code), cfg(noretcomp));
            sane(trace, &got, &cfg(noretcomp));
            let s = short(&got);
            let body = match s.last() {
                Some(E::End(_) | E::Err(_)) => &s[..s.len() - 1],
                _ => &s[..],
            };
            assert!(is_prefix(body, &g.truth), "cut at {cut}: {s:?}");
            assert!(errors(&got).len() <= 1, "cut at {cut}: {s:?}");
            for (offset, kind, _) in errors(&got) {
                match kind {
                    // A cut inside a packet: reported where that packet starts.
                    FlowErrorKind::Packet(PacketErrorKind::Truncated { .. }) => {
                        assert!(starts.contains(&offset) && offset < cut, "cut at {cut}: truncated at {offset}");
                        assert!(!starts.contains(&cut) || cut == g.out.len(), "cut at {cut} is between packets");
                    }
                    // The trace ended where a packet was needed (after a FUP, say).
                    FlowErrorKind::EndOfTrace => assert_eq!(offset, cut),
                    other => panic!("cut at {cut}: {other:?}"),
                }
            }
            if cut == g.out.len() {
                assert_eq!(s, g.truth);
            }
        }
    }
}

/// The first packet after the middle of the trace that `pick` accepts.
fn middle(g: &Gen, pick: impl Fn(&Packet) -> bool) -> (usize, Packet) {
    let mid = g.out.len() / 2;
    *g.packets.iter().find(|(o, p)| *o > mid && pick(p)).expect("such a packet")
}

#[test]
fn bad_ip_compression() {
    let code = image();
    let g = program_trace(0xabcd, 30, true);
    let c = cfg(true);
    // Reserved IPBytes (5 and 7) in a TIP: a packet error there.
    let (at, _) = middle(&g, |p| matches!(p, Packet::Tip(_)));
    for ipbytes in [5u8, 7] {
        let mut bad = g.out.clone();
        bad[at] = ipbytes << 5 | 0x0d;
        let got = decode(&bad, &Static(&code), c.clone());
        check_resync(&g, &got, at, FlowErrorKind::Packet(PacketErrorKind::BadIpBytes { packet: PacketKind::Tip, ipbytes }));
    }
    // A TIP whose 16-bit update lands on another page: no code there. The
    // IP the decoder was at is named; the walk resumes at the next PSB.
    let (at, p) = middle(&g, |p| matches!(p, Packet::Tip(ip) if ip.compression == IpCompression::Update16));
    let mut bad = g.out.clone();
    bad[at + 2] ^= 0x10; // bits 15:8 of the target
    let got = decode(&bad, &Static(&code), c.clone());
    let s = short(&got);
    let e = s.iter().position(|e| matches!(e, E::Err(_))).unwrap();
    assert_eq!(s[e], E::Err(FlowErrorKind::Unmapped));
    let Packet::Tip(ip) = p else { unreachable!() };
    assert_eq!(errors(&got)[0].2, Some((ip.ip.unwrap() ^ 0x1000) - K));
    assert!(is_prefix(&s[..e], &g.truth));
    assert_eq!(&s[e + 1..], resumes(&g, at, FlowErrorKind::Unmapped));
    // A TIP made suppressed (IPBytes 0, no payload): not a target, so not
    // the TIP an indirect branch needs. The payload bytes that stay behind
    // are decoded as packets; whatever they give, decoding resumes at the
    // next PSB.
    let mut bad = g.out.clone();
    bad[at] = 0x0d;
    let got = decode(&bad, &Static(&code), c.clone());
    sane(&bad, &got, &c);
    let s = short(&got);
    let e = s.iter().position(|e| matches!(e, E::Err(_))).unwrap();
    assert!(matches!(s[e], E::Err(FlowErrorKind::NoTip)), "{:?}", s[e]);
    assert!(s.ends_with(resumes(&g, at, FlowErrorKind::Packet(PacketErrorKind::BadOpcode(0)))));
    // Compression against the last IP after a PSB (0), where the packet meant
    // an IP near the previous one: the FUP of PSB+ as a 32-bit update.
    let mut t = Vec::new();
    let mut enc = Encoder::new();
    enc.encode(&Packet::Psb, &mut t).unwrap();
    let wrong = Ip { compression: IpCompression::Update32, payload: (K & 0xffff_ffff) + 4, ip: Some((K & 0xffff_ffff) + 4) };
    enc.encode(&Packet::Fup(wrong), &mut t).unwrap();
    enc.encode(&Packet::PsbEnd, &mut t).unwrap();
    enc.encode(&Packet::TntShort(Tnt { bits: 1, count: 1 }), &mut t).unwrap();
    let second = t.len();
    t.extend_from_slice(&g.out);
    let got = decode(&t, &Static(&code), c.clone());
    let s = short(&got);
    assert_eq!(s[0], E::Err(FlowErrorKind::Unmapped));
    assert_eq!(errors(&got)[0].2, Some(((K & 0xffff_ffff) + 4).wrapping_sub(K)));
    assert_eq!(&s[1..], &g.truth[..], "resumes at the PSB at {second}");
    // A sign-extended IP with bit 47 set: the top 16 bits come from the
    // extension, not from the kernel's upper half it was meant for.
    let mut t = Vec::new();
    let mut enc = Encoder::new();
    enc.encode(&Packet::Psb, &mut t).unwrap();
    enc.encode(&Packet::PsbEnd, &mut t).unwrap();
    let sext = Ip { compression: IpCompression::Sext48, payload: 0x8000_0000_0040, ip: Some(0xffff_8000_0000_0040) };
    enc.encode(&Packet::TipPge(sext), &mut t).unwrap();
    enc.encode(&Packet::TntShort(Tnt { bits: 1, count: 1 }), &mut t).unwrap();
    t.extend_from_slice(&g.out);
    let s = short(&decode(&t, &Static(&code), c.clone()));
    assert_eq!(s[0], E::Err(FlowErrorKind::Unmapped));
    assert_eq!(&s[1..], &g.truth[..]);
}

/// A damaged bit above the low 16 of a PSB+'s FUP (an IP in full: a PSB
/// resets the last IP) stays in the last IP that the 16-bit TIP updates
/// after it build on. The walk resumes at the FUP, as a PSB+ whose FUP it
/// does not reach says, finds no code there, and so waits for the next PSB
/// instead of failing at every TIP until then.
#[test]
fn a_damaged_last_ip_sends_the_walk_to_the_next_psb() {
    let code = image();
    for noretcomp in [true, false] {
        let g = program_trace(0x600d, 30, noretcomp);
        let mid = g.psbs[g.psbs.len() / 2].0;
        let (at, p) = *g.packets.iter().find(|(o, p)| *o > mid && matches!(p, Packet::Fup(_))).unwrap();
        let Packet::Fup(ip) = p else { unreachable!() };
        assert_eq!(ip.compression, IpCompression::Sext48);
        let next = g.packets.iter().find(|(o, p)| *o > at && matches!(p, Packet::Tip(_))).unwrap();
        assert!(matches!(next.1, Packet::Tip(ip) if ip.compression == IpCompression::Update16));
        let mut bad = g.out.clone();
        bad[at + 3] ^= 0x10; // bit 20 of the IP
        let damaged = ip.ip.unwrap() ^ 0x10_0000;
        let got = decode(&bad, &Static(&code), cfg(noretcomp));
        let s = short(&got);
        let e = s.iter().position(|e| matches!(e, E::Err(_))).unwrap();
        assert!(is_prefix(&s[..e], &g.truth));
        assert_eq!(s[e..e + 2], [E::Err(FlowErrorKind::PsbMismatch { fup: Some(damaged) }), E::Err(FlowErrorKind::Unmapped)]);
        assert_eq!(errors(&got)[1].2, Some(damaged - K));
        // Then the truth from the next PSB.
        assert_eq!(&s[e + 2..], resumes(&g, at, FlowErrorKind::Packet(PacketErrorKind::BadOpcode(0))));
    }
}

#[test]
fn tnt_where_the_code_has_no_conditional_branch() {
    let code = image();
    for noretcomp in [true, false] {
        let g = program_trace(0x5eed, 30, noretcomp);
        let c = cfg(noretcomp);
        // The TIP of the indirect call replaced by a TNT (same length: a
        // TIP with a 16-bit update is 3 bytes; a TNT and two PADs).
        let (at, _) = middle(&g, |p| matches!(p, Packet::Tip(ip) if ip.compression == IpCompression::Update16 && ip.ip == Some(K + 0x40)));
        let mut bad = g.out.clone();
        bad[at..at + 3].copy_from_slice(&[0b110, 0, 0]);
        let got = decode(&bad, &Static(&code), c.clone());
        check_resync(&g, &got, at, FlowErrorKind::NoTip);
        // One TNT bit too many before it: left over at the indirect call.
        let (at, t) = g
            .packets
            .windows(2)
            .find_map(|w| match (w[0], w[1]) {
                ((o, Packet::TntShort(t)), (_, Packet::Tip(ip))) if o > g.out.len() / 2 && t.count < 6 && ip.ip == Some(K + 0x40) => Some((o, t)),
                _ => None,
            })
            .expect("a TNT right before the call's TIP");
        let mut bad = g.out.clone();
        let mut one_more = Vec::new();
        Encoder::new().encode(&Packet::TntShort(Tnt { bits: t.bits << 1, count: t.count + 1 }), &mut one_more).unwrap();
        bad[at] = one_more[0];
        let got = decode(&bad, &Static(&code), c.clone());
        let s = short(&got);
        let e = s.iter().position(|e| matches!(e, E::Err(_))).unwrap();
        assert_eq!(s[e], E::Err(FlowErrorKind::NoTip));
        assert!(is_prefix(&s[..e], &g.truth));
        check_resumed(&s[e + 1..], resumes(&g, at, FlowErrorKind::NoTip), "one TNT bit too many");
        // A Jcc whose TNT became a TIP (an indirect branch's packet where the
        // code has a conditional one).
        let (at, _) = middle(&g, |p| matches!(p, Packet::TntShort(t) if t.count == 1));
        let mut bad = g.out.clone();
        bad[at] = 0x0d; // a suppressed TIP, one byte like the TNT
        let got = decode(&bad, &Static(&code), c.clone());
        let s = short(&got);
        let e = s.iter().position(|e| matches!(e, E::Err(_))).unwrap();
        let E::Err(kind @ (FlowErrorKind::NoTnt | FlowErrorKind::NoTip)) = s[e] else { panic!("{:?}", s[e]) };
        assert!(is_prefix(&s[..e], &g.truth));
        check_resumed(&s[e + 1..], resumes(&g, at, kind), "a TIP for a Jcc");
    }
    // Bits left over when the walk reaches an INT3: no FUP/TIP for it.
    let mut t = Vec::new();
    let mut enc = Encoder::new();
    enc.encode(&Packet::Psb, &mut t).unwrap();
    enc.encode(&Packet::Fup(Ip { compression: IpCompression::Full, payload: K + 0x40, ip: Some(K + 0x40) }), &mut t).unwrap();
    enc.encode(&Packet::PsbEnd, &mut t).unwrap();
    enc.encode(&Packet::TntShort(Tnt { bits: 0b00, count: 2 }), &mut t).unwrap();
    let s = short(&decode(&t, &Static(&code), cfg(true)));
    assert_eq!(s, [E::I(0x40), E::I(0x42), E::Err(FlowErrorKind::NoTrapPackets)]);
}

#[test]
fn a_loop_in_the_image_is_bounded_and_the_next_psb_decodes() {
    let code = image();
    let g = program_trace(0x77, 20, true);
    // Three PSB segments that start on `jmp $`, then the good trace.
    let mut t = Vec::new();
    let mut enc = Encoder::new();
    for _ in 0..3 {
        enc.encode(&Packet::Psb, &mut t).unwrap();
        enc.encode(&Packet::Fup(Ip { compression: IpCompression::Full, payload: K + 0x80, ip: Some(K + 0x80) }), &mut t).unwrap();
        enc.encode(&Packet::PsbEnd, &mut t).unwrap();
        enc.encode(&Packet::TntShort(Tnt { bits: 1, count: 1 }), &mut t).unwrap();
    }
    t.extend_from_slice(&g.out);
    for max_walk in [0, 5, 1000] {
        let c = FlowConfig { max_walk, ..cfg(true) };
        let got = decode(&t, &Static(&code), c.clone());
        sane(&t, &got, &c);
        let s = short(&got);
        let loops = s.iter().take_while(|e| **e != E::I(0)).filter(|e| **e == E::I(0x80)).count();
        assert_eq!(loops as u64, 3 * max_walk, "max_walk {max_walk}");
        let errs: Vec<E> = s.iter().copied().filter(|e| matches!(e, E::Err(_))).collect();
        if max_walk == 0 {
            // Not even one instruction: every segment fails at once. (The
            // program walks at most 3 instructions without a packet.)
            assert!(errs.iter().all(|e| *e == E::Err(FlowErrorKind::NoProgress)));
            continue;
        }
        assert_eq!(errs, [E::Err(FlowErrorKind::NoProgress); 3]);
        // The count of instructions without a packet starts again after a
        // resync: the good trace decodes in full.
        let first = s.iter().position(|e| *e == E::I(0)).unwrap();
        assert_eq!(&s[first..], &g.truth[..], "max_walk {max_walk}");
    }
}

#[test]
fn unmapped_and_invalid_code_are_errors_with_the_ip() {
    let code = image();
    let g = program_trace(0x99, 20, true);
    for (target, kind) in [(0x20u64, FlowErrorKind::Unmapped), (0x90, FlowErrorKind::BadInsn)] {
        let mut t = Vec::new();
        let mut enc = Encoder::new();
        enc.encode(&Packet::Psb, &mut t).unwrap();
        enc.encode(&Packet::PsbEnd, &mut t).unwrap();
        let ip = enc.compress(K + target);
        enc.encode(&Packet::TipPge(ip), &mut t).unwrap();
        enc.encode(&Packet::TntShort(Tnt { bits: 1, count: 1 }), &mut t).unwrap();
        t.extend_from_slice(&g.out);
        let got = decode(&t, &Static(&code), cfg(true));
        assert_eq!(errors(&got)[0].1, kind);
        assert_eq!(errors(&got)[0].2, Some(target));
        assert_eq!(&short(&got)[1..], &g.truth[..]);
    }
    // An instruction cut by the end of its region.
    let mut base = BaseImage::new();
    base.add_bytes(K, vec![0x90, 0xe8, 0x00], "cut");
    let cut = TimelineBuilder::new(base).build();
    let mut t = Vec::new();
    let mut enc = Encoder::new();
    enc.encode(&Packet::Psb, &mut t).unwrap();
    enc.encode(&Packet::Fup(enc.compress(K)), &mut t).unwrap();
    enc.encode(&Packet::PsbEnd, &mut t).unwrap();
    enc.encode(&Packet::TntShort(Tnt { bits: 1, count: 1 }), &mut t).unwrap();
    assert_eq!(short(&decode(&t, &Static(&cut), cfg(true))), [E::I(0), E::Err(FlowErrorKind::BadInsn)]);
}

#[test]
fn overflow_mid_trace_resyncs() {
    let code = image();
    let g = program_trace(0x0f0f, 30, false);
    let (at, _) = middle(&g, |p| matches!(p, Packet::Tip(_)));
    // OVF replaces the first two bytes of a TIP; the rest is skipped by the resync.
    let mut bad = g.out.clone();
    bad[at..at + 2].copy_from_slice(&[0x02, 0xf3]);
    let got = decode(&bad, &Static(&code), cfg(false));
    check_resync(&g, &got, at, FlowErrorKind::Overflow);
}

#[test]
fn time_bounds_come_back_after_a_corrupt_packet() {
    // The upper time bound is the next TSC. A corrupt packet before it stops
    // the search for it; after the resync, the next TSC bounds time again.
    let code = image();
    let g = program_trace(0x3141, 40, true);
    let tscs: Vec<usize> = g.packets.iter().filter(|p| matches!(p.1, Packet::Tsc(_))).map(|p| p.0).collect();
    let (at, _) = *g.packets.iter().find(|(o, p)| *o > tscs[2] && matches!(p, Packet::Tip(_))).unwrap();
    let mut bad = g.out.clone();
    bad[at] = 0x05;
    let got = decode(&bad, &Static(&code), cfg(true));
    check_resync(&g, &got, at, FlowErrorKind::Packet(PacketErrorKind::BadOpcode(0x05)));
    let after: Vec<(Time, Time)> = got
        .iter()
        .skip_while(|e| !matches!(e, FlowEvent::Error { .. }))
        .filter_map(|e| match *e {
            FlowEvent::Insn { lo, hi, .. } => Some((lo, hi)),
            _ => None,
        })
        .collect();
    // Unbounded only past the last TSC: what runs up to the flow packet
    // after it may have run before it, so from the TSC before it.
    let last_tscs: Vec<Time> = g
        .packets
        .iter()
        .rev()
        .filter_map(|p| match p.1 {
            Packet::Tsc(t) => Some(t),
            _ => None,
        })
        .take(2)
        .collect();
    let bounded = after.iter().filter(|&&(lo, hi)| hi != Time::MAX && lo <= hi).count();
    let open = after.iter().filter(|&&(lo, hi)| hi == Time::MAX && last_tscs.contains(&lo)).count();
    assert_eq!(bounded + open, after.len(), "{after:?}");
    assert!(bounded > 0);
}

#[test]
fn byte_flips_never_panic_and_stay_bounded() {
    let code = image();
    // A poke in the middle of the trace's time, so that the interval source
    // has candidates to try.
    let poked = image_with(&[(1150, 0x40, &[0x74, 0x01], &[0xeb, 0x01])]);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let traces: Vec<(Gen, bool)> = [true, false].iter().map(|&n| (program_trace(0x5151 + n as u64, 40, n), n)).collect();
    let mut seen_errors = 0;
    for round in 0..600 {
        let (g, noretcomp) = &traces[round % 2];
        let mut bad = g.out.clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(bad.len() as u64) as usize;
            bad[i] ^= 1 << rng.below(8);
        }
        let c = FlowConfig { max_walk: 200, ..cfg(*noretcomp) };
        let got = if round % 3 == 0 { decode(&bad, &Interval(&poked), c.clone()) } else { decode(&bad, &Static(&code), c.clone()) };
        sane(&bad, &got, &c);
        seen_errors += errors(&got).len();
        for e in &got {
            if let FlowEvent::Insn { ip, .. } = *e {
                let off = ip.wrapping_sub(K);
                assert!(PROGRAM.iter().any(|&(s, b)| (s..s + b.len() as u64).contains(&off)), "{off:#x}");
            }
        }
    }
    assert!(seen_errors > 300, "flips are noticed ({seen_errors} errors)");
}

#[test]
fn random_bytes_never_panic() {
    let code = image();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Bytes biased towards flow packets whose IPs land in the program.
    let alphabet: &[&[u8]] = &[
        &[0x2d, 0x40, 0x00], // TIP 16-bit
        &[0x2d, 0x00, 0x00],
        &[0x0d],             // TIP suppressed
        &[0x31, 0x00, 0x00], // TIP.PGE 16-bit
        &[0x3d, 0x42, 0x00], // FUP 16-bit
        &[0x01],             // TIP.PGD suppressed
        &[0x06],
        &[0x0a],
        &[0x0c],
        &[0x02, 0xf3], // OVF
        &[0x19, 1, 2, 3, 4, 5, 6, 7],
        &[0x00],
        &[0x71, 0x00, 0x00, 0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // TIP.PGE sext48 0x...8100_0000
    ];
    for len in [0usize, 1, 2, 15, 16, 17, 100, 2000] {
        for _ in 0..60 {
            let mut buf = Vec::with_capacity(len + 16);
            while buf.len() < len {
                match rng.below(4) {
                    0 => buf.push(rng.next() as u8),
                    1 if rng.below(20) == 0 => buf.extend_from_slice(&PSB),
                    _ => buf.extend_from_slice(alphabet[rng.below(alphabet.len() as u64) as usize]),
                }
            }
            let c = FlowConfig { max_walk: 100, ..cfg(rng.bool()) };
            let got = decode(&buf, &Static(&code), c.clone());
            sane(&buf, &got, &c);
        }
    }
}

/// Every fetch counted; at every address, up to 8 candidates: the code
/// there and 7 other instructions.
struct EverywhereCandidates<'a> {
    code: &'a CodeTimeline,
    fetches: Cell<u64>,
}

impl CodeSource for EverywhereCandidates<'_> {
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        self.fetches.set(self.fetches.get() + 1);
        let n = match Static(self.code).fetch(addr, lo, hi, 0, buf) {
            Fetch::Exact(n) => n,
            other => return other,
        };
        let others: [&[u8]; 7] = [&[0x90], &[0xc3], &[0xcc], &[0xff, 0xe0], &[0x74, 0x00], &[0xeb, 0x00], &[0x75, 0x02]];
        match which {
            0 => {}
            1..=7 => buf[..others[which - 1].len()].copy_from_slice(others[which - 1]),
            _ => return Fetch::Unmapped,
        }
        Fetch::Candidate { filled: n, count: 8 }
    }
}

#[test]
fn trials_are_not_nested_so_work_stays_linear() {
    // Every instruction has 8 candidates and each is tried for trial_insns
    // instructions; a trial takes the first candidate where it meets a
    // choice instead of trying them all (no trial inside a trial), so each
    // instruction costs at most 8 trials of trial_insns steps, each step at
    // most 8 fetches.
    let code = image();
    let g = program_trace(0x4242, 60, true);
    let c = cfg(true);
    let src = EverywhereCandidates { code: &code, fetches: Cell::new(0) };
    let got = decode(&g.out, &src, c.clone());
    sane(&g.out, &got, &c);
    let steps = got.len() as u64;
    let per_step = 8 + 8 * (c.trial_insns + 1) * 8;
    assert!(src.fetches.get() <= steps * per_step, "{} fetches for {steps} events", src.fetches.get());
    assert!(got.iter().any(|e| matches!(e, FlowEvent::Insn { uncertain: true, .. })));
}

#[test]
fn deep_recursion_keeps_the_call_stack_small() {
    // 00: jz 07; 02: call 00; 07: ret -- 40,000 levels deep, the Jcc a
    // candidate (or a JMP to the RET), so that every level tries both: a
    // trial copies the call stack, which keeps only the youngest 64 entries.
    let mut base = BaseImage::new();
    base.add_bytes(K, vec![0x74, 0x05, 0xe8, 0xf9, 0xff, 0xff, 0xff, 0xc3], "recursion");
    let code = TimelineBuilder::new(base).build();
    let src = AltAt { code: &code, at: K, alt: &[0xeb, 0x05] };
    let mut t = Vec::new();
    let mut enc = Encoder::new();
    enc.encode(&Packet::Psb, &mut t).unwrap();
    enc.encode(&Packet::Fup(enc.compress(K)), &mut t).unwrap();
    enc.encode(&Packet::PsbEnd, &mut t).unwrap();
    for _ in 0..40_000 / 47 {
        enc.encode(&Packet::TntLong(Tnt { bits: 0, count: 47 }), &mut t).unwrap();
    }
    let c = FlowConfig { trial_insns: 4, ..cfg(false) };
    let got = decode(&t, &src, c.clone());
    sane(&t, &got, &c);
    let levels = got.iter().filter(|e| matches!(e, FlowEvent::Insn { ip, uncertain: false, .. } if *ip == K)).count();
    assert_eq!(levels, 40_000 / 47 * 47);
}

/// Writes the seeds of the `intel_pt_flow` fuzz target: valid traces of the
/// program in the target's input format (configuration byte, pokes, trace).
#[test]
#[ignore = "writes fuzz/seeds/intel_pt_flow"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/intel_pt_flow");
    std::fs::create_dir_all(&dir).unwrap();
    // flags: bit 0 noretcomp, bits 2:1 source (0 static, 1 perf-style, 2
    // interval), bits 5:3 trial_insns, bit 7 clear: pokes change the copy of
    // the program at the kernel address, where these traces run.
    let flags = |noretcomp: bool, source: u8, trial: u8| noretcomp as u8 | source << 1 | trial << 3;
    // The JZ at 40 becomes a JMP at time 1000 + 4 * 37 = 1148, in the trace's middle.
    let poke: &[u8] = &[1, 1, 1, 37, 0xeb, 0x01];
    let seeds: [(&str, u8, &[u8], u64, bool); 5] = [
        ("static_noretcomp", flags(true, 0, 7), &[0], 1, true),
        ("static_retcomp", flags(false, 0, 7), &[0], 2, false),
        ("perf_poked", flags(true, 1, 7), poke, 3, true),
        ("interval_poked", flags(true, 2, 7), poke, 4, true),
        ("interval_poked_retcomp", flags(false, 2, 7), poke, 5, false),
    ];
    for (name, flags, pokes, seed, noretcomp) in seeds {
        let g = program_trace(seed, 40, noretcomp);
        let mut input = vec![flags];
        input.extend_from_slice(pokes);
        input.extend_from_slice(&g.out);
        std::fs::write(dir.join(format!("{name}.bin")), input).unwrap();
    }
}
