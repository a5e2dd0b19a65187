//! CPUs running the program while one agent patches it, following a protocol.
//!
//! One global clock: each tick one CPU (chosen by the seed) executes one
//! instruction from the code as it is at that tick. The patcher writes bytes
//! and emits events at ticks of its own. Everything each CPU does is reported
//! to a [`Sink`]: the instruction (ground truth) and the control-flow facts a
//! tracer records (branch outcomes, indirect targets, traps).

use std::collections::{BTreeMap, HashMap};

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction};
use serde::{Deserialize, Serialize};

use crate::program::{Program, Site, SiteKind};
use crate::rng::Rng;

/// How code changes are announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// x86 text_poke_bp: INT3, sync, tail, event, sync, first byte, sync.
    /// On AArch64, what the arm64 kernel does: every site is one
    /// instruction, written whole (aarch64_insn_patch_text_nosync for jump
    /// labels, ftrace and static calls; the same write under stop_machine
    /// for kprobes, whose handler loop is not simulated), so the event is
    /// exact: at the write.
    Int3,
    /// The Arm proposal: PRE event, write, flush, POST event.
    #[serde(rename = "prepost")]
    #[cfg_attr(feature = "clap", value(name = "prepost"))]
    PrePost,
    /// One event after a plain write.
    SingleAfter,
    /// No events.
    None,
}

impl Protocol {
    /// The name `simulate --protocol` takes.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Int3 => "int3",
            Protocol::PrePost => "prepost",
            Protocol::SingleAfter => "single-after",
            Protocol::None => "none",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a tracer sees of one instruction's control flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Falls through: nothing to record.
    Quiet,
    /// A direct jump or call, always taken: nothing for Intel PT, an E atom for ETMv4.
    Direct,
    Cond {
        taken: bool,
    },
    /// Indirect jump or call: the target (Intel PT may defer its TIP).
    Indirect {
        to: u64,
    },
    /// A return, or a transfer that leaves the walked code (far, trap),
    /// taken as one: the target (Intel PT never defers its TIP).
    Return {
        to: u64,
    },
    /// An INT3 or BRK trap: from the trapping instruction to the handler.
    Trap {
        from: u64,
        to: u64,
    },
    /// IRET or ERET back from a trap.
    FarReturn {
        to: u64,
    },
}

/// A recorded code change, as the kernel would announce it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PokeEvent {
    pub time: u64,
    pub cpu: u32,
    pub addr: u64,
    pub old: Vec<u8>,
    pub new: Vec<u8>,
}

/// Out-of-line code appearing or going away (a KSYMBOL OOL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KsymEvent {
    pub time: u64,
    pub cpu: u32,
    pub addr: u64,
    pub len: u32,
    pub unregister: bool,
}

/// Receives everything the simulation produces, in time order.
pub trait Sink {
    /// CPU `cpu` executed the instruction at `addr` at `time`, with this flow.
    /// `next` is where the CPU goes after it.
    fn instruction(&mut self, cpu: u32, time: u64, addr: u64, flow: Flow, next: u64);
    fn poke(&mut self, e: PokeEvent);
    fn ksymbol(&mut self, e: KsymEvent);
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Next,
    Cond(u64),
    Jmp(u64),
    Call(u64),
    IndCall,
    IndJmp,
    Ret,
    Int3,
    /// UD2 or bytes that are no instruction: a #UD.
    Undefined,
    Iret,
    /// Not code the walker can follow (invalid bytes, system calls, far transfers).
    Stop,
}

#[derive(Clone, Copy)]
pub(crate) struct Decoded {
    pub(crate) len: u8,
    pub(crate) kind: Kind,
}

/// The code as it is now: the kernel text plus out-of-line code.
struct Image {
    text_base: u64,
    text: Vec<u8>,
    ool: BTreeMap<u64, Vec<u8>>,
}

impl Image {
    fn slice(&self, addr: u64) -> Option<&[u8]> {
        if addr >= self.text_base && addr < self.text_base + self.text.len() as u64 {
            return Some(&self.text[(addr - self.text_base) as usize..]);
        }
        let (start, code) = self.ool.range(..=addr).next_back()?;
        let off = (addr - start) as usize;
        code.get(off..).filter(|s| !s.is_empty())
    }

