//! Shared by `tests/libipt_flow.rs` and the flow benches: a simulated run's
//! per-CPU Intel PT and code, decoded by our flow decoder and by libipt's
//! block decoder (through `libipt-sys`) into events that compare one to one;
//! the benches' counting decodes and timing.
//!
//! Included with `#[path]` (not through `common/mod.rs`), so each user gets
//! only this file.
#![allow(dead_code)] // the test and the benchmark use different parts
#![allow(non_upper_case_globals)] // libipt's constants in patterns

use std::ffi::{c_int, c_void, CString};
use std::mem::{size_of, zeroed};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use codeimage::{BaseImage, CodeTimeline, PokeEvents, TimelineBuilder};
use intel_pt::flow::{CodeSource, FlowConfig, FlowDecoder, FlowEvent, FlowSink, InsnBlock, Recovery, TimeConv};
use intel_pt::parallel::ParallelFlow;
use libipt_sys::*;
use perfdata::auxtrace::IntelPtInfo;
use perfdata::{PerfFile, RecordBody};

/// A file range mapped at an address: a PT_LOAD segment of
/// `kcore_dir/kcore`, or an executable MMAP2 of a user program. libipt is
/// given these (file sections); ours reads the same through `codeimage`.
#[derive(Clone, Debug)]
pub struct Section {
    pub path: PathBuf,
    pub offset: u64,
    pub size: u64,
    pub vaddr: u64,
}

/// A simulated run, loaded as both decoders need it.
pub struct Run {
    pub dir: PathBuf,
    /// Each CPU's AUX data, concatenated in file order (as `sim::check` does).
    pub aux: Vec<Vec<u8>>,
    pub cfg: FlowConfig,
    /// The code before any change (kcore, user mappings): the static
    /// image both decoders walk.
    pub bare: CodeTimeline,
    /// The same and every TEXT_POKE (with `PokeEvents` as `sim::check` picks them).
    pub full: CodeTimeline,
    pub sections: Vec<Section>,
}

impl Run {
    pub fn trace_bytes(&self) -> usize {
        self.aux.iter().map(Vec::len).sum()
    }
}

/// Runs the simulator into `CARGO_TARGET_TMPDIR/libipt-flow/NAME` (same seed,
/// same bytes) and loads the result: the generated kernel, or with `elf`
/// random walks through that file's real code (`simulate --elf`).
pub fn simulate(name: &str, cfg: &sim::SimConfig, elf: Option<&Path>) -> (sim::Summary, Run) {
    // (Tests and benches have a target tmpdir; the example that includes this file does not simulate.)
    let Some(tmp) = option_env!("CARGO_TARGET_TMPDIR") else { panic!("simulate: only tests and benches have a target tmpdir") };
    let dir = Path::new(tmp).join("libipt-flow").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = match elf {
        None => sim::simulate(cfg, &dir),
        Some(elf) => sim::simulate_elf(cfg, elf, &dir),
    }
    .expect("simulate");
    (summary, load(&dir))
}

