//! A trace buffer's packets, all sources interleaved in buffer order:
//! frames are split per trace ID and each ID's bytes go to its own
//! [`PacketDecoder`], the way OpenCSD's frame demultiplexer feeds its
//! packet processors (so packets come out in the same order).

use crate::config::EtmV4Config;
use crate::decode::{Emit, ErrorRecovery, PacketDecoder};
use crate::frame::{unpack, Container, Deformatter, DfEvent, FrameData, FrameError, Framing, DSTREAM_BLOCK, DSTREAM_FOOTER};
use crate::TracePacket;

const NO_DECODER: u8 = u8::MAX;

/// Bytes of a buffer that were not decoded, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Complete frames read.
    pub frames: u64,
    /// Data bytes of trace IDs with no decoder (or before any ID).
    pub unrouted_bytes: u64,
    /// Bytes of a port capture before its first FSYNC.
    pub unsynced_bytes: u64,
}

/// Decoding state of a trace buffer shared by ETMv4 sources. Feed it the
/// buffer in one or more [`Input`]s and call [`PacketStream::finish`] at the
/// end; [`PacketReader`] does that for one in-memory buffer. Clone it to fork
/// the state.
#[derive(Clone, Debug)]
pub struct PacketStream {
    framing: Framing,
    deformatter: Deformatter,
    decoders: Vec<PacketDecoder>,
    route: [u8; 128],
    cur_id: Option<u8>,
    frame: FrameData,
    /// Current run in `frame` and the position in it.
    chunk: usize,
    chunk_pos: usize,
    /// Progress of `finish`: 0 for the frame layer, then trace ID + 1.
    finish_step: usize,
    stats: StreamStats,
}

/// A block of a trace buffer and how far it has been read.
#[derive(Clone, Copy, Debug)]
pub struct Input<'d> {
    data: &'d [u8],
    pos: usize,
    base: u64,
}

impl<'d> Input<'d> {
    /// `data`, whose first byte has trace index `base` (its offset in the buffer).
    pub fn new(data: &'d [u8], base: u64) -> Input<'d> {
        Input { data, pos: 0, base }
    }

    /// Bytes of `data` consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

impl PacketStream {
    /// A stream for a buffer with `framing`, decoding the sources in
    /// `configs` (by their trace IDs; other IDs are skipped). Unframed data
    /// ([`Framing::Raw`]) is decoded with the first config and reported
    /// under the framing's trace ID.
    pub fn new(framing: Framing, configs: &[EtmV4Config], recovery: ErrorRecovery) -> PacketStream {
        let mut route = [NO_DECODER; 128];
        let mut decoders = Vec::new();
        if let Framing::Raw { trace_id } = framing {
            // Unframed data has no ID: it all goes to the first source.
            if let Some(c) = configs.first() {
                route[trace_id as usize & 0x7F] = 0;
                let c = EtmV4Config { traceidr: trace_id as u32, ..*c };
                decoders.push(PacketDecoder::new(&c).with_recovery(recovery));
            }
        } else {
            for c in configs {
                let id = c.trace_id() as usize;
                if route[id] == NO_DECODER {
                    route[id] = decoders.len() as u8;
                    decoders.push(PacketDecoder::new(c).with_recovery(recovery));
                }
            }
        }
        PacketStream {
            framing,
            deformatter: Deformatter::new(framing),
            decoders,
            route,
            cur_id: None,
            frame: FrameData::default(),
            chunk: 0,
            chunk_pos: 0,
            finish_step: 0,
            stats: StreamStats::default(),
        }
    }

    pub fn stats(&self) -> StreamStats {
        StreamStats { unsynced_bytes: self.deformatter.unsynced_bytes, ..self.stats }
    }

    /// The decoder of a trace ID, if the stream has one.
    pub fn decoder(&self, trace_id: u8) -> Option<&PacketDecoder> {
        self.decoders.get(*self.route.get(trace_id as usize)? as usize)
    }

    /// The next packet from `input`, or a frame error; None when `input` is
    /// used up (more input may follow, or [`PacketStream::finish`]).
    #[inline]
    pub fn next<'s, 'd: 's>(&'s mut self, input: &mut Input<'d>) -> Option<Result<TracePacket<'s>, FrameError>> {
        let t = self.advance(input)?;
        Some(t.map(|t| self.resolve(t, input.data)))
    }

    /// End of the trace: a frame cut short, then each source's cut-off
    /// packet (by trace ID). Call until it returns None.
    pub fn finish(&mut self) -> Option<Result<TracePacket<'_>, FrameError>> {
        let t = self.finish_token()?;
        Some(t.map(|t| self.resolve(t, &[])))
    }

    /// Like `next`, but returns where the packet is instead of borrowing it,
    /// so that callers can keep using the stream when there is none.
    #[inline]
    fn advance(&mut self, input: &mut Input<'_>) -> Option<Result<Token, FrameError>> {
        if let Framing::Raw { trace_id } = self.framing {
            let slot = self.route[trace_id as usize & 0x7F] as usize;
            let Some(dec) = self.decoders.get_mut(slot) else {
                self.stats.unrouted_bytes += (input.data.len() - input.pos) as u64;
                input.pos = input.data.len();
                return None;
            };
            let emit = dec.step(input.data, input.base, &mut input.pos)?;
            return Some(Ok(Token { slot, emit, from_input: true }));
        }
        loop {
            if self.chunk < self.frame.n {
                let c = self.frame.chunks[self.chunk];
                let slot = c.id.map_or(NO_DECODER, |id| self.route[id as usize & 0x7F]) as usize;
                if let Some(dec) = self.decoders.get_mut(slot) {
                    let bytes = &self.frame.data[c.start as usize..c.end as usize];
                    if let Some(emit) = dec.step(bytes, c.index, &mut self.chunk_pos) {
                        return Some(Ok(Token { slot, emit, from_input: false }));
                    }
                } else {
                    self.stats.unrouted_bytes += (c.end - c.start) as u64;
                }
                self.chunk += 1;
                self.chunk_pos = 0;
                continue;
            }
            match self.deformatter.next(input.data, input.base, &mut input.pos)? {
                DfEvent::Frame { frame, sof } => {
                    unpack(&frame, sof, &mut self.cur_id, &mut self.frame);
                    self.stats.frames += 1;
                    self.chunk = 0;
                    self.chunk_pos = 0;
                }
                DfEvent::Reset => self.reset_sources(),
                DfEvent::Error(err) => {
                    self.reset_sources();
                    return Some(Err(err));
                }
            }
        }
    }

    fn finish_token(&mut self) -> Option<Result<Token, FrameError>> {
        if self.finish_step == 0 {
            if let Some(err) = self.deformatter.finish() {
                return Some(Err(err));
            }
            self.finish_step = 1;
        }
        while self.finish_step <= self.route.len() {
            let slot = self.route[self.finish_step - 1] as usize;
            self.finish_step += 1;
            if let Some(emit) = self.decoders.get_mut(slot).and_then(|d| d.finish_emit()) {
                return Some(Ok(Token { slot, emit, from_input: true }));
            }
        }
        None
    }

    #[inline]
    fn resolve<'a>(&'a self, t: Token, input: &'a [u8]) -> TracePacket<'a> {
        let data = if t.from_input {
            input
        } else {
            let c = self.frame.chunks[self.chunk];
            &self.frame.data[c.start as usize..c.end as usize]
        };
        self.decoders[t.slot].resolve(t.emit, data)
    }

    fn reset_sources(&mut self) {
        self.cur_id = None;
        self.frame.n = 0;
        for d in &mut self.decoders {
            d.reset();
        }
    }
}

/// Where a packet just decoded is (see `PacketStream::advance`).
#[derive(Clone, Copy, Debug)]
struct Token {
    slot: usize,
    emit: Emit,
    /// Raw bytes in the input (raw framing) rather than in the current frame.
    from_input: bool,
}

/// All packets of one in-memory trace buffer, with the end-of-trace
/// reports at the end.
#[derive(Clone, Debug)]
pub struct PacketReader<'d> {
    data: &'d [u8],
    container: Container,
    /// Next block of `data` to read (DSTREAM files).
    block: usize,
    input: Input<'d>,
    stream: PacketStream,
    ended: bool,
}

