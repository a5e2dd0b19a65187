//! The feature sections that follow the data section of a perf.data file.

use crate::abi::feature;
use crate::attr::{EventAttr, ATTR_SIZE_VER0};
use crate::cursor::{until_nul, Cursor, Origin};
use crate::error::{Error, Result};

/// Where one feature's payload is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureSection {
    /// Feature bit number (see [`crate::abi::feature`]).
    pub feature: u32,
    pub offset: u64,
    pub size: u64,
}

/// The feature sections this crate interprets. Unparsed ones are only listed
/// in [`Features::sections`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    pub sections: Vec<FeatureSection>,
    pub hostname: Option<String>,
    pub osrelease: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    pub cpudesc: Option<String>,
    pub cpuid: Option<String>,
    pub nrcpus: Option<NrCpus>,
    pub cmdline: Option<Vec<String>>,
    pub build_ids: Vec<BuildIdEntry>,
    pub event_desc: Vec<EventDesc>,
    /// HEADER_AUXTRACE: where every AUXTRACE record is, for random access.
    pub auxtrace_index: Vec<AuxtraceIndexEntry>,
    /// Sections that could not be parsed: the error, and the section was skipped.
    pub errors: Vec<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NrCpus {
    pub available: u32,
    pub online: u32,
}

/// HEADER_BUILD_ID entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildIdEntry {
    pub misc: u16,
    pub pid: i32,
    pub build_id: Vec<u8>,
    pub filename: String,
}

/// HEADER_EVENT_DESC entry: an attr, its name and ids.
#[derive(Clone, Debug, PartialEq)]
pub struct EventDesc {
    pub attr: EventAttr,
    pub name: String,
    pub ids: Vec<u64>,
}

/// HEADER_AUXTRACE entry: file offset and size (48) of an AUXTRACE record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxtraceIndexEntry {
    pub file_offset: u64,
    pub size: u64,
}

impl Features {
    /// Reads the section table at `table_offset` for the bits set in `bitmap`,
    /// then each section. A broken section is recorded in `errors` and skipped.
    pub(crate) fn parse(file: &[u8], table_offset: u64, bitmap: &[u8; 32]) -> Result<Features> {
        let bits: Vec<u32> = (0..feature::BITS).filter(|&b| bitmap[(b / 8) as usize] & (1 << (b % 8)) != 0).collect();
        let mut f = Features::default();
        if bits.is_empty() {
            return Ok(f);
        }
        let table = slice_at(file, table_offset, bits.len() as u64 * 16, "feature section table")?;
        let mut c = Cursor::new(table, Origin::file(table_offset), "feature section table");
        for &feature in &bits {
            f.sections.push(FeatureSection { feature, offset: c.u64()?, size: c.u64()? });
        }
        for sec in f.sections.clone() {
            if let Err(e) = f.parse_section(file, sec) {
                f.errors.push(format!("feature {} ({}): {e}", sec.feature, feature_name(sec.feature)));
            }
        }
        Ok(f)
    }

