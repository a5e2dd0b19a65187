//! CoreSight trace formatter frames: splitting a buffer shared by several
//! trace sources into per-ID byte runs, and writing such buffers.
//!
//! A frame is 16 bytes. Even bytes 0..14 are either data (bit 0 = 0; the
//! data's real bit 0 is in byte 15) or a new trace ID (bit 0 = 1, ID in bits
//! 7:1); odd bytes are always data; byte 15 holds one flag bit per even
//! byte: its data bit 0, or for an ID byte whether the following byte still
//! belongs to the previous ID. Port captures (TPIU, DSTREAM) put FSYNC words
//! (`ff ff ff 7f`) between frames and may put HSYNC half-words (`ff 7f`)
//! inside them.

/// How a trace buffer is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Framing {
    /// One source's bytes, unframed (`source_data` snapshot buffers).
    Raw { trace_id: u8 },
    /// 16-byte frames from the start of the buffer (ETB, ETR, TMC: snapshot
    /// format `coresight`). With `reset_on_4x_fsync`, groups of four FSYNC
    /// words between frames mark a discontinuity, as Linux perf writes them.
    Aligned { reset_on_4x_fsync: bool },
    /// A trace port capture (TPIU, DSTREAM: `dstream_coresight`): decoding
    /// starts at the first FSYNC; FSYNCs may come between frames, and with
    /// `hsyncs` HSYNCs inside them.
    Synced { hsyncs: bool },
}

/// How a buffer file wraps the trace bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Container {
    /// The file is the trace.
    #[default]
    Plain,
    /// A DSTREAM probe capture: 512-byte blocks, each ending in an 8-byte
    /// footer that is not trace (`trc_pkt_lister -dstream_format`).
    Dstream,
}

pub(crate) const DSTREAM_BLOCK: usize = 512;
pub(crate) const DSTREAM_FOOTER: usize = 8;

/// A fault in the frame layer, at a byte offset of the buffer. The frames
/// after it are decoded from the next point of synchronisation, and every
/// source's packet decoder starts over (bytes were lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("trace buffer byte {offset:#x}: {kind}")]
pub struct FrameError {
    pub offset: u64,
    pub kind: FrameErrorKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameErrorKind {
    #[error("FSYNC inside a frame")]
    FsyncInFrame,
    #[error("HSYNC inside a frame of a capture without HSYNCs")]
    HsyncInFrame,
    #[error("{0} FSYNC words between frames, not a multiple of 4")]
    FsyncCount(u32),
    #[error("the buffer ends {0} bytes into a frame")]
    PartialFrame(usize),
}

const FSYNC: [u8; 4] = [0xFF, 0xFF, 0xFF, 0x7F];
const HSYNC: [u8; 2] = [0xFF, 0x7F];

/// One trace ID's run of bytes inside an unpacked frame.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Chunk {
    /// None before any ID has been seen.
    pub id: Option<u8>,
    /// OpenCSD's trace index of the run: the frame start, or the position
    /// of the ID byte that began it. Packet indexes count on from here.
    pub index: u64,
    pub start: u8,
    pub end: u8,
}

/// A frame's data bytes (at most 15) and their runs per trace ID.
#[derive(Clone, Debug, Default)]
pub(crate) struct FrameData {
    pub data: [u8; 15],
    pub chunks: [Chunk; 8],
    pub n: usize,
}

/// Splits a frame into per-ID runs; `cur_id` carries the ID across frames.
pub(crate) fn unpack(f: &[u8; 16], sof: u64, cur_id: &mut Option<u8>, out: &mut FrameData) {
    let aux = f[15];
    let mut n = 0usize;
    let mut c = 0usize;
    out.chunks[0] = Chunk { id: *cur_id, index: sof, start: 0, end: 0 };
    for k in 0..7 {
        let i = 2 * k;
        let flag = (aux >> k) & 1;
        let b = f[i];
        if b & 1 == 1 {
            let id = b >> 1;
            let mut next_is_old = false;
            if Some(id) != *cur_id {
                if flag == 1 {
                    out.data[n] = f[i + 1];
                    n += 1;
                    next_is_old = true;
                }
                *cur_id = Some(id);
                if n > out.chunks[c].start as usize {
                    out.chunks[c].end = n as u8;
                    c += 1;
                    out.chunks[c] = Chunk { id: Some(id), index: sof + i as u64, start: n as u8, end: 0 };
                } else {
                    out.chunks[c].id = Some(id);
                }
            }
            if !next_is_old {
                out.data[n] = f[i + 1];
                n += 1;
            }
        } else {
            out.data[n] = b | flag;
            out.data[n + 1] = f[i + 1];
            n += 2;
        }
    }
    if f[14] & 1 == 1 {
        *cur_id = Some(f[14] >> 1);
    } else {
        out.data[n] = f[14] | (aux >> 7);
        n += 1;
    }
    out.chunks[c].end = n as u8;
    out.n = c + 1;
}

