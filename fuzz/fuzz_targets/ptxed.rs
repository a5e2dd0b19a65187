//! Runs `poketrace ptxed` (libipt-tools' `ptxed::run`) on a raw Intel PT
//! trace and raw code from the input, with options the input chooses, as a
//! user runs it on a `.pt` file and the code it ran over. Any panic, a run
//! that does not end (-timeout), memory past the limits (-rss_limit_mb,
//! -malloc_limit_mb), or a refusal of the command line (it is always a
//! valid one) is a bug; what it prints is not checked (the libipt-ptt
//! suite checks that), and goes nowhere.
//!
//! Input: byte 0 and 1 are option bits, byte 2 the processor, byte 3 the
//! timing setup, byte 4 the address filter, byte 5 the code's length in
//! 8-byte units, then the code, then the trace:
//! - byte 0: `--insn-decoder` (bit 0; else the block decoder), `--no-inst`,
//!   `--quiet`, `--resync-on-error`, `--event:ip`, `--event:time`,
//!   `--event:tick`, `--event:iflags` (bit 7);
//! - byte 1: `--block:show-blocks` (bit 0), `--block:end-on-call`,
//!   `--block:end-on-jump`, `--stat`, `--stat:insn`, `--stat:blocks`,
//!   `--insn:keep-tcal-on-ovf` and `--block:keep-tcal-on-ovf`, a second
//!   `--raw` of the code's second half over its first (bit 7: overlapping
//!   images);
//! - byte 2: `--cpu`, one of [`CPUS`] (by its value modulo their number;
//!   the first is none);
//! - byte 3: `--mtc-freq` (bits 3:0) and `--nom-freq` (bits 7:4), with
//!   `--cpuid-0x15.eax 1 --cpuid-0x15.ebx 4` when the MTC frequency is not 0;
//! - byte 4: `--filter:addr0_cfg` (bits 1:0) over the code's first half and
//!   `--filter:addr1_cfg` (bits 3:2) over its second.
//!
//! The code is loaded at [`BASE`]. Seeds: `seeds/ptxed/`, written by
//! `cargo test -p libipt-tools --test fuzz_seeds -- --ignored`.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// Where the code is loaded (where libipt's tests put theirs).
const BASE: u64 = 0x100000;

/// The processors `--cpu` names: none, models with each group of errata
/// libipt knows, and one it does not know.
const CPUS: [Option<&str>; 7] = [None, Some("6/142"), Some("6/61"), Some("6/92"), Some("6/85"), Some("19/1"), Some("6/1")];

/// A directory of this process's own for the two files.
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("poketrace-fuzz-ptxed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

/// The options of byte 0's bits, and of byte 1's low six.
const BYTE_0: [&str; 8] =
    ["--insn-decoder", "--no-inst", "--quiet", "--resync-on-error", "--event:ip", "--event:time", "--event:tick", "--event:iflags"];
const BYTE_1: [&str; 6] = ["--block:show-blocks", "--block:end-on-call", "--block:end-on-jump", "--stat", "--stat:insn", "--stat:blocks"];

fn flag(args: &mut Vec<String>, on: bool, name: &str) {
    if on {
        args.push(name.to_string());
    }
}

fuzz_target!(|data: &[u8]| {
    let [a, b, cpu, timing, filter, code_units, rest @ ..] = data else {
        return;
    };
    let code_len = (usize::from(*code_units) * 8).min(rest.len());
    let (code, trace) = rest.split_at(code_len);
    // (An empty file is refused, with ptxed's message: not what is fuzzed.)
    if code.is_empty() || trace.is_empty() {
        return;
    }
    let dir = scratch();
    let (pt, bin) = (dir.join("test.pt"), dir.join("test.bin"));
    std::fs::write(&pt, trace).expect("the trace file");
    std::fs::write(&bin, code).expect("the code file");
    let bit = |byte: u8, n: u32| byte >> n & 1 != 0;
    let mut args = Vec::new();
    if let Some(cpu) = CPUS[usize::from(*cpu) % CPUS.len()] {
        args.extend(["--cpu".to_string(), cpu.to_string()]);
    }
    let half = (code.len() / 2) as u64;
    let ranges = [(BASE, BASE + half), (BASE + half, BASE + code.len() as u64 - 1)];
    for (n, (from, to)) in ranges.iter().enumerate() {
        let cfg = filter >> (2 * n) & 3;
        if cfg != 0 {
            args.extend([format!("--filter:addr{n}_cfg"), cfg.to_string()]);
            args.extend([format!("--filter:addr{n}_a"), format!("{from:#x}")]);
            args.extend([format!("--filter:addr{n}_b"), format!("{to:#x}")]);
        }
    }
    let mtc_freq = timing & 0xf;
    if mtc_freq != 0 {
        args.extend(["--mtc-freq", &mtc_freq.to_string(), "--cpuid-0x15.eax", "1", "--cpuid-0x15.ebx", "4"].map(String::from));
    }
    args.extend(["--nom-freq".to_string(), (timing >> 4).to_string()]);
    for (n, name) in BYTE_0.iter().enumerate() {
        flag(&mut args, bit(*a, n as u32), name);
    }
    for (n, name) in BYTE_1.iter().enumerate() {
        flag(&mut args, bit(*b, n as u32), name);
    }
    if bit(*b, 6) {
        args.extend(["--insn:keep-tcal-on-ovf", "--block:keep-tcal-on-ovf"].map(String::from));
    }
    args.extend(["--raw".to_string(), format!("{}:{BASE:#x}", bin.display())]);
    if bit(*b, 7) && half > 0 {
        // The second half again, over the first.
        args.extend(["--raw".to_string(), format!("{}:{half:#x}:{BASE:#x}", bin.display())]);
    }
    args.extend(["--pt".to_string(), pt.display().to_string()]);
    let status = libipt_tools::ptxed::run(&args, &mut std::io::sink());
    assert!(matches!(status, Ok(0)), "ptxed {}: {status:?}", args.join(" "));
});
