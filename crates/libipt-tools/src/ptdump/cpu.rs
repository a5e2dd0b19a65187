//! The processor a trace was recorded on (`--cpu F/M[/S]`) and the Intel PT
//! errata of its model that change what ptdump shows (from Intel's
//! specification updates, by the model lists libipt keeps).

use crate::c_number::parse_c_number;

/// An Intel processor's family, model and stepping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    pub family: u16,
    pub model: u8,
    pub stepping: u8,
}

impl Cpu {
    /// `F/M` or `F/M/S`, each number in C notation; `None` if malformed.
    pub fn parse(s: &str) -> Option<Cpu> {
        let mut parts = s.split('/');
        let family = u16::try_from(parse_c_number(parts.next()?)?).ok()?;
        let model = u8::try_from(parse_c_number(parts.next()?)?).ok()?;
        let stepping = match parts.next() {
            Some(s) => u8::try_from(parse_c_number(s)?).ok()?,
            None => 0,
        };
        parts.next().is_none().then_some(Cpu { family, model, stepping })
    }
}

/// The errata that affect packets or timing as ptdump sees them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errata {
    /// SKD007: a CYC may be emitted in the middle of an OVF (`02 <cyc> F3`).
    pub skd007: bool,
    /// SKL168: CYC packets can be dropped right before a PSB, so the first
    /// MTC after a PSB may not calibrate.
    pub skl168: bool,
    /// SKZ84: with VMX TSC scaling or offsetting a TMA can be corrupted; one
    /// with reserved bits set is an invalid 8-byte packet, not an error.
    pub skz84: bool,
}

/// Which errata the processor has; `None` for a processor not known to have
/// Intel PT (libipt's "unknown cpu").
pub fn errata(cpu: Cpu) -> Option<Errata> {
    let none = Errata::default();
    let skylake = Errata { skd007: true, skl168: true, skz84: false };
    let server = Errata { skz84: true, ..none };
    Some(match (cpu.family, cpu.model) {
        // Broadwell.
        (6, 0x3d | 0x47 | 0x4f | 0x56) => none,
        // Skylake, Kaby Lake, Coffee Lake, Comet Lake clients.
        (6, 0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6) => skylake,
        // Skylake and later servers.
        (6, 0x55 | 0x6a | 0x6c | 0x8f | 0xad | 0xae | 0xcf) | (0x13, 0x01) => server,
        // Ice Lake, Tiger Lake, Rocket Lake clients; Alder Lake and later;
        // the Atom cores (Goldmont and later).
        (6, 0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 | 0xa8)
        | (6, 0x97 | 0x9a | 0xbf | 0xb7 | 0xb5 | 0xaa | 0xac | 0xba | 0xcc | 0xbd | 0xc5 | 0xc6 | 0xd5)
        | (0x12, 0x01 | 0x03)
        | (6, 0x5c | 0x5f | 0x7a | 0x86 | 0x96 | 0x9c | 0xb6 | 0xaf | 0xdd) => none,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_family_model_stepping() {
        assert_eq!(Cpu::parse("6/142"), Some(Cpu { family: 6, model: 142, stepping: 0 }));
        assert_eq!(Cpu::parse("0x6/0x8e/10"), Some(Cpu { family: 6, model: 0x8e, stepping: 10 }));
        for bad in ["6", "6/", "6/256", "6/1/2/3", "auto", "/5", "6/x"] {
            assert_eq!(Cpu::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn errata_by_model() {
        let cpu = |family, model| Cpu { family, model, stepping: 0 };
        assert!(errata(cpu(6, 142)).unwrap().skl168);
        assert!(errata(cpu(6, 85)).unwrap().skz84);
        assert_eq!(errata(cpu(6, 61)), Some(Errata::default()));
        assert_eq!(errata(cpu(0, 0)), None);
    }
}
