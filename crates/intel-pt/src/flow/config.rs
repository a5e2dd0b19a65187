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
}
