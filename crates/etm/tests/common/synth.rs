//! Synthetic ETMv4 trace with every packet kind, written with the encoder,
//! and synthetic snapshots around it for `trc_pkt_lister`.

use std::fmt::Write as _;
use std::path::Path;

use etm::packet::*;
use etm::{Encoder, EtmV4Config, FrameWriter, Profile};

use super::Rng;

/// Configurations that between them enable and disable every optional packet.
pub fn configs() -> Vec<(&'static str, EtmV4Config)> {
    let full = EtmV4Config {
        // COND, CCI, LSP0 + DA/DV data trace
        configr: 0x1 | 0x6 | (1 << 4) | (7 << 8) | (1 << 11) | (1 << 12) | (3 << 16),
        traceidr: 0x10,
        // data trace, cond trace, cycle counting, return stack, Q full, 64-bit TS
        idr0: 0x18 | 0x40 | 0x80 | 0x200 | (3 << 15) | (8 << 24) | 0x6,
        idr1: 0x4200F440, // ETMv4.4
        // 64-bit IA, 32-bit context ID, 32-bit VMID, CCSIZE 8 (20 bits)
        idr2: 0x8 | (4 << 5) | (4 << 10) | (8 << 25),
        idr8: 0x20,
        ..EtmV4Config::default()
    };
    // Cycle counts without commit fields, Q elements, return stack, 8-bit VMID.
    let commopt1 = EtmV4Config {
        configr: 0x1 | (1 << 4) | (1 << 11) | (1 << 12),
        traceidr: 0x22,
        idr0: full.idr0 | 0x2000_0000,
        idr2: 0x8 | (4 << 5) | (1 << 10),
        idr8: 0,
        ..full
    };
    let plain = EtmV4Config { configr: 0xC1, traceidr: 0x13, idr0: 0x28000EA1, idr1: 0x4100F403, idr2: 0x488, ..EtmV4Config::default() };
    let m = EtmV4Config { traceidr: 0x31, idr1: 0x4200F420, profile: Profile::M, ..plain };
    vec![("full", full), ("commopt1", commopt1), ("plain", plain), ("mprofile", m)]
}

/// Whether OpenCSD's full decoder (`-decode`) takes the configuration: it
/// refuses speculation, data trace and conditional trace.
pub fn opencsd_decoder_accepts(c: &EtmV4Config) -> bool {
    c.max_spec_depth() == 0 && c.configr & 0x6 == 0 && !c.data_trace_enabled() && !c.cond_trace_enabled()
}

/// A core type whose profile OpenCSD derives like ours.
pub fn core_type(c: &EtmV4Config) -> &'static str {
    match c.profile {
        Profile::M => "Cortex-M33",
        Profile::R => "Cortex-R52",
        Profile::A => "Cortex-A57",
    }
}

/// 1..=max atoms, E with a random bias.
fn atoms_of(rng: &mut Rng, max: u64) -> Vec<bool> {
    let n = 1 + rng.below(max);
    let bias = rng.below(100);
    (0..n).map(|_| rng.below(100) < bias).collect()
}

fn random_atom_packet(rng: &mut Rng) -> Packet {
    let format = 1 + rng.below(6) as u8;
    let atoms = match format {
        1 => Atoms::new(rng.below(2) as u32, 1),
        2 => Atoms::new(rng.below(4) as u32, 2),
        3 => Atoms::new(rng.below(8) as u32, 3),
        4 => Atoms::new([0xE, 0x0, 0xA, 0x5][rng.below(4) as usize], 4),
        5 => Atoms::new([0x1E, 0x00, 0x0A, 0x15][rng.below(4) as usize], 5),
        _ => {
            let n = 4 + rng.below(21) as u8;
            let e = (1u32 << (n - 1)) - 1;
            Atoms::new(if rng.chance(50) { e | 1 << (n - 1) } else { e }, n)
        }
    };
    Packet::Atom { format, atoms }
}

fn random_context(rng: &mut Rng, c: &EtmV4Config) -> Context {
    Context {
        el: rng.below(4) as u8,
        aarch64: rng.chance(85),
        non_secure: rng.chance(70),
        vmid: (c.vmid_bytes() > 0 && rng.chance(60)).then(|| rng.next() as u32 & (u32::MAX >> (32 - 8 * c.vmid_bytes() as u32))),
        context_id: (c.context_id_bytes() > 0 && rng.chance(60)).then(|| rng.next() as u32),
    }
}

