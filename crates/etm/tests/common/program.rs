//! Synthetic traced runs for the flow decoder: a random A64 program (user
//! code calling leaf functions, an exception handler at EL1), executed with
//! random branch outcomes and interrupts, traced as an ETMv4 trace unit
//! would trace it (atoms, addresses for indirect branches unless the
//! return stack supplies them, exceptions with their return addresses,
//! exception returns, timestamps, cycle counts, events, overflows), written
//! as an OpenCSD snapshot with the code as memory dumps. The generator
//! knows what each word is from how it made it, not from a classifier.

use std::fmt::Write as _;
use std::path::Path;

use etm::packet::{Atoms, Context, CycleCount, Exception, Packet, Timestamp, TraceInfo};
use etm::{Encoder, EtmV4Config, FrameWriter};

use super::packets::long_addr;
use super::Rng;

/// User code: main at USER, leaf functions in its last quarter.
pub const USER: u64 = 0x40_0000;
pub const USER_WORDS: u64 = 4096;
/// The exception handler (EL1).
pub const HANDLER: u64 = 0xffff_ffc0_0008_0000;
pub const HANDLER_WORDS: u64 = 256;
/// A BL target that is not in any dump: the decoders report it inaccessible.
const NOWHERE: u64 = 0x140_0000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Plain,
    /// B.cond or CBZ to the target.
    Cond(u64),
    B(u64),
    Bl(u64),
    Ret,
    /// BR x1 (to a random main address) or BLR x2 (to a leaf function).
    Br,
    Blr,
    Isb,
    Wfi,
    Eret,
}

pub struct Program {
    words: Vec<(u32, Kind)>,
    handler: Vec<(u32, Kind)>,
    leaves: Vec<u64>,
}

fn imm(offset: i64, bits: u32, lsb: u32) -> u32 {
    (((offset / 4) as u32) & ((1 << bits) - 1)) << lsb
}

impl Program {
    pub fn random(rng: &mut Rng) -> Program {
        let leaf_start = USER_WORDS * 3 / 4;
        // Leaf functions: every 16 words of the last quarter, ending in RET.
        let leaves: Vec<u64> = (leaf_start..USER_WORDS).step_by(16).map(|w| USER + w * 4).collect();
        let mut words = Vec::with_capacity(USER_WORDS as usize);
        for w in 0..USER_WORDS {
            let pc = USER + w * 4;
            let leaf = w >= leaf_start;
            let end_of_leaf = leaf && (w - leaf_start) % 16 == 15;
            let main_target = |rng: &mut Rng| USER + rng.below(leaf_start) * 4;
            let near = |rng: &mut Rng, lo: u64, hi: u64| {
                let t = (w as i64 + rng.below(24) as i64 - 12).clamp(lo as i64, hi as i64 - 1);
                USER + t as u64 * 4
            };
            let k = if end_of_leaf {
                Kind::Ret
            } else {
                match rng.below(100) {
                    0..=69 => Kind::Plain,
                    70..=79 if leaf => Kind::Cond(near(rng, w + 1, leaf_start + (w - leaf_start) / 16 * 16 + 16)),
                    70..=79 => Kind::Cond(near(rng, 0, leaf_start)),
                    80..=82 if !leaf => Kind::B(main_target(rng)),
                    83..=87 if !leaf => {
                        if rng.chance(10) {
                            Kind::Bl(NOWHERE)
                        } else {
                            Kind::Bl(leaves[rng.below(leaves.len() as u64) as usize])
                        }
                    }
                    88..=89 if !leaf => Kind::Br,
                    90..=91 if !leaf => Kind::Blr,
                    92 => Kind::Isb,
                    93 => Kind::Wfi,
                    94 if leaf => Kind::Ret,
                    _ => Kind::Plain,
                }
            };
            let word = match k {
                Kind::Plain => {
                    if rng.chance(50) {
                        0xd503201f // nop
                    } else {
                        0x91000400 // add x0, x0, #1
                    }
                }
                Kind::Cond(t) => {
                    let off = t as i64 - pc as i64;
                    if rng.chance(50) {
                        0x54000000 | imm(off, 19, 5) | rng.below(14) as u32 // b.cond
                    } else {
                        0xb4000000 | imm(off, 19, 5) // cbz x0
                    }
                }
                Kind::B(t) => 0x14000000 | imm(t as i64 - pc as i64, 26, 0),
                Kind::Bl(t) => 0x94000000 | imm(t as i64 - pc as i64, 26, 0),
                Kind::Ret => 0xd65f03c0,
                Kind::Br => 0xd61f0020,
                Kind::Blr => 0xd63f0040,
                Kind::Isb => 0xd5033fdf,
                Kind::Wfi => 0xd503207f,
                Kind::Eret => unreachable!(),
            };
            words.push((word, k));
        }
        let mut handler: Vec<(u32, Kind)> = (0..HANDLER_WORDS).map(|_| (0xd503201f, Kind::Plain)).collect();
        // Handlers at every 32 words: a few plain instructions, maybe a
        // forward conditional branch, then ERET.
        for h in (0..HANDLER_WORDS).step_by(32) {
            let len = 2 + rng.below(20);
            if rng.chance(50) {
                let at = h + rng.below(len);
                let t = HANDLER + (h + len) * 4;
                let pc = HANDLER + at * 4;
                handler[at as usize] = (0x54000000 | imm(t as i64 - pc as i64, 19, 5) | 1, Kind::Cond(t));
            }
            handler[(h + len) as usize] = (0xd69f03e0, Kind::Eret);
        }
        Program { words, handler, leaves }
    }

