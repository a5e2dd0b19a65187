//! ptxed's output: an instruction's address per line, `[event]` lines, and
//! `[offset, ip: error: message]` for decode errors, with libipt's messages.
//! For the block decoder it also cuts the instructions into libipt's blocks
//! (`--block:show-blocks`, the block count of `--stat`).

use std::io::{self, Write};

use intel_pt::flow::{FlowErrorKind, FlowEvent, FlowSink};
use intel_pt::{Packet, PacketErrorKind};
use isa::BranchClass;

use super::clock::EventClock;
use super::options::{DecoderKind, Options};
use super::stats::Stats;
use super::status::{Show, Status};

/// What of the options the output depends on.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub decoder: DecoderKind,
    pub quiet: bool,
    pub event_ip: bool,
    pub event_time: bool,
    pub event_tick: bool,
    pub event_iflags: bool,
    pub show_blocks: bool,
    pub end_on_call: bool,
    pub end_on_jump: bool,
    /// Number the blocks (`--stat`).
    pub counting: bool,
    /// `--resync-on-error`.
    pub resync: bool,
}

impl Style {
    pub fn new(o: &Options) -> Style {
        Style {
            decoder: o.decoder,
            quiet: o.quiet,
            event_ip: o.event_ip,
            event_time: o.event_time,
            event_tick: o.event_tick,
            event_iflags: o.event_iflags,
            show_blocks: o.show_blocks,
            end_on_call: o.end_on_call,
            end_on_jump: o.end_on_jump,
            counting: o.stats.is_some(),
            resync: o.resync_on_error,
        }
    }
}

/// Takes the decoder's events and prints them as ptxed does. The first
/// write error is kept (a sink cannot return one) and given by [`Printer::finish`].
pub struct Printer<W: Write> {
    out: W,
    style: Style,
    pub stats: Stats,
    status: Status,
    /// A block of the block decoder is open: the next instruction joins it.
    in_block: bool,
    /// The time events are given.
    clock: EventClock,
    /// The time of the last event, which a tick must differ from.
    last_time: u64,
    /// With `--event:tick`: the IP of an instruction that took a flow
    /// packet, whose tick (if the time moved) goes before the next event.
    tick_at: Option<u64>,
    failed: Option<io::Error>,
}

impl<W: Write> Printer<W> {
    pub fn new(out: W, style: Style, clock: EventClock) -> Self {
        Printer { out, style, stats: Stats::default(), status: Status::default(), in_block: false, clock, last_time: 0, tick_at: None, failed: None }
    }

    /// The output, or the first error writing it.
    pub fn finish(mut self) -> io::Result<W> {
        self.tick();
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(self.out),
        }
    }

    /// A line as it is, unless `--quiet`.
    pub fn line(&mut self, args: std::fmt::Arguments<'_>) {
        if !self.style.quiet && self.failed.is_none() {
            if let Err(e) = self.out.write_fmt(args).and_then(|()| self.out.write_all(b"\n")) {
                self.failed = Some(e);
            }
        }
    }

    /// An event line: `[time  what]`, the time with `--event:time`. Ends
    /// the open block.
    pub fn event_line(&mut self, what: std::fmt::Arguments<'_>) {
        self.in_block = false;
        let t = self.clock.now();
        self.last_time = t;
        if self.style.event_time {
            self.line(format_args!("[{t:016x}  {what}]"));
        } else {
            self.line(format_args!("[{what}]"));
        }
    }

    /// The tick of the last instruction that took a flow packet, when the
    /// time has moved since the last event (libipt's tick events).
    fn tick(&mut self) {
        if let Some(ip) = self.tick_at.take() {
            if self.clock.now() != self.last_time {
                let at = self.ip_suffix(Some(ip));
                self.event_line(format_args!("tick{at}"));
            }
        }
    }

    /// `, ip: IP` after an event's name with `--event:ip`.
    fn ip_suffix(&self, ip: Option<u64>) -> String {
        match ip.filter(|_| self.style.event_ip) {
            Some(ip) => format!(", ip: {ip:016x}"),
            None => String::new(),
        }
    }

    /// A decode error, as ptxed's `[offset, ip: error: message]`. With
    /// `--resync-on-error`, a PSB+'s status that contradicts the decoder's
    /// (another execution mode, tracing off) fails ptxed's resync the same
    /// way, at the same place: a second line, `resync error`, before it
    /// goes on at the next PSB.
    pub fn error(&mut self, offset: usize, ip: Option<u64>, kind: &FlowErrorKind) {
        self.in_block = false;
        let ip = ip.unwrap_or(0);
        let message = libipt_message(kind);
        self.line(format_args!("[{offset:x}, {ip:x}: error: {message}]"));
        if self.style.resync && matches!(kind, FlowErrorKind::ModeMismatch { .. } | FlowErrorKind::PsbMismatch { fup: None }) {
            self.line(format_args!("[{offset:x}, {ip:x}: resync error: {message}]"));
        }
    }

    fn insn(&mut self, ip: u64, class: BranchClass) {
        self.stats.insn += 1;
        if self.style.decoder == DecoderKind::Block {
            if !self.in_block {
                self.in_block = true;
                self.stats.blocks += 1;
                if self.style.show_blocks {
                    if self.style.counting {
                        let n = self.stats.blocks;
                        self.line(format_args!("[block {n:x}]"));
                    } else {
                        self.line(format_args!("[block]"));
                    }
                }
            }
            self.in_block = !ends_block(class, self.style.end_on_call, self.style.end_on_jump);
        }
        if self.status.speculative {
            self.line(format_args!("? {ip:016x}"));
        } else {
            self.line(format_args!("{ip:016x}"));
        }
        if self.style.event_tick && takes_packet(class) {
            self.tick_at = Some(ip);
        }
    }

    /// A state packet (at `ip` when the trace binds it to one); `restated`
    /// in a PSB+.
    fn status(&mut self, packet: &Packet, ip: Option<u64>, restated: bool) {
        let mut lines = Vec::new();
        self.status.take(packet, ip, restated, Show { ip: self.style.event_ip, iflags: self.style.event_iflags }, &mut lines);
        // (An event, printed or not: a tick must differ from its time.)
        self.last_time = self.clock.now();
        for l in lines {
            self.event_line(format_args!("{l}"));
        }
    }
}

