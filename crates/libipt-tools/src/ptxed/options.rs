//! ptxed's command line: its options, read in order as ptxed reads them
//! (those that configure the decoder must come before `--pt`), with its
//! messages for bad usage.

use std::path::PathBuf;

pub use intel_pt::flow::AddrFilter;

use crate::c_number::parse_c_number;

/// Why the command line is refused: ptxed's message, printed to stderr as
/// `ptxed: MESSAGE.`
#[derive(Debug, PartialEq, Eq)]
pub struct Usage(pub String);

/// A file given as `FILE[:FROM[-TO]]`: the bytes `FROM..TO` of it (to its
/// end without `TO`, from 0 without `FROM`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRange {
    pub path: PathBuf,
    pub from: u64,
    /// Bytes from `from`; `None`: to the end of the file.
    pub len: Option<u64>,
}

/// `--raw FILE[:FROM[-TO]]:BASE`: raw code loaded at `base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raw {
    pub file: FileRange,
    pub base: u64,
}

/// The processor the trace comes from (`--cpu F/M[/S]`), for its errata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    pub family: u16,
    pub model: u8,
    pub stepping: u8,
}

/// libipt's two instruction-flow decoders: the same instructions and
/// events, reported one instruction at a time or a block at a time (which
/// shows in `--block:show-blocks`, the block statistics and where some
/// errors are reported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecoderKind {
    Insn,
    Block,
}

/// Which statistics `--stat` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFlags {
    pub insn: bool,
    pub blocks: bool,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub pt: FileRange,
    pub raws: Vec<Raw>,
    pub cpu: Option<Cpu>,
    pub decoder: DecoderKind,
    pub no_inst: bool,
    pub quiet: bool,
    pub check: bool,
    pub resync_on_error: bool,
    pub event_ip: bool,
    pub event_time: bool,
    pub event_tick: bool,
    pub event_iflags: bool,
    pub show_blocks: bool,
    pub end_on_call: bool,
    pub end_on_jump: bool,
    pub keep_tcal_on_ovf: bool,
    /// Statistics to print (`--stat`, `--stat:insn`, `--stat:blocks`).
    pub stats: Option<StatFlags>,
    pub filter: AddrFilter,
    pub mtc_freq: u8,
    pub nom_freq: u8,
    pub cpuid_0x15_eax: u32,
    pub cpuid_0x15_ebx: u32,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    Decode(Box<Options>),
    Help,
    Version,
}

