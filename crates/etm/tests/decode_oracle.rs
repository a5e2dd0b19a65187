//! Our decoded elements against OpenCSD's `trc_pkt_lister -decode`
//! (Debian libopencsd-bin 1.3.3), line for line, on every ETMv4 snapshot in
//! ../shared/opencsd-snapshots: every packet line, element line
//! (`OCSD_GEN_TRC_ELEM_...`) and end-of-trace line, in the same order,
//! after making whitespace runs single spaces. Without trc_pkt_lister the
//! tests skip, unless POKETRACE_REQUIRE_PERF or CI is set: then they fail.
//! Run with `--nocapture` for the counts.

mod common;

use codeimage::window::Static;
use etm::flow::{self, FlowDecoder};
use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader};

use common::{lister, program, Rng};

/// Our `-decode` listing of a snapshot's first buffer.
fn our_listing(dir: &std::path::Path) -> String {
    let snap = Snapshot::load(dir).unwrap();
    let setup = snap.buffer_setup(&snap.buffers[0].name).unwrap();
    let data = snap.read_buffer(&setup.buffer).unwrap();
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    let (code, notes) = snap.code_image();
    for n in notes {
        eprintln!("{n}");
    }
    let mut reader = PacketReader::with_container(&data, setup.container, setup.framing, &configs, ErrorRecovery::Continue);
    let mut decoder = FlowDecoder::for_buffer(Static(&code), setup.framing, &configs);
    let mut printer = OpenCsdPrinter::new(Listing::Decode);
    let mut text = Vec::new();
    flow::run(&mut reader, &mut decoder, |item| printer.write_item(&mut text, &item));
    String::from_utf8(text).unwrap()
}

fn is_element(l: &str) -> bool {
    l.contains("; OCSD_GEN_TRC_ELEM_")
}

fn snapshot(name: &str, args: &[&str]) {
    let (Some(lister), Some(dir)) = (lister::lister(), common::snapshot(name)) else {
        return;
    };
    let args: Vec<&str> = ["-decode"].iter().chain(args).copied().collect();
    let log = lister::tmp("etm-decode-oracle", &format!("{name}.ppl"));
    let (text, done) = lister::run(lister, &dir, &args, &log);
    assert!(done, "trc_pkt_lister {args:?} on {name} did not finish");
    let theirs = lister::decode_lines(&text);
    let ours = lister::decode_lines(&our_listing(&dir));
    let mut differ = 0;
    for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        if t != o {
            if differ < 5 {
                eprintln!("{name}: line {i} differs:\n  trc_pkt_lister {t}\n  ours           {o}");
            }
            differ += 1;
        }
    }
    let elements = theirs.iter().filter(|l| is_element(l)).count();
    let n = theirs.len().min(ours.len());
    eprintln!(
        "{name}: {elements} element lines ({} lines in all) from trc_pkt_lister, {} from us; {n} lines compared, {differ} differ",
        theirs.len(),
        ours.iter().filter(|l| is_element(l)).count(),
    );
    assert!(elements > 0, "{name}: no element lines");
    assert_eq!(differ, 0, "{name}: listings differ (see above)");
    assert_eq!(theirs.len(), ours.len(), "{name}: line counts differ");
}

#[test]
fn juno_r1_1() {
    snapshot("juno_r1_1", &[]);
}

#[test]
fn juno_uname_001() {
    snapshot("juno-uname-001", &[]);
}

#[test]
fn bugfix_exact_match() {
    snapshot("bugfix-exact-match", &[]);
}

#[test]
fn a57_single_step() {
    snapshot("a57_single_step", &[]);
}

#[test]
fn init_short_addr() {
    snapshot("init-short-addr", &[]);
}

#[test]
fn a55_test_tpiu() {
    snapshot("a55-test-tpiu", &["-dstream_format"]);
}