/// Whether libipt's block decoder ends a block after an instruction of
/// `class`: one that needs the trace to go on does; direct jumps and calls
/// only when asked to.
fn ends_block(class: BranchClass, end_on_call: bool, end_on_jump: bool) -> bool {
    match class {
        BranchClass::None | BranchClass::Nop => false,
        BranchClass::DirectCall => end_on_call,
        BranchClass::DirectJump => end_on_jump,
        _ => true,
    }
}

/// Whether an instruction of `class` takes a flow packet (a TNT bit or a
/// TIP) when it runs: where libipt's decoders make a tick.
fn takes_packet(class: BranchClass) -> bool {
    matches!(class, BranchClass::CondBranch | BranchClass::IndirectJump | BranchClass::IndirectCall | BranchClass::Return | BranchClass::FarTransfer)
}

/// libipt's message (`pt_errstr`) for the error it reports in this case.
fn libipt_message(kind: &FlowErrorKind) -> &'static str {
    match kind {
        FlowErrorKind::Unmapped => "no memory mapped at this address",
        FlowErrorKind::BadInsn => "unknown instruction",
        FlowErrorKind::NoTnt | FlowErrorKind::NoTip | FlowErrorKind::NoTrapPackets => "trace stream does not match query",
        FlowErrorKind::Packet(PacketErrorKind::Truncated { .. }) => "reached end of trace stream",
        FlowErrorKind::Packet(PacketErrorKind::BadOpcode(_) | PacketErrorKind::BadExtOpcode(_) | PacketErrorKind::BadExt2Opcode(_)) => {
            "unknown opcode"
        }
        FlowErrorKind::Packet(_) => "unknown packet",
        FlowErrorKind::EndOfTrace => "reached end of trace stream",
        FlowErrorKind::Overflow => "overflow",
        FlowErrorKind::BadContext => "unexpected packet context",
        FlowErrorKind::PsbMismatch { .. } | FlowErrorKind::ModeMismatch { .. } => "bad status update",
        FlowErrorKind::NoProgress => "never-ending loop",
    }
}

impl<W: Write> FlowSink for Printer<W> {
    fn event(&mut self, event: FlowEvent) {
        if let FlowEvent::State { packet, restated, .. } = &event {
            // A timing packet moves the clock; a CBR is an event too.
            if self.clock.take(packet, *restated) && !matches!(packet, Packet::Cbr(_)) {
                return;
            }
        }
        self.tick();
        match event {
            FlowEvent::Insn { ip, class, .. } => self.insn(ip, class),
            FlowEvent::Trap { from, to, .. } => {
                let at = if self.style.event_ip { format!(", from: {from:016x}, to: {to:016x}") } else { String::new() };
                self.event_line(format_args!("interrupt{at}"));
            }
            FlowEvent::End { disabled: true, at, to, .. } => {
                // An asynchronous stop (FUP + TIP.PGD) names where, with
                // --event:ip; a TIP.PGD at the IP the walk reached is none.
                let at = match at.filter(|&a| self.style.event_ip && to != Some(a)) {
                    Some(at) => format!(", at: {at:016x}"),
                    None => String::new(),
                };
                let ip = self.ip_suffix(to);
                self.event_line(format_args!("disabled{at}{ip}"));
            }
            FlowEvent::End { disabled: false, .. } => {
                self.in_block = false;
                self.line(format_args!("[end of trace]"));
            }
            FlowEvent::Error { kind: FlowErrorKind::Overflow, .. } => {
                self.status.overflow();
                self.event_line(format_args!("overflow"));
                self.clock.overflow();
            }
            FlowEvent::Error { offset, ip, kind, .. } => self.error(offset, ip, &kind),
            FlowEvent::Enabled { ip, resumed, .. } => {
                let at = self.ip_suffix(Some(ip));
                self.event_line(format_args!("{}{at}", if resumed { "resumed" } else { "enabled" }));
            }
            FlowEvent::State { ip, packet, restated, .. } => self.status(&packet, ip, restated),
        }
    }

    fn caught_up(&mut self) {
        self.tick();
    }
}
