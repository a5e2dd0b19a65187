//! Typed records: the bodies of `perf_event_header`-framed records, borrowed from the file.

use crate::abi::{misc, record_type as rt};
use crate::attr::{AttrWithIds, EventAttr, ATTR_SIZE_VER0};
use crate::cursor::{Cursor, Origin};
use crate::error::Result;
use crate::sample::{Sample, SampleId};

/// One record as found in the file: where, its header, its typed body and its
/// `sample_id` trailer (for SAMPLE records, the same fields taken from the sample).
#[derive(Clone, Debug, PartialEq)]
pub struct Record<'a> {
    /// File offset of the record header (of the enclosing COMPRESSED record
    /// when `inner_offset` is set).
    pub offset: u64,
    /// Offset inside the decompressed data of a COMPRESSED record.
    pub inner_offset: Option<u64>,
    pub misc: u16,
    /// `header.size`: for AUXTRACE the trace payload follows and is not counted.
    pub size: u16,
    pub body: RecordBody<'a>,
    pub sample_id: SampleId,
}

impl Record<'_> {
    /// `header.type`.
    pub fn record_type(&self) -> u32 {
        self.body.record_type()
    }
    /// perf timestamp from the sample_id trailer or the sample, if any.
    pub fn time(&self) -> Option<u64> {
        self.sample_id.time
    }
    /// `misc & PERF_RECORD_MISC_CPUMODE_MASK`.
    pub fn cpumode(&self) -> u16 {
        self.misc & misc::CPUMODE_MASK
    }
}

/// The body of each record type this crate understands; any other type is [`RecordBody::Other`].
// SAMPLE is the large variant; boxing it would allocate once per sample on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum RecordBody<'a> {
    Mmap(Mmap<'a>),
    Lost(Lost),
    Comm(Comm<'a>),
    Exit(ForkExit),
    Throttle(Throttle),
    Unthrottle(Throttle),
    Fork(ForkExit),
    Sample(Sample<'a>),
    Mmap2(Mmap2<'a>),
    Aux(Aux),
    ItraceStart(ItraceStart),
    LostSamples(LostSamples),
    /// A context switch; direction and preemption are in `misc`.
    Switch,
    SwitchCpuWide(SwitchCpuWide),
    Ksymbol(Ksymbol<'a>),
    BpfEvent(BpfEvent),
    TextPoke(TextPoke<'a>),
    /// Pipe mode: an event description.
    HeaderAttr(HeaderAttr<'a>),
    FinishedRound,
    IdIndex(IdIndex),
    AuxtraceInfo(AuxtraceInfo<'a>),
    Auxtrace(Auxtrace<'a>),
    TimeConv(TimeConv),
    Compressed(Compressed<'a>),
    FinishedInit,
    /// A type without a typed body here: kept whole (without its header).
    Other {
        record_type: u32,
        data: &'a [u8],
    },
}

impl RecordBody<'_> {
    pub fn record_type(&self) -> u32 {
        match self {
            RecordBody::Mmap(_) => rt::MMAP,
            RecordBody::Lost(_) => rt::LOST,
            RecordBody::Comm(_) => rt::COMM,
            RecordBody::Exit(_) => rt::EXIT,
            RecordBody::Throttle(_) => rt::THROTTLE,
            RecordBody::Unthrottle(_) => rt::UNTHROTTLE,
            RecordBody::Fork(_) => rt::FORK,
            RecordBody::Sample(_) => rt::SAMPLE,
            RecordBody::Mmap2(_) => rt::MMAP2,
            RecordBody::Aux(_) => rt::AUX,
            RecordBody::ItraceStart(_) => rt::ITRACE_START,
            RecordBody::LostSamples(_) => rt::LOST_SAMPLES,
            RecordBody::Switch => rt::SWITCH,
            RecordBody::SwitchCpuWide(_) => rt::SWITCH_CPU_WIDE,
            RecordBody::Ksymbol(_) => rt::KSYMBOL,
            RecordBody::BpfEvent(_) => rt::BPF_EVENT,
            RecordBody::TextPoke(_) => rt::TEXT_POKE,
            RecordBody::HeaderAttr(_) => rt::HEADER_ATTR,
            RecordBody::FinishedRound => rt::FINISHED_ROUND,
            RecordBody::IdIndex(_) => rt::ID_INDEX,
            RecordBody::AuxtraceInfo(_) => rt::AUXTRACE_INFO,
            RecordBody::Auxtrace(_) => rt::AUXTRACE,
            RecordBody::TimeConv(_) => rt::TIME_CONV,
            RecordBody::Compressed(_) => rt::COMPRESSED,
            RecordBody::FinishedInit => rt::FINISHED_INIT,
            RecordBody::Other { record_type, .. } => *record_type,
        }
    }
}

/// PERF_RECORD_MMAP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    /// Without the terminating NUL.
    pub filename: &'a [u8],
}

/// PERF_RECORD_MMAP2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap2<'a> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub file_id: Mmap2FileId<'a>,
    pub prot: u32,
    pub flags: u32,
    pub filename: &'a [u8],
}

/// How MMAP2 names the mapped file: device and inode, or (misc bit
/// MMAP_BUILD_ID) a build id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mmap2FileId<'a> {
    Inode { maj: u32, min: u32, ino: u64, ino_generation: u64 },
    BuildId(&'a [u8]),
}

/// PERF_RECORD_COMM. `misc` has COMM_EXEC when the name changed by exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comm<'a> {
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a [u8],
}

/// PERF_RECORD_FORK and PERF_RECORD_EXIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkExit {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
}

/// PERF_RECORD_LOST: records the kernel dropped from a ring buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    pub id: u64,
    pub lost: u64,
}

/// PERF_RECORD_LOST_SAMPLES.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostSamples {
    pub lost: u64,
}

/// PERF_RECORD_THROTTLE and PERF_RECORD_UNTHROTTLE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    pub time: u64,
    pub id: u64,
    pub stream_id: u64,
}

/// PERF_RECORD_AUX: new data in the AUX area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aux {
    pub aux_offset: u64,
    pub aux_size: u64,
    /// See [`crate::abi::aux_flag`].
    pub flags: u64,
}