pub(crate) enum DfEvent {
    Frame {
        frame: [u8; 16],
        sof: u64,
    },
    /// Four FSYNCs: every decoder starts over.
    Reset,
    Error(FrameError),
}

/// Bytes left over from the previous input (a partial frame or sync word)
/// followed by the new input, read as one.
struct Cursor<'a> {
    a: &'a [u8],
    a_index: u64,
    b: &'a [u8],
    b_index: u64,
    pos: usize,
}

impl Cursor<'_> {
    fn avail(&self) -> usize {
        self.a.len() + self.b.len() - self.pos
    }
    fn byte(&self, k: usize) -> u8 {
        let j = self.pos + k;
        if j < self.a.len() {
            self.a[j]
        } else {
            self.b[j - self.a.len()]
        }
    }
    fn is_fsync(&self) -> bool {
        self.avail() >= 4 && (0..4).all(|k| self.byte(k) == FSYNC[k])
    }
    fn index(&self) -> u64 {
        if self.pos < self.a.len() {
            self.a_index + self.pos as u64
        } else {
            self.b_index + (self.pos - self.a.len()) as u64
        }
    }
}

/// Splits a formatted buffer into frames, across any number of inputs.
#[derive(Clone, Debug)]
pub(crate) struct Deformatter {
    framing: Framing,
    pend: [u8; 16],
    pend_len: usize,
    pend_index: u64,
    synced: bool,
    frame: [u8; 16],
    frame_len: usize,
    /// A frame has begun at `sof` (its first bytes may have been HSYNCs,
    /// so `frame_len` can still be 0).
    in_frame: bool,
    sof: u64,
    /// FSYNC words seen between aligned frames, and where the run began.
    fsync_run: u32,
    fsync_at: u64,
    /// Bytes before the first FSYNC of a port capture.
    pub unsynced_bytes: u64,
}

impl Deformatter {
    pub fn new(framing: Framing) -> Deformatter {
        Deformatter {
            framing,
            pend: [0; 16],
            pend_len: 0,
            pend_index: 0,
            synced: false,
            frame: [0; 16],
            frame_len: 0,
            in_frame: false,
            sof: 0,
            fsync_run: 0,
            fsync_at: 0,
            unsynced_bytes: 0,
        }
    }

    /// The next frame (or reset or error) from `data[*pos..]`, `data[0]` at trace index `base`.
    pub fn next(&mut self, data: &[u8], base: u64, pos: &mut usize) -> Option<DfEvent> {
        match self.framing {
            Framing::Raw { .. } => None,
            Framing::Aligned { reset_on_4x_fsync } => self.next_aligned(data, base, pos, reset_on_4x_fsync),
            Framing::Synced { hsyncs } => {
                let pend = self.pend;
                let mut c = Cursor { a: &pend[..self.pend_len], a_index: self.pend_index, b: &data[*pos..], b_index: base + *pos as u64, pos: 0 };
                let ev = self.next_synced(&mut c, hsyncs);
                // Keep what could not be used yet (less than a sync word or pair).
                if ev.is_none() {
                    let left = c.avail();
                    let idx = c.index();
                    let mut tmp = [0u8; 16];
                    for (k, t) in tmp.iter_mut().enumerate().take(left) {
                        *t = c.byte(k);
                    }
                    self.pend[..left].copy_from_slice(&tmp[..left]);
                    self.pend_len = left;
                    self.pend_index = idx;
                    *pos = data.len();
                } else if c.pos >= c.a.len() {
                    *pos += c.pos - c.a.len();
                    self.pend_len = 0;
                } else {
                    let used = c.pos;
                    self.pend.copy_within(used..self.pend_len, 0);
                    self.pend_len -= used;
                    self.pend_index += used as u64;
                }
                ev
            }
        }
    }