    fn at(&self, pc: u64) -> Option<(u32, Kind)> {
        if (USER..USER + USER_WORDS * 4).contains(&pc) {
            return Some(self.words[((pc - USER) / 4) as usize]);
        }
        if (HANDLER..HANDLER + HANDLER_WORDS * 4).contains(&pc) {
            return Some(self.handler[((pc - HANDLER) / 4) as usize]);
        }
        None
    }

    fn bytes(words: &[(u32, Kind)]) -> Vec<u8> {
        words.iter().flat_map(|w| w.0.to_le_bytes()).collect()
    }
}

fn ctx(el: u8) -> Context {
    Context { el, aarch64: true, non_secure: true, vmid: None, context_id: Some(0x42) }
}

/// The trace of a run of `steps` instructions, as one source's bytes.
pub fn run(rng: &mut Rng, prog: &Program, cfg: &EtmV4Config, steps: usize) -> Vec<u8> {
    let mut enc = Encoder::new(cfg);
    let mut out = Vec::new();
    let mut atoms: Vec<bool> = Vec::new();
    let rs_on = cfg.return_stack_enabled();
    let cci = cfg.cycle_counting_enabled();
    let mut rs: Vec<u64> = Vec::new();
    let mut calls: Vec<u64> = Vec::new();
    let mut ts = 0x1000u64;
    let mut pc = USER;
    let mut el = 0u8;
    let mut exc_return = (0u64, 0u8);
    let mut at_target = false;
    // P0 elements not yet committed, and how many a COMMIT must follow (speculation).
    let mut spec = 0u32;
    let max_spec = cfg.max_spec_depth();

    let mut pushed = 0u64;
    let mut last = false;
    macro_rules! atom {
        ($a:expr) => {{
            let a: bool = $a;
            atoms.push(a);
            pushed += 1;
            last = a;
        }};
    }
    macro_rules! flush {
        () => {{
            if !atoms.is_empty() {
                enc.atoms(&atoms, &mut out);
                atoms.clear();
            }
        }};
    }
    macro_rules! put {
        ($p:expr) => {{
            flush!();
            enc.encode(&$p, &mut out).expect("encodable");
        }};
    }
    let start = |enc: &mut Encoder, out: &mut Vec<u8>, pc: u64, el: u8, rs: &mut Vec<u64>| {
        for p in [
            Packet::Async,
            Packet::TraceInfo(TraceInfo { info: cci as u32, cc_threshold: cci.then_some(4), ..TraceInfo::default() }),
            Packet::TraceOn,
            Packet::AddressContext(long_addr(pc), ctx(el)),
        ] {
            enc.encode(&p, out).expect("encodable");
        }
        rs.clear();
    };
    start(&mut enc, &mut out, pc, el, &mut rs);
    // An indirect branch's target: no address when it is the top of the return stack.
    macro_rules! indirect {
        ($target:expr) => {{
            let t: u64 = $target;
            if rs_on && rs.last() == Some(&t) {
                rs.pop();
            } else {
                flush!();
                enc.address(t, 0, &mut out).expect("address");
            }
            t
        }};
    }
    for step in 0..steps {
        // The trace unit commits before it holds more than its maximum speculation.
        if max_spec > 0 && (spec >= max_spec || (spec > 0 && rng.chance(5))) {
            let n = 1 + rng.below(spec as u64) as u32;
            put!(Packet::Commit(n));
            spec -= n;
        }
        // Interrupts between instructions of user code.
        if el == 0 && rng.chance(1) {
            // Right after a taken branch the return address is that branch's target.
            let same = at_target && rng.chance(50);
            put!(Packet::Exception(Exception { number: 14, addr_interp: if same { 2 } else { 1 }, ..Default::default() }));
            enc.address(pc, 0, &mut out).expect("address");
            exc_return = (pc, el);
            spec += 1;
            at_target = false;
            pc = HANDLER + rng.below(HANDLER_WORDS / 32) * 32 * 4;
            el = 1;
            put!(Packet::AddressContext(long_addr(pc), ctx(el)));
            continue;
        }
        if step % 97 == 96 {
            ts += 1 + rng.below(5000);
            put!(Packet::Timestamp(Timestamp { value: ts, updated_bits: 64, cycle_count: cci.then(|| rng.below(4000) as u32) }));
        }
        if cci && rng.chance(2) {
            put!(Packet::CycleCount(CycleCount { format: 3, count: Some(4 + rng.below(3) as u32), commit: None }));
        }
        if rng.chance(1) {
            put!(Packet::Event(1 + rng.below(15) as u8));
        }
        if step > 0 && step % 1500 == 0 {
            // A trace unit overflow: the trace restarts from a synchronisation.
            put!(Packet::Overflow);
            start(&mut enc, &mut out, pc, el, &mut rs);
            spec = 0;
        }
        let before = pushed;
        let Some((_, k)) = prog.at(pc) else {
            // Code not in the image ran to a branch; then tracing resumes in main.
            atom!(true);
            put!(Packet::TraceOn);
            pc = USER + rng.below(USER_WORDS / 2) * 4;
            el = 0;
            calls.clear();
            rs.clear();
            put!(Packet::AddressContext(long_addr(pc), ctx(el)));
            spec += 1;
            at_target = false;
            continue;
        };
        match k {
            Kind::Plain => pc += 4,
            Kind::Wfi => {
                if cfg.wfx_is_p0() {
                    atom!(true);
                }
                pc += 4;
            }
            Kind::Isb => {
                atom!(true);
                pc += 4;
            }
            Kind::Cond(t) => {
                let taken = rng.chance(50);
                // Speculation gone wrong: a wrong guess corrected by a
                // mispredict, or a wrong-path atom cancelled (with room
                // under the maximum depth for it).
                let room = spec + 1 < max_spec;
                match rng.below(if max_spec > 0 { 20 } else { 1 }) {
                    1 => {
                        atom!(!taken);
                        put!(Packet::Mispredict(Atoms::default()));
                    }
                    2 if room => {
                        atom!(taken);
                        atoms.push(rng.chance(50));
                        put!(Packet::CancelF1 { count: 1, mispredict: false });
                    }
                    3 if room => {
                        atom!(!taken);
                        atoms.push(rng.chance(50));
                        put!(Packet::CancelF1 { count: 1, mispredict: true });
                    }
                    _ => atom!(taken),
                }
                pc = if taken { t } else { pc + 4 };
            }
            Kind::B(t) => {
                atom!(true);
                pc = t;
            }
            Kind::Bl(t) => {
                atom!(true);
                calls.push(pc + 4);
                rs.push(pc + 4);
                pc = t;
            }
            Kind::Blr => {
                atom!(true);
                let t = prog.leaves[rng.below(prog.leaves.len() as u64) as usize];
                calls.push(pc + 4);
                let ret = pc + 4;
                pc = indirect!(t);
                rs.push(ret);
            }
            Kind::Br => {
                atom!(true);
                let mut t = USER + rng.below(USER_WORDS * 3 / 4) * 4;
                while rs.last() == Some(&t) {
                    t += 4;
                }
                pc = indirect!(t);
            }
            Kind::Ret => {
                atom!(true);
                let t = calls.pop().unwrap_or(USER + rng.below(USER_WORDS / 2) * 4);
                pc = indirect!(t);
            }
            Kind::Eret => {
                atom!(true);
                let (t, to_el) = exc_return;
                el = to_el;
                flush!();
                if rs_on && rs.last() == Some(&t) {
                    rs.pop();
                } else {
                    put!(Packet::AddressContext(long_addr(t), ctx(el)));
                }
                put!(Packet::ExceptionReturn);
                pc = t;
            }
        }
        let p0 = pushed > before;
        spec += p0 as u32;
        at_target = p0 && last && !matches!(k, Kind::Isb | Kind::Wfi);
    }
    if !atoms.is_empty() {
        enc.atoms(&atoms, &mut out);
    }
    out
}

