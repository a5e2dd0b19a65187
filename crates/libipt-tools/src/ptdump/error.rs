//! The error kinds ptdump reports in its `[offset: what: why]` lines, with
//! libipt's wording for each, so that the lines read as libipt's do.

/// Why a packet, a time update or a calibration failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Internal,
    BadOpcode,
    BadPacket,
    BadContext,
    BadConfig,
    NoIp,
    IpSuppressed,
    NoTime,
    BadCpu,
}

impl Fault {
    /// libipt's message for the fault (`pt_errstr`).
    pub fn message(self) -> &'static str {
        match self {
            Fault::Internal => "internal error",
            Fault::BadOpcode => "unknown opcode",
            Fault::BadPacket => "unknown packet",
            Fault::BadContext => "unexpected packet context",
            Fault::BadConfig => "bad configuration",
            Fault::NoIp => "no ip",
            Fault::IpSuppressed => "ip has been suppressed",
            Fault::NoTime => "no timing information",
            Fault::BadCpu => "unknown cpu",
        }
    }
}

/// Writes ptdump's error line: `[offset: what]`, or `[offset: what: why]`.
pub fn diag(out: &mut impl std::io::Write, offset: usize, what: &str, fault: Option<Fault>) -> std::io::Result<()> {
    match fault {
        Some(f) => writeln!(out, "[{offset:x}: {what}: {}]", f.message()),
        None => writeln!(out, "[{offset:x}: {what}]"),
    }
}

/// [`diag`] for a failed update, nothing for a good one.
pub fn report(out: &mut impl std::io::Write, offset: usize, what: &str, r: Result<(), Fault>) -> std::io::Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(f) => diag(out, offset, what, Some(f)),
    }
}
