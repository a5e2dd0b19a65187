//! The events libipt reports besides instructions, with
//! `FlowDecoder::with_state_events`: TIP.PGE as `Enabled` (and `resumed`),
//! state packets in the order of the instructions (bound to their FUP, to
//! the flow packet after them, or to the instruction they belong to), and
//! where tracing stops: a TIP.PGD where a branch needed a TNT, or at a
//! branch target that has no code, or after a direct branch out of the
//! address filter (its IP suppressed).

use codeimage::window::Static;
use intel_pt::flow::{AddrFilter, Errata, FlowDecoder, FlowEvent};
use intel_pt::{Ip, IpCompression, Packet, Tnt};

#[path = "common/hand.rs"]
mod hand;
use hand::{timeline, Trace, K};

impl Trace {
    fn at(&mut self, off: u64) -> Ip {
        self.enc.compress(K + off)
    }
    /// PSB+ in 64-bit mode, with the FUP of where execution is when given.
    fn psb(&mut self, fup: Option<u64>) -> &mut Trace {
        self.put(Packet::Psb).put(Packet::ModeExec { csl: true, csd: false, if_flag: false });
        if let Some(f) = fup {
            let ip = self.at(f);
            self.put(Packet::Fup(ip));
        }
        self.put(Packet::PsbEnd)
    }
    fn flow(&mut self, kind: fn(Ip) -> Packet, off: Option<u64>) -> &mut Trace {
        let ip = match off {
            Some(off) => self.at(off),
            None => Ip { compression: IpCompression::Suppressed, payload: 0, ip: None },
        };
        self.put(kind(ip))
    }
}

/// What the tests compare: instructions and events, IPs as offsets from `K`.
#[derive(Debug, PartialEq, Eq)]
enum E {
    I(u64),
    Enabled(u64, bool),
    State(Packet, Option<u64>),
    Trap(u64, u64),
    End(Option<u64>),
    Err,
}

fn run(t: &Trace, code: &[(u64, &[u8])], setup: impl for<'a> FnOnce(FlowDecoder<'a, Static<'a>>) -> FlowDecoder<'a, Static<'a>>) -> Vec<E> {
    let image = timeline(code, &[]);
    let source = Static(&image);
    let bytes = t.out.clone();
    let mut out = Vec::new();
    let off = |ip: u64| ip.wrapping_sub(K);
    setup(FlowDecoder::new(&bytes, &source, hand::config(false, 64)).with_state_events(true)).run(|e| {
        out.push(match e {
            FlowEvent::Insn { ip, .. } => E::I(off(ip)),
            FlowEvent::Enabled { ip, resumed, .. } => E::Enabled(off(ip), resumed),
            FlowEvent::State { packet, ip, restated: false, .. } => E::State(packet, ip.map(off)),
            FlowEvent::State { restated: true, .. } => return,
            FlowEvent::Trap { from, to, .. } => E::Trap(off(from), off(to)),
            FlowEvent::End { at, .. } => E::End(at.map(off)),
            FlowEvent::Error { .. } => E::Err,
        })
    });
    out
}

// nop; call +0x10 (to 0x16, where there is no code); hlt
const CALL: &[u8] = &[0x90, 0xe8, 0x10, 0x00, 0x00, 0x00, 0xf4];

#[test]
fn tip_pge_enables_and_resumes_where_tracing_stopped() {
    let mut t = Trace::new();
    t.psb(None).flow(Packet::TipPge, Some(0)).flow(Packet::Fup, Some(1)).flow(Packet::TipPgd, None);
    t.flow(Packet::TipPge, Some(1)).flow(Packet::Fup, Some(6)).flow(Packet::TipPgd, None);
    let nops: &[u8] = &[0x90; 8];
    assert_eq!(
        run(&t, &[(0, nops)], |d| d),
        [E::Enabled(0, false), E::I(0), E::End(Some(1)), E::Enabled(1, true), E::I(1), E::I(2), E::I(3), E::I(4), E::I(5), E::End(Some(6))]
    );
}

#[test]
fn a_tip_pgd_at_a_call_target_without_code_ends_tracing_there() {
    // The call's target has no code: TIP.PGD with its IP, no error.
    let mut t = Trace::new();
    t.psb(Some(0)).flow(Packet::TipPgd, Some(0x16));
    assert_eq!(run(&t, &[(0, CALL)], |d| d), [E::I(0), E::I(1), E::End(Some(0x16))]);
    // Its IP suppressed, the address filter says the call left the traced code.
    let mut t = Trace::new();
    t.psb(Some(0)).flow(Packet::TipPgd, None);
    let filter = AddrFilter { cfg: 1, a: [K, 0, 0, 0], b: [K + 0xf, 0, 0, 0] };
    assert_eq!(run(&t, &[(0, CALL)], |d| d.with_addr_filter(filter)), [E::I(0), E::I(1), E::End(None)]);
}

#[test]
fn a_tip_pgd_for_a_conditional_branch_ends_tracing_after_it() {
    // jz +2; hlt; hlt; nop
    let code: &[u8] = &[0x74, 0x02, 0xf4, 0xf4, 0x90];
    let mut t = Trace::new();
    t.psb(Some(0)).flow(Packet::TipPgd, Some(2));
    assert_eq!(run(&t, &[(0, code)], |d| d), [E::I(0), E::End(None)]);
    let mut t = Trace::new();
    t.psb(Some(0)).put(Packet::TntShort(Tnt { bits: 1, count: 1 })).flow(Packet::Fup, Some(4)).flow(Packet::TipPgd, None);
    assert_eq!(run(&t, &[(0, code)], |d| d), [E::I(0), E::End(Some(4))]);
}

