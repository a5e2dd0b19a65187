//! `profile --format perf-inject`: a perf.data with a branch-stack sample
//! every N instructions of an Intel PT trace, as `perf inject
//! --itrace=il64` writes it: the input's events plus an `instructions`
//! event whose samples carry the last 64 taken branches (newest first,
//! with hw_idx), the side-band copied, the trace and its set-up left out.
//! The branches are those that ran: at a patched site, the code of that time.

use std::path::Path;

use anyhow::{bail, Context, Result};
use codeimage::BaseImage;
use perfdata::abi::{attr_flag, misc, sample_type as st, BRANCH_SAMPLE_HW_INDEX};
use perfdata::{AttrWithIds, BranchEntry, BranchStack, EventAttr, FeatureData, PerfFile, Record, RecordBody, Sample, SampleId, Writer};
use tracedecode::pt::{BranchSample, Plan};
use tracedecode::setup::{self, PtSetup};
use tracedecode::{ImageMode, Input, Queue, Threads, Trace};

use super::staging::Staging;

/// perf's default for `--itrace=i`: 100 us of trace; here a count of
/// instructions is taken instead (see [`write`]).
pub const DEFAULT_PERIOD: u64 = 100_000;

/// perf's id of a synthesized event: the traced event's first id plus this.
const SYNTH_ID_OFFSET: u64 = 1_000_000_000;

/// PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS.
const HARDWARE: u32 = 0;
const INSTRUCTIONS: u64 = 1;

/// Decodes the Intel PT trace in `input` (a perf.data directory or file)
/// and writes `out`: a sample every `period` instructions with the
/// branches before it. `out` is a perf.data directory with a copy of the
/// input's kcore_dir when it has one (as perf inject writes), else a file;
/// it appears whole or not at all (written as OUT.tmp, then renamed).
/// Exit status 1 when the trace had decode errors or gaps, or the
/// recording lost records (the samples around them are written; a stack
/// never spans an error or a gap).
pub fn write(input: &Path, out: &Path, period: u64) -> Result<i32> {
    if period == 0 {
        bail!("--period 0: a sample needs at least one instruction");
    }
    let file = PerfFile::open(input)?;
    let (Input { trace, queues, threads, bad_records, breaks, .. }, sideband) = crate::prepare::read_input(&file, |_| ())?;
    if let Some(e) = bad_records.first() {
        bail!("{}: {} record(s) could not be read, the first: {e}; no profile is written from a damaged input", input.display(), bad_records.len());
    }
    let info = match trace.context("no Intel PT AUXTRACE_INFO in the input")? {
        Trace::IntelPt(info) => info,
        Trace::CoreSight(_) => bail!("--format perf-inject: made for Intel PT only (CoreSight ETMv4 is not done yet)"),
    };
    let mut base = BaseImage::new();
    if let Some(refused) = codeimage::add_base_mapped(&file, &sideband.mappings, &mut base, &crate::symbols::user_code(None))?.summary() {
        eprintln!("poketrace profile: {refused}");
    }
    let built = sideband.timeline(base);
    if let Some(e) = built.errors.first() {
        bail!("{}: {e}; no profile is written from a damaged input", input.display());
    }
    if built.losses.aux_damaged() > 0 {
        bail!("{}: {} AUX record(s) cut short; no profile is written from a damaged input", input.display(), built.losses.aux_damaged());
    }
    for b in &breaks {
        eprintln!("poketrace profile: {}", b.describe());
    }
    let lost = built.losses.lost_records();
    for line in built.losses.report(10) {
        eprintln!("poketrace profile: the recording is incomplete: {line}");
    }
    let tl = &built.timeline;
    let setup = PtSetup::new(&file, &info, setup::kernel_idioms(&file)?);
    let plan = Plan { setup: &setup, segments: false };

    let staging = Staging::new(out, file.kcore_dir().as_deref())?;
    let written = (|| {
        let mut w = OutFile::create(&staging.data(), &file, info.pmu_type, period)?;
        let counts = tracedecode::pt::branch_samples(plan, &queues, ImageMode::Timeline, (tl, tl), period, &mut |s| w.sample(s, &queues, &threads))?;
        w.finish()?;
        anyhow::Ok(counts)
    })();
    let counts = match written {
        Ok(c) => c,
        Err(e) => {
            staging.abandon();
            return Err(e);
        }
    };
    staging.commit(out)?;
    eprintln!(
        "poketrace profile: {} samples of {} instructions each, {} instructions, {} decode errors, {} gaps in the AUX data, \
         {} samples with branches decoded where the code may have been either version (uncertain)",
        counts.samples,
        period,
        counts.instructions,
        counts.errors,
        breaks.len(),
        counts.uncertain_samples
    );
    Ok(if counts.errors > 0 || !breaks.is_empty() || lost > 0 { 1 } else { 0 })
}

