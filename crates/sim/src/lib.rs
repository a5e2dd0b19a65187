//! A ground-truth simulator of CPUs running kernel code while it is patched.
//!
//! A real trace never says what really ran. The simulator generates a
//! kernel-like program in real x86-64 or A64 machine code with patch sites
//! of every kind (jump labels, ftrace, static calls, kprobes, trampolines
//! created and removed), runs N CPUs through it with a deterministic
//! interleaving while one agent patches it under a [`Protocol`], and writes:
//! - `DIR/data` + `DIR/kcore_dir/`: a perf.data directory with the base code,
//!   kallsyms, TEXT_POKE and KSYMBOL records at their times, and one AUX
//!   stream per CPU (Intel PT; or ETMv4 in CoreSight frames with a CoreSight
//!   AUXTRACE_INFO), which Linux perf and poketrace both decode;
//! - for AArch64, `DIR/snapshot/`: the same ETMv4 streams as an OpenCSD
//!   snapshot over the base code, for `trc_pkt_lister`;
//! - `DIR/truth/cpuN.bin`: every instruction each CPU executed, with its time,
//!   and `DIR/truth/meta.json`.
//!
//! Truth and trace are streamed to files as they are made: memory does not
//! grow with the run. Same seed, same bytes.
//!
//! [`check`] decodes such a run with three images of the code
//! ([`tracedecode::ImageMode`]: static, perf-style, timeline) and scores each
//! against the truth: right, wrong, missing, errors, uncertain.
//! [`simulate_elf`] walks a real ELF file's code instead of a generated
//! kernel. The `clap` feature makes the architecture and [`Protocol`]
//! command-line values.

mod a64prog;
pub mod check;
mod etm;
mod filter;
mod machine;
mod program;
mod pt;
mod rng;
mod snapshot;
mod spool;
mod truth;
mod walk;
mod x86prog;

use std::path::{Path, PathBuf};

use perfdata::abi::{attr_flag, cs_etm_magic, ksymbol_type, misc, sample_type as st, KSYMBOL_FLAG_UNREGISTER};
use perfdata::auxtrace::{CsEtmCpu, CsEtmInfo, IntelPtInfo};
use perfdata::kcore::{write_kcore_dir, Machine, Segment};
use perfdata::{
    AttrWithIds, Auxtrace, AuxtraceInfo, Comm, EventAttr, IdIndex, IdIndexEntry, ItraceStart, Ksymbol, Mmap, Mmap2, Mmap2FileId, NrCpus, RecordBody,
    SampleId, TextPoke, Writer, ATTR_SIZE_VER7,
};
use serde::{Deserialize, Serialize};

pub use machine::Protocol;
pub use truth::TruthReader;
pub use walk::RealCode;

use machine::Flow;
use spool::{Pending, Spool, SpoolReader};

/// Everything that defines a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SimConfig {
    /// x86_64 (Intel PT) or aarch64 (ETMv4).
    #[serde(default = "default_arch")]
    pub arch: isa::Arch,
    pub cpus: u32,
    pub protocol: Protocol,
    pub pokes: u64,
    /// Instructions per CPU, on average.
    pub instructions: u64,
    pub seed: u64,
    pub functions: usize,
    /// ns between timing packets (TSC; ETMv4 TIMESTAMP), at the next branch.
    pub tsc_period: u64,
    /// Intel PT: time by MTC packets every 2^N crystal clock ticks (25 ns
    /// each), with TSC + TMA only in PSB+, instead of TSC every `tsc_period`.
    #[serde(default)]
    pub mtc_freq: Option<u8>,
    /// Intel PT cycle-accurate mode with this CycThresh (perf's `cyc` and
    /// `cyc_thresh`): CYC packets of the core's cycles (2 a ns, CBR 20 over
    /// a max non-turbo ratio of 10) before flow packets, at most one per
    /// 2^(N-1) cycles (N = 0: before each).
    #[serde(default)]
    pub cyc_thresh: Option<u8>,
    /// Bytes of trace between synchronisations (PSB+; ETMv4 A-sync).
    pub psb_period: usize,
    /// ns between the steps of one change.
    pub sync_ns: u64,
    /// x86_64: the code also leaves the traced text (direct calls and jumps
    /// into code kcore does not hold, outside the trace's address filter)
    /// and runs undefined instructions (UD2, an invalid opcode) that trap.
    /// Written to meta.json only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exits: bool,
    /// Intel PT: indirect jumps' and calls' TIPs deferred behind the TNT of
    /// the conditional branches after them (the SDM's deferred TIPs; not
    /// with CYC). Written to meta.json only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred_tips: bool,
}