    fn next_aligned(&mut self, data: &[u8], base: u64, pos: &mut usize, reset: bool) -> Option<DfEvent> {
        // The usual case: a whole frame in the input, not an FSYNC.
        let left = &data[*pos..];
        if self.pend_len == 0 && self.fsync_run == 0 && left.len() >= 16 && !(reset && left[..4] == FSYNC) {
            let frame: [u8; 16] = left[..16].try_into().unwrap_or([0; 16]);
            let sof = base + *pos as u64;
            *pos += 16;
            return Some(DfEvent::Frame { frame, sof });
        }
        // Otherwise gather bytes in `pend`, across inputs: 4 at a frame
        // start to tell an FSYNC (when they count) from a frame, then 16.
        loop {
            let need = if reset && self.pend_len < 4 { 4 } else { 16 };
            if self.pend_len == 0 {
                self.pend_index = base + *pos as u64;
            }
            let take = (need - self.pend_len).min(data.len() - *pos);
            self.pend[self.pend_len..self.pend_len + take].copy_from_slice(&data[*pos..*pos + take]);
            self.pend_len += take;
            *pos += take;
            if self.pend_len < need {
                return None;
            }
            if need == 4 {
                if self.pend[..4] == FSYNC {
                    if self.fsync_run == 0 {
                        self.fsync_at = self.pend_index;
                    }
                    self.fsync_run += 1;
                    self.pend_len = 0;
                } else if let Some(ev) = self.end_fsync_run() {
                    return Some(ev);
                }
                continue;
            }
            self.pend_len = 0;
            return Some(DfEvent::Frame { frame: self.pend, sof: self.pend_index });
        }
    }

    /// After a run of FSYNCs between frames: four (or a multiple) reset the
    /// sources, other counts are a fault.
    fn end_fsync_run(&mut self) -> Option<DfEvent> {
        let n = std::mem::take(&mut self.fsync_run);
        match n {
            0 => None,
            n if n.is_multiple_of(4) => Some(DfEvent::Reset),
            n => Some(DfEvent::Error(FrameError { offset: self.fsync_at, kind: FrameErrorKind::FsyncCount(n) })),
        }
    }

    fn next_synced(&mut self, c: &mut Cursor<'_>, hsyncs: bool) -> Option<DfEvent> {
        if !self.synced {
            while c.avail() >= 4 {
                if c.is_fsync() {
                    self.synced = true;
                    break;
                }
                c.pos += 1;
                self.unsynced_bytes += 1;
            }
            if !self.synced {
                return None;
            }
        }
        if !self.in_frame {
            loop {
                if c.avail() < 4 {
                    return None;
                }
                if !c.is_fsync() {
                    break;
                }
                c.pos += 4;
            }
            self.sof = c.index();
            self.in_frame = true;
        }
        while self.frame_len < 16 {
            if self.frame_len.is_multiple_of(4) {
                if c.avail() < 4 {
                    return None;
                }
                if c.is_fsync() {
                    return Some(self.lost_sync(c.index(), FrameErrorKind::FsyncInFrame));
                }
            }
            if c.avail() < 2 {
                return None;
            }
            let pair = [c.byte(0), c.byte(1)];
            if pair == HSYNC {
                if !hsyncs {
                    let at = c.index();
                    c.pos += 2;
                    return Some(self.lost_sync(at, FrameErrorKind::HsyncInFrame));
                }
                c.pos += 2;
                continue;
            }
            self.frame[self.frame_len..self.frame_len + 2].copy_from_slice(&pair);
            self.frame_len += 2;
            c.pos += 2;
        }
        self.frame_len = 0;
        self.in_frame = false;
        Some(DfEvent::Frame { frame: self.frame, sof: self.sof })
    }

    fn lost_sync(&mut self, offset: u64, kind: FrameErrorKind) -> DfEvent {
        self.frame_len = 0;
        self.in_frame = false;
        self.synced = false;
        DfEvent::Error(FrameError { offset, kind })
    }