/// Reads a perf.data directory written by the simulator: what `sim::check` reads.
pub fn load(dir: &Path) -> Run {
    let summary = sim::read_summary(dir).expect("summary");
    let file = PerfFile::open(dir).expect("perf.data");
    let mut info = None;
    let mut aux: Vec<Vec<u8>> = vec![Vec::new(); summary.config.cpus as usize];
    for r in file.records() {
        match r.expect("record").body {
            RecordBody::AuxtraceInfo(i) => info = Some(IntelPtInfo::parse(&i).expect("Intel PT info")),
            RecordBody::Auxtrace(a) => aux[a.cpu as usize].extend_from_slice(a.data),
            _ => {}
        }
    }
    let info = info.expect("AUXTRACE_INFO");
    let attr = file.attrs().iter().find(|a| a.attr.type_ as u64 == info.pmu_type).expect("the PT attr");
    let cfg = FlowConfig {
        time: TimeConv { shift: info.time_shift as u32, mult: info.time_mult, zero: info.time_zero },
        noretcomp: attr.attr.config & info.noretcomp_bit != 0,
        idioms: isa::KernelIdioms::default(),
        max_walk: 1 << 20,
        trial_insns: 256,
    };
    let events = if summary.config.protocol == sim::Protocol::PrePost { PokeEvents::Pairs } else { PokeEvents::Single };
    let full = codeimage::from_perf_data_with(&file, BaseImage::new(), events).expect("timeline").timeline;
    let mut base = BaseImage::new();
    codeimage::add_base(&file, &mut base).expect("base code");
    let bare = TimelineBuilder::new(base).build();
    let mut sections = Vec::new();
    if let Some(kcore) = file.kcore_dir().map(|d| d.join("kcore")).filter(|k| k.is_file()) {
        for (offset, size, vaddr) in pt_load_segments(&std::fs::read(&kcore).expect("read kcore")) {
            sections.push(Section { path: kcore.clone(), offset, size, vaddr });
        }
    }
    for r in file.records() {
        if let RecordBody::Mmap2(m) = r.expect("record").body {
            if m.prot & 4 != 0 && m.filename.starts_with(b"/") {
                let path = PathBuf::from(std::str::from_utf8(m.filename).expect("utf-8 file name"));
                sections.push(Section { path, offset: m.pgoff, size: m.len, vaddr: m.addr });
            }
        }
    }
    Run { dir: dir.to_path_buf(), aux, cfg, bare, full, sections }
}

/// The PT_LOAD segments `(file offset, size, vaddr)` of a little-endian
/// ELF64 file (kcore), read by hand so that libipt is given the file ranges,
/// not our reading of them.
fn pt_load_segments(elf: &[u8]) -> Vec<(u64, u64, u64)> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "ELF64 little-endian");
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&ph| u32_at(ph) == 1 && u64_at(ph + 32) != 0)
        .map(|ph| (u64_at(ph + 8), u64_at(ph + 32), u64_at(ph + 16)))
        .collect()
}

/// What either decoder reports, reduced to what both can say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ev {
    /// An executed instruction.
    Insn(u64),
    /// An asynchronous transfer (FUP + TIP) before the instruction at `from`:
    /// our `FlowEvent::Trap`, libipt's `ptev_async_branch`.
    Trap { from: u64, to: u64 },
    /// Tracing stopped before `at`: our `FlowEvent::End`, libipt's
    /// `ptev_async_disabled` (`Some`) or `ptev_disabled` (`None`).
    End(Option<u64>),
    /// Lost trace (OVF).
    Overflow,
    /// A decode error at a trace offset: ours names a `FlowErrorKind`,
    /// libipt a `pt_error_code` (see [`Ev::key`]).
    Error { offset: u64, what: String },
}

impl Ev {
    /// The event without an error's wording, which differs between the
    /// decoders: where errors are, not what they are called.
    pub fn key(&self) -> Ev {
        match self {
            Ev::Error { offset, .. } => Ev::Error { offset: *offset, what: String::new() },
            e => e.clone(),
        }
    }
}

/// Our flow decoder over `code`, one CPU's trace.
pub fn ours<C: CodeSource>(trace: &[u8], code: &C, cfg: &FlowConfig) -> Vec<Ev> {
    ours_with(trace, code, cfg, Recovery::default())
}

/// The same, resuming after an error as `recovery` says.
pub fn ours_with<C: CodeSource>(trace: &[u8], code: &C, cfg: &FlowConfig, recovery: Recovery) -> Vec<Ev> {
    let mut out = Vec::new();
    FlowDecoder::new(trace, code, cfg.clone()).with_recovery(recovery).run(|e| {
        out.push(match e {
            FlowEvent::Insn { ip, .. } => Ev::Insn(ip),
            FlowEvent::Trap { from, to, .. } => Ev::Trap { from, to },
            FlowEvent::End { at, .. } => Ev::End(at),
            FlowEvent::Error { kind: intel_pt::flow::FlowErrorKind::Overflow, .. } => Ev::Overflow,
            FlowEvent::Error { kind, offset, .. } => Ev::Error { offset: offset as u64, what: format!("{kind:?}") },
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => unreachable!("state events are off"),
        })
    });
    out
}