    fn write(&mut self, addr: u64, bytes: &[u8]) {
        if addr >= self.text_base && addr < self.text_base + self.text.len() as u64 {
            let o = (addr - self.text_base) as usize;
            self.text[o..o + bytes.len()].copy_from_slice(bytes);
        } else if let Some((start, code)) = self.ool.range_mut(..=addr).next_back() {
            let o = (addr - *start) as usize;
            code[o..o + bytes.len()].copy_from_slice(bytes);
        }
    }
}

/// One scheduled action of the patcher.
#[derive(Clone, Debug)]
enum Step {
    Write {
        addr: u64,
        bytes: Vec<u8>,
    },
    Event(PokeEvent),
    /// The site is mid-change: a CPU meeting INT3 there runs `new` (emulated).
    InFlight {
        addr: u64,
        new: Option<Vec<u8>>,
    },
    Create {
        addr: u64,
        code: Vec<u8>,
    },
    Remove {
        addr: u64,
    },
    Ksym(KsymEvent),
}

struct Cpu {
    pc: u64,
    stack: Vec<u64>,
    /// Where IRET returns to, after a trap.
    resume: Option<u64>,
    rng: Rng,
}

/// Settings of a run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub cpus: u32,
    pub protocol: Protocol,
    pub pokes: u64,
    /// Instructions per CPU (on average: CPUs are picked at random each tick).
    pub instructions: u64,
    /// Ticks between the steps of one poke (the "sync" of the protocol).
    pub sync_ticks: u64,
    /// After the last tick, run each CPU on to its next branch, so that every
    /// instruction it ran is followed by a traced branch (ETMv4 has no packet
    /// for where the PE stopped between two branches).
    pub drain: bool,
    /// perf time of tick 0, in ns; one tick is one ns.
    pub time_zero: u64,
}

/// Runs the program; returns how many instructions were executed.
pub fn run(prog: &Program, cfg: &RunConfig, rng: &mut Rng, sink: &mut impl Sink) -> u64 {
    let mut image = Image { text_base: prog.text_base, text: prog.text.clone(), ool: BTreeMap::new() };
    if let Some(o) = &prog.outside {
        image.ool.insert(o.base, o.code.clone());
    }
    let indirect: HashMap<u64, &Vec<u64>> = prog.indirect.iter().map(|(a, t)| (*a, t)).collect();
    let mut cache: HashMap<u64, Decoded> = HashMap::new();
    let mut cpus: Vec<Cpu> = (0..cfg.cpus).map(|_| Cpu { pc: prog.entry, stack: Vec::new(), resume: None, rng: rng.fork() }).collect();
    let total = cfg.instructions * cfg.cpus as u64;
    let schedule = plan_pokes(prog, cfg, rng, total);
    let mut next_step = 0;
    let mut in_flight: HashMap<u64, Option<Vec<u8>>> = HashMap::new();
    for tick in 0..total {
        let time = cfg.time_zero + tick;
        while next_step < schedule.len() && schedule[next_step].0 <= tick {
            match &schedule[next_step].1 {
                Step::Write { addr, bytes } => {
                    image.write(*addr, bytes);
                    invalidate(&mut cache, *addr, bytes.len());
                }
                Step::Event(e) => sink.poke(PokeEvent { time, ..e.clone() }),
                Step::InFlight { addr, new } => match new {
                    Some(n) => {
                        in_flight.insert(*addr, Some(n.clone()));
                    }
                    None => {
                        in_flight.remove(addr);
                    }
                },
                Step::Create { addr, code } => {
                    image.ool.insert(*addr, code.clone());
                    invalidate(&mut cache, *addr, code.len());
                }
                Step::Remove { addr } => {
                    if let Some(code) = image.ool.remove(addr) {
                        invalidate(&mut cache, *addr, code.len());
                    }
                }
                Step::Ksym(k) => sink.ksymbol(KsymEvent { time, ..k.clone() }),
            }
            next_step += 1;
        }
        let c = rng.below(cfg.cpus as u64) as usize;
        step(prog, &image, &mut cache, &indirect, &in_flight, &mut cpus[c], c as u32, time, sink);
    }
    let mut extra = 0;
    if cfg.drain {
        // Pokes are over: every CPU runs on until its next branch.
        for (c, cpu) in cpus.iter_mut().enumerate() {
            for k in 0..MAX_DRAIN as u64 {
                extra += 1;
                let time = cfg.time_zero + total + k;
                if step(prog, &image, &mut cache, &indirect, &in_flight, cpu, c as u32, time, sink) != Flow::Quiet {
                    break;
                }
            }
        }
    }
    total + extra
}