impl Options {
    /// Reads ptxed's arguments (without the program name).
    pub fn parse(args: &[String]) -> Result<Parsed, Usage> {
        let mut o = Options {
            pt: FileRange { path: PathBuf::new(), from: 0, len: None },
            raws: Vec::new(),
            cpu: None,
            decoder: DecoderKind::Block,
            no_inst: false,
            quiet: false,
            check: false,
            resync_on_error: false,
            event_ip: false,
            event_time: false,
            event_tick: false,
            event_iflags: false,
            show_blocks: false,
            end_on_call: false,
            end_on_jump: false,
            keep_tcal_on_ovf: false,
            stats: None,
            filter: AddrFilter::default(),
            mtc_freq: 0,
            nom_freq: 0,
            cpuid_0x15_eax: 0,
            cpuid_0x15_ebx: 0,
        };
        let mut have_pt = false;
        let mut stat_flags = StatFlags::default();
        let mut args = args.iter().map(String::as_str);
        while let Some(arg) = args.next() {
            let before_pt = |have_pt: bool| if have_pt { Err(Usage(format!("please specify {arg} before --pt"))) } else { Ok(()) };
            match arg {
                "--help" | "-h" => return Ok(Parsed::Help),
                "--version" => return Ok(Parsed::Version),
                "--pt" => {
                    let value = args.next().ok_or_else(|| Usage("--pt: missing argument".into()))?;
                    if have_pt {
                        return Err(Usage(format!("duplicate pt sources: {value}")));
                    }
                    o.pt = file_range(value)?;
                    have_pt = true;
                }
                "--raw" => {
                    let value = args.next().ok_or_else(|| Usage("--raw: missing argument".into()))?;
                    o.raws.push(raw(value)?);
                }
                "--no-inst" => o.no_inst = true,
                "--quiet" | "-q" => o.quiet = true,
                "--check" => o.check = true,
                "--resync-on-error" => o.resync_on_error = true,
                "--event:ip" => o.event_ip = true,
                "--event:time" => o.event_time = true,
                "--event:tick" => o.event_tick = true,
                "--event:iflags" => o.event_iflags = true,
                "--stat" => o.stats = Some(o.stats.unwrap_or_default()),
                "--stat:insn" => {
                    stat_flags.insn = true;
                    o.stats = Some(stat_flags);
                }
                "--stat:blocks" => {
                    stat_flags.blocks = true;
                    o.stats = Some(stat_flags);
                }
                "--cpu" => {
                    if have_pt {
                        return Err(Usage("please specify cpu before the pt source file".into()));
                    }
                    let value = args.next().ok_or_else(|| Usage("--cpu: missing argument".into()))?;
                    o.cpu = if value == "none" { None } else { Some(cpu(value).ok_or_else(|| Usage("cpu must be specified as f/m[/s]".into()))?) };
                }
                "--insn-decoder" | "--block-decoder" => {
                    if have_pt {
                        return Err(Usage(format!("please specify {arg} before the pt source file")));
                    }
                    o.decoder = if arg == "--insn-decoder" { DecoderKind::Insn } else { DecoderKind::Block };
                }
                "--block:show-blocks" => o.show_blocks = true,
                "--block:end-on-call" => o.end_on_call = true,
                "--block:end-on-jump" => o.end_on_jump = true,
                "--insn:keep-tcal-on-ovf" | "--block:keep-tcal-on-ovf" => o.keep_tcal_on_ovf = true,
                "--mtc-freq" => o.mtc_freq = number(arg, args.next(), u8::MAX.into())? as u8,
                "--nom-freq" => o.nom_freq = number(arg, args.next(), u8::MAX.into())? as u8,
                "--cpuid-0x15.eax" => o.cpuid_0x15_eax = number(arg, args.next(), u32::MAX.into())? as u32,
                "--cpuid-0x15.ebx" => o.cpuid_0x15_ebx = number(arg, args.next(), u32::MAX.into())? as u32,
                _ => match filter_option(arg) {
                    Some((n, which)) => {
                        before_pt(have_pt)?;
                        let value = args.next();
                        match which {
                            FilterField::Cfg => o.filter.cfg |= number(arg, value, 15)? << (4 * n),
                            FilterField::A => o.filter.a[n] = number(arg, value, u64::MAX)?,
                            FilterField::B => o.filter.b[n] = number(arg, value, u64::MAX)?,
                        }
                    }
                    None => return Err(Usage(format!("unknown option: {arg}"))),
                },
            }
        }
        if !have_pt {
            return Err(Usage("no pt file".into()));
        }
        if let Some(s) = o.stats.as_mut().filter(|s| !s.insn && !s.blocks) {
            // No statistic named: all that the decoder has.
            s.insn = true;
            s.blocks = o.decoder == DecoderKind::Block;
        }
        Ok(Parsed::Decode(Box::new(o)))
    }
}

enum FilterField {
    Cfg,
    A,
    B,
}

/// `--filter:addrN_cfg|a|b`: N and the field.
fn filter_option(arg: &str) -> Option<(usize, FilterField)> {
    let rest = arg.strip_prefix("--filter:addr")?;
    let n = rest.as_bytes().first().filter(|d| (b'0'..=b'3').contains(d)).map(|d| usize::from(d - b'0'))?;
    let field = match &rest[1..] {
        "_cfg" => FilterField::Cfg,
        "_a" => FilterField::A,
        "_b" => FilterField::B,
        _ => return None,
    };
    Some((n, field))
}

/// An option's numeric argument (C's `strtoull` base 0: decimal, `0x` hex
/// or `0` octal), at most `max`.
fn number(option: &str, value: Option<&str>, max: u64) -> Result<u64, Usage> {
    let value = value.filter(|v| !v.is_empty() && !v.starts_with("--")).ok_or_else(|| Usage(format!("{option}: missing argument")))?;
    let n = parse_c_number(value).ok_or_else(|| Usage(format!("{option}: bad argument: {value}")))?;
    if n > max {
        return Err(Usage(format!("{option}: value too big: {value}")));
    }
    Ok(n)
}