    /// End of the trace: an FSYNC run of the wrong length, a frame cut
    /// short. Call until it returns None.
    pub fn finish(&mut self) -> Option<FrameError> {
        if let Some(DfEvent::Error(e)) = self.end_fsync_run() {
            return Some(e);
        }
        let (len, offset) = match self.framing {
            Framing::Raw { .. } => return None,
            Framing::Aligned { .. } => (self.pend_len, self.pend_index),
            Framing::Synced { .. } if self.frame_len > 0 => (self.frame_len + self.pend_len, self.sof),
            // Fewer than four bytes that might still have been an FSYNC.
            Framing::Synced { .. } => (self.pend_len * self.synced as usize, self.pend_index),
        };
        self.pend_len = 0;
        self.frame_len = 0;
        self.in_frame = false;
        (len > 0).then_some(FrameError { offset, kind: FrameErrorKind::PartialFrame(len) })
    }
}

/// Writes trace bytes of several sources as CoreSight frames (for tests and
/// the simulator). ID 0 is the null ID, used to pad the last frame.
#[derive(Clone, Debug, Default)]
pub struct FrameWriter {
    frame: [u8; 16],
    slot: usize,
    aux: u8,
    cur_id: Option<u8>,
    pending: Option<(u8, u8)>,
    fsync_every: Option<u32>,
    frames: u64,
}

impl FrameWriter {
    pub fn new() -> FrameWriter {
        FrameWriter::default()
    }

    /// A port capture: an FSYNC before the first frame and after every `n` frames.
    pub fn with_fsync_every(n: u32) -> FrameWriter {
        FrameWriter { fsync_every: Some(n.max(1)), ..FrameWriter::default() }
    }

    /// Appends `data` of source `id` (1..=0x6F).
    pub fn write(&mut self, id: u8, data: &[u8], out: &mut Vec<u8>) {
        debug_assert!((1..0x70).contains(&id), "trace ID {id:#x} is reserved");
        for &b in data {
            if let Some((pid, pb)) = self.pending.replace((id, b)) {
                self.place(pid, pb, Some(id), out);
            }
        }
    }

    /// Completes the current frame with null-ID padding.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if let Some((pid, pb)) = self.pending.take() {
            self.place(pid, pb, Some(0), out);
        }
        while self.slot != 0 {
            if self.slot.is_multiple_of(2) && self.cur_id != Some(0) {
                self.frame[self.slot] = 0x01;
                self.cur_id = Some(0);
            } else {
                self.frame[self.slot] = 0;
            }
            self.advance(1, out);
        }
    }

    fn advance(&mut self, n: usize, out: &mut Vec<u8>) {
        self.slot += n;
        if self.slot == 15 {
            if self.fsync_every.is_some_and(|k| self.frames.is_multiple_of(k as u64)) {
                out.extend_from_slice(&FSYNC);
            }
            self.frame[15] = self.aux;
            out.extend_from_slice(&self.frame);
            self.frames += 1;
            self.slot = 0;
            self.aux = 0;
        }
    }

    /// Places byte `b` of source `id`; `next` is the source of the byte after it.
    fn place(&mut self, id: u8, b: u8, next: Option<u8>, out: &mut Vec<u8>) {
        if self.slot % 2 == 1 {
            // Odd slots are data of the current ID (the even slot before made sure).
            self.frame[self.slot] = b;
            self.advance(1, out);
            return;
        }
        if self.cur_id != Some(id) {
            self.frame[self.slot] = (id << 1) | 1;
            self.cur_id = Some(id);
            self.advance(1, out);
            if self.slot == 0 {
                return self.place(id, b, next, out);
            }
            self.frame[self.slot] = b;
            self.advance(1, out);
            return;
        }
        match next {
            Some(n) if n != id && self.slot < 14 => {
                // Last byte before a switch: the new ID goes first, flagged so that this byte stays with the old one.
                self.frame[self.slot] = (n << 1) | 1;
                self.aux |= 1 << (self.slot / 2);
                self.frame[self.slot + 1] = b;
                self.cur_id = Some(n);
                self.advance(2, out);
            }
            _ => {
                self.frame[self.slot] = b & 0xFE;
                self.aux |= (b & 1) << (self.slot / 2);
                self.advance(1, out);
            }
        }
    }
}
