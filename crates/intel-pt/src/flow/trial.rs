//! Trial decoding: where the code at an IP has several possible contents
//! over the walk's interval of time, each distinct instruction is tried
//! against the packets that follow, and the one that fits is taken.

use isa::Insn;

use super::event::FlowErrorKind;
use super::event::{FlowEvent, InsnCode};
use super::state::{Failure, State};
use super::walk::{next_without_packet, Decoded, Walker};
use codeimage::window::{CodeSource, Content, Fetch, Time};

/// A distinct instruction the contents at an IP decode to: it, the earliest
/// time one of its contents holds, and the bytes of the first of them.
pub(super) type TrialOption = (Insn, Time, [u8; 16]);

impl<'a, C: CodeSource> Walker<'a, C> {
    /// The distinct instructions the candidate contents at `ip` decode to
    /// (as far as control flow goes: length, class, target), each with the
    /// earliest time one of its contents holds (the instruction ran no
    /// earlier) and the bytes of the first of its contents. In candidate order, except that those that hold at or after
    /// the time of the timing packets read so far come first: an instruction
    /// right after a flow packet ran after the timing packets that follow it
    /// when the processor sends them there (as it sends a TSC after a
    /// branch), so among contents that fit the trace alike that one is taken.
    pub(super) fn options(&self, st: &State<'a>, ip: u64, count: usize) -> Result<Vec<TrialOption>, Failure> {
        let mut options: Vec<TrialOption> = Vec::with_capacity(2);
        let mut first_err = None;
        let mut contents = Vec::with_capacity(count.min(8));
        self.code.candidates(ip, st.clock.lo, st.clock.hi, count.min(8), &mut contents);
        let read_to = if st.peeked.is_some() { st.clock.now } else { st.clock.lo };
        // (A stable sort: each group stays in candidate order.)
        contents.sort_by_key(|c| c.to < read_to);
        for c in contents {
            match self.classify(ip, &c.bytes[..c.len], st) {
                Ok(i) => match options.iter_mut().find(|o| o.0 == i) {
                    Some(o) => o.1 = o.1.min(c.from),
                    None => options.push((i, c.from, c.bytes)),
                },
                Err(f) => {
                    first_err.get_or_insert(f);
                }
            }
        }
        if options.is_empty() {
            return Err(first_err.unwrap_or(Failure { offset: st.error_offset(), kind: FlowErrorKind::Unmapped }));
        }
        Ok(options)
    }

    /// Tries each option at `ip` against the packets that follow; returns
    /// the first that fits, and whether another fits too.
    pub(super) fn choose(&self, st: &State<'a>, ip: u64, options: &[TrialOption]) -> Result<(TrialOption, bool), Failure> {
        let mut fits: Vec<TrialOption> = Vec::new();
        for &(insn, from, bytes) in options {
            let mut trial = st.clone();
            trial.clock.lo = trial.clock.lo.max(from);
            trial.clock.now = trial.clock.now.max(trial.clock.lo);
            trial.stop_at = usize::MAX;
            let mut sink = |_e: FlowEvent| {};
            trial.tried = Some((ip, insn));
            let first = self.run_insn(&mut trial, ip, Decoded { insn, uncertain: true, code: InsnCode::chosen(&bytes) }, &mut sink, true);
            trial.tried = None;
            let ok = first.is_ok() && {
                let mut left = self.cfg.trial_insns;
                loop {
                    if left == 0 {
                        break true;
                    }
                    left -= 1;
                    match self.step(&mut trial, &mut sink, true) {
                        Ok(true) => {}
                        Ok(false) => break true,
                        Err(_) => break false,
                    }
                }
            };
            if ok {
                fits.push((insn, from, bytes));
            }
        }
        match fits.first() {
            Some(&i) => Ok((i, fits.len() > 1)),
            // None fits: take the first, and let the error show where.
            None => Ok((options[0], true)),
        }
    }

    /// Whether the walk from `at` reaches `to` before an instruction that
    /// needs a packet: through code that runs without one (direct jumps and
    /// calls followed), along every candidate content (at `at`, `tried`
    /// alone when given), at most `max_walk` instructions in all.
    #[cold]
    pub(super) fn reaches(&self, at: u64, to: u64, lo: Time, hi: Time, tried: Option<Insn>) -> bool {
        let start = match tried {
            Some(insn) if at != to => match next_without_packet(at, &insn) {
                Some(next) => next,
                None => return false,
            },
            _ => at,
        };
        let mut todo = vec![start];
        let mut left = self.cfg.max_walk;
        let mut contents = Vec::new();
        while let Some(mut ip) = todo.pop() {
            while ip != to {
                if left == 0 {
                    return false;
                }
                left -= 1;
                contents.clear();
                let mut buf = [0u8; 16];
                match self.code.fetch(ip, lo, hi, 0, &mut buf) {
                    Fetch::Exact(len) => contents.push(Content { bytes: buf, len, from: lo, to: hi }),
                    Fetch::Candidate { count, .. } => self.code.candidates(ip, lo, hi, count.min(8), &mut contents),
                    Fetch::Unmapped => {}
                }
                let mut next = contents.iter().filter_map(|c| {
                    let insn = isa::classify_x86_64(ip, &c.bytes[..c.len], &self.cfg.idioms).ok()?;
                    next_without_packet(ip, &insn)
                });
                let Some(first) = next.next() else { break };
                todo.extend(next.filter(|&n| n != first));
                // Back where it started: a loop without packets, `to` not on it.
                if first == at {
                    break;
                }
                ip = first;
            }
            if ip == to {
                return true;
            }
        }
        false
    }

    /// Where the walk from `at` runs out of code before it needs a packet:
    /// the first IP on its path with no code, or bytes that are no
    /// instruction. `None` when it needs a packet first, or where the code
    /// has several contents on the way (`reaches` has tried them). With
    /// `tried`, as in [`Self::reaches`].
    pub(super) fn dead_end(&self, at: u64, lo: Time, hi: Time, tried: Option<Insn>) -> Option<u64> {
        let mut ip = match tried {
            Some(insn) => next_without_packet(at, &insn)?,
            None => at,
        };
        for _ in 0..self.cfg.max_walk {
            let mut buf = [0u8; 16];
            let insn = match self.code.fetch(ip, lo, hi, 0, &mut buf) {
                Fetch::Unmapped => return Some(ip),
                Fetch::Exact(len) => match isa::classify_x86_64(ip, &buf[..len], &self.cfg.idioms) {
                    Ok(insn) => insn,
                    Err(_) => return Some(ip),
                },
                Fetch::Candidate { .. } => return None,
            };
            ip = next_without_packet(ip, &insn)?;
            // Back where it started: a loop without packets.
            if ip == at {
                return None;
            }
        }
        None
    }
}