fn default_arch() -> isa::Arch {
    isa::Arch::X86_64
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            arch: default_arch(),
            cpus: 4,
            protocol: Protocol::Int3,
            pokes: 200,
            instructions: 100_000,
            seed: 1,
            functions: 64,
            tsc_period: 200,
            mtc_freq: None,
            cyc_thresh: None,
            psb_period: 4096,
            sync_ns: 50,
            exits: false,
            deferred_tips: false,
        }
    }
}

/// What a run produced.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Summary {
    pub config: SimConfig,
    pub instructions: Vec<u64>,
    pub pokes: usize,
    pub ksymbols: usize,
    pub trace_bytes: Vec<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Config(String),
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error(transparent)]
    PerfData(#[from] perfdata::Error),
    #[error(transparent)]
    Decode(#[from] tracedecode::Error),
}

/// The perf time of the first instruction.
pub const TIME_ZERO: u64 = 1_000_000_000;
const PT_PMU_TYPE: u32 = 8;
/// The cs_etm PMU's type number (dynamic on a real system).
const CS_ETM_PMU_TYPE: u32 = 9;
/// perf's ETM_OPT_TS: the cs_etm event's config bit for timestamps.
const ETM_OPT_TS: u64 = 1 << 28;
/// ETMv4 trace IDs are 0x10 + CPU and must stay below 0x70.
const MAX_ETM_CPUS: u32 = 0x60;

/// A per-CPU trace encoder (Intel PT or ETMv4).
trait Emitter {
    fn instruction(&mut self, time: u64, addr: u64, flow: Flow, next: u64);
    fn finish(&mut self);
    fn pending(&mut self) -> &mut Pending;
    fn last_time(&self) -> u64;
}

impl Emitter for pt::PtEmitter {
    fn instruction(&mut self, time: u64, addr: u64, flow: Flow, next: u64) {
        pt::PtEmitter::instruction(self, time, addr, flow, next)
    }
    fn finish(&mut self) {
        pt::PtEmitter::finish(self)
    }
    fn pending(&mut self) -> &mut Pending {
        &mut self.out
    }
    fn last_time(&self) -> u64 {
        pt::PtEmitter::last_time(self)
    }
}

impl Emitter for etm::EtmEmitter {
    fn instruction(&mut self, time: u64, addr: u64, flow: Flow, next: u64) {
        etm::EtmEmitter::instruction(self, time, addr, flow, next)
    }
    fn finish(&mut self) {
        etm::EtmEmitter::finish(self)
    }
    fn pending(&mut self) -> &mut Pending {
        &mut self.out
    }
    fn last_time(&self) -> u64 {
        etm::EtmEmitter::last_time(self)
    }
}

/// Receives the run: truth and trace go to their files as they are made.
struct Collect<'p, E> {
    truth: Vec<truth::TruthWriter>,
    emitters: Vec<E>,
    spools: Vec<Spool>,
    pokes: Vec<machine::PokeEvent>,
    ksyms: Vec<machine::KsymEvent>,
    error: Option<std::io::Error>,
    /// The truth holds only what is traced: the code this filter lets through.
    filter: Option<filter::AddrFilter>,
    /// Instructions run so far, told to `progress` every [`PROGRESS_EVERY`].
    run: u64,
    progress: &'p mut dyn FnMut(u64),
}

/// Instructions between calls of a run's progress callback (a power of two).
pub const PROGRESS_EVERY: u64 = 1 << 16;

