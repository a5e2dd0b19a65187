//! The event attributes shared by perfdata's integration tests.

use perfdata::abi::{attr_flag, sample_type as st};
use perfdata::{EventAttr, ATTR_SIZE_VER7};

/// The sample_id fields every side-band record carries in these files.
pub const SIDE_BAND: u64 = st::TID | st::TIME | st::CPU | st::IDENTIFIER;

/// A software event with `sample_type`, sample_id_all, and TEXT_POKE and
/// KSYMBOL records.
pub fn attr(sample_type: u64) -> EventAttr {
    EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        config: 9,
        sample_type,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::TEXT_POKE | attr_flag::KSYMBOL,
        ..EventAttr::default()
    }
}
