//! A ground-truth simulator of CPUs running kernel code while it is patched.
//!
//! A real trace never says what really ran. The simulator generates a
//! kernel-like x86-64 program with patch sites of every kind (jump labels,
//! ftrace, static calls, kprobes, trampolines created and removed), runs N
//! CPUs through it with a deterministic interleaving while one agent patches
//! it under a [`Protocol`], and writes:
//! - `DIR/data` + `DIR/kcore_dir/`: a perf.data directory with the base code,
//!   kallsyms, TEXT_POKE and KSYMBOL records at their times, and one Intel PT
//!   AUX stream per CPU, which Linux perf and poketrace both decode;
//! - `DIR/truth/cpuN.bin`: every instruction each CPU executed, with its time,
//!   and `DIR/truth/meta.json`.
//!
//! Same seed, same bytes.

pub mod check;
mod machine;
mod pt;
mod rng;
mod truth;
mod walk;
mod x86prog;

use std::path::Path;

use perfdata::abi::{attr_flag, ksymbol_type, misc, sample_type as st, KSYMBOL_FLAG_UNREGISTER};
use perfdata::auxtrace::IntelPtInfo;
use perfdata::kcore::{write_kcore_dir, Machine, Segment};
use perfdata::{
    AttrWithIds, Auxtrace, AuxtraceInfo, Comm, EventAttr, IdIndex, IdIndexEntry, ItraceStart, Ksymbol, Mmap, Mmap2, Mmap2FileId, NrCpus, RecordBody, SampleId, TextPoke, Writer, ATTR_SIZE_VER7,
};
use serde::{Deserialize, Serialize};

pub use machine::Protocol;
pub use truth::TruthReader;
pub use walk::RealCode;

/// Everything that defines a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SimConfig {
    pub cpus: u32,
    pub protocol: String,
    pub pokes: u64,
    /// Instructions per CPU, on average.
    pub instructions: u64,
    pub seed: u64,
    pub functions: usize,
    /// ns between TSC packets (at the next branch).
    pub tsc_period: u64,
    /// Bytes of trace between PSB+.
    pub psb_period: usize,
    /// ns between the steps of one change.
    pub sync_ns: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            cpus: 4,
            protocol: "int3".into(),
            pokes: 200,
            instructions: 100_000,
            seed: 1,
            functions: 64,
            tsc_period: 200,
            psb_period: 4096,
            sync_ns: 50,
        }
    }
}

/// `int3`, `prepost`, `single-after` or `none`.
pub fn parse_protocol(s: &str) -> Option<Protocol> {
    Some(match s {
        "int3" => Protocol::Int3,
        "prepost" => Protocol::PrePost,
        "single-after" => Protocol::SingleAfter,
        "none" => Protocol::None,
        _ => return None,
    })
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
    #[error("unknown protocol {0} (int3, prepost, single-after, none)")]
    Protocol(String),
    #[error("{0}")]
    Config(String),
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error(transparent)]
    PerfData(#[from] perfdata::Error),
}

/// The perf time of the first instruction.
pub const TIME_ZERO: u64 = 1_000_000_000;
const PT_PMU_TYPE: u32 = 8;

struct Collect {
    truth: Vec<truth::TruthWriter>,
    pt: Vec<pt::PtEmitter>,
    pokes: Vec<machine::PokeEvent>,
    ksyms: Vec<machine::KsymEvent>,
    error: Option<std::io::Error>,
}

impl machine::Sink for Collect {
    fn instruction(&mut self, cpu: u32, time: u64, addr: u64, flow: machine::Flow, next: u64) {
        if let Err(e) = self.truth[cpu as usize].push(time, addr) {
            self.error.get_or_insert(e);
        }
        self.pt[cpu as usize].instruction(time, addr, flow, next);
    }
    fn poke(&mut self, e: machine::PokeEvent) {
        self.pokes.push(e);
    }
    fn ksymbol(&mut self, e: machine::KsymEvent) {
        self.ksyms.push(e);
    }
}

