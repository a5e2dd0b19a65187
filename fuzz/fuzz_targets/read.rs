//! Opens arbitrary bytes as perf.data and reads everything a user of the
//! crate could: header, attrs, features, records in file and timestamp
//! order, AUXTRACE_INFO decoders. Any panic, endless loop, allocation over
//! libFuzzer's -malloc_limit_mb / -rss_limit_mb, error without an offset in
//! the input, or bytes of the data section skipped without an error is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfdata::abi::record_type as rt;
use perfdata::auxtrace::{CsEtmInfo, IntelPtInfo};
use perfdata::{PerfFile, Record, RecordBody, PIPE_HEADER_SIZE};

/// Bytes a record takes in the file: header.size plus an AUXTRACE or TRACING_DATA payload.
fn extent(r: &Record<'_>) -> u64 {
    r.size as u64
        + match &r.body {
            RecordBody::Auxtrace(a) => a.data.len() as u64,
            RecordBody::Other { record_type: rt::HEADER_TRACING_DATA, data } => (u32::from_le_bytes(data[..4].try_into().unwrap()) as u64 + 7) & !7,
            _ => 0,
        }
}

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let file = match PerfFile::from_vec(data.to_vec()) {
        Ok(f) => f,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = format!("{:?} {:?} {:?}", file.header(), file.attrs(), file.features());
    let (start, end) = match file.header() {
        Some(h) => (h.data_offset.min(len), h.data_offset.saturating_add(h.data_size).min(len)),
        None => (PIPE_HEADER_SIZE, len),
    };
    // Records are at least 8 bytes; COMPRESSED ones hold at most 256 MiB each.
    let cap = len / 8 + (1 << 26);
    let mut n = 0u64;
    let mut expect = Some(start);
    let mut clean = true;
    for r in file.records() {
        n += 1;
        assert!(n <= cap, "records() does not end");
        match r {
            Ok(r) => {
                let _ = r.time();
                if r.inner_offset.is_none() {
                    if let Some(e) = expect {
                        assert_eq!(r.offset, e, "bytes skipped without an error");
                    }
                    expect = Some(r.offset + extent(&r));
                }
                match &r.body {
                    RecordBody::AuxtraceInfo(info) => {
                        let _ = IntelPtInfo::parse(info).map(|i| i.tsc_to_perf_time(u64::MAX));
                        let _ = CsEtmInfo::parse(info).map(|c| c.cpus.iter().map(|c| c.trace_id()).count());
                    }
                    RecordBody::Sample(s) => {
                        let _ = s.callchain_ips().count();
                    }
                    _ => {}
                }
            }
            Err(e) => {
                let off = e.offset().expect("iteration errors have an offset");
                assert!(off <= len, "error offset {off:#x} past the end {len:#x}: {e}");
                let _ = e.to_string();
                expect = None;
                clean = false;
            }
        }
    }
    if clean {
        assert_eq!(expect, Some(end), "records end before the data section does, without an error");
    }
    let mut m = 0u64;
    for r in file.sorted_records() {
        m += 1;
        assert!(m <= cap, "sorted_records() does not end");
        if let Err(e) = r {
            let _ = e.to_string();
        }
    }
    assert_eq!(n, m, "sorted_records() and records() yield different counts");
});
