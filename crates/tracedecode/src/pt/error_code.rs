//! perf's error codes for Intel PT decode errors.

use intel_pt::flow::FlowErrorKind;

/// perf's error code for an Intel PT decode error.
pub fn perf_error_code(kind: &FlowErrorKind) -> u32 {
    match kind {
        FlowErrorKind::Packet(_) | FlowErrorKind::BadContext => 3,
        FlowErrorKind::EndOfTrace => 4,
        FlowErrorKind::Unmapped | FlowErrorKind::BadInsn => 5,
        FlowErrorKind::NoTnt
        | FlowErrorKind::NoTip
        | FlowErrorKind::NoTrapPackets
        | FlowErrorKind::PsbMismatch { .. }
        | FlowErrorKind::ModeMismatch { .. } => 6,
        FlowErrorKind::Overflow => 7,
        FlowErrorKind::NoProgress => 10,
    }
}
