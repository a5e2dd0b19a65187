//! Feeds arbitrary bytes to the zstd path of the perf.data reader: the input
//! is a zstd stream, cut into COMPRESSED records (where, the first byte
//! says) of a pipe-mode file, as `perf record -z` writes it. Every record
//! inside is read in file and in time order. Any panic, endless iterator,
//! memory past libFuzzer's limits, or error without an offset in the file
//! is a bug; errors are fine.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfdata::abi::record_type as rt;
use perfdata::{PerfFile, PIPE_HEADER_SIZE};

/// Payload bytes per COMPRESSED record: what fits a u16 record size, 8-aligned.
const MAX_PAYLOAD: usize = 0xfff0;

fuzz_target!(|input: &[u8]| {
    let Some((&cut, stream)) = input.split_first() else { return };
    let step = if cut == 0 { MAX_PAYLOAD } else { (cut as usize * 16).min(MAX_PAYLOAD) };
    let mut file = b"PERFILE2".to_vec();
    file.extend_from_slice(&PIPE_HEADER_SIZE.to_le_bytes());
    for chunk in stream.chunks(step) {
        let size = 8 + chunk.len().next_multiple_of(8);
        file.extend_from_slice(&rt::COMPRESSED.to_le_bytes());
        file.extend_from_slice(&0u16.to_le_bytes());
        file.extend_from_slice(&(size as u16).to_le_bytes());
        file.extend_from_slice(chunk);
        file.resize(file.len() + size - 8 - chunk.len(), 0);
    }
    let len = file.len() as u64;
    let Ok(perf) = PerfFile::from_vec(file) else { return };
    let cap = (1u64 << 30) / 8 + len;
    let mut n = 0u64;
    for r in perf.records() {
        n += 1;
        assert!(n <= cap, "records() does not end");
        if let Err(e) = r {
            let off = e.offset().expect("iteration errors have an offset");
            assert!(off <= len, "error offset {off:#x} past the end {len:#x}: {e}");
        }
    }
    let mut m = 0u64;
    for r in perf.sorted_records() {
        m += 1;
        assert!(m <= cap, "sorted_records() does not end");
        let _ = r.map(|r| r.time());
    }
    assert_eq!(n, m, "sorted_records() and records() yield different counts");
});
