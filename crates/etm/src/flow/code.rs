//! Code access for the flow decoder: the [`CodeSource`] trait, its
//! implementation over a [`codeimage::CodeTimeline`], an OpenCSD snapshot's
//! memory dumps as a timeline, and the walk from an address to the next P0
//! instruction (with a cache of walks already done).

use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};
use isa::BranchClass;

use super::{InstrSubtype, InstrType};
use crate::snapshot::Snapshot;

/// The trace's time for code lookups: the latest ETMv4 timestamp value seen
/// on the source (0 before the first). It is the trace unit's own clock, not
/// perf time: a source that keys code by another clock converts it.
pub type Time = u64;

/// What a [`CodeSource`] filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// Bytes filled from the start of the buffer: fewer than asked where
    /// mapped memory ends, 0 when the first byte is unmapped.
    pub len: usize,
    /// The times `[valid_from, valid_to)` over which these bytes stay the
    /// same (a cache of decoded code is good for that window).
    pub valid_from: Time,
    pub valid_to: Time,
    /// Some of these bytes have several possible contents at this time (a
    /// PRE/POST window); the buffer holds the older one.
    pub uncertain: bool,
}

/// What a [`CodeSource`] found over a window of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// These bytes (the length filled) hold over the whole window.
    Exact(usize),
    /// The content changes inside the window, or is uncertain: this is
    /// candidate `which` of `count`, the oldest first (`filled` 0: unmapped in that one).
    Candidate { filled: usize, count: usize },
    /// Nothing mapped (or no candidate `which`).
    Unmapped,
}

/// Code bytes at an address as they were at a time. The decoder asks with
/// the latest timestamp seen, and over windows between timestamps (when
/// given them) for the contents inside; an image without history (a
/// snapshot) answers the same for every time.
pub trait CodeSource {
    fn fetch(&self, addr: u64, t: Time, buf: &mut [u8]) -> Fetched;

    /// Candidate `which` of the contents the bytes at `addr` have at some
    /// moment of `lo..=hi` (the times between two timestamps), the oldest
    /// first. Asked only where [`CodeSource::fetch`] at `lo` says the bytes
    /// change before `hi` or are uncertain. A source without history has one
    /// content: the bytes at `lo`.
    fn fetch_during(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8]) -> Fetch {
        let _ = hi;
        let f = self.fetch(addr, lo, buf);
        if f.len == 0 || which > 0 {
            Fetch::Unmapped
        } else {
            Fetch::Exact(f.len)
        }
    }
}

impl<T: CodeSource + ?Sized> CodeSource for &T {
    #[inline]
    fn fetch(&self, addr: u64, t: Time, buf: &mut [u8]) -> Fetched {
        (**self).fetch(addr, t, buf)
    }

    fn fetch_during(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8]) -> Fetch {
        (**self).fetch_during(addr, lo, hi, which, buf)
    }
}

/// The time-versioned code image (base code plus TEXT_POKE history). Where
/// a change makes the content at `t` uncertain, the older bytes are given.
impl CodeSource for CodeTimeline {
    #[inline]
    fn fetch(&self, addr: u64, t: Time, buf: &mut [u8]) -> Fetched {
        let info = self.read_into(addr, buf, t);
        Fetched { len: info.mapped, valid_from: info.valid.start, valid_to: info.valid.end, uncertain: info.uncertain }
    }

    /// Every distinct content of `lo..=hi` (each side of an uncertain span counts).
    fn fetch_during(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8]) -> Fetch {
        let mut all: Vec<Vec<u8>> = Vec::new();
        for (_, r) in self.read_during(addr, buf.len(), lo, hi) {
            let more = match r {
                codeimage::Read::Exact(b) => vec![b],
                codeimage::Read::Uncertain(c) => c,
                codeimage::Read::Unmapped { .. } => vec![Vec::new()],
            };
            for b in more {
                if !all.contains(&b) {
                    all.push(b);
                }
            }
        }
        match all.get(which) {
            Some(b) if b.is_empty() && all.len() == 1 => Fetch::Unmapped,
            Some(b) => {
                buf[..b.len()].copy_from_slice(b);
                if all.len() == 1 {
                    Fetch::Exact(b.len())
                } else {
                    Fetch::Candidate { filled: b.len(), count: all.len() }
                }
            }
            None => Fetch::Unmapped,
        }
    }
}

