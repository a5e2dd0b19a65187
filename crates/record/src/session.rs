//! One recording: open the events, save the kernel's state, drain the rings
//! until the command exits, a signal comes or the time is up, then finish
//! the files.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, IsTerminal};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use perfdata::abi::{attr_flag as flag, read_format, record_type as rt, sample_type as st};
use perfdata::{AttrWithIds, EventAttr, FeatureData, NrCpus, Writer, ATTR_SIZE_VER7};

use crate::bpf::{BpfStore, Load};
use crate::error::{Error, Result};
use crate::summary::{Options, Summary};
use crate::sys::{self, Event};
use crate::watch::{bpf_load, Watched, Watcher};
use crate::{kernel, synth};

/// `perf_event_attr.watermark`: wake the reader after `wakeup_watermark` bytes.
const WATERMARK: u64 = 1 << 14;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
/// Sample fields of both events' records: TID, TIME, CPU, IDENTIFIER.
const SAMPLE_TYPE: u64 = st::TID | st::TIME | st::CPU | st::IDENTIFIER;
/// Bytes of that trailer: {pid, tid}, time, {cpu, res}, identifier.
const SAMPLE_ID_SIZE: usize = 32;
/// Data pages of each BPF watch ring.
const WATCH_PAGES: usize = 4;
/// Longest wait between two looks at the command, the clock and the rings.
const TICK: Duration = Duration::from_millis(100);

/// The side-band event, one per CPU: everything the kernel says about code
/// (text_poke, ksymbol, bpf_event) and tasks (mmap2, comm, task, context
/// switches), woken when a quarter of the ring is full.
fn sideband_attr(ring_bytes: usize, bpf_event: bool) -> EventAttr {
    EventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE_VER7,
        config: PERF_COUNT_SW_DUMMY,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        read_format: read_format::LOST,
        flags: flag::DISABLED
            | flag::MMAP
            | flag::COMM
            | flag::TASK
            | flag::SAMPLE_ID_ALL
            | flag::MMAP2
            | flag::COMM_EXEC
            | flag::CONTEXT_SWITCH
            | flag::KSYMBOL
            | if bpf_event { flag::BPF_EVENT } else { 0 }
            | flag::TEXT_POKE
            | WATERMARK,
        wakeup_events: (ring_bytes / 4) as u32,
        ..EventAttr::default()
    }
}

/// A second event per CPU, for the BPF watch thread ([`crate::watch`]),
/// that alone carries BPF_EVENT and wakes its reader at every record. Its
/// records go into the file with the others (a second attr); the side-band
/// event then goes without bpf_event, since two events on one CPU taking the
/// same record type get it with a wrong size (see [`true_size`]).
fn watch_attr() -> EventAttr {
    EventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE_VER7,
        config: PERF_COUNT_SW_DUMMY,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        read_format: read_format::LOST,
        flags: flag::DISABLED | flag::SAMPLE_ID_ALL | flag::BPF_EVENT | WATERMARK,
        // wakeup_watermark 1: wake at every record (wakeup_events counts only samples)
        wakeup_events: 1,
        ..EventAttr::default()
    }
}