impl<'d> PacketReader<'d> {
    pub fn new(data: &'d [u8], framing: Framing, configs: &[EtmV4Config], recovery: ErrorRecovery) -> PacketReader<'d> {
        PacketReader::with_container(data, Container::Plain, framing, configs, recovery)
    }

    /// A buffer whose file wraps the trace in `container` (the trace index
    /// then counts trace bytes only, as OpenCSD counts them).
    pub fn with_container(
        data: &'d [u8],
        container: Container,
        framing: Framing,
        configs: &[EtmV4Config],
        recovery: ErrorRecovery,
    ) -> PacketReader<'d> {
        let mut r = PacketReader {
            data,
            container,
            block: 0,
            input: Input::new(&[], 0),
            stream: PacketStream::new(framing, configs, recovery),
            ended: false,
        };
        r.next_block();
        r
    }

    pub fn stats(&self) -> StreamStats {
        self.stream.stats()
    }

    /// Moves `input` to the next block of trace; false at the end.
    fn next_block(&mut self) -> bool {
        let (start, len, base) = match self.container {
            Container::Plain => (0, self.data.len(), 0),
            Container::Dstream => {
                let start = self.block * DSTREAM_BLOCK;
                (start, DSTREAM_BLOCK - DSTREAM_FOOTER, (self.block * (DSTREAM_BLOCK - DSTREAM_FOOTER)) as u64)
            }
        };
        if start >= self.data.len() || (self.block > 0 && self.container == Container::Plain) {
            return false;
        }
        self.block += 1;
        self.input = Input::new(&self.data[start..(start + len).min(self.data.len())], base);
        true
    }

    /// The next packet or frame error; None at the end of the buffer.
    #[allow(clippy::should_implement_trait)] // lends from self: not an Iterator
    #[inline]
    pub fn next(&mut self) -> Option<Result<TracePacket<'_>, FrameError>> {
        self.next_item().map(|(_, item)| item)
    }

    /// Like `next`, and whether the item comes from the end-of-trace flush
    /// (a frame cut short, the sources' cut-off packets, in trace ID order).
    #[inline]
    pub fn next_item(&mut self) -> Option<(bool, Result<TracePacket<'_>, FrameError>)> {
        while !self.ended {
            match self.stream.advance(&mut self.input) {
                Some(t) => return Some((false, t.map(|t| self.stream.resolve(t, self.input.data)))),
                None => self.ended = !self.next_block(),
            }
        }
        let t = self.stream.finish_token()?;
        Some((true, t.map(|t| self.stream.resolve(t, &[]))))
    }
}
