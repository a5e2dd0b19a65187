//! The private words of AUXTRACE_INFO for Intel PT and CoreSight ETM.

use crate::abi::cs_etm_magic;
use crate::cursor::{u64_from_chunk, Origin};
use crate::error::{Error, Result};
use crate::records::AuxtraceInfo;

/// Intel PT's AUXTRACE_INFO words, in perf's order (`intel-pt.h`).
/// Words a file does not have read as zero; `words` says how many there were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntelPtInfo {
    pub pmu_type: u64,
    pub time_shift: u64,
    pub time_mult: u64,
    pub time_zero: u64,
    pub cap_user_time_zero: u64,
    pub tsc_bit: u64,
    pub noretcomp_bit: u64,
    pub have_sched_switch: u64,
    pub snapshot_mode: u64,
    pub per_cpu_mmaps: u64,
    pub mtc_bit: u64,
    pub mtc_freq_bits: u64,
    pub tsc_ctc_ratio_n: u64,
    pub tsc_ctc_ratio_d: u64,
    pub cyc_bit: u64,
    pub max_nonturbo_ratio: u64,
    pub filter_str_len: u64,
    /// Number of words present in the record.
    pub words: usize,
}

/// Words perf needs at least to decode Intel PT (up to `per_cpu_mmaps`).
pub const INTEL_PT_MIN_WORDS: usize = 10;
const INTEL_PT_WORDS: usize = 17;

impl IntelPtInfo {
    pub fn parse(info: &AuxtraceInfo<'_>) -> Result<IntelPtInfo> {
        let w: Vec<u64> = info.priv_data.chunks_exact(8).map(u64_from_chunk).collect();
        if w.len() < INTEL_PT_MIN_WORDS {
            return Err(Error::invalid("Intel PT AUXTRACE_INFO", 0, format!("{} private words, perf needs at least {INTEL_PT_MIN_WORDS}", w.len())));
        }
        let g = |i: usize| w.get(i).copied().unwrap_or(0);
        Ok(IntelPtInfo {
            pmu_type: g(0),
            time_shift: g(1),
            time_mult: g(2),
            time_zero: g(3),
            cap_user_time_zero: g(4),
            tsc_bit: g(5),
            noretcomp_bit: g(6),
            have_sched_switch: g(7),
            snapshot_mode: g(8),
            per_cpu_mmaps: g(9),
            mtc_bit: g(10),
            mtc_freq_bits: g(11),
            tsc_ctc_ratio_n: g(12),
            tsc_ctc_ratio_d: g(13),
            cyc_bit: g(14),
            max_nonturbo_ratio: g(15),
            filter_str_len: g(16),
            words: w.len(),
        })
    }

    /// The private words as perf writes them (all 17, filter string empty).
    pub fn to_priv_bytes(&self) -> Vec<u8> {
        [
            self.pmu_type,
            self.time_shift,
            self.time_mult,
            self.time_zero,
            self.cap_user_time_zero,
            self.tsc_bit,
            self.noretcomp_bit,
            self.have_sched_switch,
            self.snapshot_mode,
            self.per_cpu_mmaps,
            self.mtc_bit,
            self.mtc_freq_bits,
            self.tsc_ctc_ratio_n,
            self.tsc_ctc_ratio_d,
            self.cyc_bit,
            self.max_nonturbo_ratio,
            self.filter_str_len,
        ][..INTEL_PT_WORDS]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// perf time (ns) of a TSC value, as perf's `tsc_to_perf_time`.
    pub fn tsc_to_perf_time(&self, tsc: u64) -> u64 {
        crate::counter_to_perf_time(tsc, self.time_shift, self.time_mult, self.time_zero)
    }
}

/// CoreSight's AUXTRACE_INFO: a global header then one block per CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CsEtmInfo {
    /// 0 (fixed-size blocks) or 1 (blocks carry their parameter count).
    pub version: u64,
    pub pmu_type: u32,
    pub snapshot: u64,
    pub cpus: Vec<CsEtmCpu>,
}

/// One CPU's trace unit: its kind (by magic) and its registers, in perf's order
/// (ETMv4: TRCCONFIGR, TRCTRACEIDR, TRCIDR0, TRCIDR1, TRCIDR2, TRCIDR8, TRCAUTHSTATUS, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CsEtmCpu {
    pub magic: u64,
    pub cpu: u64,
    pub params: Vec<u64>,
}

impl CsEtmCpu {
    /// TRCTRACEIDR (ETMv4/ETE) or ETMTRACEIDR (ETMv3): the trace ID in the formatted stream.
    pub fn trace_id(&self) -> Option<u64> {
        self.params.get(1).map(|v| v & 0x7f)
    }

