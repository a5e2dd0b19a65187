//! The code timeline: base code plus every recorded change, readable at any time.
//!
//! Every address range that some poke touches is cut into elementary spans
//! (no poke boundary and no base region boundary inside). Each span keeps
//! its versions sorted by the time they start to hold. A read binary-searches
//! the spans it covers and, in each, the version active at the time asked:
//! O(log spans + k log versions), no replay, so forward and backward are the
//! same cost. Memory: the base (memory-mapped) plus the poke bytes.

use std::ops::Range;

use crate::base::BaseImage;

/// The key the image is versioned by: perf time in nanoseconds for a
/// timeline built from perf.data (TEXT_POKE records carry it). A decoder
/// whose trace has another clock converts its times to this one.
pub type Time = u64;

/// One recorded change of code (a TEXT_POKE, or a begin/end pair).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Poke<'a> {
    /// When the new bytes hold, inclusive (x86: the event's timestamp; a pair: its begin).
    pub time: Time,
    /// A pair's end: between `time` and `settled` the content is uncertain
    /// (old or new), from `settled` on it is the new bytes.
    pub settled: Option<Time>,
    pub addr: u64,
    /// What was there before (empty when code is created).
    pub old: &'a [u8],
    /// What is there after (empty when code is removed).
    pub new: &'a [u8],
    pub cpu: Option<u32>,
}

/// Where a span's content comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bytes {
    /// Nothing mapped.
    Absent,
    /// The base image at the span's address.
    Base,
    /// The arena, from this offset, span length.
    Arena(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    Exact(Bytes),
    /// Either (old, new): a pair's window, or the unexplained gap between two
    /// pokes whose bytes disagree.
    Uncertain(Bytes, Bytes),
}

#[derive(Clone, Copy, Debug)]
struct Version {
    from: Time,
    content: Content,
    /// The poke that started this version (None: the initial content).
    poke: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    len: u32,
    versions: (u32, u32),
}

impl Span {
    fn end(&self) -> u64 {
        self.start + self.len as u64
    }
}

/// A poke as stored: its bytes live in the timeline's arena.
#[derive(Clone, Debug)]
pub struct PokeInfo {
    pub time: Time,
    pub settled: Option<Time>,
    pub addr: u64,
    pub cpu: Option<u32>,
    old: Range<u32>,
    new: Range<u32>,
    /// Position in the input (ties in time keep input order).
    pub seq: u32,
}

/// Something the recorded history does not explain, kept and reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    pub addr: u64,
    pub time: Time,
    pub kind: AnomalyKind,
    /// What the image held just before `time`.
    pub expected: Vec<u8>,
    /// What the poke's old bytes say.
    pub found: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnomalyKind {
    /// The old bytes differ from the image at that time. Followed: the record
    /// is trusted, and the content since the previous change becomes
    /// uncertain (either value) or, before the first change, the old bytes.
    OldBytesDiffer,
    /// old_len and new_len both non-zero and different: the new bytes are applied.
    LengthsDiffer,
    /// A change at an address with no code at that time (nothing mapped, no
    /// creation before it): the new bytes create it.
    NothingThere,
}

/// The result of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// The bytes; shorter than asked when the range runs into unmapped memory.
    Exact(Vec<u8>),
    /// Several contents are possible (each the mapped length).
    Uncertain(Vec<Vec<u8>>),
    /// The first byte is unmapped at that time.
    Unmapped { nearest: Option<Nearby> },
}

/// The mapped range nearest to an unmapped address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nearby {
    pub name: String,
    pub start: u64,
    pub end: u64,
}

/// What `read_into` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadInfo {
    /// Bytes filled from the start of the buffer; 0 when the first byte is unmapped.
    pub mapped: usize,
    /// Some span in the mapped part has two possible contents; the buffer
    /// holds the first (older) one. [`CodeTimeline::read`] lists them all.
    pub uncertain: bool,
    /// The times over which these exact bytes stay the same at this range:
    /// a decoded-block cache entry keyed by range is valid for `t` in it.
    pub valid: Range<Time>,
}

