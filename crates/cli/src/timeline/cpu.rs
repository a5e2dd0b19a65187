//! A CPU's own tracks: which thread runs and in which mode (user, kernel,
//! interrupts nested in them) on one, decode errors and uncertain spans on
//! the other.

use anyhow::Result;
use serde_json::json;

use super::tef::TefWriter;
use super::tracks;
use super::tracks::Track;

/// A level of the CPU track under the thread's slice.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    User,
    Kernel,
    Interrupt,
}

impl Mode {
    pub fn of(addr: u64) -> Mode {
        if addr >> 63 == 1 {
            Mode::Kernel
        } else {
            Mode::User
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::User => "user",
            Mode::Kernel => "kernel",
            Mode::Interrupt => "interrupt",
        }
    }
}

/// What a decode-track slice shows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Problem {
    Error,
    Uncertain,
}

/// One CPU (or per-thread buffer) of the trace.
pub struct Cpu {
    pub lane: u32,
    /// The thread on it while tracing, and that thread's slice name.
    pub thread: Option<(Track, String)>,
    modes: Vec<Mode>,
    problem: Option<(Problem, String)>,
    pub last_time: u64,
}

impl Cpu {
    pub fn new(lane: u32, w: &mut TefWriter) -> Result<Cpu> {
        let name = tracks::lane_name(lane);
        w.name_track(tracks::cpu(lane), Some(&name), Some("CPUs"), Some(-1))?;
        w.name_track(tracks::decode(lane), Some(&format!("{name} decode")), Some("decode"), None)?;
        Ok(Cpu { lane, thread: None, modes: Vec::new(), problem: None, last_time: 0 })
    }

    /// `thread` starts running here at `t`, in `mode`.
    pub fn enter(&mut self, t: u64, thread: Track, name: String, mode: Mode, w: &mut TefWriter) -> Result<()> {
        self.leave(t, w)?;
        let track = tracks::cpu(self.lane);
        w.begin(track, t, &name, "thread")?;
        self.thread = Some((thread, name));
        self.modes.push(mode);
        w.begin(track, t, mode.name(), "mode")
    }

    /// The thread stops running here (switched out, or tracing stops).
    pub fn leave(&mut self, t: u64, w: &mut TefWriter) -> Result<()> {
        self.set_modes(t, &[], w)?;
        if let Some((_, name)) = self.thread.take() {
            w.end(tracks::cpu(self.lane), t, &name)?;
        }
        Ok(())
    }

    /// The mode after a branch to `to` with `interrupts` interrupt frames open.
    pub fn update_mode(&mut self, t: u64, to: u64, interrupts: usize, w: &mut TefWriter) -> Result<()> {
        let base = match self.modes.first() {
            Some(&m) if interrupts > 0 => m,
            _ => Mode::of(to),
        };
        let mut want = [Mode::Interrupt; 8];
        want[0] = base;
        let n = 1 + interrupts.min(want.len() - 1);
        self.set_modes(t, &want[..n], w)
    }

    fn set_modes(&mut self, t: u64, want: &[Mode], w: &mut TefWriter) -> Result<()> {
        let track = tracks::cpu(self.lane);
        let same = self.modes.iter().zip(want).take_while(|(a, b)| a == b).count();
        while self.modes.len() > same {
            let m = self.modes.pop().expect("longer than same");
            w.end(track, t, m.name())?;
        }
        for &m in &want[same..] {
            self.modes.push(m);
            w.begin(track, t, m.name(), "mode")?;
        }
        Ok(())
    }

    /// A decode error at `t`: a slice until the decode goes on.
    pub fn error(&mut self, t: u64, name: &str, args: serde_json::Value, w: &mut TefWriter) -> Result<()> {
        self.settle(t, w)?;
        w.begin_with(tracks::decode(self.lane), t, name, "error", &args)?;
        self.problem = Some((Problem::Error, name.to_string()));
        Ok(())
    }

    /// An instruction decoded at `t`, certain or not.
    pub fn instruction(&mut self, t: u64, uncertain: bool, w: &mut TefWriter) -> Result<()> {
        match (&self.problem, uncertain) {
            (Some((Problem::Uncertain, _)), true) => Ok(()),
            (_, true) => {
                self.settle(t, w)?;
                w.begin(tracks::decode(self.lane), t, "uncertain", "uncertain")?;
                self.problem = Some((Problem::Uncertain, "uncertain".into()));
                Ok(())
            }
            (_, false) => self.settle(t, w),
        }
    }

    /// The decode goes on at `t`: an error's slice ends.
    pub fn decoded(&mut self, t: u64, w: &mut TefWriter) -> Result<()> {
        if matches!(self.problem, Some((Problem::Error, _))) {
            self.settle(t, w)?;
        }
        Ok(())
    }

    /// Ends the open decode-track slice.
    pub fn settle(&mut self, t: u64, w: &mut TefWriter) -> Result<()> {
        if let Some((_, name)) = self.problem.take() {
            w.end(tracks::decode(self.lane), t, &name)?;
        }
        Ok(())
    }
}

/// A decode error's slice name and arguments, by perf's error code.
pub fn error_slice(code: u32, reason: &str, offset: usize, ip: Option<u64>) -> (&'static str, serde_json::Value) {
    let name = match code {
        3 => "trace data error",
        4 => "trace ends early",
        5 => "no code",
        6 => "trace and code disagree",
        7 => "overflow",
        10 => "no progress",
        _ => "decode error",
    };
    (name, json!({ "reason": reason, "code": code, "offset": offset, "ip": ip.map(|ip| format!("{ip:#x}")) }))
}
