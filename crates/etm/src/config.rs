//! An ETMv4 trace source's configuration: the registers that decide how its
//! packets are encoded (which headers exist, field sizes).

/// The PE architecture profile of the traced core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Profile {
    #[default]
    A,
    R,
    M,
}

impl Profile {
    /// The profile of a core type name from a snapshot (`Cortex-A53`, `Cortex-M33`, ...).
    pub fn from_core_type(core: &str) -> Profile {
        let c = core.to_ascii_uppercase();
        let c = c.strip_prefix("CORTEX-").unwrap_or(&c);
        match c.as_bytes().first() {
            Some(b'M') => Profile::M,
            Some(b'R') => Profile::R,
            _ => Profile::A,
        }
    }
}

/// Register values of one ETMv4 trace source (TRCCONFIGR, TRCTRACEIDR,
/// TRCIDR0/1/2/8-13) and its core's profile. `Default` holds the values
/// OpenCSD assumes for registers a snapshot leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EtmV4Config {
    pub configr: u32,
    pub traceidr: u32,
    pub idr0: u32,
    pub idr1: u32,
    pub idr2: u32,
    pub idr8: u32,
    pub idr9: u32,
    pub idr10: u32,
    pub idr11: u32,
    pub idr12: u32,
    pub idr13: u32,
    pub profile: Profile,
}

impl Default for EtmV4Config {
    fn default() -> Self {
        EtmV4Config {
            configr: 0xC1,
            traceidr: 0,
            idr0: 0x28000EA1,
            idr1: 0x4100F403,
            idr2: 0x00000488,
            idr8: 0,
            idr9: 0,
            idr10: 0,
            idr11: 0,
            idr12: 0,
            idr13: 0,
            profile: Profile::A,
        }
    }
}

/// The registers perf records for each CPU in a CoreSight AUXTRACE_INFO;
/// the rest (TRCIDR9..13) as for a source that does not report them.
impl From<&perfdata::auxtrace::Etmv4Regs> for EtmV4Config {
    fn from(r: &perfdata::auxtrace::Etmv4Regs) -> EtmV4Config {
        EtmV4Config {
            configr: r.trcconfigr,
            traceidr: r.trctraceidr,
            idr0: r.trcidr0,
            idr1: r.trcidr1,
            idr2: r.trcidr2,
            idr8: r.trcidr8,
            ..EtmV4Config::default()
        }
    }
}

impl EtmV4Config {
    /// The CoreSight trace ID the source writes its frames under.
    pub fn trace_id(&self) -> u8 {
        (self.traceidr & 0x7F) as u8
    }

    pub fn major_version(&self) -> u8 {
        ((self.idr1 >> 8) & 0xF) as u8
    }

    pub fn minor_version(&self) -> u8 {
        ((self.idr1 >> 4) & 0xF) as u8
    }

    /// Architecture version as 0xMm (0x40 = ETMv4.0, 0x44 = ETMv4.4).
    pub fn version(&self) -> u8 {
        (self.major_version() << 4) | self.minor_version()
    }

    /// TRCIDR0.TRCCCI: cycle counting in instruction trace is implemented.
    pub fn has_cycle_counting(&self) -> bool {
        self.idr0 & 0x80 != 0
    }

    /// TRCIDR0.TRCCOND: conditional instruction tracing is implemented.
    pub fn has_cond_trace(&self) -> bool {
        self.idr0 & 0x40 != 0
    }

    /// TRCIDR0.TRCDATA: data tracing is implemented.
    pub fn has_data_trace(&self) -> bool {
        self.idr0 & 0x18 == 0x18
    }

    /// TRCIDR0.QSUPP: Q elements are supported.
    pub fn has_q_elements(&self) -> bool {
        (self.idr0 >> 15) & 0x3 != 0
    }

    /// TRCIDR0.COMMOPT (with cycle counting): cycle count packets carry no commit field.
    pub fn commit_opt1(&self) -> bool {
        self.idr0 & 0x2000_0000 != 0 && self.has_cycle_counting()
    }

    /// TRCIDR0.RETSTACK: the return stack is implemented.
    pub fn has_return_stack(&self) -> bool {
        self.idr0 & 0x200 != 0
    }

    /// Bytes of VMID in context packets (TRCIDR2.VMIDSIZE; 16/32 bits from ETMv4.1).
    pub fn vmid_bytes(&self) -> u8 {
        match (self.idr2 >> 10) & 0x1F {
            1 => 1,
            2 if self.minor_version() > 0 => 2,
            4 if self.minor_version() > 0 => 4,
            _ => 0,
        }
    }

    /// Bytes of context ID in context packets (TRCIDR2.CIDSIZE).
    pub fn context_id_bytes(&self) -> u8 {
        if (self.idr2 >> 5) & 0x1F == 4 {
            4
        } else {
            0
        }
    }

    /// Cycle counter width in bits (TRCIDR2.CCSIZE + 12).
    pub fn cc_size(&self) -> u32 {
        ((self.idr2 >> 25) & 0xF) + 12
    }

    /// Maximum speculation depth (TRCIDR8).
    pub fn max_spec_depth(&self) -> u32 {
        self.idr8
    }

    /// TRCIDR2.WFXMODE (bit 31, from ETMv4.3): WFI and WFE are P0
    /// instructions (traced like branches).
    pub fn wfx_is_p0(&self) -> bool {
        self.idr2 & (1 << 31) != 0 && self.version() >= 0x43
    }

    /// TRCCONFIGR.CCI: cycle counting enabled.
    pub fn cycle_counting_enabled(&self) -> bool {
        self.configr & (1 << 4) != 0
    }

    /// TRCCONFIGR.RS: the return stack is enabled, so returns that match it
    /// are traced without their target address (the flow decoder must keep one).
    pub fn return_stack_enabled(&self) -> bool {
        self.configr & (1 << 12) != 0
    }

    /// TRCCONFIGR.TS: timestamps enabled.
    pub fn timestamps_enabled(&self) -> bool {
        self.configr & (1 << 11) != 0
    }

    /// TRCCONFIGR.COND, when the feature exists: conditional instruction tracing enabled.
    pub fn cond_trace_enabled(&self) -> bool {
        self.has_cond_trace() && matches!((self.configr >> 8) & 0x7, 1 | 2 | 3 | 7)
    }

    /// Data trace enabled (TRCCONFIGR.DA or DV, with load/store P0 tracing on).
    pub fn data_trace_enabled(&self) -> bool {
        self.has_data_trace() && self.configr & 0x6 != 0 && self.configr & (0x3 << 16) != 0
    }
}