impl<E: Emitter> machine::Sink for Collect<'_, E> {
    fn instruction(&mut self, cpu: u32, time: u64, addr: u64, flow: Flow, next: u64) {
        self.run += 1;
        if self.run & (PROGRESS_EVERY - 1) == 0 {
            (self.progress)(self.run);
        }
        let c = cpu as usize;
        if self.filter.as_ref().is_none_or(|f| f.traces(addr)) {
            if let Err(e) = self.truth[c].push(time, addr) {
                self.error.get_or_insert(e);
            }
        }
        let e = &mut self.emitters[c];
        e.instruction(time, addr, flow, next);
        if e.pending().bytes.len() >= spool::SPOOL_AT {
            if let Err(err) = self.spools[c].absorb(e.pending()) {
                self.error.get_or_insert(err);
            }
        }
    }
    fn poke(&mut self, e: machine::PokeEvent) {
        self.pokes.push(e);
    }
    fn ksymbol(&mut self, e: machine::KsymEvent) {
        self.ksyms.push(e);
    }
}

/// A finished run's trace: per CPU its spool file and buffer lengths, and the side-band.
struct Traces {
    spools: Vec<(PathBuf, Vec<u64>)>,
    last_times: Vec<u64>,
    pokes: Vec<machine::PokeEvent>,
    ksyms: Vec<machine::KsymEvent>,
}