/// Records `opts` asks for; see the crate documentation for what is written.
pub fn record(opts: &Options) -> Result<Summary> {
    check_options(opts, sys::page_size())?;
    crate::output::prepare(&opts.output)?;
    let mut warnings = Vec::new();
    let cpus = sys::online_cpus()?;
    let (bpf_attr, watch) = match sys::open_all(&watch_attr(), &cpus, WATCH_PAGES) {
        Ok(w) => w,
        Err(e) => {
            warnings.push(format!(
                "no BPF watch events ({e}): JIT images are read when the side-band rings are drained, so short-lived \
                 programs may be missed"
            ));
            (watch_attr(), Vec::new())
        }
    };
    let (attr, mut events) = sys::open_all(&sideband_attr(opts.mmap_pages * sys::page_size(), watch.is_empty()), &cpus, opts.mmap_pages)?;
    let kernel = kernel::snapshot(&opts.output.join("kcore_dir"), opts.vmlinux.as_deref(), &mut warnings)?;
    let mut attrs = vec![AttrWithIds { attr, ids: events.iter().map(|e| e.id).collect() }];
    if !watch.is_empty() {
        attrs.push(AttrWithIds { attr: bpf_attr, ids: watch.iter().map(|e| e.id).collect() });
    }
    let mut writer = Writer::create(opts.output.join("data"), attrs)?;
    writer.features = features(cpus.len(), !watch.is_empty());
    let mut synthesized = synth::kernel_maps(&mut writer, &kernel)? + synth::thread_names(&mut writer)?;

    let collect_loads = watch.is_empty();
    let watcher = if watch.is_empty() { None } else { Some(Watcher::start(watch)?) };
    for e in &events {
        e.enable()?;
    }
    let started = Instant::now();
    let mut bpf = BpfStore::create(&opts.output.join("bpf"))?;
    synthesized += bpf.capture_loaded(&mut writer, &mut warnings)?;
    writer.flush()?;
    let mut sink = Sink {
        writer,
        counts: [0; 64],
        lost: 0,
        reported: HashMap::new(),
        skipped: 0,
        resized: 0,
        loads: Vec::new(),
        collect_loads,
        any: false,
        fixed: Vec::new(),
    };
    let signals = sys::catch_signals()?;
    let looped = run(opts, started, &mut events, watcher, &mut sink, &mut bpf);
    sys::restore_signals(&signals);
    let looped = looped?;
    let elapsed = started.elapsed();

    let Sink { writer, counts, lost, skipped, resized, reported, .. } = sink;
    let (exit_code, watch_unreported) = looped;
    let lost_unreported =
        watch_unreported + events.iter().filter_map(|e| Some(e.lost()?.saturating_sub(*reported.get(&e.id).unwrap_or(&0)))).sum::<u64>();
    let bytes = writer.position();
    writer.finish()?;
    let bpf = bpf.finish()?;
    let records = counts.iter().enumerate().filter(|(_, &n)| n > 0).map(|(ty, &n)| (ty as u32, n)).collect::<BTreeMap<_, _>>();
    Ok(Summary {
        output: opts.output.clone(),
        elapsed,
        cpus: cpus.len(),
        records,
        synthesized,
        lost,
        lost_unreported,
        skipped_bytes: skipped,
        resized,
        bytes,
        bpf,
        kernel_code: kernel.code,
        warnings,
        exit_code,
    })
}

/// The loop: starts the command, drains the rings until it is time to stop,
/// disables the events and drains what is left. Returns the command's exit
/// code and the records the BPF watch rings lost that no LOST record reported.
fn run(
    opts: &Options,
    started: Instant,
    events: &mut [Event],
    watcher: Option<Watcher>,
    sink: &mut Sink,
    bpf: &mut BpfStore,
) -> Result<(Option<i32>, u64)> {
    let mut child = match opts.command.split_first() {
        Some((program, args)) => Some(Command::new(program).args(args).spawn().map_err(|source| Error::Sys {
            call: format!("running {}", Path::new(program).display()),
            source,
            fix: String::new(),
        })?),
        None => None,
    };
    let mut exit_code = None;
    let deadline = opts.duration.map(|d| started + d);
    let mut pollfds: Vec<libc::pollfd> = events
        .iter()
        .map(|e| e.fd.as_raw_fd())
        .chain(watcher.as_ref().map(|w| w.wake.as_raw_fd()))
        .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
        .collect();
    let mut progress = Progress::new(opts.progress);
    let result = (|| -> Result<()> {
        loop {
            if let Some(w) = &watcher {
                w.woken();
                for watched in w.queue.try_iter() {
                    sink.take_watched(watched, bpf)?;
                }
            }
            round(events, sink, bpf)?;
            progress.show(started, sink, bpf);
            if let Some(c) = child.as_mut() {
                if let Some(status) = c.try_wait().map_err(Error::io("the command"))? {
                    exit_code = Some(code(status));
                    child = None;
                    return Ok(());
                }
            }
            let now = Instant::now();
            if sys::stop_requested() || deadline.is_some_and(|d| now >= d) {
                return Ok(());
            }
            let wait = deadline.map_or(TICK, |d| TICK.min(d - now));
            sys::poll(&mut pollfds, wait)?;
        }
    })();
    progress.finish();
    for e in events.iter() {
        e.disable()?;
    }
    let watch_unreported = match watcher {
        Some(w) => w.finish(|watched| sink.take_watched(watched, bpf))?,
        None => 0,
    };
    round(events, sink, bpf)?;
    if let Some(mut c) = child {
        // The recording stopped first (signal or time): the command goes too.
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        exit_code = Some(code(c.wait().map_err(Error::io("the command"))?));
    }
    result.map(|()| (exit_code, watch_unreported))
}