fn addr(value: u64, is: u8, form: AddrForm, update_bits: u8) -> Address {
    Address { value, is, form, update_bits, valid_bits: 64, is64: true }
}

/// `packets` random packets of every kind valid for `c` (and, with
/// `errors`, reserved headers and broken sequences), after some junk and an
/// A-sync; possibly cut inside the last packet.
pub fn trace(rng: &mut Rng, c: &EtmV4Config, packets: usize, errors: bool) -> Vec<u8> {
    let mut enc = Encoder::new(c);
    let mut out = Vec::new();
    for _ in 0..rng.below(40) {
        out.push(if rng.chance(15) { 0 } else { rng.next() as u8 });
    }
    let mut threshold = 0u32;
    let mut pc: u64 = 0xffff_ffc0_0008_0000 + (rng.below(1 << 20) << 2);
    let put = |enc: &mut Encoder, p: Packet, out: &mut Vec<u8>| {
        let _ = enc.encode(&p, out);
    };
    put(&mut enc, Packet::Async, &mut out);
    for i in 0..packets {
        let k = if i == 0 { 0 } else { rng.below(46) };
        match k {
            0 | 1 => {
                let cc = rng.chance(50);
                threshold = rng.below(300) as u32;
                let ti = TraceInfo {
                    info: cc as u32 | (rng.below(2) as u32) << 4,
                    p0_key: rng.chance(20).then(|| rng.below(1000) as u32),
                    spec_depth: if rng.chance(20) { rng.below(20) as u32 } else { 0 },
                    cc_threshold: (cc || rng.chance(20)).then_some(threshold),
                    window: None,
                };
                if ti.cc_threshold.is_none() {
                    threshold = 0;
                }
                put(&mut enc, Packet::TraceInfo(ti), &mut out);
            }
            2 => put(&mut enc, Packet::TraceOn, &mut out),
            3 => put(&mut enc, Packet::Context(if rng.chance(20) { None } else { Some(random_context(rng, c)) }), &mut out),
            4..=8 => enc.atoms(&atoms_of(rng, 40), &mut out),
            9..=11 => put(&mut enc, random_atom_packet(rng), &mut out),
            12..=15 => {
                pc = match rng.below(4) {
                    0 => pc.wrapping_add(rng.below(64) * 4),
                    1 => pc ^ (rng.below(1 << 16) << 2),
                    2 => pc ^ (rng.below(1 << 30) << 2),
                    _ => rng.next() & !3 & !(1 << 63),
                };
                let _ = enc.address(pc, 0, &mut out);
            }
            16 => {
                let is = rng.below(2) as u8;
                let v = rng.next() & !1;
                let p = match rng.below(3) {
                    0 => addr(v, is, AddrForm::Short, if rng.chance(50) { 9 - is } else { 17 - is }),
                    1 => addr(v, is, AddrForm::Long32, 32),
                    _ => addr(v, is, AddrForm::Long64, 64),
                };
                put(&mut enc, Packet::Address(p), &mut out);
            }
            17 => {
                let is = rng.below(2) as u8;
                let form = if rng.chance(50) { AddrForm::Long32 } else { AddrForm::Long64 };
                put(&mut enc, Packet::AddressContext(addr(rng.next() & !1, is, form, 64), random_context(rng, c)), &mut out);
            }
            18 => put(&mut enc, Packet::ExactMatch { index: rng.below(3) as u8, addr: addr(0, 0, AddrForm::Long64, 64) }, &mut out),
            19 | 20 => {
                let limit = if c.profile == Profile::M {
                    0x400
                } else if rng.chance(90) {
                    16
                } else {
                    64
                };
                let number = rng.below(limit) as u16;
                let e = Exception {
                    number,
                    addr_interp: rng.below(3) as u8,
                    fault_pending: c.profile == Profile::M && rng.chance(20),
                    m_profile: c.profile == Profile::M,
                };
                put(&mut enc, Packet::Exception(e), &mut out);
                if e.addr_interp != 0 {
                    let _ = enc.address(pc, 0, &mut out);
                }
            }
            21 => put(&mut enc, Packet::ExceptionReturn, &mut out),
            22 | 23 => {
                let value = if rng.chance(30) { rng.next() >> 2 } else { rng.next() >> (2 + rng.below(50)) };
                let bits = if rng.chance(40) { 64 } else { 7 * (1 + rng.below(8) as u8) };
                let cycle_count = rng.chance(50).then(|| rng.below(1 << 12) as u32);
                put(&mut enc, Packet::Timestamp(Timestamp { value, updated_bits: bits, cycle_count }), &mut out);
            }
            24 | 25 => {
                let format = 1 + rng.below(3) as u8;
                let (count, commit) = match format {
                    1 => (rng.chance(80).then(|| threshold + rng.below(1 << 14) as u32), (!c.commit_opt1()).then(|| rng.below(100) as u32)),
                    2 => (Some(threshold + rng.below(16) as u32), Some(1 + rng.below(16) as u32)),
                    _ => (Some(threshold + rng.below(4) as u32), (!c.commit_opt1()).then(|| 1 + rng.below(4) as u32)),
                };
                put(&mut enc, Packet::CycleCount(CycleCount { format, count, commit }), &mut out);
            }
            26 => put(&mut enc, Packet::Commit(rng.below(200) as u32), &mut out),
            27 => put(&mut enc, Packet::CancelF1 { count: rng.below(200) as u32, mispredict: rng.chance(50) }, &mut out),
            28 => {
                let a = [Atoms::default(), Atoms::new(1, 1), Atoms::new(3, 2), Atoms::new(0, 1)][rng.below(4) as usize];
                put(&mut enc, if rng.chance(50) { Packet::Mispredict(a) } else { Packet::CancelF2(a) }, &mut out);
            }
            29 => put(&mut enc, Packet::CancelF3 { e_atom: rng.chance(50), count: 2 + rng.below(4) as u8 }, &mut out),
            30 | 31 if c.cond_trace_enabled() || errors => {
                let p = match rng.below(8) {
                    0 => Packet::CondInstr(CondInstr::F1 { key: rng.below(5000) as u32 }),
                    1 => Packet::CondInstr(CondInstr::F2 { code: rng.below(3) as u8 }),
                    2 => {
                        let final_elem = rng.chance(50);
                        Packet::CondInstr(CondInstr::F3 { count: rng.below(63) as u8 + final_elem as u8, final_elem })
                    }
                    3 => Packet::CondFlush,
                    4 => {
                        let two = rng.chance(50);
                        let r = |rng: &mut Rng| Some((rng.below(3000) as u32, rng.below(16) as u8));
                        let results = [r(rng), if two { r(rng) } else { None }];
                        Packet::CondResult(CondResult::F1 { results, ci: [rng.chance(50), two && rng.chance(50)] })
                    }
                    5 => Packet::CondResult(CondResult::F2 { key_incr: 1 + rng.below(2) as u8, token: rng.below(3) as u8 }),
                    6 => Packet::CondResult(CondResult::F3 { tokens: rng.below(0x1000) as u16 }),
                    _ => Packet::CondResult(CondResult::F4 { token: rng.below(3) as u8 }),
                };
                put(&mut enc, p, &mut out);
            }
            32 | 33 if c.has_q_elements() || errors => {
                let qtype = [0u8, 1, 2, 5, 6, 0xA, 0xB, 0xC, 0xF][rng.below(9) as usize];
                let addr = match qtype {
                    0..=2 => QAddress::ExactMatch { index: qtype, addr: addr(0, 0, AddrForm::Long64, 64) },
                    5 | 6 => QAddress::Address(addr(rng.next() & !3, qtype - 5, AddrForm::Short, if rng.chance(50) { 9 } else { 17 } - (qtype - 5))),
                    0xA | 0xB => QAddress::Address(addr(rng.next() & !3, qtype - 0xA, AddrForm::Long32, 32)),
                    _ => QAddress::None,
                };
                let count = (qtype != 0xF).then(|| rng.below(3000) as u32);
                put(&mut enc, Packet::Q(QPacket { qtype, count, addr }), &mut out);
            }
            34 => put(&mut enc, Packet::Event(1 + rng.below(15) as u8), &mut out),
            35 if c.data_trace_enabled() || errors => {
                let numbered = rng.chance(50);
                put(&mut enc, Packet::DataSync { numbered, value: rng.below(if numbered { 8 } else { 5 }) as u8 }, &mut out);
            }
            36 => put(&mut enc, [Packet::Discard, Packet::Overflow, Packet::Ignore][rng.below(3) as usize], &mut out),
            37 if c.profile == Profile::M || errors => put(&mut enc, Packet::FunctionReturn, &mut out),
            38 => put(&mut enc, Packet::Async, &mut out),
            39 if errors => {
                let bad: &[&[u8]] = &[&[0x08], &[0x84], &[0x93], &[0xB4], &[0x00, 0x07], &[0x00, 0x00, 0x00, 0x7f], &[0x47], &[0x65]];
                out.extend_from_slice(bad[rng.below(bad.len() as u64) as usize]);
            }
            _ => enc.atoms(&atoms_of(rng, 8), &mut out),
        }
    }
    if rng.chance(50) {
        // Cut inside a last, long packet.
        let mut tail = Vec::new();
        let _ = enc.encode(&Packet::Address(addr(rng.next() & !3, 0, AddrForm::Long64, 64)), &mut tail);
        out.extend_from_slice(&tail[..1 + rng.below(7) as usize]);
    }
    out
}

