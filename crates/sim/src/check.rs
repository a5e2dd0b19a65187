//! `check`: decode a simulated run's trace (Intel PT, or ETMv4 with etm's
//! flow decoder) with three images of the code and compare each with the
//! ground truth.

use std::path::Path;

use codeimage::{BaseImage, CodeTimeline, PokeEvents, TimelineBuilder};
use intel_pt::flow::{CodeSource, FlowConfig, FlowDecoder, FlowEvent, MtcConv, Time, TimeConv};
use intel_pt::sources::{Interval, PerfStyle, Static};
use perfdata::auxtrace::IntelPtInfo;
use perfdata::{AuxtraceInfo, PerfFile, RecordBody};
use serde::Serialize;

use crate::truth::TruthReader;
use crate::SimError;

/// Which code the decoder walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The code before any change (no poke awareness).
    Static,
    /// One image updated in timestamp order, read at the last timestamp seen (what perf does).
    PerfStyle,
    /// The code timeline, read over the interval the trace allows.
    Timeline,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Static, Mode::PerfStyle, Mode::Timeline];
    pub fn name(self) -> &'static str {
        match self {
            Mode::Static => "static",
            Mode::PerfStyle => "perf-style",
            Mode::Timeline => "timeline",
        }
    }
}

/// Where decode and truth first part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Divergence {
    pub cpu: u32,
    pub time: u64,
    pub expected: u64,
    pub decoded: u64,
}

/// One mode's comparison, summed over CPUs (and per CPU in `cpus`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Score {
    pub instructions: u64,
    pub correct: u64,
    pub wrong: u64,
    pub missing: u64,
    pub errors: u64,
    pub uncertain: u64,
    pub first_divergence: Option<Divergence>,
}