/// PERF_RECORD_ITRACE_START.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItraceStart {
    pub pid: u32,
    pub tid: u32,
}

/// PERF_RECORD_SWITCH_CPU_WIDE: the other task of the switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchCpuWide {
    pub next_prev_pid: u32,
    pub next_prev_tid: u32,
}

/// PERF_RECORD_KSYMBOL: kernel code that appears or goes away outside the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ksymbol<'a> {
    pub addr: u64,
    pub len: u32,
    /// See [`crate::abi::ksymbol_type`].
    pub ksym_type: u16,
    /// See [`crate::abi::KSYMBOL_FLAG_UNREGISTER`].
    pub flags: u16,
    pub name: &'a [u8],
}

/// PERF_RECORD_BPF_EVENT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BpfEvent {
    /// See [`crate::abi::bpf_event_type`].
    pub event_type: u16,
    pub flags: u16,
    pub id: u32,
    pub tag: [u8; 8],
}

/// PERF_RECORD_TEXT_POKE: kernel text at `addr` changed from `old` to `new`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPoke<'a> {
    pub addr: u64,
    /// `old_len` bytes; empty when code is created.
    pub old: &'a [u8],
    /// `new_len` bytes; empty when code is removed.
    pub new: &'a [u8],
}

/// Pipe mode PERF_RECORD_HEADER_ATTR: an attr and its ids.
#[derive(Clone, Debug, PartialEq)]
pub struct HeaderAttr<'a> {
    pub attr: EventAttr,
    /// Little-endian u64 ids.
    pub ids: &'a [u8],
}

impl HeaderAttr<'_> {
    pub fn to_attr_with_ids(&self) -> AttrWithIds {
        AttrWithIds { attr: self.attr.clone(), ids: self.ids.chunks_exact(8).map(crate::cursor::u64_from_chunk).collect() }
    }
}

/// PERF_RECORD_ID_INDEX: which CPU and thread each sample id belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdIndex {
    pub entries: Vec<IdIndexEntry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdIndexEntry {
    pub id: u64,
    /// Index of the mmap (ring buffer) the id's event writes to.
    pub idx: u64,
    pub cpu: u64,
    pub tid: u64,
}

/// PERF_RECORD_AUXTRACE_INFO: what kind of AUX trace and how to decode it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxtraceInfo<'a> {
    /// See [`crate::abi::auxtrace_type`].
    pub auxtrace_type: u32,
    /// The type's private u64 words, little-endian.
    pub priv_data: &'a [u8],
}