/// Writes sources' traces interleaved as CoreSight frames, in random runs.
pub fn frames(rng: &mut Rng, traces: &[(u8, Vec<u8>)], writer: &mut FrameWriter) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = vec![0usize; traces.len()];
    while pos.iter().zip(traces).any(|(p, t)| *p < t.1.len()) {
        let i = rng.below(traces.len() as u64) as usize;
        let (id, t) = (&traces[i].0, &traces[i].1);
        let n = (1 + rng.below(24) as usize).min(t.len() - pos[i]);
        writer.write(*id, &t[pos[i]..pos[i] + n], &mut out);
        pos[i] += n;
    }
    writer.flush(&mut out);
    out
}

/// A DSTREAM file: 504 trace bytes then an 8-byte footer per 512-byte
/// block; the trace (a port capture) is padded with FSYNCs to whole blocks.
pub fn dstream_blocks(trace: &[u8]) -> Vec<u8> {
    assert!(trace.len().is_multiple_of(4));
    let mut t = trace.to_vec();
    while !t.len().is_multiple_of(504) {
        t.extend_from_slice(&[0xff, 0xff, 0xff, 0x7f]);
    }
    let mut out = Vec::new();
    for block in t.chunks(504) {
        out.extend_from_slice(block);
        out.extend_from_slice(&[0, 0, 0, 0, 0x7e, 0, 0xfe, 0x0f]);
    }
    out
}

