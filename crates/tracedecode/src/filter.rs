//! The Intel PT address filter a recording was made with: the string
//! `perf record --filter` writes after AUXTRACE_INFO's words, as the flow
//! decoder's [`AddrFilter`]. Only kernel address ranges (`filter` and
//! `tracestop` with `START/SIZE`) are taken: a filter on a file's offsets
//! or a symbol cannot be placed without the maps, and then none is used.

use intel_pt::flow::AddrFilter;
use perfdata::abi::auxtrace_type;
use perfdata::auxtrace::IntelPtInfo;
use perfdata::{PerfFile, RecordBody};

/// Intel PT's AUXTRACE_INFO words before the filter string.
const WORDS: usize = 17;

/// The filter of the first Intel PT AUXTRACE_INFO in `file`, if it has one
/// that [`parse`] takes.
pub fn of_file(file: &PerfFile) -> Option<AddrFilter> {
    file.records().find_map(|r| match r.ok()?.body {
        RecordBody::AuxtraceInfo(i) if i.auxtrace_type == auxtrace_type::INTEL_PT => {
            let len = IntelPtInfo::parse(&i).ok()?.filter_str_len as usize;
            let text = i.priv_data.get(WORDS * 8..)?.get(..len)?;
            Some(parse(std::str::from_utf8(text).ok()?))
        }
        _ => None,
    })?
}

/// perf's filter string (`filter 0xA/0xS,tracestop 0xB/0xT`) as IA32_RTIT
/// address ranges; `None` when it has no range, more than the four a
/// processor has, or one that is not a kernel address range.
pub fn parse(text: &str) -> Option<AddrFilter> {
    let mut f = AddrFilter::default();
    let mut n = 0;
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (action, range) = entry.split_once(char::is_whitespace)?;
        let cfg = match action {
            "filter" => 1,
            "tracestop" => 2,
            _ => return None,
        };
        let (start, size) = range.trim().split_once('/')?;
        let (start, size) = (number(start)?, number(size)?);
        if n == 4 || size == 0 {
            return None;
        }
        f.cfg |= cfg << (4 * n);
        f.a[n] = start;
        f.b[n] = start.checked_add(size - 1)?;
        n += 1;
    }
    (n > 0).then_some(f)
}

/// A C number as perf's filter takes it: hex with 0x, else decimal.
fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_ranges_are_taken() {
        let f = parse("filter 0xffffffff81000000/0x2000,tracestop 0xffffffff81001000/16").unwrap();
        assert_eq!(f.cfg, 0x21);
        assert_eq!((f.a[0], f.b[0]), (0xffffffff81000000, 0xffffffff81001fff));
        assert_eq!((f.a[1], f.b[1]), (0xffffffff81001000, 0xffffffff8100100f));
        assert!(f.traces(0xffffffff81000000) && !f.traces(0xffffffff81001000) && !f.traces(0xffffffff81002000));
    }

    #[test]
    fn other_filters_are_not() {
        for s in [
            "",
            "filter main @ /bin/ls",
            "filter 0x1000/0x10 @ /bin/ls",
            "start 0x1000",
            "filter 0x1000/0",
            "filter 1/1,filter 2/1,filter 3/1,filter 4/1,filter 5/1",
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
    }
}