impl Score {
    fn add(&mut self, o: &Score) {
        self.instructions += o.instructions;
        self.correct += o.correct;
        self.wrong += o.wrong;
        self.missing += o.missing;
        self.errors += o.errors;
        self.uncertain += o.uncertain;
        // Keep the earliest divergence of all CPUs.
        if let Some(e) = &o.first_divergence {
            if self.first_divergence.as_ref().is_none_or(|d| e.time < d.time) {
                self.first_divergence = Some(e.clone());
            }
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ModeReport {
    pub mode: Mode,
    #[serde(flatten)]
    pub total: Score,
    pub cpus: Vec<Score>,
}

/// Decodes the run in `dir` in every mode and scores it against the truth.
pub fn check(dir: &Path) -> Result<Vec<ModeReport>, SimError> {
    let summary = crate::read_summary(dir)?;
    if summary.config.arch == "aarch64" {
        return check_etm(dir, &summary);
    }
    let file = PerfFile::open(dir)?;
    let (info, aux) = per_cpu_aux(&file, summary.config.cpus)?;
    let info = info.ok_or_else(|| SimError::Config("no Intel PT AUXTRACE_INFO in the file".into()))?;
    let (cfg, mtc) = pt_setup(&file, &IntelPtInfo::parse(&info)?);
    let full = poked_image(&file, &summary)?;
    let bare = base_image(&file)?;
    let mut reports = Vec::new();
    for mode in Mode::ALL {
        // Each CPU's buffer decodes on its own core.
        use rayon::prelude::*;
        let cpus = aux
            .par_iter()
            .enumerate()
            .map(|(cpu, trace)| {
                let truth = dir.join(format!("truth/cpu{cpu}.bin"));
                match mode {
                    Mode::Static => score(cpu as u32, trace, &Static(&bare), &cfg, mtc, &truth),
                    Mode::PerfStyle => score(cpu as u32, trace, &PerfStyle(&full), &cfg, mtc, &truth),
                    Mode::Timeline => score(cpu as u32, trace, &Interval(&full), &cfg, mtc, &truth),
                }
            })
            .collect::<Result<Vec<Score>, SimError>>()?;
        let mut total = Score::default();
        for s in &cpus {
            total.add(s);
        }
        reports.push(ModeReport { mode, total, cpus });
    }
    Ok(reports)
}

/// The truth of one CPU, read ahead as far as a search needs.
struct Truth {
    reader: TruthReader,
    ahead: std::collections::VecDeque<std::io::Result<(u64, u64)>>,
}

impl Truth {
    fn new(reader: TruthReader) -> Truth {
        Truth { reader, ahead: std::collections::VecDeque::new() }
    }

    fn peek(&mut self) -> Option<&std::io::Result<(u64, u64)>> {
        if self.ahead.is_empty() {
            self.ahead.push_back(self.reader.next()?);
        }
        self.ahead.front()
    }

    /// How many instructions come before the next one at `ip` that ran
    /// within `[lo, hi]`, reading ahead but taking nothing.
    fn find(&mut self, ip: u64, lo: Time, hi: Time) -> Option<usize> {
        for i in 0.. {
            if i == self.ahead.len() {
                self.ahead.push_back(self.reader.next()?);
            }
            match &self.ahead[i] {
                Ok((t, _)) if *t > hi.saturating_add(1) => return None,
                Ok((t, a)) if *a == ip && *t >= lo.saturating_sub(1) => return Some(i),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

impl Iterator for Truth {
    type Item = std::io::Result<(u64, u64)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.ahead.pop_front().or_else(|| self.reader.next())
    }
}

/// Walks the truth beside the decoded instructions.
struct Matcher {
    reader: Truth,
    synced: bool,
    failure: Option<std::io::Error>,
    s: Score,
    cpu: u32,
}

impl Matcher {
    /// One decoded instruction at `ip`, run within `[lo, hi]`.
    fn insn(&mut self, ip: u64, lo: Time, hi: Time) {
        let s = &mut self.s;
        if self.synced {
            match self.reader.next() {
                Some(Ok((t, a))) => {
                    s.instructions += 1;
                    if a == ip {
                        s.correct += 1;
                    } else {
                        s.wrong += 1;
                        self.synced = false;
                        s.first_divergence.get_or_insert(Divergence { cpu: self.cpu, time: t, expected: a, decoded: ip });
                    }
                }
                Some(Err(e)) => {
                    self.failure.get_or_insert(e);
                }
                None => s.wrong += 1,
            }
            return;
        }
        // Out of step: find this instruction in the truth, within its time
        // bounds; what it skips is missing. Not there: it is wrong, and the
        // truth stays where it is for the next one.
        match self.reader.find(ip, lo, hi) {
            Some(skipped) => {
                for _ in 0..=skipped {
                    self.reader.next();
                }
                s.instructions += 1 + skipped as u64;
                s.correct += 1;
                s.missing += skipped as u64;
                self.synced = true;
            }
            None => s.wrong += 1,
        }
    }
}

impl Matcher {
    /// A decoded instruction the decoder reports uncertain (another content
    /// of its code fits the trace too): right when it is the truth's next
    /// one, else not wrong but out of step, the truth's instructions up to
    /// the next certain one missing.
    fn uncertain_insn(&mut self, ip: u64, lo: Time, hi: Time) {
        self.s.uncertain += 1;
        if !self.synced {
            return;
        }
        match self.reader.peek() {
            Some(Ok((_, a))) if *a == ip => self.insn(ip, lo, hi),
            _ => self.synced = false,
        }
    }
}

/// Decodes one CPU's trace and walks the truth beside it.
fn score(cpu: u32, trace: &[u8], code: &impl CodeSource, cfg: &FlowConfig, mtc: Option<MtcConv>, truth: &Path) -> Result<Score, SimError> {
    let io = |source| SimError::Io { path: truth.to_path_buf(), source };
    let reader = Truth::new(TruthReader::open(truth).map_err(io)?);
    let mut m = Matcher { reader, synced: true, failure: None, s: Score::default(), cpu };
    let mut last_hi = 0;
    FlowDecoder::new(trace, code, cfg.clone()).with_mtc(mtc).run(|e| match e {
        FlowEvent::Insn { ip, lo, hi, uncertain, .. } => {
            m.s.uncertain += uncertain as u64;
            last_hi = hi;
            m.insn(ip, lo, hi);
        }
        // The simulated kernel traps only on INT3, which runs: it counts as
        // the instruction at the FUP's address.
        FlowEvent::Trap { from, time, .. } => m.insn(from, time, last_hi.max(time)),
        FlowEvent::Error { .. } => {
            m.s.errors += 1;
            m.synced = false;
        }
        FlowEvent::End { .. } => {}
    });
    if let Some(e) = m.failure {
        return Err(io(e));
    }
    let mut s = m.s;
    for r in m.reader {
        r.map_err(io)?;
        s.instructions += 1;
        s.missing += 1;
    }
    Ok(s)
}

/// Decoded events of one CPU in timeline mode (a debugging aid for the simulator's tests).
pub fn decode_cpu(dir: &Path, cpu: usize) -> Vec<FlowEvent> {
    let file = PerfFile::open(dir).unwrap();
    let summary = crate::read_summary(dir).unwrap();
    let (info, aux) = per_cpu_aux(&file, summary.config.cpus).unwrap();
    let (cfg, mtc) = pt_setup(&file, &IntelPtInfo::parse(&info.unwrap()).unwrap());
    let full = poked_image(&file, &summary).unwrap();
    let mut out = Vec::new();
    FlowDecoder::new(&aux[cpu], &Interval(&full), cfg).with_mtc(mtc).run(|e| out.push(e));
    out
}

/// A run's AUXTRACE_INFO and each CPU's trace.
fn per_cpu_aux(file: &PerfFile, cpus: u32) -> Result<(Option<AuxtraceInfo<'_>>, Vec<Vec<u8>>), SimError> {
    let mut info = None;
    let mut aux: Vec<Vec<u8>> = vec![Vec::new(); cpus as usize];
    for r in file.records() {
        match r?.body {
            RecordBody::AuxtraceInfo(i) => info = Some(i),
            RecordBody::Auxtrace(a) => {
                if let Some(buf) = aux.get_mut(a.cpu as usize) {
                    buf.extend_from_slice(a.data);
                }
            }
            _ => {}
        }
    }
    Ok((info, aux))
}

/// The Intel PT decoder's set-up from AUXTRACE_INFO and the PT event's
/// config: time conversion, return compression, MTC timing.
fn pt_setup(file: &PerfFile, info: &IntelPtInfo) -> (FlowConfig, Option<MtcConv>) {
    let pt_attr = file.attrs().iter().find(|a| a.attr.type_ as u64 == info.pmu_type);
    let cfg = FlowConfig {
        time: TimeConv { shift: info.time_shift as u32, mult: info.time_mult, zero: info.time_zero },
        noretcomp: pt_attr.is_some_and(|a| a.attr.config & info.noretcomp_bit != 0),
        idioms: isa::KernelIdioms::default(),
        max_walk: 1 << 20,
        trial_insns: 256,
    };
    let mtc = pt_attr.and_then(|a| MtcConv::from_perf(a.attr.config, info.mtc_bit, info.mtc_freq_bits, info.tsc_ctc_ratio_n, info.tsc_ctc_ratio_d));
    (cfg, mtc)
}

/// The code with every change the run recorded (begin/end pairs for the
/// PRE/POST protocol).
fn poked_image(file: &PerfFile, summary: &crate::Summary) -> Result<CodeTimeline, SimError> {
    let events = if summary.config.protocol == "prepost" { PokeEvents::Pairs } else { PokeEvents::Single };
    Ok(codeimage::from_perf_data_with(file, BaseImage::new(), events).map_err(|e| SimError::Config(e.to_string()))?.timeline)
}

/// The code before any change.
fn base_image(file: &PerfFile) -> Result<CodeTimeline, SimError> {
    let mut base = BaseImage::new();
    codeimage::add_base(file, &mut base).map_err(|e| SimError::Config(e.to_string()))?;
    Ok(TimelineBuilder::new(base).build())
}

/// The ETMv4 runs: each CPU's AUXTRACE buffers, decoded by etm's flow decoder.
///
/// ETM timestamps are perf time here. `perf-style` reads the code at the
/// latest TIMESTAMP seen, as perf does; `timeline` reads it over the window
/// up to the next TIMESTAMP, lets the trace decide where the code changes
/// inside it, and counts as uncertain the instructions of the ranges it
/// could not decide.
fn check_etm(dir: &Path, summary: &crate::Summary) -> Result<Vec<ModeReport>, SimError> {
    use etm::flow::{ElemKind, FlowDecoder, Item};
    use perfdata::auxtrace::CsEtmInfo;
    let file = PerfFile::open(dir)?;
    let (info, aux) = per_cpu_aux(&file, summary.config.cpus)?;
    let info = CsEtmInfo::parse(&info.ok_or_else(|| SimError::Config("no CoreSight AUXTRACE_INFO in the file".into()))?)?;
    let configs: Vec<etm::EtmV4Config> = (0..aux.len())
        .map(|c| {
            let r = info.cpus.iter().find(|b| b.cpu == c as u64).and_then(|b| b.etmv4());
            let r = r.ok_or_else(|| SimError::Config(format!("CoreSight AUXTRACE_INFO has no ETMv4 block for cpu {c}")))?;
            Ok(etm::EtmV4Config::from(&r))
        })
        .collect::<Result<_, SimError>>()?;
    let full = poked_image(&file, summary)?;
    let bare = base_image(&file)?;
    let framing = etm::Framing::Aligned { reset_on_4x_fsync: false };
    let mut reports = Vec::new();
    for mode in Mode::ALL {
        use rayon::prelude::*;
        let cpus = aux
            .par_iter()
            .enumerate()
            .map(|(cpu, trace)| {
                let cfg = [configs[cpu]];
                // The timestamps first: each one's successor bounds the instructions after it.
                let mut stamps = Vec::new();
                let mut reader = etm::PacketReader::new(trace, framing, &cfg, etm::ErrorRecovery::Resync);
                while let Some(item) = reader.next() {
                    if let Ok(etm::TracePacket { packet: etm::Packet::Timestamp(t), .. }) = item {
                        stamps.push(t.value);
                    }
                }
                stamps.sort_unstable();
                let next_stamp = |t: u64| stamps.get(stamps.partition_point(|&s| s <= t)).copied().unwrap_or(u64::MAX);
                let code = if mode == Mode::Static { &bare } else { &full };
                let truth = dir.join(format!("truth/cpu{cpu}.bin"));
                let io = |source| SimError::Io { path: truth.clone(), source };
                let reader_t = Truth::new(TruthReader::open(&truth).map_err(io)?);
                let mut m = Matcher { reader: reader_t, synced: true, failure: None, s: Score::default(), cpu: cpu as u32 };
                let mut flow = FlowDecoder::new(code, &cfg);
                let mut reader = etm::PacketReader::new(trace, framing, &cfg, etm::ErrorRecovery::Resync);
                if mode == Mode::Timeline {
                    flow.window_timestamps(reader.clone());
                }
                let (mut lo, mut hi) = (0u64, next_stamp(0));
                etm::flow::run(&mut reader, &mut flow, |item| {
                    let Item::Element(e) = item else { return };
                    match e.kind {
                        ElemKind::Timestamp { value, .. } => {
                            // The instructions after a timestamp ran at or
                            // after it, exactly (the matcher allows one unit
                            // before `lo`, for Intel PT's coarser clocks):
                            // a loop's iteration just before it is no match.
                            lo = value.saturating_add(1);
                            hi = next_stamp(value);
                        }
                        ElemKind::InstrRange(r) => {
                            for ip in (r.start..r.end).step_by(4) {
                                if r.uncertain {
                                    m.uncertain_insn(ip, lo, hi);
                                } else {
                                    m.insn(ip, lo, hi);
                                }
                            }
                        }
                        // A BRK trap: the BRK (its preferred return address) ran.
                        ElemKind::Exception { ret_addr, .. } => m.insn(ret_addr, lo, hi),
                        ElemKind::Error(_) | ElemKind::AddrNacc(_) => {
                            m.s.errors += 1;
                            m.synced = false;
                        }
                        _ => {}
                    }
                });
                if let Some(e) = m.failure {
                    return Err(io(e));
                }
                let mut s = m.s;
                for r in m.reader {
                    r.map_err(io)?;
                    s.instructions += 1;
                    s.missing += 1;
                }
                Ok(s)
            })
            .collect::<Result<Vec<Score>, SimError>>()?;
        let mut total = Score::default();
        for s in &cpus {
            total.add(s);
        }
        reports.push(ModeReport { mode, total, cpus });
    }
    Ok(reports)
}