/// The memory dumps of every core of a snapshot as a code timeline (no
/// pokes), and a note for each dump that could not be used as described: a
/// missing file is skipped (OpenCSD skips it too), a length past the end of
/// the file is cut to the file. Memory spaces (`space=`) are not told apart:
/// one address space holds all dumps, the first dump wins where two overlap.
pub fn snapshot_code(snap: &Snapshot) -> (CodeTimeline, Vec<String>) {
    let mut base = BaseImage::new();
    let mut notes = Vec::new();
    let mut seen = Vec::new();
    for dev in &snap.devices {
        for d in &dev.dumps {
            if seen.contains(&(&d.file, d.address)) {
                continue;
            }
            seen.push((&d.file, d.address));
            let size = match std::fs::metadata(&d.file) {
                Ok(m) => m.len(),
                Err(e) => {
                    notes.push(format!("{}: memory dump {} at {:#x} skipped: {e}", dev.path.display(), d.file.display(), d.address));
                    continue;
                }
            };
            let offset = d.offset.unwrap_or(0);
            let avail = size.saturating_sub(offset);
            let len = match d.length {
                Some(l) if l > avail => {
                    notes.push(format!(
                        "{}: memory dump {} at {:#x} says length {l:#x} but the file has {avail:#x} bytes from offset {offset:#x}: using those",
                        dev.path.display(),
                        d.file.display(),
                        d.address
                    ));
                    avail
                }
                Some(l) => l,
                None => avail,
            };
            // The image ends below 2^64: a dump running past the top of the address space is cut.
            let room = u64::MAX - d.address;
            let len = if len > room {
                notes.push(format!(
                    "{}: memory dump {} at {:#x} runs past the top of the address space: cut to {room:#x} bytes",
                    dev.path.display(),
                    d.file.display(),
                    d.address
                ));
                room
            } else {
                len
            };
            if len == 0 {
                continue;
            }
            if let Err(e) = base.add_raw_file(&d.file, offset, Some(len), d.address) {
                notes.push(format!("{}: memory dump skipped: {e}", dev.path.display()));
            }
        }
    }
    (TimelineBuilder::new(base).build(), notes)
}

/// One decoded instruction, as far as the flow decoder cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Insn {
    pub ty: InstrType,
    pub sub: InstrSubtype,
    pub cond: bool,
    /// Target of a direct branch.
    pub target: u64,
}

const OTHER: Insn = Insn { ty: InstrType::Other, sub: InstrSubtype::None, cond: false, target: 0 };

/// The P0 class of an A64 instruction word: branches (ERET included; SVC,
/// HVC, SMC and traps are not P0: exception packets trace them), ISB, and
/// WFI/WFE when `wfx_p0` (TRCIDR2.WFXMODE).
#[inline]
pub(crate) fn classify(addr: u64, word: u32, wfx_p0: bool) -> Insn {
    let i = isa::classify_aarch64(addr, word);
    let (ty, sub, cond) = match i.class {
        BranchClass::DirectJump => (InstrType::Branch, InstrSubtype::None, false),
        BranchClass::DirectCall => (InstrType::Branch, InstrSubtype::Link, false),
        BranchClass::CondBranch => (InstrType::Branch, InstrSubtype::None, true),
        BranchClass::IndirectJump => (InstrType::IndirectBranch, InstrSubtype::None, false),
        BranchClass::IndirectCall => (InstrType::IndirectBranch, InstrSubtype::Link, false),
        BranchClass::Return => (InstrType::IndirectBranch, InstrSubtype::Ret, false),
        // ERET, ERETAA, ERETAB; not SVC/HVC/SMC/DCPS/DRPS.
        BranchClass::FarTransfer if matches!(word, 0xd69f_03e0 | 0xd69f_0bff | 0xd69f_0fff) => (InstrType::IndirectBranch, InstrSubtype::Eret, false),
        // WFE, WFI (HINT #2, #3).
        BranchClass::Nop if wfx_p0 && word & 0xffff_ffdf == 0xd503_205f => (InstrType::WfiWfe, InstrSubtype::None, false),
        // ISB with any option.
        BranchClass::None if word & 0xffff_f0ff == 0xd503_30df => (InstrType::Isb, InstrSubtype::None, false),
        _ => return OTHER,
    };
    Insn { ty, sub, cond, target: i.target.unwrap_or(0) }
}

