//! CoreSight ETMv4 counted from the decoder's branch lines: each queue's
//! ranges run from a branch's target to the next branch's source.

use anyhow::Result;
use codeimage::CodeTimeline;
use perfdata::auxtrace::CsEtmInfo;
use perfdata::TimeConv;
use tracedecode::profile::{Profile, RangeCounter};
use tracedecode::{Itrace, Kind, Out, Queue};

/// The profile of every queue; what runs when `keep` says no is not counted.
pub fn profile(
    info: &CsEtmInfo,
    conv: Option<&TimeConv>,
    queues: &[Queue],
    code: &CodeTimeline,
    keep: &impl Fn(&Queue, u64) -> bool,
) -> Result<Profile> {
    let itrace = Itrace { branches: true, instructions: false, errors: true, period: 1, insn_bytes: false };
    let mut counters: Vec<RangeCounter> = (0..queues.len()).map(|_| RangeCounter::default()).collect();
    let mut emit = |l: &Out| -> Result<()> {
        let c = &mut counters[l.queue];
        let kept = keep(&queues[l.queue], l.time);
        match &l.kind {
            Kind::Branch { from, to, flags, .. } => match *flags {
                "tr strt" => c.start(kept.then_some(*to)),
                f if f.starts_with("tr end") => {
                    c.close(*from);
                    c.start(None);
                }
                "call" | "return" | "jmp" | "jcc" => {
                    c.close(*from);
                    if kept {
                        c.branch(*from, *to, false);
                    }
                    c.start(kept.then_some(*to));
                }
                // Exceptions and their returns: no branch of a function.
                _ => {
                    c.close(*from);
                    c.profile.not_branches += 1;
                    c.start(kept.then_some(*to));
                }
            },
            Kind::Error { .. } => {
                c.profile.errors += 1;
                c.cut();
            }
            Kind::Insn { .. } => {}
        }
        Ok(())
    };
    tracedecode::cs::decode(info, conv, queues, &itrace, code, &mut emit)?;
    let mut total = Profile::default();
    for c in &counters {
        total.add(&c.profile);
    }
    Ok(total)
}