    /// The ETMv4 or ETE registers, when this block is one and holds them.
    pub fn etmv4(&self) -> Option<Etmv4Regs> {
        if self.magic != cs_etm_magic::ETMV4 && self.magic != cs_etm_magic::ETE {
            return None;
        }
        let r = |i: usize| self.params.get(i).map(|&v| v as u32);
        Some(Etmv4Regs {
            trcconfigr: r(0)?,
            trctraceidr: r(1)?,
            trcidr0: r(2)?,
            trcidr1: r(3)?,
            trcidr2: r(4)?,
            trcidr8: r(5)?,
            trcauthstatus: r(6)?,
            // ETE's block has TRCDEVARCH before it.
            ts_source: self.params.get(if self.magic == cs_etm_magic::ETE { 8 } else { 7 }).copied(),
        })
    }
}

/// An ETMv4 (or ETE) CPU block's registers, in perf's metadata order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Etmv4Regs {
    pub trcconfigr: u32,
    pub trctraceidr: u32,
    pub trcidr0: u32,
    pub trcidr1: u32,
    pub trcidr2: u32,
    pub trcidr8: u32,
    pub trcauthstatus: u32,
    /// 1 when timestamps are the kernel's clock counter (perf converts them
    /// with TIME_CONV), 0 when not, absent before Linux 5.19.
    pub ts_source: Option<u64>,
}

impl CsEtmInfo {
    pub fn parse(info: &AuxtraceInfo<'_>) -> Result<CsEtmInfo> {
        let w: Vec<u64> = info.priv_data.chunks_exact(8).map(u64_from_chunk).collect();
        let bad = |at: usize, reason: String| Error::Invalid {
            what: "CoreSight AUXTRACE_INFO",
            offset: Origin::file(0).offset,
            inner: None,
            reason: format!("word {at}: {reason}"),
        };
        if w.len() < 3 {
            return Err(bad(w.len(), "header needs 3 words".into()));
        }
        let version = w[0];
        if version > 1 {
            return Err(bad(0, format!("unknown metadata version {version}")));
        }
        let nr_cpus = (w[1] & 0xffff_ffff) as usize;
        let mut info = CsEtmInfo { version, pmu_type: (w[1] >> 32) as u32, snapshot: w[2], cpus: Vec::new() };
        let mut i = 3;
        for _ in 0..nr_cpus {
            let magic = *w.get(i).ok_or_else(|| bad(i, "missing CPU block".into()))?;
            let cpu = *w.get(i + 1).ok_or_else(|| bad(i + 1, "missing CPU number".into()))?;
            let (start, n) = if version == 1 {
                let n = *w.get(i + 2).ok_or_else(|| bad(i + 2, "missing parameter count".into()))? as usize;
                (i + 3, n)
            } else {
                let n = match magic {
                    cs_etm_magic::ETMV3 => 4,
                    cs_etm_magic::ETMV4 => 7,
                    _ => return Err(bad(i, format!("unknown magic {magic:#x}"))),
                };
                (i + 2, n)
            };
            let params = w.get(start..start.saturating_add(n)).ok_or_else(|| bad(start, format!("{n} parameters do not fit")))?;
            info.cpus.push(CsEtmCpu { magic, cpu, params: params.to_vec() });
            i = start + n;
        }
        Ok(info)
    }

    /// Version-1 private words, as perf 5.x+ writes them.
    pub fn to_priv_bytes(&self) -> Vec<u8> {
        let mut w = vec![1, (self.pmu_type as u64) << 32 | self.cpus.len() as u64, self.snapshot];
        for c in &self.cpus {
            w.extend([c.magic, c.cpu, c.params.len() as u64]);
            w.extend(&c.params);
        }
        w.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etmv4_and_ete_blocks_name_their_registers() {
        let v4 = CsEtmCpu { magic: cs_etm_magic::ETMV4, cpu: 1, params: vec![0x801, 0x10, 1, 2, 3, 4, 0xcc, 1] };
        let r = v4.etmv4().unwrap();
        assert_eq!((r.trcconfigr, r.trctraceidr, r.trcidr8, r.trcauthstatus, r.ts_source), (0x801, 0x10, 4, 0xcc, Some(1)));
        // ETE: TRCDEVARCH, then TS_SOURCE.
        let ete = CsEtmCpu { magic: cs_etm_magic::ETE, cpu: 1, params: vec![0x801, 0x10, 1, 2, 3, 4, 0xcc, 0x4770_4a13, 1] };
        assert_eq!(ete.etmv4().unwrap().ts_source, Some(1));
        // Before Linux 5.19: no TS_SOURCE; too short, or ETMv3: none.
        assert_eq!(CsEtmCpu { params: v4.params[..7].to_vec(), ..v4.clone() }.etmv4().unwrap().ts_source, None);
        assert_eq!(CsEtmCpu { params: v4.params[..6].to_vec(), ..v4.clone() }.etmv4(), None);
        assert_eq!(CsEtmCpu { magic: cs_etm_magic::ETMV3, ..v4 }.etmv4(), None);
    }
}