/// The result of walking code from an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Walk {
    /// Address after the last instruction walked (the NACC address when `nacc`).
    pub end: u64,
    pub num_i: u32,
    /// The last instruction walked (OTHER when none).
    pub last: Insn,
    /// The walk stopped at code not in the image.
    pub nacc: bool,
}

/// Longest walk without a P0 instruction: longer is reported as memory not
/// accessible at the point reached (16 MiB of code with no branch is not code).
const MAX_WALK: u32 = 1 << 22;

/// Bytes asked from the code source at a time.
const CHUNK: usize = 64;

/// The times code is read for: from `lo`, the latest timestamp, to `hi`,
/// the next one (the code ran at some moment of `lo..=hi`). `hi == lo`
/// reads at one time, as for a trace whose next timestamp is not known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub lo: Time,
    pub hi: Time,
}

/// Longest script of choices a [`Picker`] replays.
pub(crate) const MAX_CHOICES: usize = 8;

/// Chooses among the candidate instructions a walk meets where the code
/// changes inside its window: replays a script of choices, then takes
/// candidate 0 (the oldest content) and notes how many there were, so the
/// caller can try the others.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Picker {
    script: [u8; MAX_CHOICES],
    len: u8,
    /// Choices made so far.
    pub made: u32,
    /// The number of candidates at the first choice past the script.
    pub fresh: Option<u8>,
    /// The address of that choice.
    pub fresh_addr: u64,
}

impl Picker {
    /// A picker replaying `script` (at most [`MAX_CHOICES`] long).
    pub fn with(script: &[u8]) -> Picker {
        let mut p = Picker::default();
        let n = script.len().min(MAX_CHOICES);
        p.script[..n].copy_from_slice(&script[..n]);
        p.len = n as u8;
        p
    }

    fn choose(&mut self, n: usize, addr: u64) -> usize {
        let at = self.made as usize;
        self.made = self.made.saturating_add(1);
        if at < self.len as usize {
            return (self.script[at] as usize).min(n - 1);
        }
        if at == self.len as usize && self.fresh.is_none() {
            self.fresh = Some(n as u8);
            self.fresh_addr = addr;
        }
        0
    }
}

/// Most candidate instructions kept for one word.
const MAX_CANDIDATES: usize = 4;

/// The distinct instructions the word at `addr` is at some moment of the
/// window, oldest first (None: unmapped then), and how many.
fn word_candidates(code: &impl CodeSource, addr: u64, win: Window, wfx_p0: bool) -> ([Option<Insn>; MAX_CANDIDATES], usize) {
    let mut out = [None; MAX_CANDIDATES];
    let mut n = 0;
    for which in 0..MAX_CANDIDATES {
        let mut b = [0u8; 4];
        let (filled, count) = match code.fetch_during(addr, win.lo, win.hi, which, &mut b) {
            Fetch::Exact(l) => (l, 1),
            Fetch::Candidate { filled, count } => (filled, count),
            Fetch::Unmapped if which == 0 => (0, 1),
            Fetch::Unmapped => break,
        };
        let c = (filled >= 4).then(|| classify(addr, u32::from_le_bytes(b), wfx_p0));
        if !out[..n].contains(&c) {
            out[n] = c;
            n += 1;
        }
        if which + 1 >= count {
            break;
        }
    }
    (out, n.max(1))
}

