//! `poketrace ptdump`'s command line, parsed as libipt's `ptdump` parses
//! its own: options in any order, dotted long names (`--cpuid-0x15.eax`),
//! numbers in C notation (`0x10`, `010`, `16`), and the trace file last,
//! optionally as `FILE:FROM` or `FILE:FROM-TO` (a byte range of it).

use super::cpu::Cpu;
use crate::c_number::parse_c_number;

/// What to show and how to track state, one flag per ptdump option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub show_offset: bool,
    pub show_raw: bool,
    pub show_last_ip: bool,
    pub show_exec_mode: bool,
    /// Time is tracked when either `show_time` or `show_tcal` is set.
    pub track_time: bool,
    pub show_time: bool,
    pub show_tcal: bool,
    pub time_delta: bool,
    pub keep_tcal_on_ovf: bool,
    pub quiet: bool,
    pub no_pad: bool,
    pub no_sync: bool,
    pub no_tcal: bool,
    pub no_wall_clock: bool,
    pub no_timing: bool,
    pub no_cyc: bool,
}

/// What the trace was recorded with: the processor and its timing setup
/// (IA32_RTIT_CTL.MTCFreq, MSR_PLATFORM_INFO's nominal ratio, CPUID 0x15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub cpu: Option<Cpu>,
    pub mtc_freq: u8,
    pub nom_freq: u8,
    pub cpuid_15_eax: u32,
    pub cpuid_15_ebx: u32,
}

/// The trace file and the byte range of it to dump (`size` 0: to its end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFile {
    pub path: String,
    pub offset: u64,
    pub size: u64,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Dump { options: Options, config: Config, file: TraceFile },
    Help,
    Version,
}

/// A command-line error, worded as libipt's ptdump words it (the caller
/// puts the program name in front).
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

/// Parses ptdump's arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Request, UsageError> {
    let mut options = Options { show_offset: true, ..Options::default() };
    let mut config = Config::default();
    let mut file = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if !arg.starts_with('-') {
            if i < args.len() {
                return Err(UsageError("[<options>] <ptfile>.  Use --help or -h for help.".into()));
            }
            file = Some(arg);
            break;
        }
        let mut value = || {
            let v = args.get(i).map(String::as_str);
            i += 1;
            v
        };
        match arg {
            "-h" | "--help" => return Ok(Request::Help),
            "--version" => return Ok(Request::Version),
            "--no-sync" => options.no_sync = true,
            "--quiet" => options.quiet = true,
            "--no-pad" => options.no_pad = true,
            "--no-timing" => options.no_timing = true,
            "--no-cyc" => options.no_cyc = true,
            "--no-offset" => options.show_offset = false,
            "--raw" => options.show_raw = true,
            "--lastip" => options.show_last_ip = true,
            "--exec-mode" => options.show_exec_mode = true,
            "--time" | "--tcal" => {
                if options.show_tcal || options.show_time {
                    return Err(UsageError("specify either --time or --tcal.".into()));
                }
                options.track_time = true;
                if arg == "--time" {
                    options.show_time = true;
                } else {
                    options.show_tcal = true;
                }
            }
            "--time-delta" => options.time_delta = true,
            "--no-tcal" => options.no_tcal = true,
            "--no-wall-clock" => options.no_wall_clock = true,
            "--keep-tcal-on-ovf" => options.keep_tcal_on_ovf = true,
            "--cpu" => {
                let v = value().ok_or_else(|| UsageError("--cpu: missing argument.".into()))?;
                config.cpu =
                    if v == "none" { None } else { Some(Cpu::parse(v).ok_or_else(|| UsageError("cpu must be specified as f/m[/s]".into()))?) };
            }
            "--mtc-freq" => config.mtc_freq = number(arg, value(), u8::MAX.into())? as u8,
            "--nom-freq" => config.nom_freq = number(arg, value(), u8::MAX.into())? as u8,
            "--cpuid-0x15.eax" => config.cpuid_15_eax = number(arg, value(), u32::MAX.into())? as u32,
            "--cpuid-0x15.ebx" => config.cpuid_15_ebx = number(arg, value(), u32::MAX.into())? as u32,
            _ => return Err(UsageError(format!("unknown option: {arg}."))),
        }
    }
    let file = file.ok_or_else(|| UsageError("No processor trace file specified.".into()))?;
    Ok(Request::Dump { options, config, file: trace_file(file)? })
}