#[test]
fn state_packets_go_where_the_trace_binds_them() {
    let nops: &[u8] = &[0x90; 8];
    let begin = Packet::ModeTsx { intx: true, abort: false };
    let commit = Packet::ModeTsx { intx: false, abort: false };
    let cbr = Packet::Cbr(0x10);
    let mut t = Trace::new();
    t.psb(Some(0)).put(begin).flow(Packet::Fup, Some(2)).put(cbr).put(commit).flow(Packet::Fup, Some(4));
    t.flow(Packet::Fup, Some(5)).flow(Packet::TipPgd, None);
    assert_eq!(
        run(&t, &[(0, nops)], |d| d),
        [E::I(0), E::I(1), E::State(begin, Some(2)), E::State(cbr, None), E::I(2), E::I(3), E::State(commit, Some(4)), E::I(4), E::End(Some(5))]
    );
}

#[test]
fn a_vm_entry_runs_before_tracing_stops_with_skd022() {
    // vmlaunch; hlt
    let code: &[u8] = &[0x0f, 0x01, 0xc2, 0xf4];
    let mut t = Trace::new();
    t.psb(Some(0)).flow(Packet::Fup, Some(0)).flow(Packet::TipPgd, None);
    assert_eq!(run(&t, &[(0, code)], |d| d), [E::End(Some(0))]);
    let skd022 = Errata::of(6, 0x8e).expect("a Kaby Lake");
    assert!(skd022.skd022);
    assert_eq!(run(&t, &[(0, code)], |d| d.with_errata(skd022)), [E::I(0), E::End(None)]);
}

/// A TRIG with an instruction count is reported after that many
/// instructions, counted from where the walk was when it was read (here the
/// PSB+'s FUP) or from the TRIG before it, with the IP of the instruction
/// after them; one with an IP at its FUP.
#[test]
fn trig_goes_after_its_instruction_count_or_at_its_fup() {
    let trig = |trbv, icnt| Packet::Trig { trbv, ip: false, mult: false, icnt: Some(icnt) };
    let mut t = Trace::new();
    t.psb(Some(0)).put(trig(1, 2)).put(trig(2, 0)).put(trig(3, 1));
    t.put(Packet::Trig { trbv: 4, ip: true, mult: false, icnt: None }).flow(Packet::Fup, Some(4));
    t.flow(Packet::Fup, Some(5)).flow(Packet::TipPgd, None);
    let nops: &[u8] = &[0x90; 8];
    let state = |trbv, ip, icnt, at| E::State(Packet::Trig { trbv, ip, mult: false, icnt }, Some(at));
    assert_eq!(
        run(&t, &[(0, nops)], |d| d),
        [
            E::I(0),
            E::I(1),
            state(1, false, Some(2), 2),
            state(2, false, Some(0), 2),
            E::I(2),
            state(3, false, Some(1), 3),
            E::I(3),
            state(4, true, None, 4),
            E::I(4),
            E::End(Some(5)),
        ]
    );
}

/// Event data a control flow event does not take, or of kinds no event
/// takes together, is an error of the packets (resynced at the next PSB).
#[test]
fn event_data_must_fit_its_control_flow_event() {
    let cases = [
        (vec![Packet::Evd { event_type: 0, payload: 0xf00 }, Packet::Cfe { ip: false, event_type: 2, vector: 0 }], true),
        (vec![Packet::Evd { event_type: 0, payload: 0xf00 }, Packet::Evd { event_type: 1, payload: 0 }], true),
        (
            vec![
                Packet::Evd { event_type: 1, payload: 0 },
                Packet::Evd { event_type: 2, payload: 0 },
                Packet::Cfe { ip: false, event_type: 8, vector: 0 },
            ],
            false,
        ),
        (vec![Packet::Evd { event_type: 0, payload: 0xf00 }, Packet::Cfe { ip: false, event_type: 1, vector: 14 }], false),
    ];
    let nops: &[u8] = &[0x90; 8];
    for (packets, bad) in cases {
        let mut t = Trace::new();
        t.psb(Some(0));
        for p in &packets {
            t.put(*p);
        }
        t.flow(Packet::Fup, Some(2)).flow(Packet::TipPgd, None);
        let got = run(&t, &[(0, nops)], |d| d);
        assert_eq!(got.contains(&E::Err), bad, "{packets:?}: {got:?}");
    }
}

/// At a FUP that state packets are bound to, those read before the first
/// of them go first, in the order of the packets: an event of its own (an
/// RSM), and event data (EVD) for the bound event; then the bound ones.
#[test]
fn events_read_before_the_bound_ones_go_first() {
    let rsm = Packet::Cfe { ip: false, event_type: 4, vector: 0 };
    let evd = Packet::Evd { event_type: 0, payload: 0xbaa };
    let intr = Packet::Cfe { ip: true, event_type: 1, vector: 14 };
    let mut t = Trace::new();
    t.psb(None).put(rsm).put(evd).put(intr).flow(Packet::Fup, Some(2));
    let nops: &[u8] = &[0x90; 4];
    assert_eq!(run(&t, &[(0, nops)], |d| d), [E::State(rsm, None), E::State(evd, None), E::State(intr, Some(2))]);
}
