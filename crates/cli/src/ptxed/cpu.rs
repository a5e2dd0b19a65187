//! The Intel PT errata of a processor model, as libipt knows them (its
//! errata table as of January 2026, which its tests' `cpu F/M` lines list):
//! which workarounds `--cpu F/M` turns on. Intel's specification updates
//! name each erratum (BDM70, SKL014, APL11, ...).

use super::options::Cpu;

/// The errata a model has that a decoder works around.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errata {
    /// BDM70: PSB+ may hold packets it should not.
    pub bdm70: bool,
    /// BDM64: the packet of a branch right before a TSX abort may be wrong.
    pub bdm64: bool,
    /// SKD007: an overflow may leave wrong packets.
    pub skd007: bool,
    /// SKD022: a VM entry that clears TraceEn may send a FUP.
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
    /// The errata of `cpu`; `None` for a processor libipt does not know
    /// (ptxed reports that as a configuration error and decodes by the spec).
    pub fn of(cpu: Cpu) -> Option<Errata> {
        let none = Errata::default();
        let core = Errata { bdm70: true, skd022: true, ..none };
        Some(match (cpu.family, cpu.model) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_have_their_errata() {
        let cpu = |family, model| Cpu { family, model, stepping: 0 };
        assert!(Errata::of(cpu(6, 142)).unwrap().skl014);
        assert!(!Errata::of(cpu(6, 142)).unwrap().apl11);
        assert!(Errata::of(cpu(6, 92)).unwrap().apl12);
        assert!(Errata::of(cpu(19, 1)).unwrap().skz84);
        assert!(Errata::of(cpu(18, 3)).unwrap().apl11);
        assert_eq!(Errata::of(cpu(0, 0)), None);
        assert_eq!(Errata::of(cpu(6, 1)), None);
    }
}
