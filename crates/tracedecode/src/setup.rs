//! Decoder set-up from AUXTRACE_INFO and the trace event's config, for
//! Intel PT and for CoreSight ETMv4.

use intel_pt::flow::{AddrFilter, CycConv, Errata, FlowConfig, MtcConv, TimeConv};
use isa::KernelIdioms;
use perfdata::auxtrace::CsEtmInfo;
use perfdata::PerfFile;

use crate::Error;

/// Instructions the Intel PT decoder walks after a packet before it gives up.
const PT_MAX_WALK: u64 = 1 << 20;
/// Instructions the Intel PT decoder tries of each candidate content of changed code.
const PT_TRIAL_INSNS: u64 = 256;

/// The Intel PT decoder's set-up: its config, and MTC and CYC timing where
/// the PT event enabled them.
#[derive(Clone)]
pub struct PtSetup {
    pub cfg: FlowConfig,
    pub mtc: Option<MtcConv>,
    pub cyc: Option<CycConv>,
    /// The address filter the trace was made with (from AUXTRACE_INFO).
    pub filter: Option<AddrFilter>,
    /// Each PSB+ carries a TSC (the event's `tsc` bit): a PSB segment then
    /// decodes on its own as within the whole buffer.
    pub psb_tsc: bool,
    /// The errata of the processor perf's CPUID header names.
    pub errata: Errata,
}

impl PtSetup {
    /// From AUXTRACE_INFO and the PT event's config (time conversion,
    /// return compression, MTC and CYC timing, address filter) and the
    /// CPUID header (errata), decoding with `idioms`.
    pub fn new(file: &PerfFile, info: &perfdata::auxtrace::IntelPtInfo, idioms: KernelIdioms) -> PtSetup {
        let pt_attr = file.attrs().iter().find(|a| a.attr.type_ as u64 == info.pmu_type);
        let cfg = FlowConfig {
            time: TimeConv { shift: info.time_shift as u32, mult: info.time_mult, zero: info.time_zero },
            noretcomp: pt_attr.is_some_and(|a| a.attr.config & info.noretcomp_bit != 0),
            idioms,
            max_walk: PT_MAX_WALK,
            trial_insns: PT_TRIAL_INSNS,
        };
        // MTC packets time what runs between TSCs when the event enabled them.
        let mtc =
            pt_attr.and_then(|a| MtcConv::from_perf(a.attr.config, info.mtc_bit, info.mtc_freq_bits, info.tsc_ctc_ratio_n, info.tsc_ctc_ratio_d));
        // CYC packets (cycle-accurate mode), converted by the trace's CBR and the max non-turbo ratio.
        let cyc = pt_attr.and_then(|a| CycConv::from_perf(a.attr.config, info.cyc_bit, info.max_nonturbo_ratio));
        let psb_tsc = pt_attr.is_some_and(|a| a.attr.config & info.tsc_bit != 0);
        let errata = file.features().cpuid.as_deref().map(Errata::of_perf_cpuid).unwrap_or_default();
        PtSetup { cfg, mtc, cyc, filter: crate::filter::of_file(file), psb_tsc, errata }
    }
}

/// The kernel's code idioms, from the kallsyms of the recording's kcore_dir
/// (none without one).
pub fn kernel_idioms(file: &PerfFile) -> Result<KernelIdioms, Error> {
    Ok(match file.kcore_dir() {
        Some(d) if d.join("kallsyms").is_file() => {
            let (ks, _) = perfdata::kcore::Kallsyms::load(&d.join("kallsyms"))?;
            idioms_of(&ks)
        }
        _ => KernelIdioms::default(),
    })
}

/// The kernel's code idioms, from its symbols (of every kind).
pub fn idioms_of(kallsyms: &perfdata::kcore::Kallsyms) -> KernelIdioms {
    KernelIdioms::from_symbols(kallsyms.symbols().iter().map(|s| (s.name.as_str(), s.addr)))
}

/// Each CPU's ETMv4 trace unit set-up, in AUXTRACE_INFO's order; an error
/// for a trace unit that is not ETMv4.
pub fn etm_configs(info: &CsEtmInfo) -> Result<Vec<(u64, etm::EtmV4Config)>, Error> {
    info.cpus
        .iter()
        .map(|c| match c.etmv4() {
            Some(r) => Ok((c.cpu, etm::EtmV4Config::from(&r))),
            None => Err(Error::Setup(format!(
                "CoreSight AUXTRACE_INFO: cpu {} is not an ETMv4/ETE trace unit (magic {:#x}); only ETMv4 is decoded",
                c.cpu, c.magic
            ))),
        })
        .collect()
}
