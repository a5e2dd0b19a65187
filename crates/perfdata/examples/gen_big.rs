//! Writes a large, deterministic perf.data shaped like the side-band of
//! `perf record -e intel_pt// -a` plus a sampling event, for read benchmarks.
//!
//!     cargo run --release -p perfdata --example gen_big -- OUT N [SEED]
//!
//! N is the total number of records written, FINISHED_ROUND included (so it
//! equals the "TOTAL events" line of `perf report -D`'s "Aggregated stats").
//! Two attrs, both with PERF_SAMPLE_IDENTIFIER and sample_id_all:
//!   0: the traced/sampled event (SAMPLE IP|TID|TIME|CPU|IDENTIFIER|PERIOD,
//!      AUX and ITRACE_START come from it, as from an Intel PT event),
//!   1: the `dummy` side-band event (MMAP2, COMM, TEXT_POKE, KSYMBOL,
//!      SWITCH_CPU_WIDE).
//! Like perf, records come in rounds of ~1000 ended by FINISHED_ROUND; inside
//! a round each CPU's ring buffer is written in turn, so times increase per
//! CPU but interleave across CPUs (the sorted readers have real work to do);
//! every time in a round is above every time in the round before.
//! The mix per 1000 records (see `pick`): ~40% SAMPLE, 25% SWITCH_CPU_WIDE,
//! 10% MMAP2, 8% AUX, 5% ITRACE_START, 5% COMM, 4% TEXT_POKE, 3% KSYMBOL.
//! Prints the count of each record type to stderr.
//!
//! benches/read.rs includes this file as a module and calls [`generate`].
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use perfdata::abi::{attr_flag, ksymbol_type, misc, sample_type as st, KSYMBOL_FLAG_UNREGISTER};
use perfdata::*;

const CPUS: u64 = 4;
const ROUND: u64 = 1000;
const SAMPLE_TYPE: u64 = st::IP | st::TID | st::TIME | st::CPU | st::IDENTIFIER | st::PERIOD;
const PT_ID: u64 = 100; // ids PT_ID + cpu
const DUMMY_ID: u64 = 200; // ids DUMMY_ID + cpu
const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;
const BPF_BASE: u64 = 0xffff_ffff_c000_0000;

/// splitmix64: small, deterministic.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const LIBS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30",
    "/usr/lib/x86_64-linux-gnu/libm.so.6",
    "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1",
    "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
    "/home/user/src/project/target/release/deps/libserde_json-5c1f0e9b2d7a4c11.so",
    "/usr/bin/python3.11",
    "[vdso]",
    "//anon",
];
const COMMS: &[&str] = &["bash", "make", "cc1", "rustc", "python3", "kworker/0:1", "ld", "cargo"];

fn attrs() -> Vec<AttrWithIds> {
    let pt = EventAttr {
        type_: 0, // PERF_TYPE_HARDWARE cycles stands in for the intel_pt PMU (dynamic type)
        size: ATTR_SIZE_VER7,
        config: 0,
        sample_period: 10007,
        sample_type: SAMPLE_TYPE,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::DISABLED | attr_flag::INHERIT | attr_flag::EXCLUDE_HV,
        ..EventAttr::default()
    };
    let dummy = EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        config: 9, // PERF_COUNT_SW_DUMMY
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        flags: attr_flag::SAMPLE_ID_ALL
            | attr_flag::DISABLED
            | attr_flag::INHERIT
            | attr_flag::EXCLUDE_HV
            | attr_flag::MMAP
            | attr_flag::COMM
            | attr_flag::TASK
            | attr_flag::MMAP2
            | attr_flag::COMM_EXEC
            | attr_flag::CONTEXT_SWITCH
            | attr_flag::KSYMBOL
            | attr_flag::TEXT_POKE,
        ..EventAttr::default()
    };
    vec![
        AttrWithIds { attr: pt, ids: (0..CPUS).map(|c| PT_ID + c).collect() },
        AttrWithIds { attr: dummy, ids: (0..CPUS).map(|c| DUMMY_ID + c).collect() },
    ]
}