/// One pass over the side-band rings, closed by FINISHED_ROUND as perf
/// does, so readers may sort by time one round at a time, and flushed to
/// the file, so a recording that is killed is readable up to its last round.
fn round(events: &mut [Event], sink: &mut Sink, bpf: &mut BpfStore) -> Result<()> {
    for e in events.iter_mut() {
        let d = e.ring.drain(|r| sink.take(r))?;
        sink.any |= d.records > 0;
        if let Some(bad) = d.bad {
            sink.skipped += bad.available as u64;
        }
        for load in sink.loads.drain(..) {
            bpf.capture(load)?;
        }
    }
    if std::mem::take(&mut sink.any) {
        sink.writer.finish_round()?;
    }
    Ok(())
}

/// Where drained records go: the file, and the counts.
struct Sink {
    writer: Writer<BufWriter<File>>,
    /// Records by type (types past 63 are counted as 63).
    counts: [u64; 64],
    lost: u64,
    /// LOST records' counts by event id.
    reported: HashMap<u64, u64>,
    skipped: u64,
    resized: u64,
    /// Programs loaded, seen in the side-band data when there is no watch thread.
    loads: Vec<Load>,
    collect_loads: bool,
    /// Records written since the last FINISHED_ROUND.
    any: bool,
    /// A record cut to its true size.
    fixed: Vec<u8>,
}

impl Sink {
    fn take(&mut self, r: &[u8]) -> Result<()> {
        let ty = record_type(r);
        self.counts[(ty as usize).min(63)] += 1;
        match ty {
            rt::LOST => {
                self.lost += u64_at(r, 16);
                *self.reported.entry(u64_at(r, 8)).or_default() += u64_at(r, 16);
            }
            rt::BPF_EVENT if self.collect_loads => {
                if let Some((id, time)) = bpf_load(r) {
                    self.loads.push(Load::open(id, time));
                }
            }
            _ => {}
        }
        match true_size(r) {
            Some(size) if size < r.len() => {
                self.resized += 1;
                self.fixed.clear();
                self.fixed.extend_from_slice(&r[..size]);
                self.fixed[6..8].copy_from_slice(&(size as u16).to_le_bytes());
                self.writer.write_raw(&self.fixed)?;
            }
            _ => {
                self.writer.write_raw(r)?;
            }
        }
        Ok(())
    }

    /// A record from the BPF watch thread, and the program it announces.
    fn take_watched(&mut self, w: Watched, bpf: &mut BpfStore) -> Result<()> {
        self.take(&w.record)?;
        self.any = true;
        match w.load {
            Some(load) => bpf.capture(load),
            None => Ok(()),
        }
    }
}