/// A sink that takes blocks whole and expands them, checking each against
/// what it says of itself (count, first and last IP, times), to compare
/// with events; and how many blocks came.
#[derive(Default)]
pub struct Blocks {
    pub events: Vec<FlowEvent>,
    pub blocks: usize,
}

impl FlowSink for Blocks {
    fn event(&mut self, e: FlowEvent) {
        self.events.push(e);
    }

    fn block(&mut self, b: InsnBlock<'_>) {
        let start = self.events.len();
        b.for_each_insn(|e| self.events.push(e));
        let got = &self.events[start..];
        assert_eq!(got.len(), b.len());
        assert!(matches!(got[0], FlowEvent::Insn { ip, .. } if ip == b.ip), "block at {:#x}: first {:x?}", b.ip, got[0]);
        assert!(
            matches!(got[got.len() - 1], FlowEvent::Insn { ip, len, class, .. } if ip == b.last_ip && len == b.last().len && class == b.last().class),
            "block at {:#x}: last at {:#x}, expanded {:x?}",
            b.ip,
            b.last_ip,
            got[got.len() - 1]
        );
        let (last, before) = got.split_last().expect("a block has its last instruction");
        assert!(before.iter().all(|e| matches!(e, FlowEvent::Insn { lo, hi, uncertain: false, .. } if *lo == b.lo && *hi == b.hi)));
        assert!(matches!(last, FlowEvent::Insn { lo, hi, uncertain: false, .. } if *lo == b.last_lo && *hi == b.hi && b.lo <= b.last_lo));
        // Its inner jumps and calls, each to the instruction after it.
        let inner: Vec<(u64, u64)> = got
            .windows(2)
            .filter_map(|w| match (w[0], w[1]) {
                (FlowEvent::Insn { ip, class: isa::BranchClass::DirectJump | isa::BranchClass::DirectCall, .. }, FlowEvent::Insn { ip: to, .. }) => {
                    Some((ip, to))
                }
                _ => None,
            })
            .collect();
        let mut given = Vec::new();
        b.for_each_inner_branch(|from, to| given.push((from, to)));
        assert_eq!(given, inner, "block at {:#x}", b.ip);
        self.blocks += 1;
    }
}

/// How libipt is given the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// `pt_image_add_file` on the run's [`Section`]s: file sections, which
    /// carry libipt's block cache.
    File,
    /// `pt_iscache_add_file` + `pt_image_add_cached`: the same sections
    /// through an image section cache (what perf-like tools use).
    Cached,
    /// `pt_image_set_callback` reading our `CodeTimeline` at time 0: no
    /// section, so no block cache.
    Callback,
}

/// A libipt image over a run's static code.
pub struct LibiptImage<'a> {
    image: *mut pt_image,
    iscache: *mut pt_image_section_cache,
    _code: std::marker::PhantomData<&'a CodeTimeline>,
}

impl<'a> LibiptImage<'a> {
    pub fn new(run: &'a Run, kind: ImageKind) -> LibiptImage<'a> {
        let paths: Vec<CString> = run.sections.iter().map(|s| CString::new(s.path.to_str().expect("utf-8 path")).unwrap()).collect();
        // SAFETY: plain libipt calls; `paths` live across them (libipt copies
        // file names), and the callback context is `run.bare`, which outlives
        // the image (`'a`).
        unsafe {
            let image = pt_image_alloc(std::ptr::null());
            assert!(!image.is_null());
            let mut iscache = std::ptr::null_mut();
            match kind {
                ImageKind::File => {
                    for (s, path) in run.sections.iter().zip(&paths) {
                        assert_eq!(pt_image_add_file(image, path.as_ptr(), s.offset, s.size, std::ptr::null(), s.vaddr), 0);
                    }
                }
                ImageKind::Cached => {
                    iscache = pt_iscache_alloc(std::ptr::null());
                    assert!(!iscache.is_null());
                    for (s, path) in run.sections.iter().zip(&paths) {
                        let isid = pt_iscache_add_file(iscache, path.as_ptr(), s.offset, s.size, s.vaddr);
                        assert!(isid > 0, "pt_iscache_add_file: {isid}");
                        assert_eq!(pt_image_add_cached(image, iscache, isid, std::ptr::null()), 0);
                    }
                }
                ImageKind::Callback => {
                    let ctx = &run.bare as *const CodeTimeline as *mut c_void;
                    assert_eq!(pt_image_set_callback(image, Some(read_memory), ctx), 0);
                }
            }
            LibiptImage { image, iscache, _code: std::marker::PhantomData }
        }
    }
}

impl Drop for LibiptImage<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once; no decoder outlives `self`
        // (decoders live inside `libipt_decode`).
        unsafe {
            pt_image_free(self.image);
            if !self.iscache.is_null() {
                pt_iscache_free(self.iscache);
            }
        }
    }
}

