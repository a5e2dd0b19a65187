//! The names KSYMBOL records give kernel code (OOL trampolines, BPF
//! programs), each from its record's time on, as perf applies them while
//! it decodes.

use std::collections::BTreeMap;

use perfdata::Ksymbol;

/// What a start address names from a time on: `(end, name)`, or nothing
/// once unregistered.
type Version = (u64, Option<(u64, String)>);

/// Every KSYMBOL range's versions over time.
#[derive(Clone, Default)]
pub struct KsymbolNames {
    /// start -> versions sorted by the time they take effect.
    versions: BTreeMap<u64, Vec<Version>>,
    /// The longest range registered: no range starting further below an
    /// address than this covers it.
    longest: u64,
    /// The lowest start and the highest end registered: no range covers an
    /// address outside them.
    bounds: Option<(u64, u64)>,
}

impl KsymbolNames {
    /// Applies `k` from `time` on (after any record of the same start and time).
    pub fn apply_at(&mut self, k: &Ksymbol<'_>, time: u64) {
        let entry = if k.flags & perfdata::abi::KSYMBOL_FLAG_UNREGISTER != 0 {
            None
        } else {
            let len = u64::from(k.len);
            self.longest = self.longest.max(len);
            let end = k.addr.saturating_add(len);
            self.bounds = Some(self.bounds.map_or((k.addr, end), |(lo, hi)| (lo.min(k.addr), hi.max(end))));
            Some((k.addr.saturating_add(len), String::from_utf8_lossy(k.name).into_owned()))
        };
        let versions = self.versions.entry(k.addr).or_default();
        let at = versions.partition_point(|v| v.0 <= time);
        versions.insert(at, (time, entry));
    }

    /// Applies `k` after every record applied so far, whatever their times.
    pub fn apply(&mut self, k: &Ksymbol<'_>) {
        let last = self.versions.get(&k.addr).and_then(|v| v.last()).map_or(0, |v| v.0);
        self.apply_at(k, last);
    }

    /// Whether a range registered at some time may cover `addr`.
    pub fn may_cover(&self, addr: u64) -> bool {
        self.bounds.is_some_and(|(lo, hi)| (lo..hi).contains(&addr))
    }

    /// The range covering `addr` at `time` (`u64::MAX`: after every record):
    /// its name and `addr`'s offset into it.
    pub fn lookup(&self, addr: u64, time: u64) -> Option<(&str, u64)> {
        if !self.may_cover(addr) {
            return None;
        }
        for (start, versions) in self.versions.range(..=addr).rev() {
            if addr - start >= self.longest {
                return None;
            }
            let Some(i) = versions.partition_point(|v| v.0 <= time).checked_sub(1) else { continue };
            if let Some((end, name)) = &versions[i].1 {
                if addr < *end {
                    return Some((name, addr - start));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfdata::abi::KSYMBOL_FLAG_UNREGISTER;

    fn ksym(addr: u64, len: u32, flags: u16, name: &'static [u8]) -> Ksymbol<'static> {
        Ksymbol { addr, len, ksym_type: 2, flags, name }
    }

    /// A name covers its range from its record's time until unregistered,
    /// and again when registered again; other ranges are not hidden.
    #[test]
    fn names_apply_from_their_time_until_unregistered() {
        let mut n = KsymbolNames::default();
        n.apply_at(&ksym(0x1000, 0x100, 0, b"big"), 5);
        n.apply_at(&ksym(0x1040, 0x10, 0, b"small"), 10);
        n.apply_at(&ksym(0x1040, 0x10, KSYMBOL_FLAG_UNREGISTER, b"small"), 20);
        n.apply_at(&ksym(0x1040, 0x10, 0, b"again"), 30);
        assert_eq!(n.lookup(0x1041, 4), None);
        assert_eq!(n.lookup(0x1041, 5), Some(("big", 0x41)));
        assert_eq!(n.lookup(0x1041, 10), Some(("small", 1)));
        assert_eq!(n.lookup(0x1041, 25), Some(("big", 0x41)));
        assert_eq!(n.lookup(0x1041, u64::MAX), Some(("again", 1)));
        assert_eq!(n.lookup(0x1100, u64::MAX), None);
        assert_eq!(n.lookup(0xfff, u64::MAX), None);
    }

    /// `apply` orders records as they come, whatever their times.
    #[test]
    fn apply_follows_the_order_of_the_records() {
        let mut n = KsymbolNames::default();
        n.apply_at(&ksym(0x1000, 0x10, 0, b"late"), 50);
        n.apply(&ksym(0x1000, 0x10, KSYMBOL_FLAG_UNREGISTER, b"late"));
        assert_eq!(n.lookup(0x1000, u64::MAX), None);
        n.apply(&ksym(0x1000, 0x10, 0, b"next"));
        assert_eq!(n.lookup(0x1000, u64::MAX), Some(("next", 0)));
    }
}
