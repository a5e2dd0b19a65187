//! Reads every record of a perf.data with the `linux-perf-data` crate (0.11),
//! the reference for `read_perfdata` in scripts/bench-read.sh.
//!
//!     read_linux_perf_data FILE [--mmap]
//!
//! Its reader always sorts by time (like `perfdata`'s `sorted_records`) and
//! reads through `Read + Seek`: a `BufReader<File>` as its docs show, or with
//! `--mmap` a `Cursor` over a memory map of the file. Each record is parsed
//! to its typed form (`parse()`) and its sample_id / sample fields read
//! (`common_data()`), the work `perfdata` does for every record. Note that
//! linux-perf-event-reader 0.10 has no typed form for AUX, ITRACE_START,
//! KSYMBOL and TEXT_POKE (they stay `EventRecord::Raw`), and that it
//! consumes FINISHED_ROUND records instead of returning them.

use linux_perf_data::linux_perf_event_reader::EventRecord;
use linux_perf_data::{PerfFileReader, PerfFileRecord};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: read_linux_perf_data FILE [--mmap]");
    let mmap = args.any(|a| a == "--mmap");
    let file = std::fs::File::open(&path)?;
    let totals = if mmap {
        // SAFETY: read-only map of a file nobody modifies during the run.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        run(std::io::Cursor::new(&map[..]))?
    } else {
        run(std::io::BufReader::new(file))?
    };
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

fn run<R: std::io::Read + std::io::Seek>(reader: R) -> Result<Totals, Box<dyn std::error::Error>> {
    let PerfFileReader { mut perf_file, mut record_iter } = PerfFileReader::parse_file(reader)?;
    let mut t = Totals::default();
    while let Some(record) = record_iter.next_record(&mut perf_file)? {
        t.records += 1;
        let x = match record {
            PerfFileRecord::EventRecord { record, .. } => {
                let common = record.common_data()?;
                if let Some(time) = common.timestamp {
                    t.timed += 1;
                    t.time_sum = t.time_sum.wrapping_add(time);
                    t.time_order = t.time_order.rotate_left(7) ^ time;
                }
                match record.parse()? {
                    EventRecord::Sample(s) => s.ip.unwrap_or(0) ^ s.period.unwrap_or(0),
                    EventRecord::Mmap2(m) => m.address ^ m.length ^ m.path.len() as u64,
                    EventRecord::Comm(c) => c.name.len() as u64 ^ c.pid as u64,
                    EventRecord::ContextSwitch(_) => 1,
                    EventRecord::Raw(r) => r.data.len() as u64,
                    _ => record.record_type.0 as u64,
                }
            }
            PerfFileRecord::UserRecord(u) => {
                let _ = u.parse()?;
                u.record_type.record_type().0 as u64
            }
        };
        t.checksum = t.checksum.rotate_left(5) ^ x;
    }
    Ok(t)
}