/// libipt's memory callback over a `CodeTimeline` (the static code: time 0).
unsafe extern "C" fn read_memory(buffer: *mut u8, size: usize, _asid: *const pt_asid, ip: u64, ctx: *mut c_void) -> c_int {
    // SAFETY: `ctx` is the `&CodeTimeline` given in `LibiptImage::new`, alive
    // as long as the image; libipt passes a buffer of `size` bytes.
    let (code, buf) = unsafe { (&*(ctx as *const CodeTimeline), std::slice::from_raw_parts_mut(buffer, size)) };
    match code.read_into(ip, buf, 0).mapped {
        0 => -(pt_error_code_pte_nomap as c_int),
        n => n as c_int,
    }
}

/// The CPU libipt is told the trace came from (family 6 model 0x55,
/// Skylake-SP / Cascade Lake); libipt applies the workarounds of its errata
/// (`pt_cpu_errata`: BDM70, SKL014, SKD022, SKZ84).
pub const CPU: pt_cpu = pt_cpu { vendor: pt_cpu_vendor_pcv_intel, family: 6, model: 0x55, stepping: 7 };

/// The simulator starts each CPU's trace with a PSB+ that holds a FUP (the
/// SDM's "tracing is on, at this IP") and then a TIP.PGE at the same IP
/// ("tracing turns on"). Hardware sends TIP.PGE only when tracing was off,
/// and then its PSB+ has no FUP. libipt rejects the pair: without errata
/// the TIP.PGE is "unexpected packet context"; with BDM70 (which matches
/// exactly this pattern) it drops the FUP and its last-IP update, so the
/// 16-bit compressed TIP.PGE resolves against 0 ("no memory mapped").
/// Either way it loses the first PSB segment; ours and perf accept it.
///
/// Returns the trace with that TIP.PGE turned into PADs (same offsets), the
/// stream hardware would send for a trace that starts enabled, and the
/// TIP.PGE's offset. Any other stream is returned unchanged.
pub fn without_start_pge(trace: &[u8]) -> (Vec<u8>, Option<usize>) {
    use intel_pt::{Packet, PacketDecoder};
    let mut out = trace.to_vec();
    let mut dec = PacketDecoder::new(trace);
    let mut fup = None;
    while let Ok(Some((offset, p))) = dec.next_packet() {
        match p {
            Packet::Psb if offset == 0 => {}
            Packet::Tsc(_) | Packet::ModeExec { .. } | Packet::PsbEnd => {}
            Packet::Fup(ip) => fup = ip.ip,
            Packet::TipPge(ip) if fup.is_some() && ip.ip == fup => {
                out[offset..dec.offset()].fill(0);
                return (out, Some(offset));
            }
            _ => break,
        }
    }
    (out, None)
}