/// PERF_RECORD_AUXTRACE: a chunk of one AUX buffer; the trace bytes follow the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Auxtrace<'a> {
    /// Offset of this chunk in the AUX buffer's byte stream.
    pub offset: u64,
    pub reference: u64,
    /// Index of the AUX buffer (mmap).
    pub idx: u32,
    pub tid: u32,
    pub cpu: u32,
    /// The trace bytes (`size` of them), borrowed from the file.
    pub data: &'a [u8],
}

/// PERF_RECORD_TIME_CONV: converts hardware time (TSC) to perf time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeConv {
    pub time_shift: u64,
    pub time_mult: u64,
    pub time_zero: u64,
    /// Present in records from perf 5.10 on.
    pub extended: Option<TimeConvExt>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeConvExt {
    pub time_cycles: u64,
    pub time_mask: u64,
    pub cap_user_time_zero: bool,
    pub cap_user_time_short: bool,
}

impl TimeConv {
    /// perf time (ns) of a hardware counter value, as perf's `tsc_to_perf_time`
    /// (a short counter is first extended from `time_cycles`).
    pub fn to_perf_time(&self, cycles: u64) -> u64 {
        let cycles = match self.extended {
            Some(e) if e.cap_user_time_short => e.time_cycles.wrapping_add(cycles.wrapping_sub(e.time_cycles) & e.time_mask),
            _ => cycles,
        };
        counter_to_perf_time(cycles, self.time_shift, self.time_mult, self.time_zero)
    }
}

/// perf time (ns) of a counter value by `time_shift`, `time_mult` and
/// `time_zero`, as perf's `tsc_to_perf_time` computes it: the one formula for
/// TIME_CONV, Intel PT's AUXTRACE_INFO and the Intel PT decoder's clock.
#[inline]
pub fn counter_to_perf_time(ticks: u64, shift: u64, mult: u64, zero: u64) -> u64 {
    let shift = shift.min(63) as u32;
    let quot = ticks >> shift;
    let rem = ticks & ((1u64 << shift) - 1);
    zero.wrapping_add(quot.wrapping_mul(mult)).wrapping_add(rem.wrapping_mul(mult) >> shift)
}

/// PERF_RECORD_COMPRESSED: a zstd frame holding more records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compressed<'a> {
    pub data: &'a [u8],
}