/// A run of straight-line code longer than this is not generated: draining stops there.
const MAX_DRAIN: u32 = 1 << 16;

/// CPU `cpu` executes one instruction at `time`; returns its flow.
#[allow(clippy::too_many_arguments)]
fn step(
    prog: &Program,
    image: &Image,
    cache: &mut HashMap<u64, Decoded>,
    indirect: &HashMap<u64, &Vec<u64>>,
    in_flight: &HashMap<u64, Option<Vec<u8>>>,
    cpu: &mut Cpu,
    c: u32,
    time: u64,
    sink: &mut impl Sink,
) -> Flow {
    {
        let pc = cpu.pc;
        let d = match cache.get(&pc) {
            Some(d) => *d,
            None => {
                let d = decode_for(prog.arch, image.slice(pc).unwrap_or(&[]), pc);
                cache.insert(pc, d);
                d
            }
        };
        let next = pc + d.len as u64;
        let flow = match d.kind {
            Kind::Next => {
                cpu.pc = next;
                Flow::Quiet
            }
            Kind::Cond(target) => {
                let backward = target <= pc;
                let taken = if backward { cpu.rng.chance(3, 5) } else { cpu.rng.chance(1, 2) };
                cpu.pc = if taken { target } else { next };
                Flow::Cond { taken }
            }
            Kind::Jmp(target) => {
                cpu.pc = target;
                Flow::Direct
            }
            Kind::Call(target) => {
                cpu.stack.push(next);
                cpu.pc = target;
                Flow::Direct
            }
            Kind::IndCall | Kind::IndJmp => {
                let targets = indirect.get(&pc).copied();
                let to = targets.map_or(prog.entry, |t| t[cpu.rng.below(t.len() as u64) as usize]);
                if matches!(d.kind, Kind::IndCall) {
                    cpu.stack.push(next);
                }
                cpu.pc = to;
                Flow::Indirect { to }
            }
            Kind::Undefined if prog.ud_handler.is_some() => {
                let handler = prog.ud_handler.unwrap_or(prog.entry);
                cpu.resume = Some(next);
                cpu.pc = handler;
                Flow::Trap { from: pc, to: handler }
            }
            Kind::Ret | Kind::Stop | Kind::Undefined => {
                let to = cpu.stack.pop().unwrap_or(prog.entry);
                cpu.pc = to;
                Flow::Return { to }
            }
            Kind::Int3 => {
                // The handler emulates what the site is becoming (text_poke_bp)
                // or, for a kprobe, the probed instruction.
                let resume = match in_flight.get(&pc).cloned().flatten() {
                    Some(new) => emulate(prog.arch, &new, pc, &mut cpu.stack),
                    None => kprobe_resume(prog, pc),
                };
                cpu.resume = Some(resume);
                cpu.pc = prog.int3_handler;
                Flow::Trap { from: pc, to: prog.int3_handler }
            }
            Kind::Iret => {
                let to = cpu.resume.take().unwrap_or(prog.entry);
                cpu.pc = to;
                Flow::FarReturn { to }
            }
        };
        let next = cpu.pc;
        sink.instruction(c, time, pc, flow, next);
        flow
    }
}

fn invalidate(cache: &mut HashMap<u64, Decoded>, addr: u64, len: usize) {
    for a in addr.saturating_sub(15)..addr + len as u64 {
        cache.remove(&a);
    }
}

/// Decodes the instruction at `pc` for `arch`.
pub(crate) fn decode_for(arch: isa::Arch, bytes: &[u8], pc: u64) -> Decoded {
    match arch {
        isa::Arch::X86_64 => decode(bytes, pc),
        isa::Arch::Aarch64 => decode_a64(bytes, pc),
    }
}