/// Runs the simulation and writes the perf.data directory `dir` with the truth beside it.
pub fn simulate(cfg: &SimConfig, dir: &Path) -> Result<Summary, SimError> {
    let protocol = parse_protocol(&cfg.protocol).ok_or_else(|| SimError::Protocol(cfg.protocol.clone()))?;
    let mut rng = rng::Rng::new(cfg.seed);
    let prog = x86prog::generate(&mut rng, cfg.functions);
    let run = machine::RunConfig {
        cpus: cfg.cpus,
        protocol,
        pokes: cfg.pokes,
        instructions: cfg.instructions,
        sync_ticks: cfg.sync_ns,
        time_zero: TIME_ZERO,
    };
    let summary = record_run(cfg, dir, Space::Kernel(&prog), |sink| {
        machine::run(&prog, &run, &mut rng, sink);
    })?;
    // kcore_dir: the code as it was before any change, and its symbols.
    let kallsyms: String = prog.symbols.iter().map(|(a, n)| format!("{a:016x} T {n}\n")).collect();
    write_kcore_dir(&dir.join("kcore_dir"), Machine::X86_64, &[Segment { vaddr: x86prog::TEXT_BASE, bytes: prog.text.clone() }], &kallsyms, "")?;
    Ok(summary)
}

/// Where a user program's code is placed when it is position-independent.
pub const PIE_BASE: u64 = 0x5555_5555_4000;

/// Random walks of `cfg.cpus` CPUs through the real code of the ELF file
/// `elf` (a user program, traced as one process with a thread per CPU):
/// the same outputs as [`simulate`], without changes to the code.
pub fn simulate_elf(cfg: &SimConfig, elf: &Path, dir: &Path) -> Result<Summary, SimError> {
    let code = walk::RealCode::load(elf, PIE_BASE)?;
    let mut rng = rng::Rng::new(cfg.seed);
    record_run(cfg, dir, Space::User(&code), |sink| {
        walk::walk(&code, cfg.cpus, cfg.instructions, TIME_ZERO, &mut rng, sink);
    })
}

