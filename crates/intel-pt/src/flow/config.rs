//! How the flow decoder is set up: the trace's configuration, and where
//! the walk goes on after an error.

use isa::KernelIdioms;

use super::clock::TimeConv;

/// How the trace was configured.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    pub time: TimeConv,
    /// Return compression off (`noretcomp`): every RET has a TIP.
    pub noretcomp: bool,
    pub idioms: KernelIdioms,
    /// Instructions walked without a packet before giving up (a loop in the image).
    pub max_walk: u64,
    /// Instructions a candidate is tried for before it counts as fitting.
    pub trial_insns: u64,
}

/// Where the walk goes on after a decode error that leaves the packets
/// whole: the walk and the trace disagree (not a bad packet, after which
/// only the next PSB finds packet boundaries again, nor an overflow, after
/// which the next FUP says where tracing resumed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recovery {
    /// At the next TIP's target (or TIP.PGE, or PSB+), as perf does; at
    /// the next PSB when that target has no code (its IP was built on a
    /// bad last IP).
    #[default]
    NextTip,
    /// At the next PSB, as libipt does.
    NextPsb,
    /// At the next TIP's target (or TIP.PGE, or PSB+), also after a
    /// target without code, as libipt's ptxed resyncs on an error.
    EachTip,
}

/// The address filter the trace was made with: IA32_RTIT_CTL's ADDRn_CFG
/// fields (bits `4n..4n+4` of `cfg`: 1 traces only inside the ranges so
/// configured, 2 stops tracing in the range) and the IA32_RTIT_ADDRn_A/B
/// ranges (both ends inclusive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddrFilter {
    pub cfg: u64,
    pub a: [u64; 4],
    pub b: [u64; 4],
}

impl AddrFilter {
    /// Whether code at `ip` is traced: in no stop range, and in a filter
    /// range when there is one.
    pub fn traces(&self, ip: u64) -> bool {
        let ranges = (0..4).map(|n| ((self.cfg >> (4 * n)) & 0xf, self.a[n]..=self.b[n]));
        if ranges.clone().any(|(cfg, r)| cfg == 2 && r.contains(&ip)) {
            return false;
        }
        let mut filters = ranges.filter(|(cfg, _)| *cfg == 1).peekable();
        filters.peek().is_none() || filters.any(|(_, r)| r.contains(&ip))
    }
}

/// Processor errata the decoder works around (Intel's specification
/// updates name them), as [`Errata::of`] gives them for a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errata {
    /// BDM70: PSB+ may hold packets it should not.
    pub bdm70: bool,
    /// BDM64: the packet of a branch right before a TSX abort may be wrong.
    pub bdm64: bool,
    /// SKD007: an overflow may leave wrong packets.
    pub skd007: bool,
    /// SKD022: a VM entry that clears TraceEn may send a FUP: the VMLAUNCH
    /// or VMRESUME at the FUP runs before tracing stops.
    pub skd022: bool,
    /// SKD010: the FUP after an OVF may be dropped.
    pub skd010: bool,
    /// SKL014: a TIP.PGD may have no target IP.
    pub skl014: bool,
    /// SKL168: CYC packets right before a PSB may be dropped.
    pub skl168: bool,
    /// SKZ84: with VMX TSC scaling or offsetting, a TMA is corrupt and a bogus byte follows it.
    pub skz84: bool,
    /// APL12: an OVF may be followed by an unexpected FUP.
    pub apl12: bool,
    /// APL11: an OVF may be followed by a TIP.PGD.
    pub apl11: bool,
}

impl Errata {
    /// The errata of Intel family `family`, model `model`, by libipt's
    /// table (as of January 2026); `None` for a processor it does not know.
    pub fn of(family: u16, model: u8) -> Option<Errata> {
        let none = Errata::default();
        let core = Errata { bdm70: true, skd022: true, ..none };
        Some(match (family, model) {
            (6, 0x3d | 0x47 | 0x4f | 0x56) => Errata { bdm70: true, bdm64: true, ..none },
            (6, 0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6) => Errata { skd007: true, skd010: true, skl014: true, skl168: true, ..core },
            (6, 0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 | 0xa8) => Errata { skl014: true, ..core },
            (6, 0x55 | 0x6a | 0x6c) => Errata { skl014: true, skz84: true, ..core },
            (6, 0x8f | 0xad | 0xae | 0xcf) | (0x13, 0x01) => Errata { skz84: true, ..core },
            (6, 0x97 | 0x9a | 0xaa | 0xac | 0xb5 | 0xb7 | 0xba | 0xbd | 0xbf | 0xc5 | 0xc6 | 0xcc | 0xd5) | (0x12, 0x01 | 0x03) => {
                Errata { apl11: true, ..core }
            }
            (6, 0x5c | 0x5f) => Errata { apl12: true, apl11: true, ..none },
            (6, 0x7a | 0x86 | 0x96 | 0x9c | 0xaf | 0xb6 | 0xdd) => Errata { apl11: true, ..none },
            _ => return None,
        })
    }

    /// The errata of the processor perf's CPUID header names (on x86
    /// `VENDOR,FAMILY,MODEL,STEPPING`, in decimal): none for another vendor,
    /// a model [`Errata::of`] does not know, or a string it cannot read.
    pub fn of_perf_cpuid(cpuid: &str) -> Errata {
        let mut fields = cpuid.split(',').map(str::trim);
        if fields.next() != Some("GenuineIntel") {
            return Errata::default();
        }
        match (fields.next().map(str::parse), fields.next().map(str::parse)) {
            (Some(Ok(family)), Some(Ok(model))) => Errata::of(family, model).unwrap_or_default(),
            _ => Errata::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_have_their_errata() {
        assert!(Errata::of(6, 142).unwrap().skl014);
        assert!(!Errata::of(6, 142).unwrap().apl11);
        assert!(Errata::of(6, 92).unwrap().apl12);
        assert!(Errata::of(19, 1).unwrap().skz84);
        assert!(Errata::of(18, 3).unwrap().apl11);
        assert_eq!(Errata::of(0, 0), None);
    }

    #[test]
    fn perf_cpuid_names_the_model() {
        assert_eq!(Errata::of_perf_cpuid("GenuineIntel,6,142,10"), Errata::of(6, 142).unwrap());
        assert!(Errata::of_perf_cpuid("GenuineIntel,6,78,3").skd007);
        assert_eq!(Errata::of_perf_cpuid("AuthenticAMD,25,33,2"), Errata::default());
        assert_eq!(Errata::of_perf_cpuid("GenuineIntel,6,1,0"), Errata::default());
        assert_eq!(Errata::of_perf_cpuid("GenuineIntel,6"), Errata::default());
        assert_eq!(Errata::of_perf_cpuid("GenuineIntel,x,142,10"), Errata::default());
        assert_eq!(Errata::of_perf_cpuid(""), Errata::default());
    }

    #[test]
    fn filters_trace_inside_their_ranges_and_stops_do_not() {
        let none = AddrFilter::default();
        assert!(none.traces(0x1234));
        let filter = AddrFilter { cfg: 1, a: [0x1000, 0, 0, 0], b: [0x10ff, 0, 0, 0] };
        assert!(filter.traces(0x1000) && filter.traces(0x10ff));
        assert!(!filter.traces(0x1100));
        let stop = AddrFilter { cfg: 0x20, a: [0, 0x2000, 0, 0], b: [0, 0x2fff, 0, 0] };
        assert!(!stop.traces(0x2000) && stop.traces(0x1000));
    }
}