/// The length of what the kernel wrote for a KSYMBOL, BPF_EVENT or
/// TEXT_POKE record. Linux's perf_event_{ksymbol,bpf,text_poke}_output add
/// the sample_id size to header.size for each event they write the record
/// to, and never take it back off: when several events on one CPU take
/// these records (poketrace beside `perf record`, say), each gets a
/// header.size grown by the trailers of the events served before it (the
/// newest first): its record, then stale ring bytes that a reader would take
/// for the trailer. The trailer written follows the body at once, so cutting
/// the record to this length repairs it.
fn true_size(r: &[u8]) -> Option<usize> {
    let body = match record_type(r) {
        rt::BPF_EVENT => 24,
        rt::KSYMBOL => 24 + (r.get(24..)?.iter().position(|&b| b == 0)? + 1).next_multiple_of(8),
        rt::TEXT_POKE => {
            let old = u16::from_le_bytes([*r.get(16)?, *r.get(17)?]) as usize;
            let new = u16::from_le_bytes([*r.get(18)?, *r.get(19)?]) as usize;
            16 + (4 + old + new).next_multiple_of(8)
        }
        _ => return None,
    };
    Some(body + SAMPLE_ID_SIZE)
}

fn record_type(r: &[u8]) -> u32 {
    u32::from_le_bytes([r[0], r[1], r[2], r[3]])
}

fn u64_at(r: &[u8], at: usize) -> u64 {
    r.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
}

fn code(status: ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Most bytes one ring may take: larger sizes are refused rather than wrapped.
const MAX_RING_BYTES: usize = 1 << 32;

/// What can be refused before anything is touched: the ring size, and a
/// command that cannot be run (so that the previous recording is not moved away).
fn check_options(opts: &Options, page_size: usize) -> Result<()> {
    let pages = opts.mmap_pages;
    if !pages.is_power_of_two() {
        return Err(Error::Environment(format!("--mmap-pages {pages} is not a power of two")));
    }
    if pages.checked_mul(page_size).is_none_or(|bytes| bytes > MAX_RING_BYTES) {
        return Err(Error::Environment(format!(
            "--mmap-pages {pages}: rings of more than {MAX_RING_BYTES} bytes ({} pages of {page_size} bytes) are refused",
            MAX_RING_BYTES / page_size
        )));
    }
    if let Some(program) = opts.command.first() {
        if find_program(Path::new(program)).is_none() {
            return Err(Error::Environment(format!("{}: no such executable (nothing was recorded or moved)", program.to_string_lossy())));
        }
    }
    Ok(())
}

/// `program` as the shell would find it: a path with a slash as it is, else in `$PATH`.
fn find_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.components().count() > 1 || program.is_absolute() {
        return executable(program).then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| executable(p))
}

/// The header features perf shows with `--header`.
fn features(online: usize, watch: bool) -> FeatureData {
    let u = sys::uname();
    // SAFETY: sysconf has no preconditions.
    let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(online as i64) as u32;
    let cpudesc = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| t.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()));
    FeatureData {
        hostname: Some(u.nodename),
        osrelease: Some(u.release),
        version: Some(format!("poketrace {}", env!("CARGO_PKG_VERSION"))),
        arch: Some(u.machine),
        nrcpus: Some(NrCpus { available: configured, online: online as u32 }),
        cpudesc,
        cmdline: Some(std::env::args().collect()),
        event_names: Some(if watch { vec!["dummy:HG".into(), "dummy:bpf".into()] } else { vec!["dummy:HG".into()] }),
        ..FeatureData::default()
    }
}

/// A one-line status on stderr while recording, when it is a terminal.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    last: Option<Instant>,
}

