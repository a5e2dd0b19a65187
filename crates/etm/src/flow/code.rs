//! Walking code for the flow decoder: from an address to the next P0
//! instruction, reading the code through a [`CodeSource`] over the window
//! of time the trace allows, with a cache of walks already done.

use codeimage::window::{CodeSource, Content, Fetch, Time};
use isa::BranchClass;
use perfdata::TimeConv;

use super::{InstrRange, InstrSubtype, InstrType};

/// How the trace's timestamps become the image's [`Time`]: as they are (a
/// snapshot, or a trace timed in perf time), or by perf's TIME_CONV (the
/// kernel's clock counter as timestamp source).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ImageClock(pub Option<TimeConv>);

impl ImageClock {
    #[inline]
    pub fn time(&self, ts: u64) -> Time {
        self.0.map_or(ts, |c| c.to_perf_time(ts))
    }

    /// The image time of a window's end (unbounded stays unbounded).
    #[inline]
    pub fn end(&self, ts: u64) -> Time {
        if ts == Time::MAX {
            ts
        } else {
            self.time(ts)
        }
    }
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

/// The times code is read for, on the image's clock: from `lo`, the latest
/// timestamp, to `hi`, the next one (the code ran at some moment of
/// `lo..=hi`). `hi == lo` reads at one time, as for a trace whose next
/// timestamp is not known.
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
#[derive(Clone, Debug, Default)]
pub(crate) struct Picker {
    script: [u8; MAX_CHOICES],
    len: u8,
    /// Choices made so far.
    pub made: u32,
    /// The number of candidates at the first choice past the script.
    pub fresh: Option<u8>,
    /// The address of that choice.
    pub fresh_addr: u64,
    /// Words taken from a content newer than the window's start since the
    /// last range took them, by address: at most [`MAX_CHOICES`], as a
    /// script makes no more choices. Rare, so kept out of line: the source
    /// holding the picker is copied before every packet.
    picked: Vec<(u64, u32)>,
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

    /// Notes `word` taken at `addr` from a content newer than the window's start.
    fn note_picked(&mut self, addr: u64, word: u32) {
        if self.picked.len() < MAX_CHOICES {
            self.picked.push((addr, word));
        }
    }

    /// Hands the words picked since the last range to `range`.
    pub fn give_picked(&mut self, range: &mut InstrRange) {
        for &(addr, word) in &self.picked {
            range.note_picked(addr, word);
        }
        self.picked.clear();
    }
}

/// Most candidate instructions kept for one word.
const MAX_CANDIDATES: usize = 4;

/// The distinct instructions the word at `addr` is at some moment of the
/// window, oldest first, each with the first word that is it (None:
/// unmapped, or less than a word), and how many: of the first
/// [`MAX_CANDIDATES`] distinct words.
fn word_candidates(code: &impl CodeSource, addr: u64, win: Window, wfx_p0: bool) -> ([Option<(Insn, u32)>; MAX_CANDIDATES], usize) {
    let mut out = [None; MAX_CANDIDATES];
    let word = |bytes: &[u8; 16], len: usize| (len >= 4).then(|| u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
    let mut buf = [0u8; 16];
    let count = match code.fetch(addr, win.lo, win.hi, 0, &mut buf) {
        Fetch::Unmapped => return (out, 1),
        Fetch::Exact(len) => {
            out[0] = word(&buf, len).map(|w| (classify(addr, w, wfx_p0), w));
            return (out, 1);
        }
        Fetch::Candidate { count, .. } => count,
    };
    let mut contents: Vec<Content> = Vec::with_capacity(count);
    code.candidates(addr, win.lo, win.hi, count, &mut contents);
    let mut words = [None; MAX_CANDIDATES];
    let mut k = 0;
    for c in &contents {
        let w = word(&c.bytes, c.len);
        if !words[..k].contains(&w) {
            if k == MAX_CANDIDATES {
                break;
            }
            words[k] = w;
            k += 1;
        }
    }
    let mut n = 0;
    for w in &words[..k] {
        let c = w.map(|w| (classify(addr, w, wfx_p0), w));
        if !out[..n].iter().any(|o| o.map(|o| o.0) == c.map(|c| c.0)) {
            out[n] = c;
            n += 1;
        }
    }
    (out, n.max(1))
}

/// Walks A64 code from `addr` over the window `win` until `stop` says an
/// instruction ends the walk, or the code runs out. Where a word changes
/// inside the window and its candidates are different instructions, `pick`
/// chooses. Returns the walk and the times over which its code stays the
/// same, as the code source says them (meaningless when `pick` made a
/// choice).
#[inline]
fn walk(
    code: &impl CodeSource,
    addr: u64,
    win: Window,
    wfx_p0: bool,
    pick: &mut Picker,
    mut stop: impl FnMut(u64, &Insn) -> bool,
) -> (Walk, Time, Time) {
    let mut buf = [0u8; 16];
    let (mut from, mut to) = (0, Time::MAX);
    let mut w = Walk { end: addr, num_i: 0, last: OTHER, nacc: false };
    macro_rules! walk_words {
        ($bytes:expr) => {
            for c in $bytes.chunks_exact(4) {
                let word = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if w.take(classify(w.end, word, wfx_p0), &mut stop) {
                    return (w, from, to);
                }
            }
        };
    }
    loop {
        // Code no change touches: walked where it lies.
        if let Some((run, valid)) = code.code_run(w.end, win.lo, win.hi) {
            if run.len() >= 4 {
                from = from.max(valid.start);
                to = to.min(valid.end);
                walk_words!(run);
                continue;
            }
        }
        // Bytes that hold over the whole window.
        if let Some((len, valid)) = code.fetch_window(w.end, win.lo, win.hi, &mut buf) {
            from = from.max(valid.start);
            to = to.min(valid.end);
            if len < 4 {
                w.nacc = true;
                return (w, from, to);
            }
            walk_words!(buf[..len]);
            continue;
        }
        // The code changes inside the window, or is not mapped: this word
        // alone, with every instruction it may be.
        let (c, n) = word_candidates(code, w.end, win, wfx_p0);
        let k = if n > 1 { pick.choose(n, w.end) } else { 0 };
        from = from.max(win.lo);
        to = to.min(win.hi.saturating_add(1));
        let Some((insn, word)) = c[k] else {
            w.nacc = true;
            return (w, from, to);
        };
        if k > 0 {
            pick.note_picked(w.end, word);
        }
        if w.take(insn, &mut stop) {
            return (w, from, to);
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
/// mapped; an entry is used only for windows the code source admits with
/// the window its code holds for).
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
            if e.addr == addr && code.admits(&(e.from..e.to), win.lo, win.hi) {
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
