//! PERF_RECORD_SAMPLE bodies and the `sample_id` trailer of other records.

use crate::abi::{read_format, sample_type as st, BRANCH_SAMPLE_HW_INDEX};
use crate::attr::EventAttr;
use crate::cursor::{le_u64, Cursor};
use crate::error::Result;

/// The `sample_id` trailer (`sample_id_all`): who, when, where a record happened.
/// A field is `Some` when the attr's sample_type asks for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub identifier: Option<u64>,
}

impl SampleId {
    /// Parses a trailer laid out by `sample_type` from exactly its bytes.
    pub(crate) fn parse(c: &mut Cursor<'_>, sample_type: u64) -> Result<SampleId> {
        let mut s = SampleId::default();
        if sample_type & st::TID != 0 {
            s.pid = Some(c.u32()?);
            s.tid = Some(c.u32()?);
        }
        if sample_type & st::TIME != 0 {
            s.time = Some(c.u64()?);
        }
        if sample_type & st::ID != 0 {
            s.id = Some(c.u64()?);
        }
        if sample_type & st::STREAM_ID != 0 {
            s.stream_id = Some(c.u64()?);
        }
        if sample_type & st::CPU != 0 {
            s.cpu = Some(c.u32()?);
            c.u32()?;
        }
        if sample_type & st::IDENTIFIER != 0 {
            s.identifier = Some(c.u64()?);
        }
        Ok(s)
    }

    /// The id that names the record's attr: IDENTIFIER, else ID.
    pub fn attr_id(&self) -> Option<u64> {
        self.identifier.or(self.id)
    }
}

/// PERF_RECORD_SAMPLE with the fields its attr's sample_type selects.
/// Variable-size parts stay borrowed from the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    pub identifier: Option<u64>,
    pub ip: Option<u64>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    /// The `read_format` block, raw.
    pub read: Option<&'a [u8]>,
    /// `nr` little-endian u64 instruction pointers.
    pub callchain: Option<&'a [u8]>,
    pub raw: Option<&'a [u8]>,
    /// `nr`, optional `hw_idx`, then 24-byte entries, raw.
    pub branch_stack: Option<&'a [u8]>,
    /// `abi` then the registers, raw.
    pub regs_user: Option<&'a [u8]>,
    /// `size`, data and `dyn_size`, raw.
    pub stack_user: Option<&'a [u8]>,
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    pub transaction: Option<u64>,
    pub regs_intr: Option<&'a [u8]>,
    pub phys_addr: Option<u64>,
    pub aux: Option<&'a [u8]>,
    pub cgroup: Option<u64>,
    pub data_page_size: Option<u64>,
    pub code_page_size: Option<u64>,
}

impl<'a> Sample<'a> {
    pub(crate) fn parse(c: &mut Cursor<'a>, attr: &EventAttr) -> Result<Sample<'a>> {
        let t = attr.sample_type;
        let has = |bit| t & bit != 0;
        let mut s = Sample::default();
        if has(st::IDENTIFIER) {
            s.identifier = Some(c.u64()?);
        }
        if has(st::IP) {
            s.ip = Some(c.u64()?);
        }
        if has(st::TID) {
            s.pid = Some(c.u32()?);
            s.tid = Some(c.u32()?);
        }
        if has(st::TIME) {
            s.time = Some(c.u64()?);
        }
        if has(st::ADDR) {
            s.addr = Some(c.u64()?);
        }
        if has(st::ID) {
            s.id = Some(c.u64()?);
        }
        if has(st::STREAM_ID) {
            s.stream_id = Some(c.u64()?);
        }
        if has(st::CPU) {
            s.cpu = Some(c.u32()?);
            c.u32()?;
        }
        if has(st::PERIOD) {
            s.period = Some(c.u64()?);
        }
        if has(st::READ) {
            s.read = Some(read_block(c, attr)?);
        }
        if has(st::CALLCHAIN) {
            let nr = c.u64()?;
            s.callchain = Some(c.items(nr, 8)?);
        }
        if has(st::RAW) {
            let size = c.u32()?;
            s.raw = Some(c.bytes(size as usize)?);
        }
        if has(st::BRANCH_STACK) {
            let start = *c;
            let nr = c.u64()?;
            if attr.branch_sample_type & BRANCH_SAMPLE_HW_INDEX != 0 {
                c.u64()?;
            }
            c.items(nr, 24)?;
            s.branch_stack = Some(consumed(start, c));
        }
        if has(st::REGS_USER) {
            s.regs_user = Some(regs_block(c, attr.sample_regs_user)?);
        }
        if has(st::STACK_USER) {
            let start = *c;
            let size = c.u64()?;
            if size != 0 {
                c.items(size, 1)?;
                c.u64()?;
            }
            s.stack_user = Some(consumed(start, c));
        }
        if has(st::WEIGHT) || has(st::WEIGHT_STRUCT) {
            s.weight = Some(c.u64()?);
        }
        if has(st::DATA_SRC) {
            s.data_src = Some(c.u64()?);
        }
        if has(st::TRANSACTION) {
            s.transaction = Some(c.u64()?);
        }
        if has(st::REGS_INTR) {
            s.regs_intr = Some(regs_block(c, attr.sample_regs_intr)?);
        }
        if has(st::PHYS_ADDR) {
            s.phys_addr = Some(c.u64()?);
        }
        if has(st::CGROUP) {
            s.cgroup = Some(c.u64()?);
        }
        if has(st::DATA_PAGE_SIZE) {
            s.data_page_size = Some(c.u64()?);
        }
        if has(st::CODE_PAGE_SIZE) {
            s.code_page_size = Some(c.u64()?);
        }
        if has(st::AUX) {
            let size = c.u64()?;
            s.aux = Some(c.items(size, 1)?);
        }
        Ok(s)
    }

    /// The sample's who/when/where, as the trailer of other records would give it.
    pub fn sample_id(&self) -> SampleId {
        SampleId { pid: self.pid, tid: self.tid, time: self.time, id: self.id, stream_id: self.stream_id, cpu: self.cpu, identifier: self.identifier }
    }

    /// The callchain's instruction pointers.
    pub fn callchain_ips(&self) -> impl Iterator<Item = u64> + 'a {
        self.callchain.unwrap_or_default().chunks_exact(8).map(|c| le_u64(c, 0))
    }
}

fn consumed<'a>(start: Cursor<'a>, now: &Cursor<'a>) -> &'a [u8] {
    let mut s = start;
    let n = start.remaining() - now.remaining();
    s.bytes(n).expect("bytes already checked")
}

fn read_block<'a>(c: &mut Cursor<'a>, attr: &EventAttr) -> Result<&'a [u8]> {
    let rf = attr.read_format;
    let start = *c;
    let times = (rf & read_format::TOTAL_TIME_ENABLED != 0) as usize + (rf & read_format::TOTAL_TIME_RUNNING != 0) as usize;
    if rf & read_format::GROUP != 0 {
        let nr = c.u64()?;
        c.bytes(times * 8)?;
        c.items(nr, attr.read_value_size())?;
    } else {
        c.bytes(times * 8 + attr.read_value_size())?;
    }
    Ok(consumed(start, c))
}

fn regs_block<'a>(c: &mut Cursor<'a>, mask: u64) -> Result<&'a [u8]> {
    let start = *c;
    let abi = c.u64()?;
    if abi != 0 {
        c.items(mask.count_ones() as u64, 8)?;
    }
    Ok(consumed(start, c))
}
