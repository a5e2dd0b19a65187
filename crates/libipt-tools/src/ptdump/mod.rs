//! `poketrace ptdump`: a drop-in for libipt's `ptdump`. It prints every
//! Intel PT packet of a raw trace file with its offset and payload, and
//! optionally the last IP, the execution mode and the estimated time, in
//! ptdump's format, from the project's packet decoder.

mod clock;
mod cpu;
mod dump;
mod error;
mod line;
mod options;
mod reader;
mod text;
pub(crate) mod time;

use std::io::Write;

use anyhow::Result;

use options::{Request, TraceFile};

/// The name ptdump's messages start with.
const PROG: &str = "ptdump";

/// Runs ptdump with its own arguments (everything after `ptdump`); the
/// exit code is 0 on success, 1 for bad usage or an unreadable file.
pub fn run(args: &[String], out: &mut impl Write) -> Result<i32> {
    let (options, config, file) = match options::parse(args) {
        Ok(Request::Dump { options, config, file }) => (options, config, file),
        Ok(Request::Help) => {
            out.write_all(HELP.as_bytes())?;
            return Ok(0);
        }
        Ok(Request::Version) => {
            writeln!(out, "poketrace ptdump {}", env!("CARGO_PKG_VERSION"))?;
            return Ok(0);
        }
        Err(e) => {
            eprintln!("{PROG}: {}", e.0);
            return Ok(1);
        }
    };
    let errata = match config.cpu.map(cpu::errata) {
        Some(Some(errata)) => errata,
        Some(None) => {
            writeln!(out, "[0: failed to determine errata: {}]", error::Fault::BadCpu.message())?;
            cpu::Errata::default()
        }
        None => cpu::Errata::default(),
    };
    let trace = match load(&file) {
        Ok(trace) => trace,
        Err(message) => {
            out.flush()?;
            eprintln!("{PROG}: {message}");
            return Ok(1);
        }
    };
    let timing = time::TimingConfig {
        mtc_freq: config.mtc_freq,
        nom_freq: config.nom_freq,
        cpuid_15_eax: config.cpuid_15_eax,
        cpuid_15_ebx: config.cpuid_15_ebx,
        skl168: errata.skl168,
    };
    let mut reader = reader::Reader::new(&trace, errata);
    dump::Dumper::new(options, timing, out).dump(&mut reader)?;
    Ok(0)
}

/// The file's bytes in the range asked for, or libipt's message for why not.
fn load(file: &TraceFile) -> Result<Vec<u8>, String> {
    let TraceFile { path, offset, size } = file;
    let mut data = std::fs::read(path).map_err(|e| format!("failed to open {path}: {e}."))?;
    let len = data.len() as u64;
    if *offset >= len {
        return Err(format!("bad offset {offset:#x} into {path}."));
    }
    let end = if *size == 0 { len } else { offset.saturating_add(*size) };
    if end > len {
        return Err(format!("bad range {end:#x} in {path}."));
    }
    data.truncate(end as usize);
    data.drain(..*offset as usize);
    Ok(data)
}

const HELP: &str = "\
usage: poketrace ptdump [<options>] <ptfile>[:<from>[-<to>]]

Lists the Intel PT packets of a raw trace file, one a line, in the format
of libipt's ptdump. FROM and TO (C notation: 0x.. hex, 0.. octal) select a
byte range of the file.

options:
  -h, --help                print this help
  --version                 print the version
  --no-sync                 start decoding at the first byte instead of the first PSB
  --quiet                   print error lines only
  --no-pad                  leave out PAD packets
  --no-timing               leave out TSC, TMA, MTC, CYC and CBR packets
  --no-cyc                  leave out CYC packets and do not use them for time
  --no-offset               leave out the offset column
  --raw                     add a column with the packet's bytes in hex
  --lastip                  add the IP that IP packets leave (the last IP)
  --exec-mode               add the execution mode MODE.Exec packets set
  --time                    add the estimated TSC to timing packets
  --tcal                    add the calibrated cycle-to-TSC ratio to timing packets
  --time-delta              show --time and --tcal values as changes since the last one
  --no-tcal                 do not calibrate (CYC packets then cannot give time)
  --no-wall-clock           without a TSC packet, show time relative to the start
  --keep-tcal-on-ovf        keep the calibration over an OVF packet
  --cpu none|F/M[/S]        the processor (family/model[/stepping]), for its errata
  --mtc-freq N              IA32_RTIT_CTL.MTCFreq (bits 17:14) the trace used
  --nom-freq N              the nominal ratio (MSR_PLATFORM_INFO bits 15:8)
  --cpuid-0x15.eax N        CPUID leaf 0x15 EAX (TSC to crystal clock ratio denominator)
  --cpuid-0x15.ebx N        CPUID leaf 0x15 EBX (its numerator)
";
