//! `check`: decode a simulated run's trace (Intel PT, or ETMv4 with etm's
//! flow decoder) with three images of the code and compare each with the
//! ground truth.

use std::collections::VecDeque;
use std::path::Path;

use codeimage::window::{CodeSource, Interval, PerfStyle, Static};
use codeimage::{BaseImage, CodeTimeline, PokeEvents, Sideband, SidebandReader, TimelineBuilder};
use intel_pt::flow::{FlowDecoder, FlowEvent, Recovery, Time};
use perfdata::PerfFile;
use serde::Serialize;
use tracedecode::setup::PtSetup;
use tracedecode::{ImageMode, Input, Trace};

use crate::truth::TruthReader;
use crate::SimError;

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
    /// The truth's instructions: `correct`, replaced by a wrong one, or `missing`.
    pub instructions: u64,
    /// Decoded instructions that are the truth's, in order.
    pub correct: u64,
    /// Decoded instructions off the truth's path.
    pub wrong: u64,
    /// The truth's instructions with no decoded one in their place.
    pub missing: u64,
    pub errors: u64,
    pub uncertain: u64,
    /// Wrong instructions of runs with no uncertain choice or error flagged
    /// at or before the run's first one since the timing packet before it:
    /// wrong with no warning (a wrong one after a flag is honest).
    pub silent_wrong: u64,
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
        self.silent_wrong += o.silent_wrong;
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
    pub mode: ImageMode,
    #[serde(flatten)]
    pub total: Score,
    pub cpus: Vec<Score>,
}

/// Decodes the run in `dir` in every mode and scores it against the truth.
pub fn check(dir: &Path) -> Result<Vec<ModeReport>, SimError> {
    check_with(dir, Recovery::default(), |_, _| {})
}

