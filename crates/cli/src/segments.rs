//! `poketrace segments`: the independent units of a perf.data directory's
//! trace, each decodable alone with `poketrace decode --segment ID`.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use isa::KernelIdioms;
use perfdata::PerfFile;
use tracedecode::setup::PtSetup;
use tracedecode::units::{self, Unit};
use tracedecode::{Input, Trace};

/// Bytes of trace a unit holds about (`--target-bytes`'s default).
pub const DEFAULT_TARGET: usize = 8 << 20;

/// Lists the units, one a line: text columns or JSON objects.
pub fn run(input: &Path, target: usize, json: bool, out: &mut impl Write) -> Result<i32> {
    let file = PerfFile::open(input)?;
    let Input { trace, queues, .. } = Input::read(&file)?;
    let units = match trace.context("no Intel PT or CoreSight AUXTRACE_INFO in the input")? {
        Trace::IntelPt(info) => units::pt_units(&queues, target, &PtSetup::new(&file, &info, KernelIdioms::default()).cfg.time),
        Trace::CoreSight(_) => units::whole_runs(&queues),
    };
    if !json {
        writeln!(
            out,
            "{:<28} {:>6} {:>12} {:>12} {:>10} {:>6} {:>20} {:>20}",
            "ID", "CPU", "START", "END", "BYTES", "SYNCS", "TIME_FROM", "TIME_TO"
        )?;
    }
    for u in &units {
        let q = &queues[u.queue];
        if json {
            writeln!(out, "{}", serde_json::to_string(&as_json(u, q.cpu, q.thread))?)?;
        } else {
            let cpu = if q.cpu == u32::MAX { format!("t{}", q.thread.unwrap_or(-1)) } else { q.cpu.to_string() };
            let time = |t: Option<u64>| t.map_or("-".to_string(), |t| t.to_string());
            writeln!(
                out,
                "{:<28} {:>6} {:>12} {:>12} {:>10} {:>6} {:>20} {:>20}",
                u.id.to_string(),
                cpu,
                u.id.start,
                u.id.end,
                u.bytes(),
                u.syncs,
                time(u.time.0),
                time(u.time.1)
            )?;
        }
    }
    Ok(0)
}

/// A unit as a JSON object (`cpu` null for a per-thread buffer).
fn as_json(u: &Unit, cpu: u32, thread: Option<i32>) -> serde_json::Value {
    serde_json::json!({
        "id": u.id.to_string(),
        "buffer": u.id.idx,
        "cpu": (cpu != u32::MAX).then_some(cpu),
        "tid": thread,
        "start": u.id.start,
        "end": u.id.end,
        "bytes": u.bytes(),
        "syncs": u.syncs,
        "time_from": u.time.0,
        "time_to": u.time.1,
    })
}