#[derive(Clone, Copy)]
enum Kind {
    Sample,
    Switch,
    Mmap2,
    Aux,
    ItraceStart,
    Comm,
    TextPoke,
    Ksymbol,
}

fn pick(r: u64) -> Kind {
    match r % 100 {
        0..=39 => Kind::Sample,
        40..=64 => Kind::Switch,
        65..=74 => Kind::Mmap2,
        75..=82 => Kind::Aux,
        83..=87 => Kind::ItraceStart,
        88..=92 => Kind::Comm,
        93..=96 => Kind::TextPoke,
        _ => Kind::Ksymbol,
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gen_big OUT N [SEED]");
        std::process::exit(2);
    }
    let n: u64 = args[2].parse().expect("N: a number of records");
    let seed: u64 = args.get(3).map(|s| s.parse().expect("SEED: a number")).unwrap_or(1);
    let counts = generate(Path::new(&args[1]), n, seed)?;
    for (k, v) in &counts {
        eprintln!("{k:>16}: {v}");
    }
    Ok(())
}

/// Writes `n` records to `out`; returns the count of each record type, with
/// "TOTAL" and "end of data" (the file offset where the data section ends).
pub fn generate(out: &Path, n: u64, seed: u64) -> Result<BTreeMap<&'static str, u64>> {
    let mut rng = Rng(seed);
    let mut w = Writer::create(out, attrs())?;
    w.features.hostname = Some("bench-host".into());
    w.features.osrelease = Some("6.1.0-bench".into());
    w.features.version = Some("6.1.0".into());
    w.features.arch = Some("x86_64".into());
    w.features.nrcpus = Some(NrCpus { available: CPUS as u32, online: CPUS as u32 });
    w.features.cmdline = Some(vec!["perf".into(), "record".into(), "-e".into(), "intel_pt//".into(), "-a".into()]);
    w.features.event_names = Some(vec!["cycles".into(), "dummy:u".into()]);

    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut written = 0u64;
    let mut round_start_time = 1_000_000_000u64; // ns
    let round_window = 2_000_000u64; // each round covers 2 ms of every CPU
                                     // Per-CPU state: the task running, the AUX head.
    let mut running = [0u32; CPUS as usize];
    let mut aux_head = [0u64; CPUS as usize];
    let mut ksym_live: Vec<u64> = Vec::new();
    let mut poke_count = 0u64;
    let mut name = String::new();
    while written < n {
        // One round: up to ROUND-1 records then FINISHED_ROUND.
        let in_round = (ROUND - 1).min(n - written - 1);
        for cpu in 0..CPUS {
            let share = in_round / CPUS + u64::from(cpu < in_round % CPUS);
            let mut t = round_start_time;
            let step = round_window / share.max(1);
            for _ in 0..share {
                t += 1 + rng.below(step.max(1));
                let c = cpu as usize;
                let pid = if running[c] == 0 { 1000 + rng.below(200) as u32 } else { running[c] };
                running[c] = pid;
                let sid = |id_base: u64| SampleId {
                    pid: Some(pid),
                    tid: Some(pid),
                    time: Some(t),
                    cpu: Some(cpu as u32),
                    identifier: Some(id_base + cpu),
                    ..SampleId::default()
                };
                let pt = sid(PT_ID);
                let dummy = sid(DUMMY_ID);
                let r = rng.next();
                let jmp = [0xe9, (r >> 8) as u8, (r >> 16) as u8, 0, 0];
                let (what, m, body, s) = match pick(r) {
                    Kind::Sample => {
                        let kernel = r & (1 << 40) != 0;
                        let ip = if kernel { KERNEL_TEXT + (r >> 44) % 0x100_0000 } else { 0x5555_5555_0000 + (r >> 44) % 0x40_0000 };
                        let s = Sample {
                            identifier: pt.identifier,
                            ip: Some(ip),
                            pid: Some(pid),
                            tid: Some(pid),
                            time: Some(t),
                            cpu: Some(cpu as u32),
                            period: Some(10007),
                            ..Sample::default()
                        };
                        let m = if kernel { misc::KERNEL } else { misc::USER | misc::EXACT_IP };
                        ("SAMPLE", m, RecordBody::Sample(s), SampleId::default())
                    }
                    Kind::Switch => {
                        let out = r & 1 != 0;
                        let other = 1000 + rng.below(200) as u32;
                        if !out {
                            running[c] = other;
                        }
                        let m = misc::KERNEL | if out { misc::SWITCH_OUT } else { 0 };
                        let body = RecordBody::SwitchCpuWide(SwitchCpuWide { next_prev_pid: other, next_prev_tid: other });
                        ("SWITCH_CPU_WIDE", m, body, dummy)
                    }
                    Kind::Mmap2 => {
                        let lib = LIBS[(r >> 8) as usize % LIBS.len()];
                        let addr = 0x7f00_0000_0000 + ((r >> 16) % 0x1000_0000) * 0x1000;
                        let body = RecordBody::Mmap2(Mmap2 {
                            pid,
                            tid: pid,
                            addr,
                            len: 0x1000 * (1 + (r >> 48) % 512),
                            pgoff: 0,
                            file_id: Mmap2FileId::Inode { maj: 8, min: 1, ino: 1_000_000 + (r >> 8) % LIBS.len() as u64, ino_generation: 0 },
                            prot: 5,
                            flags: 2,
                            filename: lib.as_bytes(),
                        });
                        ("MMAP2", misc::USER, body, dummy)
                    }
                    Kind::Aux => {
                        let size = 0x1000 * (1 + (r >> 8) % 64);
                        let offset = aux_head[c];
                        aux_head[c] += size;
                        ("AUX", 0, RecordBody::Aux(Aux { aux_offset: offset, aux_size: size, flags: 0 }), pt)
                    }
                    Kind::ItraceStart => ("ITRACE_START", 0, RecordBody::ItraceStart(ItraceStart { pid, tid: pid }), pt),
                    Kind::Comm => {
                        let comm = COMMS[(r >> 8) as usize % COMMS.len()];
                        let m = misc::USER | if r & 2 != 0 { misc::COMM_EXEC } else { 0 };
                        ("COMM", m, RecordBody::Comm(Comm { pid, tid: pid, comm: comm.as_bytes() }), dummy)
                    }
                    Kind::TextPoke => {
                        // A 5-byte jump label / static call site: nop5 <-> jmp rel32.
                        const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
                        poke_count += 1;
                        let addr = KERNEL_TEXT + ((r >> 24) % 0x80_0000);
                        let (old, new): (&[u8], &[u8]) = if poke_count & 1 == 0 { (&NOP5, &jmp) } else { (&jmp, &NOP5) };
                        ("TEXT_POKE", misc::KERNEL, RecordBody::TextPoke(TextPoke { addr, old, new }), dummy)
                    }
                    Kind::Ksymbol => {
                        // BPF programs come and go: register, or unregister a live one.
                        let unregister = !ksym_live.is_empty() && (r & 1 != 0 || ksym_live.len() > 64);
                        let addr = if unregister {
                            ksym_live.swap_remove((r >> 8) as usize % ksym_live.len())
                        } else {
                            let a = BPF_BASE + (r >> 20) % 0x10_0000 * 0x1000;
                            ksym_live.push(a);
                            a
                        };
                        name.clear();
                        name.push_str(&format!("bpf_prog_{:016x}_sys_enter_{}", r, (r >> 32) % 97));
                        let flags = if unregister { KSYMBOL_FLAG_UNREGISTER } else { 0 };
                        let body = RecordBody::Ksymbol(Ksymbol {
                            addr,
                            len: 0x100 + (r >> 40) as u32 % 0x800,
                            ksym_type: ksymbol_type::BPF,
                            flags,
                            name: name.as_bytes(),
                        });
                        ("KSYMBOL", misc::KERNEL, body, dummy)
                    }
                };
                w.write(m, &body, &s)?;
                *counts.entry(what).or_default() += 1;
            }
        }
        w.write(0, &RecordBody::FinishedRound, &SampleId::default())?;
        *counts.entry("FINISHED_ROUND").or_default() += 1;
        written += in_round + 1;
        round_start_time += round_window;
    }
    let pos = w.position();
    w.finish()?;
    counts.insert("TOTAL", written);
    counts.insert("end of data", pos);
    Ok(counts)
}