/// A named range of code that may come and go (KSYMBOL), used to explain reads.
#[derive(Clone, Debug)]
struct NamedRange {
    start: u64,
    end: u64,
    name: String,
}

/// Collects base code and pokes, then builds a [`CodeTimeline`].
#[derive(Default)]
pub struct TimelineBuilder {
    base: BaseImage,
    pokes: Vec<PokeInfo>,
    arena: Vec<u8>,
    names: Vec<NamedRange>,
}

impl TimelineBuilder {
    pub fn new(base: BaseImage) -> TimelineBuilder {
        TimelineBuilder { base, ..TimelineBuilder::default() }
    }

    /// The same changes over `base` instead.
    pub fn over(self, base: BaseImage) -> TimelineBuilder {
        TimelineBuilder { base, ..self }
    }

    /// Adds a change. Pokes may come in any time order; equal times keep the order given.
    pub fn poke(&mut self, p: Poke<'_>) {
        let old = self.stash(p.old);
        let new = self.stash(p.new);
        let seq = self.pokes.len() as u32;
        self.pokes.push(PokeInfo { time: p.time, settled: p.settled, addr: p.addr, cpu: p.cpu, old, new, seq });
    }

    /// Names a range of dynamic code (a KSYMBOL), for messages about it.
    pub fn name_range(&mut self, start: u64, len: u64, name: impl Into<String>) {
        self.names.push(NamedRange { start, end: start.saturating_add(len), name: name.into() });
    }

    fn stash(&mut self, b: &[u8]) -> Range<u32> {
        let at = self.arena.len() as u32;
        self.arena.extend_from_slice(b);
        at..self.arena.len() as u32
    }

    pub fn build(self) -> CodeTimeline {
        let TimelineBuilder { base, mut pokes, arena, names } = self;
        // A poke with no bytes changes nothing and has no range: drop it.
        pokes.retain(|p| !(p.old.is_empty() && p.new.is_empty()));
        pokes.sort_by_key(|p| (p.time, p.seq));
        let touched = |p: &PokeInfo| {
            let len = if p.new.is_empty() { p.old.len() } else { p.new.len() } as u64;
            p.addr..p.addr.saturating_add(len)
        };
        // Span boundaries: every poke edge, and base region edges inside poked ranges.
        let mut cuts: Vec<u64> = Vec::with_capacity(pokes.len() * 2);
        for p in &pokes {
            let r = touched(p);
            if r.is_empty() {
                continue;
            }
            cuts.push(r.start);
            cuts.push(r.end);
        }
        for region in base.regions() {
            cuts.push(region.start);
            cuts.push(region.end());
        }
        cuts.sort_unstable();
        cuts.dedup();
        // A span between two cuts exists when some poke covers it.
        let mut covered = vec![false; cuts.len()];
        for p in &pokes {
            let r = touched(p);
            let (a, b) = (cuts.partition_point(|&c| c < r.start), cuts.partition_point(|&c| c < r.end));
            for c in &mut covered[a..b] {
                *c = true;
            }
        }
        let mut spans: Vec<Span> = Vec::new();
        for i in 0..cuts.len().saturating_sub(1) {
            if covered[i] {
                let len = (cuts[i + 1] - cuts[i]).min(u32::MAX as u64) as u32;
                spans.push(Span { start: cuts[i], len, versions: (0, 0) });
            }
        }
        // Each poke's effect on each span it covers, in (span, time) order.
        let mut effects: Vec<(u32, u32)> = Vec::new();
        for (pi, p) in pokes.iter().enumerate() {
            let r = touched(p);
            let first = spans.partition_point(|s| s.end() <= r.start);
            for (si, s) in spans.iter().enumerate().skip(first) {
                if s.start >= r.end {
                    break;
                }
                effects.push((si as u32, pi as u32));
            }
        }
        effects.sort_by_key(|&(s, p)| (s, p));
        let mut versions: Vec<Version> = Vec::with_capacity(effects.len() + spans.len());
        let mut anomalies = Vec::new();
        let mut e = 0;
        for (si, span) in spans.iter_mut().enumerate() {
            let first_version = versions.len() as u32;
            let initial = if base.find(span.start).is_some() { Bytes::Base } else { Bytes::Absent };
            versions.push(Version { from: 0, content: Content::Exact(initial), poke: None });
            while e < effects.len() && effects[e].0 as usize == si {
                let pi = effects[e].1;
                let p = &pokes[pi as usize];
                apply(&base, &arena, &mut versions, first_version as usize, span, p, pi, &mut anomalies);
                e += 1;
            }
            span.versions = (first_version, versions.len() as u32);
        }
        anomalies.sort_by_key(|a: &Anomaly| (a.time, a.addr));
        anomalies.dedup();
        let index = SpanIndex::new(&spans);
        CodeTimeline { base, arena, spans, versions, pokes, anomalies, names, index }
    }
}