/// Writes a snapshot of one source (trace ID `cfg`'s, in CoreSight frames)
/// with the program's code as two memory dumps.
pub fn write_snapshot(dir: &Path, rng: &mut Rng, prog: &Program, cfg: &EtmV4Config, trace: &[u8]) {
    let frames = super::synth::frames(rng, &[(cfg.trace_id(), trace.to_vec())], &mut FrameWriter::new());
    super::synth::write_snapshot(dir, &[("etm_0", *cfg)], "coresight", &frames);
    std::fs::write(dir.join("user.bin"), Program::bytes(&prog.words)).unwrap();
    std::fs::write(dir.join("handler.bin"), Program::bytes(&prog.handler)).unwrap();
    let mut cpu = std::fs::read_to_string(dir.join("cpu_0.ini")).unwrap();
    write!(cpu, "\n[dump1]\nfile=user.bin\naddress=0x{USER:x}\nlength=0x{:x}\n\n[dump2]\nfile=handler.bin\naddress=0x{HANDLER:x}\n", USER_WORDS * 4)
        .unwrap();
    std::fs::write(dir.join("cpu_0.ini"), cpu).unwrap();
}

/// A random packet sequence for `cfg` (valid packets in senseless order,
/// with a few corrupt bytes): addresses near the program, every packet the
/// flow decoder acts on except mispredicts (see `random_packet_sequences`
/// in decode_oracle.rs).
pub fn random_packets(rng: &mut Rng, cfg: &EtmV4Config, n: usize) -> Vec<u8> {
    let mut enc = Encoder::new(cfg);
    let mut out = Vec::new();
    let cci = cfg.cycle_counting_enabled();
    let _ = enc.encode(&Packet::Async, &mut out);
    for _ in 0..n {
        let pc = USER + rng.below(USER_WORDS) * 4;
        let p = match rng.below(24) {
            0 => Packet::Async,
            1 => Packet::TraceInfo(TraceInfo {
                info: cci as u32,
                cc_threshold: cci.then_some(4),
                spec_depth: if rng.chance(10) { rng.below(8) as u32 } else { 0 },
                ..TraceInfo::default()
            }),
            2 => Packet::TraceOn,
            3 => Packet::AddressContext(long_addr(pc), ctx(rng.below(2) as u8)),
            4 => Packet::Context(rng.chance(70).then(|| ctx(rng.below(2) as u8))),
            5..=7 => {
                let _ = enc.address(pc, 0, &mut out);
                continue;
            }
            8..=12 => {
                let atoms: Vec<bool> = (0..1 + rng.below(6)).map(|_| rng.chance(60)).collect();
                enc.atoms(&atoms, &mut out);
                continue;
            }
            // (Return address also the last branch target, addr_interp 2,
            // can leave the instruction set unknown, which OpenCSD then
            // walks as A32: synthetic runs test it where it makes sense.)
            13 => Packet::Exception(Exception { number: rng.below(16) as u16, addr_interp: 1, ..Default::default() }),
            14 => Packet::ExceptionReturn,
            15 => Packet::Timestamp(Timestamp { value: rng.below(1 << 40), updated_bits: 64, cycle_count: cci.then(|| rng.below(100) as u32) }),
            16 if cci => Packet::CycleCount(CycleCount { format: 3, count: Some(4 + rng.below(3) as u32), commit: None }),
            17 => Packet::Event(1 + rng.below(15) as u8),
            18 => Packet::Commit(1 + rng.below(4) as u32),
            19 | 20 => Packet::CancelF1 { count: 1 + rng.below(3) as u32, mispredict: false },
            21 => {
                if rng.chance(30) {
                    Packet::Overflow
                } else {
                    Packet::Discard
                }
            }
            22 => {
                // A corrupt byte (mostly reserved headers).
                out.push([0x05, 0x47, 0x70, 0x87, 0x93, 0xac][rng.below(6) as usize]);
                continue;
            }
            _ => Packet::Ignore,
        };
        let _ = enc.encode(&p, &mut out);
    }
    out
}