impl Progress {
    fn new(wanted: bool) -> Progress {
        let bar = (wanted && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}").unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            bar
        });
        Progress { bar, last: None }
    }

    fn show(&mut self, started: Instant, sink: &Sink, bpf: &BpfStore) {
        let Some(bar) = &self.bar else { return };
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_millis(200)) {
            return;
        }
        self.last = Some(Instant::now());
        let records: u64 = sink.counts.iter().sum();
        let secs = started.elapsed().as_secs_f64().max(0.1);
        bar.set_message(format!(
            "{records} records ({:.0}/s), {} text pokes, {} lost, {:.1} MiB, {} BPF images",
            records as f64 / secs,
            sink.counts[rt::TEXT_POKE as usize],
            sink.lost,
            sink.writer.position() as f64 / (1 << 20) as f64,
            bpf.stats.before + bpf.stats.during
        ));
        bar.tick();
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_cannot_work_are_refused_first() {
        let mut opts = Options::new("/nonexistent/out");
        assert!(check_options(&opts, 4096).is_ok());
        opts.mmap_pages = 4503599627370496; // 2^52 pages of 4 KiB wrap to 0 bytes
        let err = check_options(&opts, 4096).unwrap_err().to_string();
        assert!(err.contains("are refused") && err.contains("1048576 pages"), "{err}");
        opts.mmap_pages = 1 << 20;
        assert!(check_options(&opts, 4096).is_ok());
        opts.command = vec!["/nonexistent".into()];
        let err = check_options(&opts, 4096).unwrap_err().to_string();
        assert!(err.contains("/nonexistent: no such executable"), "{err}");
        opts.command = vec!["poketrace-no-such-program".into()];
        assert!(check_options(&opts, 4096).is_err());
        opts.command = vec!["sh".into(), "-c".into(), "true".into()];
        assert!(check_options(&opts, 4096).is_ok());
    }

    #[test]
    fn attr_asks_for_every_side_band_record() {
        let a = sideband_attr(1 << 20, true);
        for f in [flag::TEXT_POKE, flag::KSYMBOL, flag::BPF_EVENT, flag::MMAP2, flag::COMM, flag::TASK, flag::CONTEXT_SWITCH] {
            assert!(a.has(f));
        }
        assert!(!sideband_attr(1 << 20, false).has(flag::BPF_EVENT));
        assert!(watch_attr().has(flag::BPF_EVENT));
        assert_eq!(a.sample_id_size(), SAMPLE_ID_SIZE);
        assert_eq!(watch_attr().sample_id_size(), SAMPLE_ID_SIZE);
        assert_eq!(a.to_bytes().len(), 128);
    }

    /// A record as the kernel writes it for the second of two events:
    /// header.size one trailer too long, stale bytes at the end.
    fn grown(ty: u32, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&ty.to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&((8 + body.len() + 2 * SAMPLE_ID_SIZE) as u16).to_le_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(&[7u8; SAMPLE_ID_SIZE]); // the trailer written
        r.extend_from_slice(&[0xeeu8; SAMPLE_ID_SIZE]); // stale
        r
    }

    #[test]
    fn sizes_the_kernel_grew_are_cut_back() {
        let r = grown(rt::BPF_EVENT, &[1, 0, 0, 0, 98, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(true_size(&r), Some(56));
        let mut k = vec![0u8; 16];
        k.extend_from_slice(b"bpf_prog_59f4a931744dcdc6_poketrace_test\0\0\0\0\0\0\0");
        assert_eq!(true_size(&grown(rt::KSYMBOL, &k)), Some(8 + 16 + 48 + 32));
        let mut p = vec![0u8; 8];
        p.extend_from_slice(&5u16.to_le_bytes());
        p.extend_from_slice(&5u16.to_le_bytes());
        p.extend_from_slice(&[0x0f, 0x1f, 0x44, 0, 0, 0xe9, 1, 2, 3, 4, 0, 0]);
        assert_eq!(true_size(&grown(rt::TEXT_POKE, &p)), Some(8 + 8 + 16 + 32));
        // a record of the right size stays as it is
        let r = &r[..56];
        assert_eq!(true_size(r), Some(56));
        assert_eq!(true_size(&grown(rt::COMM, &[0; 16])), None);
    }
}