/// Parses the body of a record of type `ty` (header and sample_id trailer removed).
/// `attr` is the attr that SAMPLE records are laid out by.
pub(crate) fn parse_body<'a>(
    ty: u32,
    body: &'a [u8],
    origin: Origin,
    misc_bits: u16,
    attr: Option<&EventAttr>,
    what: &'static str,
) -> Result<RecordBody<'a>> {
    let mut c = Cursor::new(body, origin, what);
    let c = &mut c;
    Ok(match ty {
        rt::MMAP => {
            RecordBody::Mmap(Mmap { pid: c.u32()?, tid: c.u32()?, addr: c.u64()?, len: c.u64()?, pgoff: c.u64()?, filename: c.c_string_rest() })
        }
        rt::MMAP2 => {
            let (pid, tid, addr, len, pgoff) = (c.u32()?, c.u32()?, c.u64()?, c.u64()?, c.u64()?);
            let file_id = if misc_bits & misc::MMAP_BUILD_ID != 0 {
                let size = c.u8()?;
                c.bytes(3)?;
                let id = c.bytes(20)?;
                if size > 20 {
                    return Err(c.invalid(format!("build id size {size} > 20")));
                }
                Mmap2FileId::BuildId(&id[..size as usize])
            } else {
                Mmap2FileId::Inode { maj: c.u32()?, min: c.u32()?, ino: c.u64()?, ino_generation: c.u64()? }
            };
            RecordBody::Mmap2(Mmap2 { pid, tid, addr, len, pgoff, file_id, prot: c.u32()?, flags: c.u32()?, filename: c.c_string_rest() })
        }
        rt::COMM => RecordBody::Comm(Comm { pid: c.u32()?, tid: c.u32()?, comm: c.c_string_rest() }),
        rt::FORK | rt::EXIT => {
            let fe = ForkExit { pid: c.u32()?, ppid: c.u32()?, tid: c.u32()?, ptid: c.u32()?, time: c.u64()? };
            if ty == rt::FORK {
                RecordBody::Fork(fe)
            } else {
                RecordBody::Exit(fe)
            }
        }
        rt::LOST => RecordBody::Lost(Lost { id: c.u64()?, lost: c.u64()? }),
        rt::LOST_SAMPLES => RecordBody::LostSamples(LostSamples { lost: c.u64()? }),
        rt::THROTTLE | rt::UNTHROTTLE => {
            let t = Throttle { time: c.u64()?, id: c.u64()?, stream_id: c.u64()? };
            if ty == rt::THROTTLE {
                RecordBody::Throttle(t)
            } else {
                RecordBody::Unthrottle(t)
            }
        }
        rt::SAMPLE => match attr {
            Some(attr) => RecordBody::Sample(Sample::parse(c, attr)?),
            None => return Err(c.invalid("SAMPLE record but the file has no attr to lay it out")),
        },
        rt::AUX => RecordBody::Aux(Aux { aux_offset: c.u64()?, aux_size: c.u64()?, flags: c.u64()? }),
        rt::ITRACE_START => RecordBody::ItraceStart(ItraceStart { pid: c.u32()?, tid: c.u32()? }),
        rt::SWITCH => RecordBody::Switch,
        rt::SWITCH_CPU_WIDE => RecordBody::SwitchCpuWide(SwitchCpuWide { next_prev_pid: c.u32()?, next_prev_tid: c.u32()? }),
        rt::KSYMBOL => RecordBody::Ksymbol(Ksymbol { addr: c.u64()?, len: c.u32()?, ksym_type: c.u16()?, flags: c.u16()?, name: c.c_string_rest() }),
        rt::BPF_EVENT => RecordBody::BpfEvent(BpfEvent { event_type: c.u16()?, flags: c.u16()?, id: c.u32()?, tag: c.array()? }),
        rt::TEXT_POKE => {
            let addr = c.u64()?;
            let old_len = c.u16()? as usize;
            let new_len = c.u16()? as usize;
            if old_len + new_len > c.remaining() {
                return Err(c.invalid(format!("old_len {old_len} + new_len {new_len} exceed the {} bytes left in the record", c.remaining())));
            }
            RecordBody::TextPoke(TextPoke { addr, old: c.bytes(old_len)?, new: c.bytes(new_len)? })
        }
        rt::HEADER_ATTR => {
            let size = body.get(4..8).map(|b| u32::from_le_bytes(b.try_into().unwrap())).unwrap_or(0);
            if size < ATTR_SIZE_VER0 {
                return Err(c.invalid(format!("attr size {size} is below the minimum {ATTR_SIZE_VER0}")));
            }
            let attr = EventAttr::parse(c.bytes(size as usize)?);
            if !c.remaining().is_multiple_of(8) {
                return Err(c.invalid("id array is not a multiple of 8 bytes"));
            }
            RecordBody::HeaderAttr(HeaderAttr { attr, ids: c.rest() })
        }
        rt::FINISHED_ROUND => RecordBody::FinishedRound,
        rt::FINISHED_INIT => RecordBody::FinishedInit,
        rt::ID_INDEX => {
            let nr = c.u64()?;
            let raw = c.items(nr, 32)?;
            let entries = raw
                .chunks_exact(32)
                .map(|e| {
                    let w = |i: usize| crate::cursor::le_u64(e, i * 8);
                    IdIndexEntry { id: w(0), idx: w(1), cpu: w(2), tid: w(3) }
                })
                .collect();
            RecordBody::IdIndex(IdIndex { entries })
        }
        rt::AUXTRACE_INFO => {
            let auxtrace_type = c.u32()?;
            c.u32()?;
            RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type, priv_data: c.rest() })
        }
        rt::TIME_CONV => {
            let (time_shift, time_mult, time_zero) = (c.u64()?, c.u64()?, c.u64()?);
            let extended = if c.remaining() >= 24 {
                let (time_cycles, time_mask) = (c.u64()?, c.u64()?);
                let (z, s) = (c.u8()?, c.u8()?);
                Some(TimeConvExt { time_cycles, time_mask, cap_user_time_zero: z != 0, cap_user_time_short: s != 0 })
            } else {
                None
            };
            RecordBody::TimeConv(TimeConv { time_shift, time_mult, time_zero, extended })
        }
        rt::COMPRESSED => RecordBody::Compressed(Compressed { data: c.rest() }),
        _ => RecordBody::Other { record_type: ty, data: body },
    })
}