/// An A64 instruction: every branch kind the generated code uses; ERET
/// returns from a trap, other exception-generating instructions stop.
fn decode_a64(bytes: &[u8], pc: u64) -> Decoded {
    use isa::BranchClass as B;
    let Some(w) = bytes.get(..4) else {
        return Decoded { len: 4, kind: Kind::Stop };
    };
    let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
    let insn = isa::classify_aarch64(pc, word);
    let target = insn.target.unwrap_or(0);
    let kind = match insn.class {
        B::None | B::Nop => Kind::Next,
        B::CondBranch => Kind::Cond(target),
        B::DirectJump => Kind::Jmp(target),
        B::DirectCall => Kind::Call(target),
        B::IndirectJump => Kind::IndJmp,
        B::IndirectCall => Kind::IndCall,
        B::Return => Kind::Ret,
        B::FarTransfer if word == crate::a64prog::ERET => Kind::Iret,
        B::Trap if word & 0xffe0_001f == 0xd420_0000 => Kind::Int3,
        B::FarTransfer | B::Trap => Kind::Stop,
    };
    Decoded { len: 4, kind }
}

/// An x86-64 instruction.
pub(crate) fn decode(bytes: &[u8], pc: u64) -> Decoded {
    let mut dec = Decoder::with_ip(64, bytes, pc, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    dec.decode_out(&mut insn);
    if insn.is_invalid() {
        return Decoded { len: 1, kind: Kind::Undefined };
    }
    let kind = match insn.flow_control() {
        FlowControl::Next => Kind::Next,
        FlowControl::ConditionalBranch => Kind::Cond(insn.near_branch_target()),
        FlowControl::UnconditionalBranch => Kind::Jmp(insn.near_branch_target()),
        // iced calls SYSCALL and VMCALL calls: far transfers, not followed.
        FlowControl::Call if insn.near_branch_target() == 0 => Kind::Stop,
        FlowControl::Call => Kind::Call(insn.near_branch_target()),
        FlowControl::IndirectCall => Kind::IndCall,
        FlowControl::IndirectBranch => Kind::IndJmp,
        FlowControl::Return if insn.code() == Code::Iretq => Kind::Iret,
        FlowControl::Return => Kind::Ret,
        FlowControl::Interrupt if insn.code() == Code::Int3 => Kind::Int3,
        FlowControl::Exception if insn.code() == Code::Ud2 => Kind::Undefined,
        FlowControl::Interrupt | FlowControl::Exception | FlowControl::XbeginXabortXend => Kind::Stop,
    };
    Decoded { len: insn.len() as u8, kind }
}

/// Where execution goes after the handler emulates `new` at `pc`.
fn emulate(arch: isa::Arch, new: &[u8], pc: u64, stack: &mut Vec<u64>) -> u64 {
    let d = decode_for(arch, new, pc);
    let next = pc + d.len as u64;
    match d.kind {
        Kind::Jmp(t) => t,
        Kind::Call(t) => {
            stack.push(next);
            t
        }
        _ => next,
    }
}

/// A kprobe single-steps the probed instruction: continue after it.
fn kprobe_resume(prog: &Program, pc: u64) -> u64 {
    let o = (pc - prog.text_base) as usize;
    let mut original = prog.text[o..].to_vec();
    if let Some(s) = prog.sites.iter().find(|s| s.addr == pc) {
        original[..s.states[0].len()].copy_from_slice(&s.states[0]);
    }
    pc + decode_for(prog.arch, &original, pc).len as u64
}

/// The patcher's whole schedule: (tick, step), sorted by tick.
fn plan_pokes(prog: &Program, cfg: &RunConfig, rng: &mut Rng, total: u64) -> Vec<(u64, Step)> {
    let mut steps: Vec<(u64, Step)> = Vec::new();
    if cfg.pokes == 0 || prog.sites.is_empty() {
        return steps;
    }
    let mut current: Vec<usize> = vec![0; prog.sites.len()];
    let d = cfg.sync_ticks.max(1);
    let slot = (total / (cfg.pokes + 1)).max(4 * d + 1);
    let tramp_at = prog.ool_base;
    let mut tramp_live = false;
    for k in 0..cfg.pokes {
        let t0 = slot * (k + 1);
        if t0 + 4 * d >= total {
            break;
        }
        let cpu = rng.below(cfg.cpus as u64) as u32;
        // Every 16th change creates or removes the ftrace trampoline instead.
        if k % 16 == 15 {
            if !tramp_live {
                let code = prog.trampoline_code.clone();
                steps.push((t0, Step::Ksym(KsymEvent { time: 0, cpu, addr: tramp_at, len: 0x1000, unregister: false })));
                steps.push((t0, Step::Create { addr: tramp_at, code: code.clone() }));
                let created = PokeEvent { time: 0, cpu, addr: tramp_at, old: vec![], new: code };
                if cfg.protocol == Protocol::PrePost {
                    // A pair here too: the end record follows the change.
                    steps.push((t0 + d + 1, Step::Event(created.clone())));
                }
                steps.push((t0, Step::Event(created)));
            } else if !prog.sites.iter().zip(&current).any(|(s, &c)| s.kind == SiteKind::Ftrace && c == 2) {
                let code = prog.trampoline_code.clone();
                let removed = PokeEvent { time: 0, cpu, addr: tramp_at, old: code, new: vec![] };
                let mut after = t0 + 1;
                if cfg.protocol == Protocol::PrePost {
                    steps.push((t0 + d + 1, Step::Event(removed.clone())));
                    after = t0 + d + 2;
                }
                steps.push((t0, Step::Event(removed)));
                steps.push((t0, Step::Remove { addr: tramp_at }));
                steps.push((after, Step::Ksym(KsymEvent { time: 0, cpu, addr: tramp_at, len: 0x1000, unregister: true })));
            } else {
                continue;
            }
            tramp_live = !tramp_live;
            continue;
        }
        let si = rng.below(prog.sites.len() as u64) as usize;
        let site: &Site = &prog.sites[si];
        let mut states = site.states.clone();
        if let (Some(call), true) = (&site.tramp_call, tramp_live) {
            states.push(call.clone());
        }
        let cur = current[si].min(states.len() - 1);
        let mut next = rng.below(states.len() as u64) as usize;
        if next == cur {
            next = (cur + 1) % states.len();
        }
        // Never leave a site calling a trampoline that may be removed.
        if site.kind == SiteKind::Ftrace && !tramp_live && next == 2 {
            next = 0;
        }
        let (old, new) = (states[cur].clone(), states[next].clone());
        current[si] = next;
        let event = |time_tick: u64, steps: &mut Vec<(u64, Step)>| {
            steps.push((time_tick, Step::Event(PokeEvent { time: 0, cpu, addr: site.addr, old: old.clone(), new: new.clone() })));
        };
        match cfg.protocol {
            // On AArch64 every site is one 4-byte instruction, written at
            // once (single-copy atomic): the kernel's aarch64_insn_patch_text_nosync
            // for jump labels, ftrace and static calls, stop_machine around the
            // same write for kprobes. The event can be exact: at the write.
            Protocol::Int3 if prog.arch == isa::Arch::X86_64 && new.len() > 1 => {
                steps.push((t0, Step::InFlight { addr: site.addr, new: Some(new.clone()) }));
                steps.push((t0, Step::Write { addr: site.addr, bytes: vec![crate::x86prog::INT3] }));
                steps.push((t0 + d, Step::Write { addr: site.addr + 1, bytes: new[1..].to_vec() }));
                event(t0 + d, &mut steps);
                steps.push((t0 + 2 * d, Step::Write { addr: site.addr, bytes: new[..1].to_vec() }));
                steps.push((t0 + 3 * d, Step::InFlight { addr: site.addr, new: None }));
            }
            Protocol::Int3 => {
                steps.push((t0, Step::Write { addr: site.addr, bytes: new.clone() }));
                event(t0, &mut steps);
            }
            Protocol::PrePost => {
                event(t0, &mut steps);
                steps.push((t0 + 1 + rng.below(d), Step::Write { addr: site.addr, bytes: new.clone() }));
                event(t0 + d + 1, &mut steps);
            }
            Protocol::SingleAfter => {
                steps.push((t0, Step::Write { addr: site.addr, bytes: new.clone() }));
                event(t0 + d, &mut steps);
            }
            Protocol::None => steps.push((t0, Step::Write { addr: site.addr, bytes: new.clone() })),
        }
    }
    steps.sort_by_key(|s| s.0);
    steps
}
