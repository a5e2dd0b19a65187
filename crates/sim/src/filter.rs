//! The trace's address filter of a run whose code leaves the traced text:
//! the ranges traced, as `perf record --filter` hands them to the kernel
//! and writes them into AUXTRACE_INFO.

/// Code is traced inside these ranges (start, size) only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrFilter {
    ranges: Vec<(u64, u64)>,
}

impl AddrFilter {
    pub fn new(ranges: Vec<(u64, u64)>) -> AddrFilter {
        AddrFilter { ranges }
    }

    /// Whether the instruction at `ip` is traced.
    pub fn traces(&self, ip: u64) -> bool {
        self.ranges.iter().any(|&(start, size)| ip.wrapping_sub(start) < size)
    }

    /// perf's filter string: `filter START/SIZE` for each range, comma-separated.
    pub fn perf_string(&self) -> String {
        self.ranges.iter().map(|(start, size)| format!("filter {start:#x}/{size:#x}")).collect::<Vec<_>>().join(",")
    }

    /// The string as AUXTRACE_INFO carries it after its words: NUL-terminated,
    /// padded with NULs to a multiple of 8 bytes.
    pub fn perf_bytes(&self) -> Vec<u8> {
        let mut b = self.perf_string().into_bytes();
        b.push(0);
        b.resize(b.len().next_multiple_of(8), 0);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_perf_string() {
        let f = AddrFilter::new(vec![(0x1000, 0x100), (0x8000, 0x10)]);
        assert!(f.traces(0x1000) && f.traces(0x10ff) && f.traces(0x800f));
        assert!(!f.traces(0xfff) && !f.traces(0x1100) && !f.traces(0x8010));
        assert_eq!(f.perf_string(), "filter 0x1000/0x100,filter 0x8000/0x10");
        let b = f.perf_bytes();
        assert_eq!((b.len() % 8, b[f.perf_string().len()]), (0, 0));
    }
}