/// Records between FINISHED_ROUNDs: the output is in time order, so a
/// reader may deliver each round as it comes.
const ROUND: usize = 4096;

/// The output being written, in time order: the input's side-band records
/// as the samples' times pass theirs. The first error is kept (the decoder
/// cannot be stopped from its sink) and returned by [`OutFile::finish`].
struct OutFile<'f> {
    w: Writer<std::io::BufWriter<std::fs::File>>,
    id: u64,
    stack: Vec<u8>,
    error: Option<perfdata::Error>,
    side: std::iter::Peekable<perfdata::SortedRecords<'f>>,
    /// Records since the last FINISHED_ROUND.
    in_round: usize,
}

impl<'f> OutFile<'f> {
    /// `path` with `input`'s events and the synthesized one (after the
    /// traced event, of PMU type `pmu_type`), and its features.
    fn create(path: &Path, input: &'f PerfFile, pmu_type: u64, period: u64) -> Result<OutFile<'f>> {
        let attrs = input.attrs();
        let traced = attrs.iter().find(|a| u64::from(a.attr.type_) == pmu_type).or(attrs.first()).context("the input has no event")?;
        let used = |id: u64| attrs.iter().any(|a| a.ids.contains(&id));
        let mut id = traced.ids.first().copied().unwrap_or(0) + SYNTH_ID_OFFSET;
        while used(id) {
            id += 1;
        }
        let exclude = traced.attr.flags & (attr_flag::EXCLUDE_USER | attr_flag::EXCLUDE_KERNEL | attr_flag::EXCLUDE_HV);
        let synth = EventAttr {
            type_: HARDWARE,
            size: traced.attr.size,
            config: INSTRUCTIONS,
            sample_period: period,
            sample_type: st::IP | st::TID | st::TIME | st::CPU | st::PERIOD | st::BRANCH_STACK | st::IDENTIFIER,
            flags: attr_flag::SAMPLE_ID_ALL | exclude,
            branch_sample_type: BRANCH_SAMPLE_HW_INDEX,
            ..EventAttr::default()
        };
        let mut all: Vec<AttrWithIds> = attrs.to_vec();
        all.push(AttrWithIds { attr: synth, ids: vec![id] });
        let names = event_names(input, &all);
        let mut w = Writer::create(path, all)?;
        let f = input.features();
        w.features = FeatureData {
            hostname: f.hostname.clone(),
            osrelease: f.osrelease.clone(),
            version: f.version.clone(),
            arch: f.arch.clone(),
            nrcpus: f.nrcpus,
            cpudesc: f.cpudesc.clone(),
            cpuid: f.cpuid.clone(),
            cmdline: Some(std::env::args().collect()),
            build_ids: f.build_ids.clone(),
            event_names: Some(names),
            branch_stack: true,
        };
        let side = input.sorted_records().peekable();
        Ok(OutFile { w, id, stack: Vec::with_capacity(16 + 24 * tracedecode::pt::DEPTH), error: None, side, in_round: 0 })
    }

    /// The input's side-band records up to `time` (all, for `None`), as
    /// perf inject keeps them: not the trace (AUXTRACE, AUX, AUXTRACE_INFO,
    /// ITRACE_START), nor the ids index and perf's own records (types 64 and up).
    fn side_band_until(&mut self, time: Option<u64>) -> perfdata::Result<()> {
        let due = |r: &perfdata::Result<Record<'_>>| match (r, time) {
            (Ok(r), Some(t)) => r.time().is_none_or(|rt| rt <= t),
            _ => true,
        };
        while let Some(r) = self.side.next_if(due) {
            let Record { misc, body, sample_id, .. } = r?;
            let kept = match body {
                RecordBody::Aux(_)
                | RecordBody::ItraceStart(_)
                | RecordBody::AuxtraceInfo(_)
                | RecordBody::Auxtrace(_)
                | RecordBody::IdIndex(_)
                | RecordBody::HeaderAttr(_)
                | RecordBody::FinishedRound
                | RecordBody::FinishedInit
                | RecordBody::Compressed(_) => false,
                RecordBody::Other { record_type, .. } => record_type < perfdata::abi::record_type::USER_TYPE_START,
                _ => true,
            };
            if kept {
                self.w.write(misc, &body, &sample_id)?;
                self.count_record()?;
            }
        }
        Ok(())
    }