impl Traces {
    fn remove_spools(&self) {
        for (p, _) in &self.spools {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Runs the simulation and writes the perf.data directory `dir` with the
/// truth beside it; for aarch64 also an OpenCSD snapshot in `DIR/snapshot/`.
pub fn simulate(cfg: &SimConfig, dir: &Path) -> Result<Summary, SimError> {
    simulate_reporting(cfg, dir, &mut |_| {})
}

/// [`simulate`], telling `progress` how many instructions have run, every
/// [`PROGRESS_EVERY`] (of `cfg.instructions` per CPU).
pub fn simulate_reporting(cfg: &SimConfig, dir: &Path, progress: &mut dyn FnMut(u64)) -> Result<Summary, SimError> {
    let arch = cfg.arch;
    let mut rng = rng::Rng::new(cfg.seed);
    let prog = match arch {
        isa::Arch::X86_64 => x86prog::generate(&mut rng, cfg.functions, cfg.exits),
        isa::Arch::Aarch64 if cfg.exits => return Err(SimError::Config("--exits: x86_64 (Intel PT) only".into())),
        isa::Arch::Aarch64 if cfg.deferred_tips => return Err(SimError::Config("--deferred-tips: x86_64 (Intel PT) only".into())),
        isa::Arch::Aarch64 => a64prog::generate(&mut rng, cfg.functions),
    };
    let filter = prog.outside.as_ref().map(|_| filter::AddrFilter::new(prog.traced_ranges()));
    let run = machine::RunConfig {
        cpus: cfg.cpus,
        protocol: cfg.protocol,
        pokes: cfg.pokes,
        instructions: cfg.instructions,
        sync_ticks: cfg.sync_ns,
        time_zero: TIME_ZERO,
        drain: arch == isa::Arch::Aarch64,
    };
    let (traces, counts) = match arch {
        isa::Arch::X86_64 => {
            let emitters = (0..cfg.cpus)
                .map(|_| {
                    pt::PtEmitter::new(pt::Timing::of(cfg), cfg.psb_period)
                        .with_cyc(cfg.cyc_thresh)
                        .with_filter(filter.clone())
                        .with_deferred_tips(cfg.deferred_tips)
                })
                .collect();
            record_run(cfg, dir, emitters, filter.clone(), progress, |sink| {
                machine::run(&prog, &run, &mut rng, sink);
            })?
        }
        isa::Arch::Aarch64 => {
            if cfg.cpus > MAX_ETM_CPUS {
                return Err(SimError::Config(format!("--cpus {} (ETMv4 trace IDs allow 1 to {MAX_ETM_CPUS})", cfg.cpus)));
            }
            let emitters = (0..cfg.cpus).map(|c| etm::EtmEmitter::new(c, cfg.tsc_period, cfg.psb_period)).collect();
            record_run(cfg, dir, emitters, None, progress, |sink| {
                machine::run(&prog, &run, &mut rng, sink);
            })?
        }
    };
    let result = write_outputs(cfg, dir, arch, &prog, filter.as_ref(), &traces);
    traces.remove_spools();
    result?;
    finish_summary(cfg, dir, &traces, counts)
}

/// perf.data, kcore_dir and (aarch64) the snapshot of a generated-kernel run.
fn write_outputs(
    cfg: &SimConfig,
    dir: &Path,
    arch: isa::Arch,
    prog: &program::Program,
    filter: Option<&filter::AddrFilter>,
    traces: &Traces,
) -> Result<(), SimError> {
    let aux = match arch {
        isa::Arch::X86_64 => Aux::IntelPt,
        isa::Arch::Aarch64 => Aux::CsEtm,
    };
    write_perf_data(cfg, dir, &Space::Kernel(prog), aux, filter, traces)?;
    // kcore_dir: the code as it was before any change, and its symbols.
    let kallsyms: String = prog.symbols.iter().map(|(a, n)| format!("{a:016x} T {n}\n")).collect();
    let machine = if arch == isa::Arch::X86_64 { Machine::X86_64 } else { Machine::Aarch64 };
    write_kcore_dir(&dir.join("kcore_dir"), machine, &[Segment { vaddr: prog.text_base, bytes: prog.text.clone() }], &kallsyms, "")?;
    if arch == isa::Arch::Aarch64 {
        snapshot::write(&dir.join("snapshot"), cfg.cpus, prog, &traces.spools)?;
    }
    Ok(())
}

/// Where a user program's code is placed when it is position-independent.
pub const PIE_BASE: u64 = 0x5555_5555_4000;

/// Random walks of `cfg.cpus` CPUs through the real code of the ELF file
/// `elf` (a user program, traced as one process with a thread per CPU):
/// the same outputs as [`simulate`], without changes to the code.
pub fn simulate_elf(cfg: &SimConfig, elf: &Path, dir: &Path) -> Result<Summary, SimError> {
    simulate_elf_reporting(cfg, elf, dir, &mut |_| {})
}

/// [`simulate_elf`], telling `progress` how many instructions have run, as [`simulate_reporting`] does.
pub fn simulate_elf_reporting(cfg: &SimConfig, elf: &Path, dir: &Path, progress: &mut dyn FnMut(u64)) -> Result<Summary, SimError> {
    if cfg.arch != isa::Arch::X86_64 {
        return Err(SimError::Config("--elf: only x86_64 programs".into()));
    }
    let code = walk::RealCode::load(elf, PIE_BASE)?;
    let mut rng = rng::Rng::new(cfg.seed);
    let emitters = (0..cfg.cpus)
        .map(|_| pt::PtEmitter::new(pt::Timing::of(cfg), cfg.psb_period).with_cyc(cfg.cyc_thresh).with_deferred_tips(cfg.deferred_tips))
        .collect();
    let (traces, counts) = record_run(cfg, dir, emitters, None, progress, |sink| {
        walk::walk(&code, cfg.cpus, cfg.instructions, TIME_ZERO, &mut rng, sink);
    })?;
    let result = write_perf_data(cfg, dir, &Space::User(&code), Aux::IntelPt, None, &traces);
    traces.remove_spools();
    result?;
    finish_summary(cfg, dir, &traces, counts)
}

/// The code a run executes: the generated kernel, or a user program's file.
enum Space<'a> {
    Kernel(&'a program::Program),
    User(&'a walk::RealCode),
}

/// The kind of trace in the AUX area.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aux {
    IntelPt,
    CsEtm,
}

/// The process and first thread id of a user-program run (one thread per CPU).
const USER_PID: u32 = 4242;

/// Runs `execute` with truth and trace streamed to files (`DIR/truth/cpuN.bin`,
/// `DIR/.trace-cpuN`; the truth without what `filter` leaves out); returns
/// the trace files and the instruction counts.
fn record_run<E: Emitter>(
    cfg: &SimConfig,
    dir: &Path,
    emitters: Vec<E>,
    filter: Option<filter::AddrFilter>,
    progress: &mut dyn FnMut(u64),
    execute: impl FnOnce(&mut Collect<'_, E>),
) -> Result<(Traces, Vec<u64>), SimError> {
    if cfg.cpus == 0 || cfg.cpus > 256 {
        return Err(SimError::Config(format!("--cpus {} (1 to 256)", cfg.cpus)));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SimError::Io { path, source }
    };
    let truth_dir = dir.join("truth");
    std::fs::create_dir_all(&truth_dir).map_err(io(&truth_dir))?;
    let mut sink =
        Collect { truth: Vec::new(), emitters, spools: Vec::new(), pokes: Vec::new(), ksyms: Vec::new(), error: None, filter, run: 0, progress };
    for c in 0..cfg.cpus {
        let p = truth_dir.join(format!("cpu{c}.bin"));
        sink.truth.push(truth::TruthWriter::create(&p).map_err(io(&p))?);
        let p = dir.join(format!(".trace-cpu{c}"));
        sink.spools.push(Spool::create(&p).map_err(io(&p))?);
    }
    execute(&mut sink);
    if let Some(e) = sink.error.take() {
        return Err(SimError::Io { path: dir.to_path_buf(), source: e });
    }
    let mut counts = Vec::new();
    for t in sink.truth.drain(..) {
        counts.push(t.count);
        t.finish().map_err(io(&truth_dir))?;
    }
    let mut spools = Vec::new();
    let mut last_times = Vec::new();
    for (e, mut s) in sink.emitters.iter_mut().zip(sink.spools.drain(..)) {
        e.finish();
        s.absorb(e.pending()).map_err(io(dir))?;
        spools.push(s.finish().map_err(io(dir))?);
        last_times.push(e.last_time());
    }
    Ok((Traces { spools, last_times, pokes: sink.pokes, ksyms: sink.ksyms }, counts))
}

/// Writes `DIR/truth/meta.json` and returns the summary.
fn finish_summary(cfg: &SimConfig, dir: &Path, traces: &Traces, counts: Vec<u64>) -> Result<Summary, SimError> {
    let summary = Summary {
        config: cfg.clone(),
        instructions: counts,
        pokes: traces.pokes.len(),
        ksymbols: traces.ksyms.len(),
        trace_bytes: traces.spools.iter().map(|(_, c)| c.iter().sum::<u64>() as usize).collect(),
    };
    let meta = dir.join("truth/meta.json");
    std::fs::write(&meta, serde_json::to_vec_pretty(&summary).expect("plain data")).map_err(|source| SimError::Io { path: meta.clone(), source })?;
    Ok(summary)
}

/// The run's summary, from `DIR/truth/meta.json`.
pub fn read_summary(dir: &Path) -> Result<Summary, SimError> {
    let meta = dir.join("truth/meta.json");
    let text = std::fs::read(&meta).map_err(|source| SimError::Io { path: meta.clone(), source })?;
    serde_json::from_slice(&text).map_err(|e| SimError::Config(format!("{}: {e}", meta.display())))
}

/// The (pid, tid) running on CPU `cpu`: the idle task, or the user program's thread for that CPU.
fn pid_tid(cpu: u32, user: bool) -> (u32, u32) {
    if user {
        (USER_PID, USER_PID + cpu)
    } else {
        (0, 0)
    }
}

fn write_perf_data(
    cfg: &SimConfig,
    dir: &Path,
    space: &Space<'_>,
    aux: Aux,
    filter: Option<&filter::AddrFilter>,
    traces: &Traces,
) -> Result<(), SimError> {
    let user = matches!(space, Space::User(_));
    let n = cfg.cpus as u64;
    let sample_type = st::IP | st::TID | st::TIME | st::CPU | st::IDENTIFIER;
    let (pmu_type, config) = match aux {
        // tsc, noretcomp; mtc and its frequency; cyc and its threshold
        Aux::IntelPt => (
            PT_PMU_TYPE,
            0x400 | 0x800 | cfg.mtc_freq.map_or(0, |f| 0x200 | (f as u64) << 14) | cfg.cyc_thresh.map_or(0, |t| 0x2 | (t.min(15) as u64) << 19),
        ),
        Aux::CsEtm => (CS_ETM_PMU_TYPE, ETM_OPT_TS),
    };
    let pt_attr = EventAttr {
        type_: pmu_type,
        size: ATTR_SIZE_VER7,
        config,
        sample_period: 1,
        sample_type,
        flags: attr_flag::SAMPLE_ID_ALL
            | attr_flag::DISABLED
            | if user { attr_flag::EXCLUDE_KERNEL | attr_flag::EXCLUDE_HV } else { attr_flag::EXCLUDE_USER },
        ..EventAttr::default()
    };
    let side_attr = EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        config: 9, // dummy
        sample_period: 1,
        sample_type,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::TEXT_POKE | attr_flag::KSYMBOL | attr_flag::MMAP | attr_flag::COMM | attr_flag::TASK,
        ..EventAttr::default()
    };
    let pt_ids: Vec<u64> = (0..n).map(|c| 1 + c).collect();
    let side_ids: Vec<u64> = (0..n).map(|c| 1001 + c).collect();
    let mut w = Writer::create(
        dir.join("data"),
        vec![AttrWithIds { attr: pt_attr, ids: pt_ids.clone() }, AttrWithIds { attr: side_attr, ids: side_ids.clone() }],
    )?;
    w.features.hostname = Some("poketrace-sim".into());
    w.features.osrelease = Some("6.1.0-poketrace-sim".into());
    w.features.arch = Some(if aux == Aux::CsEtm { "aarch64" } else { "x86_64" }.into());
    w.features.nrcpus = Some(NrCpus { available: cfg.cpus, online: cfg.cpus });
    w.features.cmdline = Some(vec!["poketrace".into(), "simulate".into(), format!("--seed={}", cfg.seed)]);
    let pmu = if aux == Aux::CsEtm { "cs_etm" } else { "intel_pt" };
    w.features.event_names = Some(if user { vec![format!("{pmu}//u"), "dummy:u".into()] } else { vec![format!("{pmu}//k"), "dummy:k".into()] });
    let filter_bytes = filter.map(|f| (f.perf_string().len() as u64, f.perf_bytes()));
    let mut pt_info = IntelPtInfo {
        pmu_type: PT_PMU_TYPE as u64,
        time_shift: 0,
        time_mult: 1,
        time_zero: 0,
        cap_user_time_zero: 1,
        tsc_bit: 0x400,
        noretcomp_bit: 0x800,
        per_cpu_mmaps: 1,
        mtc_bit: 0x200,
        mtc_freq_bits: 0xf << 14,
        tsc_ctc_ratio_n: pt::TSC_PER_CTC,
        tsc_ctc_ratio_d: 1,
        cyc_bit: 0x2,
        max_nonturbo_ratio: pt::MAX_NON_TURBO_RATIO,
        filter_str_len: filter_bytes.as_ref().map_or(0, |f| f.0),
        ..IntelPtInfo::default()
    }
    .to_priv_bytes();
    // The address filter's string follows the words.
    if let Some((_, bytes)) = &filter_bytes {
        pt_info.extend_from_slice(bytes);
    }
    let (auxtrace_type, info) = match aux {
        Aux::IntelPt => (perfdata::abi::auxtrace_type::INTEL_PT, pt_info),
        Aux::CsEtm => (perfdata::abi::auxtrace_type::CS_ETM, cs_etm_info(cfg.cpus).to_priv_bytes()),
    };
    w.write(0, &RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type, priv_data: &info }), &SampleId::default())?;
    if aux == Aux::CsEtm {
        // ETM timestamps are perf time: the identity conversion.
        let ext = perfdata::TimeConvExt { time_cycles: 0, time_mask: 0, cap_user_time_zero: true, cap_user_time_short: false };
        let tc = perfdata::TimeConv { time_shift: 0, time_mult: 1, time_zero: 0, extended: Some(ext) };
        w.write(0, &RecordBody::TimeConv(tc), &SampleId::default())?;
    }
    let entries = (0..n)
        .flat_map(|c| {
            [
                IdIndexEntry { id: pt_ids[c as usize], idx: c, cpu: c, tid: u64::MAX },
                IdIndexEntry { id: side_ids[c as usize], idx: c, cpu: c, tid: u64::MAX },
            ]
        })
        .collect();
    w.write(0, &RecordBody::IdIndex(IdIndex { entries }), &SampleId::default())?;
    let sid = |time: u64, cpu: u32| {
        let (p, t) = pid_tid(cpu, user);
        SampleId { pid: Some(p), tid: Some(t), time: Some(time), cpu: Some(cpu), identifier: Some(1001 + cpu as u64), ..SampleId::default() }
    };
    match space {
        Space::Kernel(prog) => {
            let text_len = prog.text.len() as u64;
            w.write(
                misc::KERNEL,
                &RecordBody::Mmap(Mmap {
                    pid: u32::MAX,
                    tid: 0,
                    addr: prog.text_base,
                    len: text_len,
                    pgoff: prog.text_base,
                    filename: b"[kernel.kallsyms]_text",
                }),
                &sid(0, 0),
            )?;
        }
        Space::User(code) => {
            let name = code.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let comm = name.as_bytes()[..name.len().min(15)].to_vec();
            let path = std::fs::canonicalize(&code.path).unwrap_or_else(|_| code.path.clone());
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).map_err(|source| SimError::Io { path: path.clone(), source })?);
            let filename = path.to_string_lossy().into_owned();
            for c in 0..cfg.cpus {
                let (p, t) = pid_tid(c, true);
                w.write(misc::USER, &RecordBody::Comm(Comm { pid: p, tid: t, comm: &comm }), &sid(TIME_ZERO - 2, c))?;
            }
            for s in &code.segments {
                let m = Mmap2 {
                    pid: USER_PID,
                    tid: USER_PID,
                    addr: s.addr,
                    len: s.bytes.len() as u64,
                    pgoff: s.file_offset,
                    file_id: Mmap2FileId::Inode { maj: 0, min: 0, ino, ino_generation: 0 },
                    prot: 5,
                    flags: 2,
                    filename: filename.as_bytes(),
                };
                w.write(misc::USER, &RecordBody::Mmap2(m), &sid(TIME_ZERO - 1, 0))?;
            }
        }
    }
    for c in 0..cfg.cpus {
        let (p, t) = pid_tid(c, user);
        let s = SampleId { identifier: Some(1 + c as u64), ..sid(TIME_ZERO, c) };
        let cpumode = if user { misc::USER } else { misc::KERNEL };
        w.write(cpumode, &RecordBody::ItraceStart(ItraceStart { pid: p, tid: t }), &s)?;
    }
    // The trace first, so that perf has it queued before the changes come.
    // `reference` is not a sequence number: perf record stores the TSC read
    // when the AUX buffer was copied out (intel_pt_reference() = rdtsc), and
    // perf's decoder needs it. A TSC packet only carries bits 0..55, so the
    // decoder takes the first TSC after each buffer start only relative to
    // the buffer's ref_timestamp (intel_pt_calc_tsc_timestamp: with ref 0 and
    // no earlier timestamp the TSC is ignored). With reference 0 every decoder
    // state had timestamp 0, perf 6.1 kept decoding in intel_pt_setup_queue()
    // looking for a first timestamp, and intel_pt_walk_next_insn() then read
    // the still NULL ptq->state: SIGSEGV in every decoding perf script/report.
    // Here TSC == perf time (time_mult 1, shift 0, zero 0), and the buffer is
    // copied out after its last instruction.
    //
    // Each AUXTRACE buffer must also end between two packets: a 64-bit perf
    // joins a packet split across buffers only on 32-bit builds
    // (intel_pt_get_next_packet: `BITS_PER_LONG == 32`), otherwise it reports
    // "Bad packet" and loses sync until the next PSB. Real buffers are copied
    // out while tracing is stopped, so they hold whole packets; here each
    // buffer ends just before a PSB (at most AUX_CHUNK bytes when PSBs allow).
    // ETM buffers begin at an A-sync: perf resets its ETM decoder at each.
    for (c, (path, chunks)) in traces.spools.iter().enumerate() {
        let copied_out = traces.last_times[c].max(TIME_ZERO) + 1;
        let mut offset = 0;
        let io = |source| SimError::Io { path: path.clone(), source };
        let mut reader = SpoolReader::open(path, chunks.clone()).map_err(io)?;
        while let Some(chunk) = reader.next_chunk().map_err(io)? {
            let a = Auxtrace { offset, reference: copied_out, idx: c as u32, tid: pid_tid(c as u32, user).1, cpu: c as u32, data: chunk };
            w.write(0, &RecordBody::Auxtrace(a), &SampleId::default())?;
            if aux == Aux::CsEtm {
                // perf 6.1 queues CoreSight trace only where a PERF_RECORD_AUX
                // (the kernel's "AUX data arrived") covers it: one per buffer.
                let r = perfdata::Aux { aux_offset: offset, aux_size: chunk.len() as u64, flags: 0 };
                w.write(0, &RecordBody::Aux(r), &SampleId { identifier: Some(1 + c as u64), ..sid(copied_out, c as u32) })?;
            }
            offset += chunk.len() as u64;
        }
    }
    // Side-band in time order: KSYMBOL before the poke that creates its code.
    let mut side: Vec<(u64, u8, usize)> = traces.ksyms.iter().enumerate().map(|(i, k)| (k.time, if k.unregister { 2 } else { 0 }, i)).collect();
    side.extend(traces.pokes.iter().enumerate().map(|(i, p)| (p.time, 1, i)));
    side.sort();
    let mut written = 0;
    for (time, kind, i) in side {
        match kind {
            1 => {
                let p = &traces.pokes[i];
                w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: p.addr, old: &p.old, new: &p.new }), &sid(time, p.cpu))?;
            }
            _ => {
                let k = &traces.ksyms[i];
                let flags = if k.unregister { KSYMBOL_FLAG_UNREGISTER } else { 0 };
                let body = Ksymbol { addr: k.addr, len: k.len, ksym_type: ksymbol_type::OOL, flags, name: b"ftrace_trampoline" };
                w.write(misc::KERNEL, &RecordBody::Ksymbol(body), &sid(time, k.cpu))?;
            }
        }
        written += 1;
        if written % 64 == 0 {
            w.write(0, &RecordBody::FinishedRound, &SampleId::default())?;
        }
    }
    w.write(0, &RecordBody::FinishedRound, &SampleId::default())?;
    w.finish()?;
    Ok(())
}

/// CoreSight AUXTRACE_INFO: one ETMv4 block per CPU with its registers, in perf's order.
fn cs_etm_info(cpus: u32) -> CsEtmInfo {
    let cpus = (0..cpus)
        .map(|c| {
            let r = etm::config(c);
            // Then TS_SOURCE: 1, the timestamps are the generic timer, so a
            // reader converts them with TIME_CONV (perf 6.1 does not: it
            // gives every sample the time of the latest side-band record).
            // TRCDEVARCH belongs to ETE's block, before its TS_SOURCE.
            let params = [r.configr, r.traceidr, r.idr0, r.idr1, r.idr2, r.idr8, etm::TRCAUTHSTATUS, 1];
            CsEtmCpu { magic: cs_etm_magic::ETMV4, cpu: c as u64, params: params.iter().map(|&v| v as u64).collect() }
        })
        .collect();
    CsEtmInfo { version: 1, pmu_type: CS_ETM_PMU_TYPE, snapshot: 0, cpus }
}