/// Adds the versions poke `p` makes in `span` (whose versions start at `first`).
#[allow(clippy::too_many_arguments)]
fn apply(
    base: &BaseImage,
    arena: &[u8],
    versions: &mut Vec<Version>,
    first: usize,
    span: &Span,
    p: &PokeInfo,
    pi: u32,
    anomalies: &mut Vec<Anomaly>,
) {
    let off = (span.start - p.addr) as usize;
    let len = span.len as usize;
    let slice = |r: &Range<u32>| -> Option<Range<u32>> {
        let n = (r.end - r.start) as usize;
        (off + len <= n).then(|| r.start + off as u32..r.start + (off + len) as u32)
    };
    let old = slice(&p.old);
    let new = slice(&p.new);
    if !p.old.is_empty() && !p.new.is_empty() && p.old.len() != p.new.len() && off == 0 {
        anomalies.push(Anomaly {
            addr: p.addr,
            time: p.time,
            kind: AnomalyKind::LengthsDiffer,
            expected: arena[p.old.start as usize..p.old.end as usize].to_vec(),
            found: arena[p.new.start as usize..p.new.end as usize].to_vec(),
        });
    }
    let last = versions.len() - 1;
    let current = match versions[last].content {
        Content::Exact(b) | Content::Uncertain(_, b) => b,
    };
    // Check the record's old bytes against the image just before the poke.
    if let Some(old) = &old {
        let found = arena[old.start as usize..old.end as usize].to_vec();
        let expected = content_bytes(base, arena, span, current);
        if expected.as_deref() != Some(&found[..]) {
            let known = expected.is_some();
            anomalies.push(Anomaly {
                addr: span.start,
                time: p.time,
                kind: if expected.is_none() { AnomalyKind::NothingThere } else { AnomalyKind::OldBytesDiffer },
                expected: expected.unwrap_or_default(),
                found,
            });
            let old_bytes = Bytes::Arena(old.start);
            if last == first && versions[last].poke.is_none() && known {
                // Before the first change, the record knows better than the base.
                versions[last].content = Content::Exact(old_bytes);
            } else if known {
                versions[last].content = Content::Uncertain(current, old_bytes);
            } else {
                versions[last].content = Content::Exact(old_bytes);
            }
        }
    }
    let after = match new {
        Some(n) => Bytes::Arena(n.start),
        None => Bytes::Absent,
    };
    let before = match versions[last].content {
        Content::Exact(b) | Content::Uncertain(_, b) => b,
    };
    match p.settled {
        Some(end) if end > p.time => {
            versions.push(Version { from: p.time, content: Content::Uncertain(before, after), poke: Some(pi) });
            versions.push(Version { from: end, content: Content::Exact(after), poke: Some(pi) });
        }
        _ => versions.push(Version { from: p.time, content: Content::Exact(after), poke: Some(pi) }),
    }
    // Several versions from the same instant: the last one given wins.
    let n = versions.len();
    if n - first >= 2 && versions[n - 2].from == versions[n - 1].from && versions[n - 2].poke.is_some() {
        versions.remove(n - 2);
    }
}