/// What libipt's block decoder hands out, in order.
pub enum Out<'b> {
    Block(&'b pt_block),
    Event(&'b pt_event),
    /// A decode error at this trace offset; libipt then syncs forward.
    Error {
        offset: u64,
        code: c_int,
    },
}

/// libipt's block decoder over one CPU's trace, the loop of libipt's `ptxed`:
/// sync forward; drain pending events before each `pt_blk_next`; on an
/// error, report it (with any instructions of the partial block first) and
/// sync forward to the next PSB.
#[inline(always)]
pub fn libipt_decode(trace: &[u8], image: &LibiptImage<'_>, cpu: pt_cpu, mut out: impl FnMut(Out<'_>)) {
    if trace.is_empty() {
        return;
    }
    // SAFETY: the config points into `trace` and the image outlives the
    // decoder, which is freed before returning; `pt_block`/`pt_event` are
    // plain data.
    unsafe {
        let mut config: pt_config = zeroed();
        config.size = size_of::<pt_config>();
        config.begin = trace.as_ptr() as *mut u8;
        config.end = trace.as_ptr().add(trace.len()) as *mut u8;
        config.cpu = cpu;
        assert_eq!(pt_cpu_errata(&mut config.errata, &config.cpu), 0);
        let dec = pt_blk_alloc_decoder(&config);
        assert!(!dec.is_null());
        assert_eq!(pt_blk_set_image(dec, image.image), 0);
        let eos = -(pt_error_code_pte_eos as c_int);
        let mut block: pt_block = zeroed();
        let mut event: pt_event = zeroed();
        let mut status = pt_blk_sync_forward(dec);
        'sync: loop {
            if status < 0 {
                if status == eos {
                    break;
                }
                let mut offset = 0;
                pt_blk_get_offset(dec, &mut offset);
                out(Out::Error { offset, code: status });
                status = pt_blk_sync_forward(dec);
                continue;
            }
            loop {
                while status & pt_status_flag_pts_event_pending as c_int != 0 {
                    status = pt_blk_event(dec, &mut event, size_of::<pt_event>());
                    if status < 0 {
                        continue 'sync;
                    }
                    out(Out::Event(&event));
                }
                block.ninsn = 0;
                status = pt_blk_next(dec, &mut block, size_of::<pt_block>());
                if block.ninsn > 0 {
                    out(Out::Block(&block));
                }
                if status < 0 {
                    continue 'sync;
                }
            }
        }
        pt_blk_free_decoder(dec);
    }
}

/// libipt's instructions and errors over one CPU's trace (the benchmark's
/// loop: what a block decoder's user gets without expanding blocks).
#[inline(always)]
pub fn libipt_count(trace: &[u8], image: &LibiptImage<'_>) -> (u64, u64) {
    let (mut n, mut errors) = (0u64, 0u64);
    libipt_decode(trace, image, CPU, |o| match o {
        Out::Block(b) => n += b.ninsn as u64,
        Out::Error { .. } => errors += 1,
        Out::Event(_) => {}
    });
    (n, errors)
}

/// libipt's blocks expanded into instructions, and its events as [`Ev`]. A
/// block is a run of instructions that needs no trace: it follows direct
/// jumps and calls. Expanding walks the same static bytes libipt read with
/// iced-x86 (not our isa crate), and each block must end exactly at its
/// `end_ip`.
pub fn libipt(trace: &[u8], image: &LibiptImage<'_>, cpu: pt_cpu, code: &CodeTimeline) -> Vec<Ev> {
    let mut evs = Vec::new();
    libipt_decode(trace, image, cpu, |o| match o {
        Out::Block(b) => {
            let mut ip = b.ip;
            for i in 0..b.ninsn {
                evs.push(Ev::Insn(ip));
                if i + 1 < b.ninsn {
                    ip = next_in_block(code, ip);
                }
            }
            assert_eq!(ip, b.end_ip, "block at {:#x}: {} instructions do not end at {:#x}", b.ip, b.ninsn, b.end_ip);
        }
        Out::Event(e) => {
            // Each union member read below is the one `type_` names.
            let v = &e.variant;
            let status_update = e.status_update() != 0;
            match e.type_ {
                pt_event_type_ptev_async_branch => {
                    let (from, to) = unsafe { (v.async_branch.from, v.async_branch.to) };
                    evs.push(Ev::Trap { from, to });
                }
                pt_event_type_ptev_async_disabled => evs.push(Ev::End(Some(unsafe { v.async_disabled.at }))),
                pt_event_type_ptev_disabled if !status_update => evs.push(Ev::End(None)),
                pt_event_type_ptev_overflow => evs.push(Ev::Overflow),
                // Tracing (re)starts: ours has no event for it. Status
                // updates (PSB+) and mode/timing events carry no flow.
                pt_event_type_ptev_enabled | pt_event_type_ptev_exec_mode | pt_event_type_ptev_cbr | pt_event_type_ptev_tick => {}
                _ if status_update => {}
                t => evs.push(Ev::Error { offset: u64::MAX, what: format!("unexpected libipt event type {t}") }),
            }
        }
        Out::Error { offset, code } => evs.push(Ev::Error { offset, what: errstr(code) }),
    });
    evs
}