/// Synthetic runs (tests/common/program.rs) under configurations the real
/// snapshots do not use: the return stack, cycle counting (cycle count
/// packets, timestamps with cycle counts), WFI/WFE as P0, events,
/// overflows, exceptions (also at a branch target) and exception returns,
/// code that is not in the image, speculation (commits, mispredicts,
/// cancels). Every line must agree with trc_pkt_lister.
#[test]
fn synthetic_runs() {
    let Some(lister) = lister::lister() else {
        return;
    };
    let mut rng = Rng(0xe7a4_f10f);
    let (mut elements, mut lines) = (0, 0);
    for round in 0..12u32 {
        let cfg = etm::EtmV4Config {
            configr: 0x1 | (round & 1) << 12 | (round >> 1 & 1) << 4 | 1 << 11,
            traceidr: 0x10,
            idr0: 0x28000EA1 | 0x200,
            idr1: 0x4100F430, // ETMv4.3: WFXMODE exists
            idr2: 0x488 | (round >> 2 & 1) << 31,
            // Speculation, when trc_pkt_lister takes it.
            idr8: if round >= 8 { 4 } else { 0 },
            ..etm::EtmV4Config::default()
        };
        let prog = program::Program::random(&mut rng);
        let trace = program::run(&mut rng, &prog, &cfg, 6000);
        let name = format!("synthetic-{round}");
        let dir = lister::tmp("etm-decode-oracle", &name);
        program::write_snapshot(&dir, &mut rng, &prog, &cfg, &trace);
        let log = lister::tmp("etm-decode-oracle", &format!("{name}.ppl"));
        let (text, done) = lister::run(lister, &dir, &["-decode"], &log);
        assert!(done, "trc_pkt_lister -decode on {name} did not finish");
        let theirs = lister::decode_lines(&text);
        let ours = lister::decode_lines(&our_listing(&dir));
        let differ = theirs.iter().zip(&ours).position(|(t, o)| t != o);
        if let Some(i) = differ {
            panic!(
                "{name} (config {cfg:x?}): line {i} differs:\n  trc_pkt_lister {}\n  ours           {}\n(snapshot in {})",
                theirs[i],
                ours[i],
                dir.display()
            );
        }
        assert_eq!(theirs.len(), ours.len(), "{name}: line counts differ");
        let n = theirs.iter().filter(|l| is_element(l)).count();
        assert!(theirs.iter().any(|l| l.contains("INSTR_RANGE")), "{name}: no ranges");
        elements += n;
        lines += theirs.len();
    }
    eprintln!("synthetic runs: {elements} element lines ({lines} lines in all) agree");
}

/// Random packet sequences (tests/common/program.rs `random_packets`):
/// valid packets in senseless order with corrupt bytes between them, under
/// configurations with and without speculation, the return stack and cycle
/// counting: errors, resynchronisation and everything else the decoder
/// meets give the same lines as trc_pkt_lister. Mispredicts are left out
/// (the well-formed runs of `synthetic_runs` have them): in senseless
/// sequences OpenCSD 1.3.3 fails to find the atom to correct once
/// addresses lie between it and the mispredict ("Not found mispredict
/// atom"), and the packets that carry atoms (Mispredict, Cancel formats 2
/// and 3) it reads in another order: it adds the atoms before it cancels
/// and corrects, so it cancels or flips the packet's own atoms, where the
/// architecture adds them after (a packet cancelling the atoms it carries
/// would say nothing); flow_rules.rs tests our reading.
#[test]
fn random_packet_sequences() {
    let Some(lister) = lister::lister() else {
        return;
    };
    let mut rng = Rng(0xdec0_de5e);
    let (mut elements, mut lines, mut crashes, mut a32_cuts) = (0, 0, 0, 0);
    for round in 0..32u32 {
        let cfg = etm::EtmV4Config {
            configr: 0x1 | (round & 1) << 12 | (round >> 1 & 1) << 4,
            traceidr: 0x10,
            idr0: 0x28000EA1 | 0x200,
            idr8: [0, 2, 8, 0][(round >> 2 & 3) as usize],
            ..etm::EtmV4Config::default()
        };
        let prog = program::Program::random(&mut rng);
        let trace = program::random_packets(&mut rng, &cfg, 2500);
        let name = format!("random-{round}");
        let dir = lister::tmp("etm-decode-oracle", &name);
        program::write_snapshot(&dir, &mut rng, &prog, &cfg, &trace);
        let log = lister::tmp("etm-decode-oracle", &format!("{name}.ppl"));
        let (text, done) = lister::run(lister, &dir, &["-decode"], &log);
        let mut theirs = lister::decode_lines(&text);
        let mut ours = lister::decode_lines(&our_listing(&dir));
        if !done {
            // trc_pkt_lister died: what it printed before must still agree.
            crashes += 1;
            ours.truncate(theirs.len());
        }
        // Up to the first A32 or T32 code OpenCSD walks (an exception's
        // walk ignores a missing context, and a reset leaves AArch32): we
        // report such code as unsupported rather than walk it.
        if let Some(cut) = theirs.iter().position(|l| l.contains("INSTR_RANGE") && !l.contains("(ISA=A64)")) {
            a32_cuts += 1;
            theirs.truncate(cut);
            ours.truncate(cut);
        }
        if let Some(i) = theirs.iter().zip(&ours).position(|(t, o)| t != o) {
            panic!("{name}: line {i} differs:\n  trc_pkt_lister {}\n  ours           {}\n(snapshot in {})", theirs[i], ours[i], dir.display());
        }
        assert_eq!(theirs.len(), ours.len(), "{name}: line counts differ");
        elements += theirs.iter().filter(|l| is_element(l)).count();
        lines += theirs.len();
    }
    eprintln!("random packet sequences: {elements} element lines ({lines} lines in all) agree; trc_pkt_lister crashed on {crashes} of 32, walked AArch32 code in {a32_cuts}");
    assert!(elements > 1000, "{elements} element lines compared");
}
