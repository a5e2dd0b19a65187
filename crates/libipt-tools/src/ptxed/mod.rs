//! `poketrace ptxed`: libipt's ptxed on the project's flow decoder. A raw
//! Intel PT file and the code it ran over (raw binaries at their load
//! addresses) in; each instruction's address and libipt's event and error
//! lines out, with ptxed's options and output (`--no-inst`: addresses only).

mod clock;
mod fixup;
mod image;
mod options;
mod printer;
mod stats;
mod status;

use std::io::Write;

use anyhow::Result;
use codeimage::window::Static;
use intel_pt::flow::{Errata, FlowConfig, FlowDecoder, Recovery, TimeConv};
use isa::KernelIdioms;

use crate::ptdump::time::TimingConfig;
use clock::EventClock;
use options::{Options, Parsed, Usage};
use printer::{Printer, Style};

/// Runs ptxed with `args` (its options, without a program name). Bad usage
/// is reported on stderr as ptxed reports it, with exit status 1.
pub fn run(args: &[String], out: &mut impl Write) -> Result<i32> {
    let opts = match Options::parse(args) {
        Ok(Parsed::Decode(o)) => o,
        Ok(Parsed::Help) => {
            out.write_all(HELP.as_bytes())?;
            return Ok(0);
        }
        Ok(Parsed::Version) => {
            writeln!(out, "ptxed (poketrace {})", env!("CARGO_PKG_VERSION"))?;
            return Ok(0);
        }
        Err(usage) => return Ok(refuse(&usage)),
    };
    match decode(&opts, out) {
        Ok(()) => Ok(0),
        Err(Failed::Usage(usage)) => Ok(refuse(&usage)),
        Err(Failed::Io(e)) => Err(e.into()),
    }
}

enum Failed {
    Usage(Usage),
    Io(std::io::Error),
}

impl From<Usage> for Failed {
    fn from(u: Usage) -> Self {
        Failed::Usage(u)
    }
}

impl From<std::io::Error> for Failed {
    fn from(e: std::io::Error) -> Self {
        Failed::Io(e)
    }
}

fn refuse(usage: &Usage) -> i32 {
    eprintln!("ptxed: {}.", usage.0);
    1
}

fn decode(opts: &Options, out: &mut impl Write) -> Result<(), Failed> {
    // A processor libipt has no errata table for: decoded by the spec.
    let errata = opts.cpu.map(|cpu| Errata::of(cpu.family, cpu.model));
    let timing = TimingConfig {
        mtc_freq: opts.mtc_freq,
        nom_freq: opts.nom_freq,
        cpuid_15_eax: opts.cpuid_0x15_eax,
        cpuid_15_ebx: opts.cpuid_0x15_ebx,
        skl168: errata.flatten().is_some_and(|e| e.skl168),
    };
    let mut printer = Printer::new(&mut *out, Style::new(opts), EventClock::new(timing, opts.keep_tcal_on_ovf));
    if errata == Some(None) {
        printer.line(format_args!("[0, 0: config error: unknown cpu]"));
    }
    let errata = errata.flatten().unwrap_or_default();
    let mut trace = image::load_trace(&opts.pt)?;
    fixup::pwre_hw_as_libipt(&mut trace);
    let code = image::load_code(&opts.raws)?;
    let source = Static(&code);
    let cfg = FlowConfig {
        // Times are the trace's own TSC values.
        time: TimeConv { shift: 0, mult: 1, zero: 0 },
        noretcomp: false,
        idioms: KernelIdioms::default(),
        max_walk: 1 << 20,
        trial_insns: 256,
    };
    // libipt goes on at the next PSB after an error; with
    // --resync-on-error, where the trace next says where execution is.
    let recovery = if opts.resync_on_error { Recovery::EachTip } else { Recovery::NextPsb };
    let mut decoder = FlowDecoder::new(&trace, &source, cfg)
        .with_recovery(recovery)
        .with_state_events(true)
        .with_timing_events(true)
        .with_deferred_tips(true)
        .with_errata(errata);
    if opts.filter.cfg != 0 {
        decoder = decoder.with_addr_filter(opts.filter);
    }
    decoder.run_with(&mut printer);
    let stats = printer.stats;
    printer.finish()?;
    if let Some(flags) = opts.stats {
        stats.print(flags, out)?;
    }
    Ok(())
}

const HELP: &str = "\
usage: poketrace ptxed [OPTION]... --pt FILE --raw FILE:BASE...

Decodes a raw Intel PT trace over raw code: libipt's ptxed, on poketrace's decoder.

  --pt FILE[:FROM[-TO]]            the trace (bytes FROM..TO of FILE)
  --raw FILE[:FROM[-TO]]:BASE      code, placed at address BASE (repeatable)
  --cpu F/M[/S] | none             the processor, for its errata (before --pt)
  --insn-decoder | --block-decoder report instructions or blocks (before --pt)
  --no-inst                        addresses only
  --quiet, -q                      errors only
  --check                          accepted; no further checks are made
  --resync-on-error                after an error, go on at the next IP the trace gives
  --event:ip | time | tick | iflags  event IPs, event times, tick and iflags events
  --block:show-blocks | end-on-call | end-on-jump  block decoder output and block ends
  --insn:keep-tcal-on-ovf, --block:keep-tcal-on-ovf  keep time calibration over an overflow
  --stat, --stat:insn, --stat:blocks  counts after the trace (also with --quiet)
  --filter:addrN_cfg | addrN_a | addrN_b VALUE  the address filter (N: 0-3, before --pt)
  --mtc-freq N, --nom-freq N, --cpuid-0x15.eax N, --cpuid-0x15.ebx N  timing configuration
  --help, -h | --version
";