/// A span's bytes for `b`, or None when absent.
fn content_bytes(base: &BaseImage, arena: &[u8], span: &Span, b: Bytes) -> Option<Vec<u8>> {
    let len = span.len as usize;
    match b {
        Bytes::Absent => None,
        Bytes::Arena(at) => Some(arena[at as usize..at as usize + len].to_vec()),
        Bytes::Base => {
            let (r, off) = base.find(span.start)?;
            r.bytes().get(off..off + len).map(<[u8]>::to_vec)
        }
    }
}

/// Base code plus the recorded changes, readable at any time.
pub struct CodeTimeline {
    base: BaseImage,
    arena: Vec<u8>,
    spans: Vec<Span>,
    versions: Vec<Version>,
    pokes: Vec<PokeInfo>,
    anomalies: Vec<Anomaly>,
    names: Vec<NamedRange>,
    index: SpanIndex,
}

/// Finds the first span ending after an address in O(1) plus a short scan:
/// for each granule of the spanned address range, the first span that ends
/// after the granule's start. Most reads touch no span and go straight to
/// the base; a binary search over all spans would cost a cache miss per step.
#[derive(Default)]
struct SpanIndex {
    lo: u64,
    shift: u32,
    first: Vec<u32>,
    /// One bit per granule: does any span touch it? Small enough to stay in cache.
    occupied: Vec<u64>,
}

/// Granules at most (4 MiB of index).
const MAX_GRANULES: u64 = 1 << 20;

impl SpanIndex {
    fn new(spans: &[Span]) -> SpanIndex {
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else { return SpanIndex::default() };
        let (lo, hi) = (first.start, last.end());
        let mut shift = 6;
        while (hi - lo) >> shift >= MAX_GRANULES {
            shift += 1;
        }
        let n = ((hi - lo) >> shift) + 1;
        let mut idx = Vec::with_capacity(n as usize);
        let mut si = 0;
        for g in 0..n {
            let start = lo + (g << shift);
            while si < spans.len() && spans[si].end() <= start {
                si += 1;
            }
            idx.push(si as u32);
        }
        let mut occupied = vec![0u64; (n as usize).div_ceil(64)];
        for s in spans {
            for g in (s.start - lo) >> shift..=(s.end() - 1 - lo) >> shift {
                occupied[(g / 64) as usize] |= 1 << (g % 64);
            }
        }
        SpanIndex { lo, shift, first: idx, occupied }
    }

    /// Where the first granule a span touches in `[start, end)` starts (at
    /// or before `start` when it holds `start`): a word of the bitmap at a
    /// time, so that long ranges cost little.
    fn first_touched(&self, start: u64, end: u64) -> Option<u64> {
        if self.first.is_empty() || end <= self.lo || start >= end {
            return None;
        }
        let g0 = (start.max(self.lo) - self.lo) >> self.shift;
        let g1 = ((end - 1 - self.lo) >> self.shift).min(self.first.len() as u64 - 1);
        let mut g = g0;
        while g <= g1 {
            let word = self.occupied[(g / 64) as usize] >> (g % 64);
            if word != 0 {
                let hit = g + u64::from(word.trailing_zeros());
                return (hit <= g1).then(|| self.lo + (hit << self.shift));
            }
            g = (g / 64 + 1) * 64;
        }
        None
    }

    /// Whether some span may touch `[start, end)` (false: only base code there).
    fn touches(&self, start: u64, end: u64) -> bool {
        if self.first.is_empty() || end <= self.lo {
            return false;
        }
        let g0 = (start.max(self.lo) - self.lo) >> self.shift;
        let g1 = (end - 1 - self.lo) >> self.shift;
        (g0..=g1.min(self.first.len() as u64 - 1)).any(|g| self.occupied[(g / 64) as usize] & (1 << (g % 64)) != 0)
    }
}

/// One version of the code at an address, for `--history`.
#[derive(Clone, Debug)]
pub struct HistoryEntry<'a> {
    /// From this time (0: since before any recorded change) ...
    pub from: Time,
    /// ... until this one (exclusive), if it ends.
    pub until: Option<Time>,
    /// The poke that made this version, if any.
    pub poke: Option<&'a PokeInfo>,
    /// The content of the poked range then (for the initial version: the range of the first poke).
    pub content: Read,
}