/// The code a run executes: the generated kernel, or a user program's file.
enum Space<'a> {
    Kernel(&'a x86prog::Program),
    User(&'a walk::RealCode),
}

/// The process and first thread id of a user-program run (one thread per CPU).
const USER_PID: u32 = 4242;

/// Runs `execute` into per-CPU truth files and Intel PT, then writes perf.data and the summary.
fn record_run(cfg: &SimConfig, dir: &Path, space: Space<'_>, execute: impl FnOnce(&mut Collect)) -> Result<Summary, SimError> {
    if cfg.cpus == 0 || cfg.cpus > 256 {
        return Err(SimError::Config(format!("--cpus {} (1 to 256)", cfg.cpus)));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SimError::Io { path, source }
    };
    let truth_dir = dir.join("truth");
    std::fs::create_dir_all(&truth_dir).map_err(io(&truth_dir))?;
    let mut sink = Collect { truth: Vec::new(), pt: Vec::new(), pokes: Vec::new(), ksyms: Vec::new(), error: None };
    for c in 0..cfg.cpus {
        let p = truth_dir.join(format!("cpu{c}.bin"));
        sink.truth.push(truth::TruthWriter::create(&p).map_err(io(&p))?);
        sink.pt.push(pt::PtEmitter::new(cfg.tsc_period, cfg.psb_period));
    }
    execute(&mut sink);
    if let Some(e) = sink.error.take() {
        return Err(SimError::Io { path: truth_dir, source: e });
    }
    let mut counts = Vec::new();
    for t in sink.truth.drain(..) {
        counts.push(t.count);
        t.finish().map_err(io(&truth_dir))?;
    }
    for p in &mut sink.pt {
        p.finish();
    }
    write_perf_data(cfg, dir, &space, &sink)?;
    let summary = Summary {
        config: cfg.clone(),
        instructions: counts,
        pokes: sink.pokes.len(),
        ksymbols: sink.ksyms.len(),
        trace_bytes: sink.pt.iter().map(|p| p.out.len()).collect(),
    };
    let meta = truth_dir.join("meta.json");
    std::fs::write(&meta, serde_json::to_vec_pretty(&summary).expect("plain data")).map_err(io(&meta))?;
    Ok(summary)
}

/// The run's summary, from `DIR/truth/meta.json`.
pub fn read_summary(dir: &Path) -> Result<Summary, SimError> {
    let meta = dir.join("truth/meta.json");
    let text = std::fs::read(&meta).map_err(|source| SimError::Io { path: meta.clone(), source })?;
    serde_json::from_slice(&text).map_err(|e| SimError::Config(format!("{}: {e}", meta.display())))
}

/// Target size of one AUXTRACE buffer of Intel PT data.
const AUX_CHUNK: usize = 1 << 16;

/// The (pid, tid) running on CPU `cpu`: the idle task, or the user program's thread for that CPU.
fn pid_tid(cpu: u32, user: bool) -> (u32, u32) {
    if user {
        (USER_PID, USER_PID + cpu)
    } else {
        (0, 0)
    }
}

/// Splits a PT stream into buffers of at most `max` bytes where PSBs allow,
/// each cut just before a PSB so that no packet straddles two buffers (a
/// buffer is longer than `max` only when no PSB falls in it).
fn split_before_psb(data: &[u8], max: usize) -> Vec<&[u8]> {
    const PSB: [u8; 16] = [0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82];
    let psbs: Vec<usize> = data.windows(PSB.len()).enumerate().filter(|(_, w)| *w == PSB).map(|(i, _)| i).collect();
    let mut out = Vec::new();
    let mut start = 0;
    while data.len() - start > max {
        let later = psbs.iter().copied().filter(|&p| p > start);
        let cut = later.clone().take_while(|&p| p <= start + max).last().or_else(|| later.clone().next());
        match cut {
            Some(cut) => {
                out.push(&data[start..cut]);
                start = cut;
            }
            None => break,
        }
    }
    out.push(&data[start..]);
    out
}

fn write_perf_data(cfg: &SimConfig, dir: &Path, space: &Space<'_>, sink: &Collect) -> Result<(), SimError> {
    let user = matches!(space, Space::User(_));
    let n = cfg.cpus as u64;
    let sample_type = st::IP | st::TID | st::TIME | st::CPU | st::IDENTIFIER;
    let pt_attr = EventAttr {
        type_: PT_PMU_TYPE,
        size: ATTR_SIZE_VER7,
        config: 0x400 | 0x800, // tsc, noretcomp
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
    let mut w = Writer::create(dir.join("data"), vec![AttrWithIds { attr: pt_attr, ids: pt_ids.clone() }, AttrWithIds { attr: side_attr, ids: side_ids.clone() }])?;
    w.features.hostname = Some("poketrace-sim".into());
    w.features.osrelease = Some("6.1.0-poketrace-sim".into());
    w.features.arch = Some("x86_64".into());
    w.features.nrcpus = Some(NrCpus { available: cfg.cpus, online: cfg.cpus });
    w.features.cmdline = Some(vec!["poketrace".into(), "simulate".into(), format!("--seed={}", cfg.seed)]);
    w.features.event_names = Some(if user { vec!["intel_pt//u".into(), "dummy:u".into()] } else { vec!["intel_pt//k".into(), "dummy:k".into()] });
    let info = IntelPtInfo {
        pmu_type: PT_PMU_TYPE as u64,
        time_shift: 0,
        time_mult: 1,
        time_zero: 0,
        cap_user_time_zero: 1,
        tsc_bit: 0x400,
        noretcomp_bit: 0x800,
        per_cpu_mmaps: 1,
        ..IntelPtInfo::default()
    }
    .to_priv_bytes();
    w.write(0, &RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: perfdata::abi::auxtrace_type::INTEL_PT, priv_data: &info }), &SampleId::default())?;
    let entries = (0..n)
        .flat_map(|c| {
            [IdIndexEntry { id: pt_ids[c as usize], idx: c, cpu: c, tid: u64::MAX }, IdIndexEntry { id: side_ids[c as usize], idx: c, cpu: c, tid: u64::MAX }]
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
                &RecordBody::Mmap(Mmap { pid: u32::MAX, tid: 0, addr: x86prog::TEXT_BASE, len: text_len, pgoff: x86prog::TEXT_BASE, filename: b"[kernel.kallsyms]_text" }),
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
    for (c, p) in sink.pt.iter().enumerate() {
        let copied_out = p.last_time().max(TIME_ZERO) + 1;
        let mut offset = 0;
        for chunk in split_before_psb(&p.out, AUX_CHUNK) {
            let a = Auxtrace { offset: offset as u64, reference: copied_out, idx: c as u32, tid: pid_tid(c as u32, user).1, cpu: c as u32, data: chunk };
            w.write(0, &RecordBody::Auxtrace(a), &SampleId::default())?;
            offset += chunk.len();
        }
    }
    // Side-band in time order: KSYMBOL before the poke that creates its code.
    let mut side: Vec<(u64, u8, usize)> = sink.ksyms.iter().enumerate().map(|(i, k)| (k.time, if k.unregister { 2 } else { 0 }, i)).collect();
    side.extend(sink.pokes.iter().enumerate().map(|(i, p)| (p.time, 1, i)));
    side.sort();
    let mut written = 0;
    for (time, kind, i) in side {
        match kind {
            1 => {
                let p = &sink.pokes[i];
                w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: p.addr, old: &p.old, new: &p.new }), &sid(time, p.cpu))?;
            }
            _ => {
                let k = &sink.ksyms[i];
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