    /// One more record in the round; a FINISHED_ROUND when it is full.
    fn count_record(&mut self) -> perfdata::Result<()> {
        self.in_round += 1;
        if self.in_round == ROUND {
            self.w.finish_round()?;
            self.in_round = 0;
        }
        Ok(())
    }

    /// One synthesized sample.
    fn sample(&mut self, s: &BranchSample<'_>, queues: &[Queue], threads: &Threads) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.side_band_until(Some(s.time)) {
            self.error = Some(e);
            return;
        }
        let (pid, tid) = threads.at(&queues[s.queue], s.cpu, s.time).map_or((-1, -1), |(pid, tid, _)| (pid, tid));
        self.stack.clear();
        let entries = s.branches.newest_first().map(|b| BranchEntry { from: b.from, to: b.to, flags: 0 });
        BranchStack::encode(&mut self.stack, Some(0), entries);
        let sample = Sample {
            identifier: Some(self.id),
            ip: Some(s.ip),
            pid: Some(pid as u32),
            tid: Some(tid as u32),
            time: Some(s.time),
            cpu: Some(s.cpu),
            period: Some(s.period),
            branch_stack: Some(&self.stack),
            ..Sample::default()
        };
        let mode = if s.ip >> 63 == 1 { misc::KERNEL } else { misc::USER };
        if let Err(e) = self.w.write(mode, &RecordBody::Sample(sample), &SampleId::default()).and_then(|_| self.count_record()) {
            self.error = Some(e);
        }
    }

    /// The side-band records after the last sample, and the file's end.
    fn finish(mut self) -> Result<()> {
        if self.error.is_none() {
            if let Err(e) = self.side_band_until(None) {
                self.error = Some(e);
            }
        }
        if let Some(e) = self.error {
            return Err(e.into());
        }
        self.w.finish()?;
        Ok(())
    }
}

/// Each event's name: the input's (HEADER_EVENT_DESC), and
/// `instructions` with perf's modifiers for the one made here.
fn event_names(input: &PerfFile, attrs: &[AttrWithIds]) -> Vec<String> {
    let desc = &input.features().event_desc;
    attrs
        .iter()
        .map(|a| match desc.iter().find(|d| d.ids.first().is_some_and(|id| a.ids.contains(id))) {
            Some(d) => d.name.clone(),
            None if a.attr.type_ == HARDWARE && a.attr.config == INSTRUCTIONS => format!("instructions{}", modifiers(&a.attr)),
            None => String::new(),
        })
        .collect()
}

/// perf's `:kuh` suffix: what an event counts, when it leaves something out.
fn modifiers(a: &EventAttr) -> String {
    let excluded = |f| a.flags & f != 0;
    if !(excluded(attr_flag::EXCLUDE_USER) || excluded(attr_flag::EXCLUDE_KERNEL) || excluded(attr_flag::EXCLUDE_HV)) {
        return String::new();
    }
    let mut m = String::from(":");
    for (flag, c) in [(attr_flag::EXCLUDE_KERNEL, 'k'), (attr_flag::EXCLUDE_USER, 'u'), (attr_flag::EXCLUDE_HV, 'h')] {
        if !excluded(flag) {
            m.push(c);
        }
    }
    m
}