impl CodeTimeline {
    pub fn base(&self) -> &BaseImage {
        &self.base
    }

    /// Pokes in time order.
    pub fn pokes(&self) -> &[PokeInfo] {
        &self.pokes
    }

    pub fn old_bytes(&self, p: &PokeInfo) -> &[u8] {
        &self.arena[p.old.start as usize..p.old.end as usize]
    }

    pub fn new_bytes(&self, p: &PokeInfo) -> &[u8] {
        &self.arena[p.new.start as usize..p.new.end as usize]
    }

    /// Heap memory besides the base image (poke bytes, spans, versions, pokes).
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + self.spans.capacity() * std::mem::size_of::<Span>()
            + self.versions.capacity() * std::mem::size_of::<Version>()
            + self.pokes.capacity() * std::mem::size_of::<PokeInfo>()
    }

    /// What the history does not explain, in time order.
    pub fn anomalies(&self) -> &[Anomaly] {
        &self.anomalies
    }

    /// Index of the first span that ends after `addr` (`spans.len()` if none).
    fn first_span(&self, addr: u64) -> usize {
        let ix = &self.index;
        if addr < ix.lo {
            return 0;
        }
        let g = ((addr - ix.lo) >> ix.shift) as usize;
        let Some(&from) = ix.first.get(g) else { return self.spans.len() };
        let to = ix.first.get(g + 1).map_or(self.spans.len(), |&t| t as usize + 1).min(self.spans.len());
        let from = from as usize;
        from + self.spans[from..to].partition_point(|s| s.end() <= addr)
    }

    fn span_versions(&self, s: &Span) -> &[Version] {
        &self.versions[s.versions.0 as usize..s.versions.1 as usize]
    }

    /// Index of the version of `vs` active at `t` (the last one starting at or before it).
    fn active(vs: &[Version], t: Time) -> usize {
        vs.partition_point(|v| v.from <= t).saturating_sub(1)
    }

    fn bytes_of(&self, s: &Span, b: Bytes, from: usize, n: usize) -> Option<&[u8]> {
        match b {
            Bytes::Absent => None,
            Bytes::Arena(at) => {
                let at = at as usize + from;
                Some(&self.arena[at..at + n])
            }
            Bytes::Base => {
                let (r, off) = self.base.find(s.start + from as u64)?;
                r.bytes().get(off..off + n)
            }
        }
    }

    /// Fills `buf` with the code at `addr` at time `t`, without allocating.
    pub fn read_into(&self, addr: u64, buf: &mut [u8], t: Time) -> ReadInfo {
        let end = addr.saturating_add(buf.len() as u64);
        let mut info = ReadInfo { mapped: 0, uncertain: false, valid: 0..Time::MAX };
        if !self.index.touches(addr, end) {
            info.mapped = self.read_base(addr, buf);
            if info.mapped == 0 {
                info.valid = self.unmapped_validity(addr, t);
            }
            return info;
        }
        let mut p = addr;
        let mut si = self.first_span(p);
        while p < end {
            let done = (p - addr) as usize;
            let piece = match self.spans.get(si) {
                Some(s) if s.start <= p => {
                    let vs = self.span_versions(s);
                    let i = Self::active(vs, t);
                    info.valid.start = info.valid.start.max(vs[i].from);
                    if let Some(next) = vs.get(i + 1) {
                        info.valid.end = info.valid.end.min(next.from);
                    }
                    let b = match vs[i].content {
                        Content::Exact(b) => b,
                        Content::Uncertain(a, _) => {
                            info.uncertain = true;
                            a
                        }
                    };
                    let n = (end.min(s.end()) - p) as usize;
                    si += 1;
                    self.bytes_of(s, b, (p - s.start) as usize, n)
                }
                next => {
                    let limit = next.map_or(end, |s| s.start.min(end));
                    self.base.find(p).map(|(r, off)| {
                        let n = (limit.min(r.end()) - p) as usize;
                        &r.bytes()[off..off + n]
                    })
                }
            };
            match piece {
                Some(bytes) if !bytes.is_empty() => {
                    buf[done..done + bytes.len()].copy_from_slice(bytes);
                    p += bytes.len() as u64;
                }
                _ => break,
            }
        }
        info.mapped = (p - addr) as usize;
        if info.mapped == 0 {
            info.valid = self.unmapped_validity(addr, t);
        }
        info
    }

    /// The base code from `addr` on, at most `len` bytes, cut at the end of
    /// its region and before the first recorded change (to the granule of
    /// the index): what a read gives at any time, borrowed instead of
    /// copied (a decoder's block builder reads whole runs of code this
    /// way). `None` when nothing is mapped at `addr`, or a change may touch
    /// it.
    pub fn unchanging(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let (r, off) = self.base.find(addr)?;
        let mut n = len.min(r.bytes().len() - off);
        if let Some(at) = self.index.first_touched(addr, addr.saturating_add(n as u64)) {
            n = at.saturating_sub(addr) as usize;
        }
        (n > 0).then(|| &r.bytes()[off..off + n])
    }

    /// Copies base code only (no span touches the range); returns the bytes mapped.
    fn read_base(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            let Some((r, off)) = self.base.find(addr + done as u64) else { break };
            let n = (buf.len() - done).min(r.bytes().len() - off);
            buf[done..done + n].copy_from_slice(&r.bytes()[off..off + n]);
            done += n;
        }
        done
    }

    /// How long `addr` stays unmapped around `t` (it may be created or removed by pokes).
    fn unmapped_validity(&self, addr: u64, t: Time) -> Range<Time> {
        let i = self.first_span(addr);
        match self.spans.get(i).filter(|s| s.start <= addr) {
            Some(s) => {
                let vs = self.span_versions(s);
                let a = Self::active(vs, t);
                vs[a].from..vs.get(a + 1).map_or(Time::MAX, |v| v.from)
            }
            None => 0..Time::MAX,
        }
    }

    /// The code at `[addr, addr+len)` at time `t`.
    pub fn read(&self, addr: u64, len: usize, t: Time) -> Read {
        let mut buf = vec![0u8; len];
        let info = self.read_into(addr, &mut buf, t);
        if info.mapped == 0 {
            return Read::Unmapped { nearest: self.nearest(addr, t) };
        }
        buf.truncate(info.mapped);
        if !info.uncertain {
            return Read::Exact(buf);
        }
        // Every combination of the uncertain spans' two contents.
        let mut candidates = vec![buf];
        let end = addr + info.mapped as u64;
        let first = self.first_span(addr);
        for s in self.spans[first..].iter().take_while(|s| s.start < end) {
            let vs = self.span_versions(s);
            if let Content::Uncertain(_, b) = vs[Self::active(vs, t)].content {
                let lo = s.start.max(addr);
                let hi = s.end().min(end);
                let alt = self.bytes_of(s, b, (lo - s.start) as usize, (hi - lo) as usize);
                let mut more = Vec::new();
                for c in &candidates {
                    let mut c2 = c.clone();
                    let at = (lo - addr) as usize;
                    match alt {
                        Some(bytes) => c2[at..at + bytes.len()].copy_from_slice(bytes),
                        None => c2.truncate(at),
                    }
                    more.push(c2);
                }
                candidates.extend(more);
                candidates.sort();
                candidates.dedup();
            }
        }
        if candidates.len() == 1 {
            return Read::Exact(candidates.pop().unwrap());
        }
        Read::Uncertain(candidates)
    }

    /// Every distinct content `[addr, addr+len)` has at some moment of `t0..=t1`,
    /// with the first time each holds; one entry when no change lands inside.
    pub fn read_during(&self, addr: u64, len: usize, t0: Time, t1: Time) -> Vec<(Time, Read)> {
        let mut out: Vec<(Time, Read)> = Vec::new();
        for (span, r) in self.segments_during(addr, len, t0, t1) {
            if !out.iter().any(|(_, seen)| *seen == r) {
                out.push((span.start, r));
            }
        }
        out
    }

    /// The content of `[addr, addr+len)` over `t0..=t1`, cut where it
    /// changes: each piece with the times it covers (end exclusive, except
    /// that the last piece includes `t1`). Lets a decoder weigh candidates by
    /// how long each held.
    pub fn segments_during(&self, addr: u64, len: usize, t0: Time, t1: Time) -> Vec<(Range<Time>, Read)> {
        let end = addr.saturating_add(len as u64);
        let first = self.first_span(addr);
        let mut times = vec![t0];
        for s in self.spans[first..].iter().take_while(|s| s.start < end) {
            times.extend(self.span_versions(s).iter().map(|v| v.from).filter(|&f| f > t0 && f <= t1));
        }
        times.sort_unstable();
        times.dedup();
        let mut out = Vec::with_capacity(times.len());
        for (i, &t) in times.iter().enumerate() {
            let until = times.get(i + 1).copied().unwrap_or(t1.saturating_add(1));
            out.push((t..until, self.read(addr, len, t)));
        }
        out
    }

    /// Every version of the code at `addr`: the initial one, then one per poke
    /// touching `addr`, each over the whole range that poke wrote.
    pub fn history(&self, addr: u64) -> Vec<HistoryEntry<'_>> {
        let i = self.first_span(addr);
        let Some(s) = self.spans.get(i).filter(|s| s.start <= addr) else {
            return Vec::new();
        };
        let vs = self.span_versions(s);
        let site = |v: &Version| match v.poke {
            Some(pi) => {
                let p = &self.pokes[pi as usize];
                (p.addr, (p.new.end - p.new.start).max(p.old.end - p.old.start) as usize)
            }
            None => (s.start, s.len as usize),
        };
        let (first_addr, first_len) = vs.iter().find(|v| v.poke.is_some()).map_or((s.start, s.len as usize), site);
        vs.iter()
            .enumerate()
            .map(|(k, v)| {
                let (a, n) = if v.poke.is_some() { site(v) } else { (first_addr, first_len) };
                HistoryEntry {
                    from: v.from,
                    until: vs.get(k + 1).map(|n| n.from),
                    poke: v.poke.map(|pi| &self.pokes[pi as usize]),
                    content: self.read(a, n, v.from),
                }
            })
            .collect()
    }

    /// Every poke that touched `addr`, in time order: what a decoder needs to
    /// explain an INT3 trap met at a site near a poke's time (x86 writes INT3
    /// first, and the event comes before the last byte is written).
    pub fn pokes_at(&self, addr: u64) -> impl Iterator<Item = &PokeInfo> + '_ {
        let i = self.first_span(addr);
        let vs = match self.spans.get(i).filter(|s| s.start <= addr) {
            Some(s) => self.span_versions(s),
            None => &[],
        };
        let mut last = None;
        vs.iter().filter_map(|v| v.poke).filter(move |&p| last.replace(p) != Some(p)).map(|p| &self.pokes[p as usize])
    }

    /// The mapped range nearest to `addr` at `t`: a base region, or code a poke created.
    pub fn nearest(&self, addr: u64, t: Time) -> Option<Nearby> {
        if let Some(n) = self.names.iter().find(|n| n.start <= addr && addr < n.end) {
            return Some(Nearby { name: format!("{} (no code there at this time)", n.name), start: n.start, end: n.end });
        }
        let base = self.base.nearest(addr).map(|r| Nearby { name: r.name.clone(), start: r.start, end: r.end() });
        let created = self
            .spans
            .iter()
            .filter(|s| {
                let vs = self.span_versions(s);
                !matches!(vs[Self::active(vs, t)].content, Content::Exact(Bytes::Absent))
            })
            .min_by_key(|s| if s.start > addr { s.start - addr } else { addr.saturating_sub(s.end()) })
            .map(|s| Nearby { name: "code created by a poke".into(), start: s.start, end: s.end() });
        let dist = |n: &Nearby| if n.start > addr { n.start - addr } else { addr.saturating_sub(n.end) };
        match (base, created) {
            (Some(b), Some(c)) => Some(if dist(&c) < dist(&b) { c } else { b }),
            (b, c) => b.or(c),
        }
    }
}
