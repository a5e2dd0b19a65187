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
            Fault::NoTime => "no timing information",
            Fault::BadCpu => "unknown cpu",
        }
    }
}
