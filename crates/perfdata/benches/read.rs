//! Read throughput of `perfdata` against `linux-perf-data` on the same file.
//!
//!     cargo bench -p perfdata --bench read
//!
//! The input (~50 MB, 800k records, the mix of examples/gen_big.rs) is
//! generated once into Cargo's target tmp dir. Every benchmark opens the file
//! and walks all records, touching each typed record; divan reports time and
//! throughput (bytes = file size, items = records). See docs/PERFORMANCE.md.

use std::path::PathBuf;
use std::sync::OnceLock;

use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use linux_perf_data::linux_perf_event_reader::EventRecord;
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use perfdata::{PerfFile, Record, RecordBody};

#[path = "../examples/gen_big.rs"]
mod gen_big;

const RECORDS: u64 = 800_000;
const SEED: u64 = 1;

fn main() {
    divan::main();
}

struct Input {
    path: PathBuf,
    bytes: u64,
    records: u64,
}

/// The generated file, written on first use (kept for later runs).
fn input() -> &'static Input {
    static INPUT: OnceLock<Input> = OnceLock::new();
    INPUT.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join(format!("bench-read-{RECORDS}-{SEED}-v1.data"));
        if !path.exists() {
            let tmp = path.with_extension("tmp");
            gen_big::generate(&tmp, RECORDS, SEED).expect("generate bench input");
            std::fs::rename(&tmp, &path).expect("rename bench input");
        }
        let bytes = std::fs::metadata(&path).expect("bench input").len();
        Input { path, bytes, records: RECORDS }
    })
}

fn touch(r: &Record<'_>) -> u64 {
    let t = r.time().unwrap_or(0);
    t ^ match &r.body {
        RecordBody::Sample(s) => s.ip.unwrap_or(0) ^ s.period.unwrap_or(0),
        RecordBody::Mmap2(m) => m.addr ^ m.len ^ m.filename.len() as u64,
        RecordBody::Comm(c) => c.comm.len() as u64 ^ c.pid as u64,
        RecordBody::TextPoke(p) => p.addr ^ p.new.len() as u64,
        RecordBody::Ksymbol(k) => k.addr ^ k.name.len() as u64,
        RecordBody::SwitchCpuWide(s) => s.next_prev_tid as u64,
        RecordBody::Aux(a) => a.aux_offset ^ a.aux_size,
        RecordBody::ItraceStart(i) => i.tid as u64,
        _ => r.record_type() as u64,
    }
}

fn counted<'a, 'b>(bencher: Bencher<'a, 'b>) -> Bencher<'a, 'b> {
    let input = input();
    bencher.counter(BytesCount::new(input.bytes)).counter(ItemsCount::new(input.records))
}

/// `PerfFile::open` + `records()` (file order).
#[divan::bench(sample_count = 10, sample_size = 1)]
fn perfdata_records(bencher: Bencher) {
    let path = &input().path;
    counted(bencher).bench(|| {
        let file = PerfFile::open(path).unwrap();
        let mut acc = 0u64;
        for r in file.records() {
            acc = acc.rotate_left(5) ^ touch(&r.unwrap());
        }
        black_box(acc)
    });
}

/// `PerfFile::open` + `sorted_records()` (perf's time order, as linux-perf-data delivers).
#[divan::bench(sample_count = 10, sample_size = 1)]
fn perfdata_sorted_records(bencher: Bencher) {
    let path = &input().path;
    counted(bencher).bench(|| {
        let file = PerfFile::open(path).unwrap();
        let mut acc = 0u64;
        for r in file.sorted_records() {
            acc = acc.rotate_left(5) ^ touch(&r.unwrap());
        }
        black_box(acc)
    });
}

fn lpd_walk<R: std::io::Read + std::io::Seek>(reader: R) -> u64 {
    let PerfFileReader { mut perf_file, mut record_iter } = PerfFileReader::parse_file(reader).unwrap();
    let mut acc = 0u64;
    while let Some(record) = record_iter.next_record(&mut perf_file).unwrap() {
        let x = match record {
            PerfFileRecord::EventRecord { record, .. } => {
                let t = record.common_data().unwrap().timestamp.unwrap_or(0);
                t ^ match record.parse().unwrap() {
                    EventRecord::Sample(s) => s.ip.unwrap_or(0) ^ s.period.unwrap_or(0),
                    EventRecord::Mmap2(m) => m.address ^ m.length ^ m.path.len() as u64,
                    EventRecord::Comm(c) => c.name.len() as u64 ^ c.pid as u64,
                    EventRecord::ContextSwitch(_) => 1,
                    EventRecord::Raw(r) => r.data.len() as u64,
                    _ => record.record_type.0 as u64,
                }
            }
            PerfFileRecord::UserRecord(u) => {
                black_box(u.parse().unwrap());
                u.record_type.record_type().0 as u64
            }
        };
        acc = acc.rotate_left(5) ^ x;
    }
    acc
}

/// linux-perf-data 0.11 as its docs use it: `BufReader<File>`, `next_record`
/// (always time-sorted), `parse()` + `common_data()` of each record.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn linux_perf_data_bufreader(bencher: Bencher) {
    let path = &input().path;
    counted(bencher).bench(|| {
        let f = std::fs::File::open(path).unwrap();
        black_box(lpd_walk(std::io::BufReader::new(f)))
    });
}

/// linux-perf-data 0.11 over a memory map (`Cursor<&[u8]>`), like perfdata's input.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn linux_perf_data_mmap(bencher: Bencher) {
    let path = &input().path;
    counted(bencher).bench(|| {
        let f = std::fs::File::open(path).unwrap();
        // SAFETY: read-only map of a file nobody modifies during the run.
        let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        black_box(lpd_walk(std::io::Cursor::new(&map[..])))
    });
}