/// [`check`] of an Intel PT run, each CPU's trace changed by `damage`
/// first and decoded with `recovery` after errors: how a decode recovers
/// from damage. (An ETMv4 run is checked as it is.)
pub fn check_with(dir: &Path, recovery: Recovery, damage: impl Fn(usize, &mut Vec<u8>)) -> Result<Vec<ModeReport>, SimError> {
    let summary = crate::read_summary(dir)?;
    if summary.config.arch == isa::Arch::Aarch64 {
        return check_etm(dir, &summary);
    }
    let file = PerfFile::open(dir)?;
    let (input, sideband) = read_input(&file, &summary)?;
    let setup = pt_setup(&file, &input)?;
    let mut aux = per_cpu_aux(input, summary.config.cpus);
    for (cpu, trace) in aux.iter_mut().enumerate() {
        damage(cpu, trace);
    }
    let (full, bare) = images(&file, sideband)?;
    let mut reports = Vec::new();
    for mode in ImageMode::ALL {
        // Each CPU's buffer decodes on its own core.
        use rayon::prelude::*;
        let cpus = aux
            .par_iter()
            .enumerate()
            .map(|(cpu, trace)| {
                let truth = dir.join(format!("truth/cpu{cpu}.bin"));
                match mode {
                    ImageMode::Static => score(cpu as u32, trace, &Static(&bare), &setup, recovery, &truth),
                    ImageMode::PerfStyle => score(cpu as u32, trace, &PerfStyle(&full), &setup, recovery, &truth),
                    ImageMode::Timeline => score(cpu as u32, trace, &Interval(&full), &setup, recovery, &truth),
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
    ahead: VecDeque<(u64, u64)>,
    failure: Option<std::io::Error>,
}

impl Truth {
    fn new(reader: TruthReader) -> Truth {
        Truth { reader, ahead: VecDeque::new(), failure: None }
    }

    /// The `i`th instruction from here (time, address), reading ahead;
    /// `None` past the end (or a read error, kept for the caller).
    fn get(&mut self, i: usize) -> Option<(u64, u64)> {
        while self.ahead.len() <= i {
            match self.reader.next()? {
                Ok(r) => self.ahead.push_back(r),
                Err(e) => {
                    self.failure.get_or_insert(e);
                    return None;
                }
            }
        }
        Some(self.ahead[i])
    }

    /// Takes the next `n` instructions (fewer at the end).
    fn take(&mut self, n: usize) {
        if n > 0 {
            self.get(n - 1);
        }
        self.ahead.drain(..n.min(self.ahead.len()));
    }

    /// Where, from here, the truth runs `ips` in a row, the first of them
    /// within `[lo, hi]`: the first such place, as a count of instructions
    /// before it.
    fn find_run(&mut self, ips: impl Iterator<Item = u64> + Clone, lo: Time, hi: Time) -> Option<usize> {
        let first = ips.clone().next()?;
        for i in 0.. {
            let (t, a) = self.get(i)?;
            if t > hi.saturating_add(1) {
                return None;
            }
            if a == first && t >= lo.saturating_sub(1) && ips.clone().enumerate().skip(1).all(|(j, ip)| self.get(i + j).is_some_and(|r| r.1 == ip)) {
                return Some(i);
            }
        }
        None
    }
}

/// Decoded instructions in a row that must be the truth's, in order, for
/// decode and truth to count as having met again after they part: one
/// match alone is often a common instruction (a function both paths call)
/// met in the wrong place.
const CONFIRM: usize = 8;

/// Decoded instructions kept out of step before the oldest counts as wrong
/// without a place in the truth (bounds the memory and the search).
const PENDING: usize = 4096;

/// Walks the truth beside the decoded instructions.
///
/// In step, each decoded instruction is the truth's next or not. Once they
/// part, the decoded instructions wait in `pending` until [`CONFIRM`] of
/// them in a row are found in the truth ahead (the first within its time
/// bounds): the decoded ones before that are wrong, the truth's skipped are
/// replaced by them one for one and missing past that.
struct Matcher {
    truth: Truth,
    synced: bool,
    /// Out of step: decoded instructions (ip, lo, hi) not yet placed.
    pending: VecDeque<(u64, Time, Time)>,
    /// How many of `pending`, from the front, were tried as a meeting point.
    tried: usize,
    s: Score,
    cpu: u32,
    /// The start of the current timing window (the `lo` of the decoded
    /// instructions since the last timing packet).
    window: Time,
    /// An uncertain choice or an error was reported in the current window.
    window_flagged: bool,
    /// The current run out of step began with a flag in its window.
    run_flagged: bool,
}

impl Matcher {
    fn new(truth: TruthReader, cpu: u32) -> Matcher {
        Matcher {
            truth: Truth::new(truth),
            synced: true,
            pending: VecDeque::new(),
            tried: 0,
            s: Score::default(),
            cpu,
            window: 0,
            window_flagged: false,
            run_flagged: false,
        }
    }

    /// The decoder's next event ran from `lo` on: a later `lo` is a new
    /// timing window, with no flag yet.
    fn at(&mut self, lo: Time) {
        if lo != self.window {
            self.window = lo;
            self.window_flagged = false;
        }
    }

    /// Decode and truth part here.
    fn part(&mut self) {
        self.synced = false;
        self.run_flagged = self.window_flagged;
    }

    /// `n` decoded instructions are wrong: silently so unless their run was flagged.
    fn wrong(&mut self, n: u64, flagged: bool) {
        self.s.wrong += n;
        if !flagged {
            self.s.silent_wrong += n;
        }
    }

    /// One decoded instruction at `ip`, run within `[lo, hi]`.
    fn insn(&mut self, ip: u64, lo: Time, hi: Time) {
        if !self.synced {
            self.pending.push_back((ip, lo, hi));
            self.meet(CONFIRM);
            return;
        }
        match self.truth.get(0) {
            Some((_, a)) if a == ip => {
                self.truth.take(1);
                self.s.instructions += 1;
                self.s.correct += 1;
            }
            Some((t, a)) => {
                self.s.first_divergence.get_or_insert(Divergence { cpu: self.cpu, time: t, expected: a, decoded: ip });
                self.part();
                self.pending.push_back((ip, lo, hi));
            }
            // Decoded past the truth's end.
            None => self.wrong(1, self.window_flagged),
        }
    }

    /// A decoded instruction the decoder reports uncertain (another content
    /// of its code fits the trace too): right when it is the truth's next
    /// one, else not wrong but out of step, the truth's instructions up to
    /// where the certain ones meet it again missing.
    fn uncertain_insn(&mut self, ip: u64, lo: Time, hi: Time) {
        self.s.uncertain += 1;
        self.window_flagged = true;
        if !self.synced {
            return;
        }
        match self.truth.get(0) {
            Some((_, a)) if a == ip => self.insn(ip, lo, hi),
            _ => self.part(),
        }
    }

    /// A decode error: what follows is out of step until it meets the truth.
    fn error(&mut self) {
        self.s.errors += 1;
        self.window_flagged = true;
        self.part();
    }

    /// Tries the untried starts in `pending` with `len` decoded instructions
    /// after them as where decode and truth meet again.
    fn meet(&mut self, len: usize) {
        while self.tried + len <= self.pending.len() {
            let a = self.tried;
            let (_, lo, hi) = self.pending[a];
            let ips = self.pending.range(a..a + len).map(|p| p.0);
            if let Some(b) = self.truth.find_run(ips, lo, hi) {
                self.met(a, b);
                return;
            }
            self.tried += 1;
        }
        if self.pending.len() > PENDING {
            self.pending.pop_front();
            self.wrong(1, self.run_flagged);
            self.tried = self.tried.saturating_sub(1);
        }
    }

    /// Decode and truth meet again after `a` decoded and `b` truth
    /// instructions: those are wrong and replaced or missing; the pending
    /// ones from there are taken in step.
    fn met(&mut self, a: usize, b: usize) {
        self.skip(a, b);
        self.truth.take(b);
        self.pending.drain(..a);
        self.tried = 0;
        self.synced = true;
        let rest: Vec<_> = self.pending.drain(..).collect();
        for (ip, lo, hi) in rest {
            self.insn(ip, lo, hi);
        }
    }

    /// Counts `a` decoded instructions off the truth's path and `b` truth
    /// instructions not decoded: each of the first one for one a wrong
    /// instruction in place of one of the second, the rest of the second missing.
    fn skip(&mut self, a: usize, b: usize) {
        self.wrong(a as u64, self.run_flagged);
        self.s.instructions += b as u64;
        self.s.missing += b.saturating_sub(a) as u64;
    }

    /// The end of the decode: pending instructions that end the decode in
    /// step with the truth (fewer than [`CONFIRM`]) are placed; the others
    /// are wrong, and what the truth has left is replaced by them or missing.
    fn finish(mut self) -> Result<Score, std::io::Error> {
        while !self.synced && self.tried < self.pending.len() {
            let len = self.pending.len() - self.tried;
            self.meet(len);
        }
        let mut left = 0;
        while self.truth.get(0).is_some() {
            self.truth.take(1);
            left += 1;
        }
        self.skip(self.pending.len(), left);
        match self.truth.failure {
            Some(e) => Err(e),
            None => Ok(self.s),
        }
    }
}

/// Decodes one CPU's trace and walks the truth beside it.
fn score(cpu: u32, trace: &[u8], code: &impl CodeSource, setup: &PtSetup, recovery: Recovery, truth: &Path) -> Result<Score, SimError> {
    let io = |source| SimError::Io { path: truth.to_path_buf(), source };
    let mut m = Matcher::new(TruthReader::open(truth).map_err(io)?, cpu);
    let mut last_hi = 0;
    let mut decoder =
        FlowDecoder::new(trace, code, setup.cfg.clone()).with_mtc(setup.mtc).with_cyc(setup.cyc).with_recovery(recovery).with_deferred_tips(true);
    if let Some(f) = setup.filter {
        decoder = decoder.with_addr_filter(f);
    }
    decoder.run(|e| match e {
        FlowEvent::Insn { ip, lo, hi, uncertain, .. } => {
            m.at(lo);
            if uncertain {
                // Counted, and a flag; the instruction is placed as a certain one.
                m.s.uncertain += 1;
                m.window_flagged = true;
            }
            last_hi = hi;
            m.insn(ip, lo, hi);
        }
        // The simulated kernel traps on INT3 and on undefined instructions,
        // which run: each counts as the instruction at the FUP's address.
        FlowEvent::Trap { from, time, .. } => {
            m.at(time);
            m.insn(from, time, last_hi.max(time))
        }
        FlowEvent::Error { .. } => m.error(),
        // (Not asked for: no state events.)
        FlowEvent::End { .. } | FlowEvent::Enabled { .. } | FlowEvent::State { .. } => {}
    });
    m.finish().map_err(io)
}

/// Decoded events of one CPU of an Intel PT run in timeline mode (a debugging aid for the
/// simulator's tests).
pub fn decode_cpu(dir: &Path, cpu: usize) -> Result<Vec<FlowEvent>, SimError> {
    let file = PerfFile::open(dir)?;
    let summary = crate::read_summary(dir)?;
    if summary.config.arch != isa::Arch::X86_64 {
        return Err(SimError::Config(format!("{}: decode_cpu decodes Intel PT; this run is {:?}", dir.display(), summary.config.arch)));
    }
    let (input, sideband) = read_input(&file, &summary)?;
    let setup = pt_setup(&file, &input)?;
    let aux = per_cpu_aux(input, summary.config.cpus);
    let trace = aux.get(cpu).ok_or_else(|| SimError::Config(format!("cpu {cpu}: the run has {} CPUs", aux.len())))?;
    let full = poked_image(&file, sideband)?;
    let mut out = Vec::new();
    let code = Interval(&full);
    let mut decoder = FlowDecoder::new(trace, &code, setup.cfg).with_mtc(setup.mtc).with_cyc(setup.cyc).with_deferred_tips(true);
    if let Some(f) = setup.filter {
        decoder = decoder.with_addr_filter(f);
    }
    decoder.run(|e| out.push(e));
    Ok(out)
}

/// Each CPU's trace, from the run's queues.
fn per_cpu_aux(input: Input, cpus: u32) -> Vec<Vec<u8>> {
    let mut aux: Vec<Vec<u8>> = vec![Vec::new(); cpus as usize];
    for q in input.queues {
        if let Some(buf) = aux.get_mut(q.cpu as usize) {
            buf.extend_from_slice(&q.trace);
        }
    }
    aux
}

/// The Intel PT decoder's set-up, for the simulated kernel (no kernel idioms).
fn pt_setup(file: &PerfFile, input: &Input) -> Result<PtSetup, SimError> {
    match &input.trace {
        Some(Trace::IntelPt(info)) => Ok(PtSetup::new(file, info, isa::KernelIdioms::default())),
        _ => Err(SimError::Config("no Intel PT AUXTRACE_INFO in the file".into())),
    }
}

/// The input and the side-band with every change the run recorded
/// (begin/end pairs for the PRE/POST protocol), from one pass over the records.
fn read_input<'a>(file: &'a PerfFile, summary: &crate::Summary) -> Result<(Input<'a>, Sideband<'a>), SimError> {
    let events = if summary.config.protocol == crate::Protocol::PrePost { PokeEvents::Pairs } else { PokeEvents::Single };
    let mut side = SidebandReader::new(file, events);
    let input = Input::read_sorted(file, |r| side.observe(r))?;
    let sideband = side.finish(input.bad_records.iter().map(ToString::to_string).collect());
    Ok((input, sideband))
}

/// The code before any change, for `sideband`.
fn base_of(file: &PerfFile, sideband: &Sideband<'_>) -> Result<BaseImage, SimError> {
    let mut base = BaseImage::new();
    codeimage::add_base_mapped(file, &sideband.mappings, &mut base, &codeimage::UserCode::default()).map_err(|e| SimError::Config(e.to_string()))?;
    Ok(base)
}

/// The code with every change the run recorded.
fn poked_image(file: &PerfFile, sideband: Sideband<'_>) -> Result<CodeTimeline, SimError> {
    let base = base_of(file, &sideband)?;
    Ok(sideband.timeline(base).timeline)
}

/// The code with every change and the code before any, from one reading of the base.
fn images(file: &PerfFile, sideband: Sideband<'_>) -> Result<(CodeTimeline, CodeTimeline), SimError> {
    let base = base_of(file, &sideband)?;
    let bare = TimelineBuilder::new(base.clone()).build();
    Ok((sideband.timeline(base).timeline, bare))
}

/// The ETMv4 runs: each CPU's AUXTRACE buffers, decoded by etm's flow decoder.
///
/// ETM timestamps are perf time here. `perf-style` reads the code at the
/// latest TIMESTAMP seen, as perf does; `timeline` reads it over the window
/// up to the next TIMESTAMP, lets the trace decide where the code changes
/// inside it, and counts as uncertain the instructions of the ranges it
/// could not decide.
fn check_etm(dir: &Path, summary: &crate::Summary) -> Result<Vec<ModeReport>, SimError> {
    use etm::flow::FlowDecoder;
    let file = PerfFile::open(dir)?;
    let (input, sideband) = read_input(&file, summary)?;
    let Some(Trace::CoreSight(info)) = &input.trace else {
        return Err(SimError::Config("no CoreSight AUXTRACE_INFO in the file".into()));
    };
    let units = tracedecode::setup::etm_configs(info)?;
    let aux = per_cpu_aux(input, summary.config.cpus);
    let configs: Vec<etm::EtmV4Config> = (0..aux.len())
        .map(|c| {
            let unit = units.iter().find(|(cpu, _)| *cpu == c as u64);
            unit.map(|u| u.1).ok_or_else(|| SimError::Config(format!("CoreSight AUXTRACE_INFO has no ETMv4 block for cpu {c}")))
        })
        .collect::<Result<_, SimError>>()?;
    let (full, bare) = images(&file, sideband)?;
    let framing = etm::Framing::Aligned { reset_on_4x_fsync: false };
    let mut reports = Vec::new();
    for mode in ImageMode::ALL {
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
                let truth = dir.join(format!("truth/cpu{cpu}.bin"));
                let io = |source| SimError::Io { path: truth.clone(), source };
                let mut m = Matcher::new(TruthReader::open(&truth).map_err(io)?, cpu as u32);
                match mode {
                    ImageMode::Static => match_etm(FlowDecoder::new(Static(&bare), &cfg), trace, &cfg, framing, false, &stamps, &mut m),
                    ImageMode::PerfStyle => match_etm(FlowDecoder::new(PerfStyle(&full), &cfg), trace, &cfg, framing, false, &stamps, &mut m),
                    ImageMode::Timeline => match_etm(FlowDecoder::new(Interval(&full), &cfg), trace, &cfg, framing, true, &stamps, &mut m),
                }
                m.finish().map_err(io)
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

/// Decodes one CPU's ETMv4 trace with `flow` (over windows between
/// timestamps when `windows`) and matches its instructions against the
/// truth; `stamps` are the trace's timestamps, ascending.
fn match_etm<C: CodeSource>(
    mut flow: etm::flow::FlowDecoder<C>,
    trace: &[u8],
    cfg: &[etm::EtmV4Config],
    framing: etm::Framing,
    windows: bool,
    stamps: &[u64],
    m: &mut Matcher,
) {
    use etm::flow::{ElemKind, Item};
    let next_stamp = |t: u64| stamps.get(stamps.partition_point(|&s| s <= t)).copied().unwrap_or(u64::MAX);
    let mut reader = etm::PacketReader::new(trace, framing, cfg, etm::ErrorRecovery::Resync);
    if windows {
        flow.window_timestamps(reader.clone());
    }
    let (mut lo, mut hi) = (0u64, next_stamp(0));
    etm::flow::run(&mut reader, &mut flow, |item| {
        let Item::Element(e) = item else { return };
        match e.kind {
            ElemKind::Timestamp { value, .. } => {
                // The instructions after a timestamp ran at or after it,
                // exactly (the matcher allows one unit before `lo`, for
                // Intel PT's coarser clocks): a loop's iteration just
                // before it is no match.
                lo = value.saturating_add(1);
                hi = next_stamp(value);
                m.at(lo);
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
            ElemKind::Error(_) | ElemKind::AddrNacc(_) => m.error(),
            _ => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::truth::TruthWriter;

    /// The score of `decoded` against `truth` (addresses; the truth's
    /// instructions 1 ns apart, the decoded ones timed over the whole run,
    /// as a wide MTC window times them).
    fn score_of(name: &str, truth: &[u64], decoded: &[u64]) -> Score {
        let path = std::env::temp_dir().join(format!("poketrace-check-{}-{name}.bin", std::process::id()));
        let mut w = TruthWriter::create(&path).unwrap();
        for (t, &a) in truth.iter().enumerate() {
            w.push(1000 + t as u64, a).unwrap();
        }
        w.finish().unwrap();
        let mut m = Matcher::new(TruthReader::open(&path).unwrap(), 0);
        for &ip in decoded {
            m.insn(ip, 1000, 1000 + truth.len() as u64);
        }
        let s = m.finish().unwrap();
        std::fs::remove_file(&path).unwrap();
        s
    }

    /// After one wrong choice the decode runs 6 instructions off the
    /// truth's path (3 where the truth ran 3 others, calling a function at
    /// 0 the truth calls again soon after), then the two run the same 50
    /// loop iterations, each calling that function. The greedy resync this
    /// replaces took the first decoded call of the function for the truth's
    /// next, which put the truth one iteration ahead of the decode for good:
    /// 152 right, 56 wrong of 205. Now the 6 off the path are wrong (the
    /// truth's 3 replaced by them, nothing missing) and the other 202 right.
    #[test]
    fn one_wrong_choice_costs_the_instructions_off_the_path_only() {
        let (f, w, t) = (0x100u64, 0x200u64, 0x300u64);
        let call = [f, f + 1, f + 2];
        let mut body = Vec::new();
        for i in 0..50 {
            body.push(0x1000 + i);
            body.extend_from_slice(&call);
        }
        let mut truth = vec![1, 2, t, t + 1, t + 2];
        truth.extend_from_slice(&body);
        let mut decoded = vec![1, 2, w];
        decoded.extend_from_slice(&call);
        decoded.extend_from_slice(&[w + 1, w + 2]);
        decoded.extend_from_slice(&body);
        let s = score_of("offpath", &truth, &decoded);
        assert_eq!((s.instructions, s.correct, s.wrong, s.missing), (truth.len() as u64, 2 + body.len() as u64, 6, 0), "{s:?}");
        assert_eq!(s.first_divergence.map(|d| (d.expected, d.decoded)), Some((t, w)));
    }

    /// Wrong instructions are silent unless an uncertain choice or an error
    /// came first in their timing window; a flag in an earlier window does
    /// not cover them.
    #[test]
    fn silent_wrong_needs_no_flag_in_the_window() {
        let path = std::env::temp_dir().join(format!("poketrace-check-{}-silent.bin", std::process::id()));
        let mut w = TruthWriter::create(&path).unwrap();
        for t in 0..40u64 {
            w.push(1000 + t, 1 + t).unwrap();
        }
        w.finish().unwrap();
        // Instructions 1..=10, then 3 off the path (0x90..) in place of 11..=13, then 14..=40.
        let run = |flag_at: Option<u64>| {
            let mut m = Matcher::new(TruthReader::open(&path).unwrap(), 0);
            let decoded = (1..=10u64).chain(0x90..0x93).chain(14..=40);
            for (i, ip) in decoded.enumerate() {
                let lo = if i < 5 { 1000 } else { 1005 };
                m.at(lo);
                if flag_at == Some(i as u64) {
                    m.uncertain_insn(ip, lo, 1100);
                } else {
                    m.insn(ip, lo, 1100);
                }
            }
            m.finish().unwrap()
        };
        let silent = run(None);
        assert_eq!((silent.wrong, silent.silent_wrong), (3, 3), "{silent:?}");
        let flagged = run(Some(7));
        assert_eq!((flagged.wrong, flagged.silent_wrong, flagged.uncertain), (3, 0, 1), "{flagged:?}");
        let earlier_window = run(Some(2));
        assert_eq!((earlier_window.wrong, earlier_window.silent_wrong), (3, 3), "{earlier_window:?}");
        std::fs::remove_file(&path).unwrap();
    }

    /// What the decode skips is missing; what it has beyond the truth is wrong.
    #[test]
    fn skipped_and_extra_instructions() {
        let truth: Vec<u64> = (1..=40).collect();
        // 11..=15 not decoded.
        let decoded: Vec<u64> = (1..=10).chain(16..=40).collect();
        let s = score_of("skipped", &truth, &decoded);
        assert_eq!((s.instructions, s.correct, s.wrong, s.missing), (40, 35, 0, 5), "{s:?}");
        // Two instructions not in the truth, then the rest in step.
        let decoded: Vec<u64> = (1..=10).chain([0x99, 0x98]).chain(11..=40).collect();
        let s = score_of("extra", &truth, &decoded);
        assert_eq!((s.instructions, s.correct, s.wrong, s.missing), (40, 40, 2, 0), "{s:?}");
        // Decode and truth meet again 3 instructions before the end (fewer
        // than CONFIRM): still placed.
        let decoded: Vec<u64> = (1..=10).chain([0x99]).chain(38..=40).collect();
        let s = score_of("tail", &truth, &decoded);
        assert_eq!((s.instructions, s.correct, s.wrong, s.missing), (40, 13, 1, 26), "{s:?}");
        // Never again: the decoded ones wrong, each in place of one of the truth's.
        let decoded: Vec<u64> = (1..=10).chain(0x90..0x9a).collect();
        let s = score_of("never", &truth, &decoded);
        assert_eq!((s.instructions, s.correct, s.wrong, s.missing), (40, 10, 10, 20), "{s:?}");
    }
}