/// Walks A64 code from `addr` over the window `win` until `stop` says an
/// instruction ends the walk, or the code runs out. Where a word changes
/// inside the window and its candidates are different instructions, `pick`
/// chooses. Returns the walk and the times over which its code stays the
/// same (meaningless when `pick` made a choice).
#[inline]
fn walk(
    code: &impl CodeSource,
    addr: u64,
    win: Window,
    wfx_p0: bool,
    pick: &mut Picker,
    mut stop: impl FnMut(u64, &Insn) -> bool,
) -> (Walk, Time, Time) {
    let mut buf = [0u8; CHUNK];
    let (mut from, mut to) = (0, Time::MAX);
    let mut w = Walk { end: addr, num_i: 0, last: OTHER, nacc: false };
    loop {
        let f = code.fetch(w.end, win.lo, &mut buf);
        let mut words = f.len.min(CHUNK) / 4;
        if win.hi != win.lo && (f.uncertain || f.valid_to <= win.hi) {
            // The code changes inside the window: this word alone, with
            // every instruction it may be (the next read starts after it).
            let mut b = [0u8; 4];
            let f4 = code.fetch(w.end, win.lo, &mut b);
            if f4.len >= 4 && !f4.uncertain && f4.valid_to > win.hi {
                buf[..4].copy_from_slice(&b);
                from = from.max(f4.valid_from);
                to = to.min(f4.valid_to);
            } else {
                let (c, n) = word_candidates(code, w.end, win, wfx_p0);
                let k = if n > 1 { pick.choose(n, w.end) } else { 0 };
                from = from.max(win.lo);
                to = to.min(win.hi.saturating_add(1));
                let Some(insn) = c[k] else {
                    w.nacc = true;
                    return (w, from, to);
                };
                if w.take(insn, &mut stop) {
                    return (w, from, to);
                }
                continue;
            }
            words = 1;
        } else {
            from = from.max(f.valid_from);
            to = to.min(f.valid_to);
        }
        if words == 0 {
            w.nacc = true;
            return (w, from, to);
        }
        for c in buf[..words * 4].chunks_exact(4) {
            let word = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if w.take(classify(w.end, word, wfx_p0), &mut stop) {
                return (w, from, to);
            }
        }
    }
}

impl Walk {
    /// Takes `insn` as the walk's next instruction: true when the walk ends
    /// with it (`stop` says so, or the walk wrapped or ran too long: then
    /// what follows is not accessible).
    #[inline(always)]
    fn take(&mut self, insn: Insn, stop: &mut impl FnMut(u64, &Insn) -> bool) -> bool {
        self.last = insn;
        self.num_i += 1;
        let (next, wrapped) = self.end.overflowing_add(4);
        self.end = next;
        if stop(self.end, &insn) {
            return true;
        }
        if wrapped || self.num_i >= MAX_WALK {
            self.nacc = true;
            return true;
        }
        false
    }
}

/// Walks to an address (an exception's preferred return address): through
/// branches, until the next instruction is `target`. Also says whether the
/// walk went through a P0 instruction, which a trace traces with an atom
/// first: a walk that does is not the code that ran.
pub(crate) fn walk_to_addr(code: &impl CodeSource, addr: u64, target: u64, win: Window, wfx_p0: bool, pick: &mut Picker) -> (Walk, bool) {
    let mut crossed = false;
    let w = walk(code, addr, win, wfx_p0, pick, |next, i| {
        if next == target {
            return true;
        }
        crossed |= i.ty != InstrType::Other;
        false
    })
    .0;
    (w, crossed)
}

#[derive(Clone, Copy)]
struct Entry {
    addr: u64,
    from: Time,
    to: Time,
    walk: Walk,
}

/// Walks to the next P0 instruction, cached by start address (direct
/// mapped; an entry is used only for windows inside its validity window).
pub(crate) struct RunCache {
    entries: Vec<Option<Entry>>,
}

const CACHE_BITS: u32 = 14;

impl RunCache {
    pub fn new() -> RunCache {
        RunCache { entries: Vec::new() }
    }

    #[inline]
    pub fn walk_to_p0(&mut self, code: &impl CodeSource, addr: u64, win: Window, wfx_p0: bool, pick: &mut Picker) -> Walk {
        if self.entries.is_empty() {
            self.entries = vec![None; 1 << CACHE_BITS];
        }
        let slot = ((addr >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_BITS)) as usize;
        if let Some(e) = &self.entries[slot] {
            if e.addr == addr && e.from <= win.lo && win.hi < e.to {
                return e.walk;
            }
        }
        let made = pick.made;
        let (w, from, to) = walk(code, addr, win, wfx_p0, pick, |_, i| i.ty != InstrType::Other);
        // A walk that chose among candidates holds for that choice only.
        if pick.made == made {
            self.entries[slot] = Some(Entry { addr, from, to, walk: w });
        }
        w
    }
}
