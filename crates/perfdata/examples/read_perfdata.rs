//! Reads every record of a perf.data with `perfdata`, touching each typed
//! record, for read benchmarks (scripts/bench-read.sh, docs/PERFORMANCE.md).
//!
//!     read_perfdata FILE [--sorted]
//!
//! File order by default; `--sorted` delivers them in perf's timestamp order
//! (`PerfFile::sorted_records`), the same work linux-perf-data's reader does.
//! Prints records, records with a time, the sum of times and a checksum of
//! the typed fields, so the work cannot be optimised away and the readers can
//! be compared.

use perfdata::{PerfFile, RecordBody};

fn main() -> perfdata::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: read_perfdata FILE [--sorted]");
    let sorted = args.any(|a| a == "--sorted");
    let file = PerfFile::open(&path)?;
    let mut totals = Totals::default();
    if sorted {
        for r in file.sorted_records() {
            totals.add(&r?);
        }
    } else {
        for r in file.records() {
            totals.add(&r?);
        }
    }
    println!(
        "records {} timed {} time_sum {} time_order {:#x} checksum {:#x}",
        totals.records, totals.timed, totals.time_sum, totals.time_order, totals.checksum
    );
    Ok(())
}

#[derive(Default)]
struct Totals {
    records: u64,
    timed: u64,
    time_sum: u64,
    /// Order-sensitive hash of the times, equal for readers that deliver the same order.
    time_order: u64,
    checksum: u64,
}

impl Totals {
    fn add(&mut self, r: &perfdata::Record<'_>) {
        self.records += 1;
        if let Some(t) = r.time() {
            self.timed += 1;
            self.time_sum = self.time_sum.wrapping_add(t);
            self.time_order = self.time_order.rotate_left(7) ^ t;
        }
        let x = match &r.body {
            RecordBody::Sample(s) => s.ip.unwrap_or(0) ^ s.period.unwrap_or(0),
            RecordBody::Mmap2(m) => m.addr ^ m.len ^ m.filename.len() as u64,
            RecordBody::Comm(c) => c.comm.len() as u64 ^ c.pid as u64,
            RecordBody::TextPoke(p) => p.addr ^ p.new.len() as u64,
            RecordBody::Ksymbol(k) => k.addr ^ k.name.len() as u64,
            RecordBody::SwitchCpuWide(s) => s.next_prev_tid as u64,
            RecordBody::Aux(a) => a.aux_offset ^ a.aux_size,
            RecordBody::ItraceStart(i) => i.tid as u64,
            _ => r.record_type() as u64,
        };
        self.checksum = self.checksum.rotate_left(5) ^ x;
    }
}
