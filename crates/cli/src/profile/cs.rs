//! CoreSight ETMv4 counted from the decoder's lines: each queue's ranges
//! run from a branch's target to the next branch's source, and its
//! instruction lines tell which instructions were uncertain.

use anyhow::Result;
use codeimage::CodeTimeline;
use perfdata::auxtrace::CsEtmInfo;
use perfdata::TimeConv;
use tracedecode::profile::{Profile, RangeCounter};
use tracedecode::{Itrace, Kind, Out, Queue};

/// One queue's counting state: its ranges, and the last instruction (IP,
/// uncertain) of the current one.
#[derive(Default)]
struct QueueCount {
    counter: RangeCounter,
    last: Option<(u64, bool)>,
}

impl QueueCount {
    fn line(&mut self, l: &Out, kept: bool) {
        let c = &mut self.counter;
        match &l.kind {
            Kind::Insn { ip, uncertain, .. } => {
                if *uncertain {
                    c.saw_uncertain();
                }
                self.last = Some((*ip, *uncertain));
            }
            Kind::Branch { from, to, flags, .. } => {
                let uncertain = self.last.is_some_and(|(ip, u)| ip == *from && u);
                match *flags {
                    // Tracing stopped since the last range (no line says
                    // so): it ended at its last instruction.
                    "tr strt" => {
                        if let (true, Some((ip, _))) = (c.open(), self.last) {
                            c.close(ip);
                        }
                        c.start(kept.then_some(*to));
                    }
                    "call" | "return" | "jmp" | "jcc" => {
                        c.close(*from);
                        if kept {
                            c.branch(*from, *to, uncertain);
                        }
                        c.start(kept.then_some(*to));
                    }
                    // Exceptions and their returns: no branch of a function.
                    _ => {
                        c.close(*from);
                        c.not_branch();
                        c.start(kept.then_some(*to));
                    }
                }
                self.last = None;
            }
            Kind::Error { .. } => {
                c.error();
                c.cut();
                self.last = None;
            }
        }
    }
}

/// The profile of every queue; what runs when `keep` says no is not counted.
pub fn profile(
    info: &CsEtmInfo,
    conv: Option<&TimeConv>,
    queues: &[Queue],
    code: &CodeTimeline,
    keep: &impl Fn(&Queue, u64) -> bool,
) -> Result<Profile> {
    let itrace = Itrace { branches: true, instructions: true, errors: true, period: 1, insn_bytes: false };
    let mut counts: Vec<QueueCount> = (0..queues.len()).map(|_| QueueCount::default()).collect();
    let mut emit = |l: &Out| -> Result<()> {
        counts[l.queue].line(l, keep(&queues[l.queue], l.time));
        Ok(())
    };
    tracedecode::cs::decode(info, conv, queues, &itrace, code, &mut emit)?;
    let mut total = Profile::default();
    for mut q in counts {
        if let Some((ip, _)) = q.last {
            q.counter.close(ip);
        }
        total.add(q.counter.finish());
    }
    Ok(total)
}