/// `FILE[:FROM[-TO]]`. A suffix that is no range is part of the file name.
fn file_range(arg: &str) -> Result<FileRange, Usage> {
    let whole = FileRange { path: PathBuf::from(arg), from: 0, len: None };
    let Some((path, range)) = arg.rsplit_once(':') else { return Ok(whole) };
    let (from, to) = match range.split_once('-') {
        Some((from, to)) => (from, Some(to)),
        None => (range, None),
    };
    let Some(from) = parse_c_number(from) else { return Ok(whole) };
    let len = match to.map(parse_c_number) {
        None => None,
        Some(None) => return Ok(whole),
        Some(Some(to)) if to <= from => return Err(Usage(format!("bad file {arg}: invalid argument"))),
        Some(Some(to)) => Some(to - from),
    };
    Ok(FileRange { path: PathBuf::from(path), from, len })
}

/// `FILE[:FROM[-TO]]:BASE`.
fn raw(arg: &str) -> Result<Raw, Usage> {
    let base = arg.rsplit_once(':').and_then(|(file, base)| Some((file, parse_c_number(base)?)));
    let Some((file, base)) = base else {
        return Err(Usage(format!("failed to parse base address from '{arg}'")));
    };
    Ok(Raw { file: file_range(file)?, base })
}

/// `F/M[/S]`, each a decimal number.
fn cpu(s: &str) -> Option<Cpu> {
    let mut parts = s.split('/');
    let family = parts.next()?.parse().ok()?;
    let model = parts.next()?.parse().ok()?;
    let stepping = match parts.next() {
        Some(s) => s.parse().ok()?,
        None => 0,
    };
    parts.next().is_none().then_some(Cpu { family, model, stepping })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Options, Usage> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        match Options::parse(&args)? {
            Parsed::Decode(o) => Ok(*o),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn raw_files_take_a_range_and_a_base() {
        let o = parse("--raw test.bin:0x1000 --raw a:b.bin:0x2-0x10:0x1002 --pt t.pt:4").unwrap();
        assert_eq!(o.raws[0], Raw { file: FileRange { path: "test.bin".into(), from: 0, len: None }, base: 0x1000 });
        assert_eq!(o.raws[1], Raw { file: FileRange { path: "a:b.bin".into(), from: 2, len: Some(14) }, base: 0x1002 });
        assert_eq!(o.pt, FileRange { path: "t.pt".into(), from: 4, len: None });
        assert_eq!(parse("--raw test.bin --pt t").unwrap_err(), Usage("failed to parse base address from 'test.bin'".into()));
        assert_eq!(parse("--raw t:8-4:0 --pt t").unwrap_err(), Usage("bad file t:8-4: invalid argument".into()));
    }

    #[test]
    fn decoder_options_come_before_the_trace() {
        assert_eq!(parse("--pt t --cpu 6/142").unwrap_err(), Usage("please specify cpu before the pt source file".into()));
        assert_eq!(parse("--pt t --filter:addr0_a 1").unwrap_err(), Usage("please specify --filter:addr0_a before --pt".into()));
        let o = parse("--cpu 6/142 --filter:addr0_cfg 1 --filter:addr1_cfg 2 --filter:addr0_b 0x20 --pt t").unwrap();
        assert_eq!(o.cpu, Some(Cpu { family: 6, model: 142, stepping: 0 }));
        assert_eq!((o.filter.cfg, o.filter.b[0]), (0x21, 0x20));
        assert_eq!(parse("--cpu 6 --pt t").unwrap_err(), Usage("cpu must be specified as f/m[/s]".into()));
        assert_eq!(parse("--filter:addr0_cfg 16 --pt t").unwrap_err(), Usage("--filter:addr0_cfg: value too big: 16".into()));
        assert_eq!(parse("--mtc-freq --pt t").unwrap_err(), Usage("--mtc-freq: missing argument".into()));
    }

    #[test]
    fn statistics_default_to_all_the_decoder_has() {
        assert_eq!(parse("--stat --pt t").unwrap().stats, Some(StatFlags { insn: true, blocks: true }));
        assert_eq!(parse("--insn-decoder --stat --pt t").unwrap().stats, Some(StatFlags { insn: true, blocks: false }));
        assert_eq!(parse("--stat --stat:blocks --pt t").unwrap().stats, Some(StatFlags { insn: false, blocks: true }));
        assert_eq!(parse("--pt t").unwrap().stats, None);
        assert_eq!(parse("--bogus --pt t").unwrap_err(), Usage("unknown option: --bogus".into()));
        assert_eq!(parse("--raw t:0").unwrap_err(), Usage("no pt file".into()));
    }
}
