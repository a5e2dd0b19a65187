//! What `decode` makes of a trace, whichever the decoder: which lines to make (`--itrace`), the
//! AUX buffers it reads, and the lines themselves.

use anyhow::{bail, Context, Result};
use isa::BranchClass;

/// What to print, from `--itrace` letters: b (branches), i (instructions),
/// e (errors), and perf's period for instructions where it is a count.
pub struct Itrace {
    pub(crate) branches: bool,
    pub(crate) instructions: bool,
    pub(crate) errors: bool,
    /// With `instructions`: a line every this many instructions (1: each).
    pub(crate) period: u64,
}

impl Itrace {
    /// perf's `--itrace` letters and period (`i1000i`: every 1000th
    /// instruction; `i0ns` or `i1i`: each). A period in time or ticks is
    /// refused unless zero (perf: as often as possible). `i` alone gives
    /// each instruction (perf's default period there, 100 us, is not taken).
    pub fn parse(s: &str) -> Result<Itrace> {
        let mut t = Itrace { branches: false, instructions: false, errors: false, period: 1 };
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            if c.is_ascii_digit() {
                let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
                let n: u64 = rest[..digits].parse().with_context(|| format!("--itrace={s}: period {} is too large", &rest[..digits]))?;
                rest = &rest[digits..];
                let unit = ["i", "t", "ms", "us", "ns"].into_iter().find(|u| rest.starts_with(u));
                rest = &rest[unit.map_or(0, str::len)..];
                match unit {
                    Some("i") => t.period = n.max(1),
                    _ if n == 0 => t.period = 1,
                    unit => bail!(
                        "--itrace={s}: a period of {n}{} is not supported: instructions are sampled by count (i1000i: every 1000th; i1i or i0ns: each)",
                        unit.unwrap_or("ns")
                    ),
                }
                continue;
            }
            match c {
                'b' => t.branches = true,
                'i' => t.instructions = true,
                'e' => t.errors = true,
                _ => bail!("--itrace: '{c}' is not supported (b, i, e, and a period in instructions such as i1000i)"),
            }
            rest = &rest[c.len_utf8()..];
        }
        Ok(t)
    }

    /// Whether the next instruction gets a line (every `period`-th, counted
    /// in `seen`, the instructions since the last that got one).
    #[inline]
    pub(crate) fn sampled(&self, seen: &mut u64) -> bool {
        *seen += 1;
        if *seen >= self.period {
            *seen = 0;
            true
        } else {
            false
        }
    }
}

/// One AUX buffer of the input (perf's queue): per CPU, or per thread.
pub(crate) struct Queue {
    /// The mmap index of its AUXTRACE records.
    pub idx: u32,
    /// The CPU (`u32::MAX` for a per-thread buffer followed across CPUs).
    pub cpu: u32,
    /// The traced thread of a per-thread buffer.
    pub thread: Option<i32>,
    pub trace: Vec<u8>,
}

/// One line of output, from one queue and CPU.
pub(crate) struct Out {
    pub time: u64,
    pub queue: usize,
    pub cpu: u32,
    pub kind: Kind,
}

pub(crate) enum Kind {
    /// A taken branch; `from_len` is the branching instruction's length when known.
    Branch { from: u64, to: u64, flags: &'static str, from_len: Option<u8> },
    /// An instruction; `class` and, once the next one is known, where a
    /// taken branch went (perf's `flags` and `addr` of instruction samples).
    Insn { ip: u64, len: u8, class: BranchClass, to: Option<u64>, uncertain: bool },
    /// A decode error: perf's error `code` and our reason.
    Error { offset: usize, ip: Option<u64>, code: u32, reason: String },
}