    fn parse_section(&mut self, file: &[u8], sec: FeatureSection) -> Result<()> {
        let what = feature_name(sec.feature);
        let data = slice_at(file, sec.offset, sec.size, what)?;
        let c = &mut Cursor::new(data, Origin::file(sec.offset), what);
        match sec.feature {
            feature::HOSTNAME => self.hostname = Some(perf_string(c)?),
            feature::OSRELEASE => self.osrelease = Some(perf_string(c)?),
            feature::VERSION => self.version = Some(perf_string(c)?),
            feature::ARCH => self.arch = Some(perf_string(c)?),
            feature::CPUDESC => self.cpudesc = Some(perf_string(c)?),
            feature::CPUID => self.cpuid = Some(perf_string(c)?),
            feature::NRCPUS => self.nrcpus = Some(NrCpus { available: c.u32()?, online: c.u32()? }),
            feature::CMDLINE => {
                let nr = c.u32()?;
                let mut args = Vec::new();
                for _ in 0..nr {
                    args.push(perf_string(c)?);
                }
                self.cmdline = Some(args);
            }
            feature::BUILD_ID => {
                while c.remaining() > 0 {
                    let (_, misc, size) = (c.u32()?, c.u16()?, c.u16()? as usize);
                    if size < 8 + 4 + 24 {
                        return Err(c.invalid(format!("build id entry size {size} is too small")));
                    }
                    let pid = c.u32()? as i32;
                    let id = c.bytes(24)?;
                    let len = if misc & crate::abi::misc::BUILD_ID_SIZE != 0 { (id[20] as usize).min(20) } else { 20 };
                    let filename = String::from_utf8_lossy(until_nul(c.bytes(size - 36)?)).into_owned();
                    self.build_ids.push(BuildIdEntry { misc, pid, build_id: id[..len].to_vec(), filename });
                }
            }
            feature::EVENT_DESC => {
                let nr = c.u32()?;
                let attr_size = c.u32()? as usize;
                if attr_size < ATTR_SIZE_VER0 as usize {
                    return Err(c.invalid(format!("attr size {attr_size} is below the minimum")));
                }
                for _ in 0..nr {
                    let attr = EventAttr::parse(c.bytes(attr_size)?);
                    let nr_ids = c.u32()?;
                    let name = perf_string(c)?;
                    let ids = c.items(nr_ids as u64, 8)?.chunks_exact(8).map(crate::cursor::u64_from_chunk).collect();
                    self.event_desc.push(EventDesc { attr, name, ids });
                }
            }
            feature::AUXTRACE => {
                let nr = c.u64()?;
                let raw = c.items(nr, 16)?;
                self.auxtrace_index = raw
                    .chunks_exact(16)
                    .map(|e| AuxtraceIndexEntry { file_offset: crate::cursor::le_u64(e, 0), size: crate::cursor::le_u64(e, 8) })
                    .collect();
            }
            _ => {}
        }
        Ok(())
    }
}

/// perf's header string: u32 length (padded, counting the NUL) then the bytes.
fn perf_string(c: &mut Cursor<'_>) -> Result<String> {
    let len = c.u32()?;
    let b = c.items(len as u64, 1)?;
    Ok(String::from_utf8_lossy(until_nul(b)).into_owned())
}

/// `len` bytes at `offset` of `file`, or an error naming `what`.
pub(crate) fn slice_at<'a>(file: &'a [u8], offset: u64, len: u64, what: &'static str) -> Result<&'a [u8]> {
    let end = offset.checked_add(len);
    match end {
        Some(end) if end <= file.len() as u64 => Ok(&file[offset as usize..end as usize]),
        _ => Err(Error::Truncated { what, offset, inner: None, needed: len, available: (file.len() as u64).saturating_sub(offset) }),
    }
}

/// perf's name for a feature bit.
pub fn feature_name(bit: u32) -> &'static str {
    match bit {
        feature::TRACING_DATA => "TRACING_DATA",
        feature::BUILD_ID => "BUILD_ID",
        feature::HOSTNAME => "HOSTNAME",
        feature::OSRELEASE => "OSRELEASE",
        feature::VERSION => "VERSION",
        feature::ARCH => "ARCH",
        feature::NRCPUS => "NRCPUS",
        feature::CPUDESC => "CPUDESC",
        feature::CPUID => "CPUID",
        feature::TOTAL_MEM => "TOTAL_MEM",
        feature::CMDLINE => "CMDLINE",
        feature::EVENT_DESC => "EVENT_DESC",
        feature::CPU_TOPOLOGY => "CPU_TOPOLOGY",
        feature::NUMA_TOPOLOGY => "NUMA_TOPOLOGY",
        feature::BRANCH_STACK => "BRANCH_STACK",
        feature::PMU_MAPPINGS => "PMU_MAPPINGS",
        feature::GROUP_DESC => "GROUP_DESC",
        feature::AUXTRACE => "AUXTRACE",
        feature::STAT => "STAT",
        feature::CACHE => "CACHE",
        feature::SAMPLE_TIME => "SAMPLE_TIME",
        feature::MEM_TOPOLOGY => "MEM_TOPOLOGY",
        feature::CLOCKID => "CLOCKID",
        feature::DIR_FORMAT => "DIR_FORMAT",
        feature::BPF_PROG_INFO => "BPF_PROG_INFO",
        feature::BPF_BTF => "BPF_BTF",
        feature::COMPRESSED => "COMPRESSED",
        feature::CPU_PMU_CAPS => "CPU_PMU_CAPS",
        feature::CLOCK_DATA => "CLOCK_DATA",
        feature::HYBRID_TOPOLOGY => "HYBRID_TOPOLOGY",
        feature::PMU_CAPS => "PMU_CAPS",
        _ => "unknown feature",
    }
}
