//! `perf_event_attr`: the event description that decides every record's layout.

use crate::abi::{attr_flag, read_format, sample_type};
use crate::cursor::le_u64;

/// Smallest attr the kernel ever had (`PERF_ATTR_SIZE_VER0`).
pub const ATTR_SIZE_VER0: u32 = 64;
/// The size perf 6.1 writes (`PERF_ATTR_SIZE_VER7`); perf 6.1 refuses larger ones.
pub const ATTR_SIZE_VER7: u32 = 128;
/// Largest layout this crate knows (`PERF_ATTR_SIZE_VER8`, adds `config3`).
pub const ATTR_SIZE_KNOWN: usize = 136;

/// `struct perf_event_attr`, every field up to `config3`.
///
/// Fields beyond `size` read as zero, as the kernel treats them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    /// `sample_period`, or `sample_freq` when the FREQ flag is set.
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The bitfield word (`disabled`, `sample_id_all`, `text_poke`, ...); see [`attr_flag`].
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub aux_sample_size: u32,
    pub sig_data: u64,
    pub config3: u64,
}

impl EventAttr {
    /// Parses an attr from `bytes` (its `size` field may be smaller or larger
    /// than what this crate knows; unknown tail bytes are ignored).
    /// `bytes` must hold at least [`ATTR_SIZE_VER0`] bytes.
    pub(crate) fn parse(bytes: &[u8]) -> EventAttr {
        let mut b = [0u8; ATTR_SIZE_KNOWN];
        let n = bytes.len().min(ATTR_SIZE_KNOWN);
        b[..n].copy_from_slice(&bytes[..n]);
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u16_at = |at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap());
        EventAttr {
            type_: u32_at(0),
            size: u32_at(4),
            config: le_u64(&b, 8),
            sample_period: le_u64(&b, 16),
            sample_type: le_u64(&b, 24),
            read_format: le_u64(&b, 32),
            flags: le_u64(&b, 40),
            wakeup_events: u32_at(48),
            bp_type: u32_at(52),
            config1: le_u64(&b, 56),
            config2: le_u64(&b, 64),
            branch_sample_type: le_u64(&b, 72),
            sample_regs_user: le_u64(&b, 80),
            sample_stack_user: u32_at(88),
            clockid: u32_at(92) as i32,
            sample_regs_intr: le_u64(&b, 96),
            aux_watermark: u32_at(104),
            sample_max_stack: u16_at(108),
            aux_sample_size: u32_at(112),
            sig_data: le_u64(&b, 120),
            config3: le_u64(&b, 128),
        }
    }

    /// Serialises `self.size` bytes (at least [`ATTR_SIZE_VER0`]); bytes past
    /// the known layout are zero.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(ATTR_SIZE_KNOWN);
        b.extend_from_slice(&self.type_.to_le_bytes());
        b.extend_from_slice(&self.size.to_le_bytes());
        for v in [self.config, self.sample_period, self.sample_type, self.read_format, self.flags] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.wakeup_events.to_le_bytes());
        b.extend_from_slice(&self.bp_type.to_le_bytes());
        for v in [self.config1, self.config2, self.branch_sample_type, self.sample_regs_user] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.sample_stack_user.to_le_bytes());
        b.extend_from_slice(&self.clockid.to_le_bytes());
        b.extend_from_slice(&self.sample_regs_intr.to_le_bytes());
        b.extend_from_slice(&self.aux_watermark.to_le_bytes());
        b.extend_from_slice(&self.sample_max_stack.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.aux_sample_size.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.sig_data.to_le_bytes());
        b.extend_from_slice(&self.config3.to_le_bytes());
        debug_assert_eq!(b.len(), ATTR_SIZE_KNOWN);
        b.resize(self.size.max(ATTR_SIZE_VER0) as usize, 0);
        b
    }

    pub fn has(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }

    pub fn sample_id_all(&self) -> bool {
        self.has(attr_flag::SAMPLE_ID_ALL)
    }

    /// Bytes of the `sample_id` trailer on non-sample records (0 without sample_id_all).
    pub fn sample_id_size(&self) -> usize {
        if !self.sample_id_all() {
            return 0;
        }
        let st = self.sample_type;
        [sample_type::TID, sample_type::TIME, sample_type::ID, sample_type::STREAM_ID, sample_type::CPU, sample_type::IDENTIFIER]
            .iter()
            .filter(|&&bit| st & bit != 0)
            .count()
            * 8
    }

    /// Size of one `read_format` value block in a sample (for READ).
    pub(crate) fn read_value_size(&self) -> usize {
        let rf = self.read_format;
        (1 + (rf & read_format::ID != 0) as usize + (rf & read_format::LOST != 0) as usize) * 8
    }
}

/// One event description with the sample ids the kernel gave its instances.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttrWithIds {
    pub attr: EventAttr,
    pub ids: Vec<u64>,
}