/// libipt's name for an error code.
pub fn errstr(code: c_int) -> String {
    // SAFETY: pt_errstr returns a static C string for any code.
    unsafe { std::ffi::CStr::from_ptr(pt_errstr(code.unsigned_abs() as pt_error_code)) }.to_string_lossy().into_owned()
}

/// Where execution goes after the instruction at `ip` inside a block, by
/// iced-x86: the next instruction, or a direct jump's or call's target.
fn next_in_block(code: &CodeTimeline, ip: u64) -> u64 {
    use iced_x86::FlowControl;
    let mut buf = [0u8; 16];
    let n = code.read_into(ip, &mut buf, 0).mapped;
    let mut d = iced_x86::Decoder::with_ip(64, &buf[..n], ip, iced_x86::DecoderOptions::NONE);
    let insn = d.decode();
    assert!(!insn.is_invalid(), "iced-x86 cannot decode at {ip:#x}: {:02x?}", &buf[..n]);
    match insn.flow_control() {
        FlowControl::UnconditionalBranch | FlowControl::Call if insn.near_branch_target() != 0 => insn.near_branch_target(),
        FlowControl::Next => insn.next_ip(),
        f => panic!("{f:?} at {ip:#x} inside a libipt block"),
    }
}

/// Instructions and errors. As a sink it takes cached blocks whole (as
/// libipt's block decoder hands out blocks) and counts their instructions.
#[derive(Default)]
pub struct Count {
    pub insns: u64,
    pub errors: u64,
}

impl FlowSink for Count {
    fn event(&mut self, e: FlowEvent) {
        match e {
            FlowEvent::Insn { .. } => self.insns += 1,
            FlowEvent::Error { .. } => self.errors += 1,
            _ => {}
        }
    }

    fn block(&mut self, b: InsnBlock<'_>) {
        self.insns += b.len() as u64;
    }
}

/// Every trace in turn on `dec` (whose block cache may be warm), blocks
/// taken whole.
pub fn blocks_on<'a, C: CodeSource>(dec: &mut FlowDecoder<'a, C>, traces: &'a [Vec<u8>]) -> (u64, u64) {
    let mut sink = Count::default();
    for t in traces {
        dec.reset(t);
        dec.run_with(&mut sink);
    }
    (sink.insns, sink.errors)
}

/// Ours with each CPU's trace cut at its PSBs, the segments decoded on
/// `threads` threads (a pool of its own) into a counting sink each
/// (`run_segments`), the counts added in trace order: nothing recorded
/// and replayed.
pub fn ours_segments<C: CodeSource + Sync>(traces: &[Vec<u8>], code: &C, cfg: &FlowConfig, threads: usize) -> (u64, u64) {
    let par = ParallelFlow::new(FlowDecoder::new(&[], code, cfg.clone()));
    let mut total = Count::default();
    pool(threads).install(|| {
        for t in traces {
            par.run_segments(t, Count::default, |c| {
                total.insns += c.insns;
                total.errors += c.errors;
            });
        }
    });
    (total.insns, total.errors)
}

/// A rayon pool of 1 or 2 threads, built once.
pub fn pool(threads: usize) -> &'static rayon::ThreadPool {
    static POOLS: [OnceLock<rayon::ThreadPool>; 2] = [OnceLock::new(), OnceLock::new()];
    POOLS[threads - 1].get_or_init(|| rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool"))
}

/// The fastest of `reps` timed runs of `run` (at least one).
pub fn fastest(reps: usize, run: &mut dyn FnMut()) -> std::time::Duration {
    (0..reps.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            run();
            t.elapsed()
        })
        .min()
        .expect("one run at least")
}