/// Writes an OpenCSD snapshot: one core and one ETMv4 device per source, one buffer.
pub fn write_snapshot(dir: &Path, sources: &[(&str, EtmV4Config)], format: &str, buffer: &[u8]) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut snap = String::from("[snapshot]\nversion=1.0\n\n[device_list]\n");
    let mut trace = format!("[trace_buffers]\nbuffers=buffer0\n\n[buffer0]\nname=buf\nfile=trace.bin\nformat={format}\n\n[source_buffers]\n");
    let mut cores = String::from("\n[core_trace_sources]\n");
    for (i, (name, c)) in sources.iter().enumerate() {
        writeln!(snap, "device{}=cpu_{i}.ini\ndevice{}=etm_{i}.ini", 2 * i, 2 * i + 1).unwrap();
        std::fs::write(
            dir.join(format!("cpu_{i}.ini")),
            format!("[device]\nname=cpu_{i}\nclass=core\ntype={}\n\n[regs]\nPC(size:64)=0x0\n", core_type(c)),
        )
        .unwrap();
        let regs = [
            ("TRCCONFIGR(id:0x4)", c.configr),
            ("TRCTRACEIDR(id:0x10)", c.traceidr),
            ("TRCIDR0(id:0x78)", c.idr0),
            ("TRCIDR1(id:0x79)", c.idr1),
            ("TRCIDR2(id:0x7A)", c.idr2),
            ("TRCIDR8(id:0x60)", c.idr8),
            ("TRCIDR9(id:0x61)", c.idr9),
            ("TRCIDR10(id:0x62)", c.idr10),
            ("TRCIDR11(id:0x63)", c.idr11),
            ("TRCIDR12(id:0x64)", c.idr12),
            ("TRCIDR13(id:0x65)", c.idr13),
        ];
        let mut dev = format!("[device]\nname={name}\nclass=trace_source\ntype=ETM4\n\n[regs]\n");
        for (k, v) in regs {
            writeln!(dev, "{k}=0x{v:08X}").unwrap();
        }
        std::fs::write(dir.join(format!("etm_{i}.ini")), dev).unwrap();
        writeln!(trace, "{name}=buf").unwrap();
        writeln!(cores, "cpu_{i}={name}").unwrap();
    }
    snap.push_str("\n[trace]\nmetadata=trace.ini\n");
    std::fs::write(dir.join("snapshot.ini"), snap).unwrap();
    std::fs::write(dir.join("trace.ini"), trace + &cores).unwrap();
    std::fs::write(dir.join("trace.bin"), buffer).unwrap();
}