/// An option's numeric value, at most `max`.
fn number(option: &str, value: Option<&str>, max: u64) -> Result<u64, UsageError> {
    let v = match value {
        Some(v) if !v.is_empty() && !v.starts_with("--") => v,
        _ => return Err(UsageError(format!("{option}: missing argument."))),
    };
    let n = parse_c_number(v).ok_or_else(|| UsageError(format!("{option}: bad argument: {v}.")))?;
    if n > max {
        return Err(UsageError(format!("{option}: value too big: {v}.")));
    }
    Ok(n)
}

/// Splits `FILE[:FROM[-TO]]`. A suffix after the last `:` that is not a
/// range is part of the file name, as libipt takes it.
fn trace_file(arg: &str) -> Result<TraceFile, UsageError> {
    let whole = TraceFile { path: arg.to_string(), offset: 0, size: 0 };
    let Some((path, range)) = arg.rsplit_once(':') else {
        return Ok(whole);
    };
    let (from, to) = match range.split_once('-') {
        Some((from, to)) => (parse_c_number(from), Some(parse_c_number(to))),
        None => (parse_c_number(range), None),
    };
    match (from, to) {
        (Some(offset), None) => Ok(TraceFile { path: path.to_string(), offset, size: 0 }),
        (Some(from), Some(Some(to))) if to > from => Ok(TraceFile { path: path.to_string(), offset: from, size: to - from }),
        (Some(_), Some(Some(_))) => Err(UsageError(format!("bad file {arg}: invalid argument."))),
        _ => Ok(whole),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Request, UsageError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options_in_any_order_with_dotted_names_and_c_numbers() {
        let r = parse_strs(&["--cpuid-0x15.ebx", "0x10", "--time", "--mtc-freq", "010", "--cpu", "6/142", "t.pt:0x10-0x20"]).unwrap();
        let Request::Dump { options, config, file } = r else { panic!("{r:?}") };
        assert!(options.show_time && options.track_time && options.show_offset);
        assert_eq!((config.cpuid_15_ebx, config.mtc_freq), (16, 8));
        assert_eq!(config.cpu.map(|c| (c.family, c.model)), Some((6, 142)));
        assert_eq!(file, TraceFile { path: "t.pt".into(), offset: 0x10, size: 0x10 });
    }

    #[test]
    fn bad_values_are_named() {
        let err = |args: &[&str]| parse_strs(args).unwrap_err().0;
        assert_eq!(err(&["--mtc-freq", "256", "t.pt"]), "--mtc-freq: value too big: 256.");
        assert_eq!(err(&["--nom-freq", "4x", "t.pt"]), "--nom-freq: bad argument: 4x.");
        assert_eq!(err(&["--cpuid-0x15.eax"]), "--cpuid-0x15.eax: missing argument.");
        assert_eq!(err(&["--cpuid-0x15.eax", "--time", "t.pt"]), "--cpuid-0x15.eax: missing argument.");
        assert_eq!(err(&["--cpu", "skylake", "t.pt"]), "cpu must be specified as f/m[/s]");
        assert_eq!(err(&["--time", "--tcal", "t.pt"]), "specify either --time or --tcal.");
        assert_eq!(err(&["--bogus", "t.pt"]), "unknown option: --bogus.");
        assert_eq!(err(&["a.pt", "b.pt"]), "[<options>] <ptfile>.  Use --help or -h for help.");
        assert_eq!(err(&["--raw"]), "No processor trace file specified.");
        assert_eq!(err(&["t.pt:0x20-0x10"]), "bad file t.pt:0x20-0x10: invalid argument.");
    }

    #[test]
    fn a_colon_suffix_that_is_no_range_stays_in_the_name() {
        let Ok(Request::Dump { file, .. }) = parse_strs(&["c:trace.pt"]) else { panic!() };
        assert_eq!(file, TraceFile { path: "c:trace.pt".into(), offset: 0, size: 0 });
        let Ok(Request::Dump { file, .. }) = parse_strs(&["t.pt:12"]) else { panic!() };
        assert_eq!(file, TraceFile { path: "t.pt".into(), offset: 12, size: 0 });
    }
}
