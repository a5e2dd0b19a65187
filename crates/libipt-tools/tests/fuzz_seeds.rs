//! The seeds of the `ptxed` fuzz target (`fuzz/seeds/ptxed/`, its input
//! format in `fuzz/fuzz_targets/ptxed.rs`): a small program and traces of
//! it made with the project's packet encoder, each run here through `ptxed`
//! with the options its first bytes choose, so that a seed that stops
//! decoding as described fails.
//!
//! Written by `cargo test -p libipt-tools --test fuzz_seeds -- --ignored`.

use intel_pt::{Encoder, Ip, IpCompression, Packet, Tnt};

const BASE: u64 = 0x100000;

/// nop; jne +2; hlt; hlt; call rax; nop; hlt x5; ret (at 0xd).
const CODE: [u8; 16] = [0x90, 0x75, 0x02, 0xf4, 0xf4, 0xff, 0xd0, 0x90, 0xf4, 0xf4, 0xf4, 0xf4, 0xf4, 0xc3, 0xf4, 0xf4];

struct Trace {
    enc: Encoder,
    out: Vec<u8>,
}

impl Trace {
    fn put(&mut self, p: Packet) -> &mut Trace {
        self.enc.encode(&p, &mut self.out).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        self
    }
    fn ip(&self, off: u64) -> Ip {
        self.enc.compress(BASE + off)
    }
    fn fup(&mut self, off: u64) -> &mut Trace {
        let ip = self.ip(off);
        self.put(Packet::Fup(ip))
    }
    fn taken(&mut self) -> &mut Trace {
        self.put(Packet::TntShort(Tnt { bits: 1, count: 1 }))
    }
}

/// PSB+ at the program's start (with `timing` in it), the jne taken, the
/// call's TIP, the compressed ret, and a stop at the hlt after the nop;
/// `middle` writes what goes after the jne's TNT. A CYC before each flow
/// packet.
fn trace(timing: &[Packet], middle: impl Fn(&mut Trace)) -> Vec<u8> {
    let mut t = Trace { enc: Encoder::new(), out: Vec::new() };
    t.put(Packet::Psb).put(Packet::ModeExec { csl: true, csd: false, if_flag: true }).fup(0);
    for p in timing {
        t.put(*p);
    }
    t.put(Packet::PsbEnd).put(Packet::Cyc(4)).taken();
    middle(&mut t);
    let tip = t.ip(0xd);
    t.put(Packet::Cyc(0x12)).put(Packet::Tip(tip)).put(Packet::Cyc(8)).taken();
    t.put(Packet::Cyc(6)).fup(8).put(Packet::TipPgd(Ip { compression: IpCompression::Suppressed, payload: 0, ip: None }));
    t.out
}

/// A seed: the option bytes, the code's length, the code, the trace.
fn seed(options: [u8; 5], trace: &[u8]) -> Vec<u8> {
    let mut s = options.to_vec();
    s.push((CODE.len() / 8) as u8);
    s.extend_from_slice(&CODE);
    s.extend_from_slice(trace);
    s
}

const TSC_CBR: [Packet; 2] = [Packet::Tsc(0xa000), Packet::Cbr(2)];

/// Each seed's name, options and trace.
fn seeds() -> Vec<(&'static str, [u8; 5], Vec<u8>)> {
    let mtc = [Packet::Tsc(0x1000), Packet::Tma { ctc: 0x10, fast_counter: 0x40 }];
    vec![
        // Instruction decoder, ticks and times, the nominal frequency 4.
        ("ticks", [0x61, 0, 0, 0x40, 0], trace(&TSC_CBR, |_| {})),
        // An overflow after the jne, tracing resuming at the call; a Skylake.
        (
            "overflow",
            [0x30, 0x48, 1, 0x40, 0],
            trace(&TSC_CBR, |t| {
                t.put(Packet::Ovf).fup(5);
            }),
        ),
        // MTC timing, the block decoder showing blocks, a filter, overlapping code.
        (
            "mtc_blocks",
            [0x70, 0x81, 0, 0x04, 0x01],
            trace(&mtc, |t| {
                t.put(Packet::Mtc(2)).put(Packet::Mtc(3));
            }),
        ),
    ]
}

/// What ptxed prints for `trace` over the program with `options` (before
/// `--raw` and `--pt`).
fn ptxed(options: &[&str], trace: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("libipt-tools-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.pt"), trace).unwrap();
    std::fs::write(dir.join("t.bin"), CODE).unwrap();
    let mut args: Vec<String> = options.iter().map(|s| s.to_string()).collect();
    args.extend(["--raw".into(), format!("{}:{BASE:#x}", dir.join("t.bin").display()), "--pt".into(), dir.join("t.pt").display().to_string()]);
    let mut out = Vec::new();
    assert_eq!(libipt_tools::ptxed::run(&args, &mut out).unwrap(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
    String::from_utf8(out).unwrap()
}

/// The seeds' traces follow the program: the first with its ticks (a CYC
/// is 2 TSC ticks at the nominal ratio 4 over CBR 2), and none has an error.
#[test]
fn the_seeds_traces_follow_the_program() {
    let out = ptxed(&["--insn-decoder", "--nom-freq", "4", "--event:tick", "--event:time"], &seeds()[0].2);
    let want = "0000000000100000\n0000000000100001\n[000000000000a008  tick]\n0000000000100005\n[000000000000a02c  tick]\n\
                000000000010000d\n[000000000000a03c  tick]\n0000000000100007\n[000000000000a048  disabled]\n";
    assert_eq!(out, want);
    for (name, _, trace) in seeds() {
        let out = ptxed(&["--insn-decoder"], &trace);
        assert!(!out.contains("error"), "{name}: {out}");
        assert!(out.ends_with("[disabled]\n"), "{name}: {out}");
    }
    assert!(ptxed(&[], &seeds()[1].2).contains("[overflow]\n0000000000100005\n"));
}

#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/ptxed");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, options, trace) in seeds() {
        std::fs::write(dir.join(name), seed(options, &trace)).unwrap();
    }
}
