//! Our packet listing against OpenCSD's `trc_pkt_lister` (Debian
//! libopencsd-bin), line for line: on every real snapshot in
//! ../shared/opencsd-snapshots, and on synthetic snapshots holding every
//! packet kind under several configurations and framings.
//!
//! Compared per packet line: trace index, trace ID, raw bytes, packet name,
//! and the description (after normalising whitespace). Without
//! trc_pkt_lister the tests skip, unless POKETRACE_REQUIRE_PERF or CI is
//! set: then they fail. Run with `--nocapture` for the counts.

mod common;

use std::path::{Path, PathBuf};

use common::lister::{self, lister};
use common::{synth, Rng};
use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::{Container, ErrorRecovery, FrameErrorKind, FrameWriter, PacketReader};

fn tmp(name: &str) -> PathBuf {
    lister::tmp("etm-opencsd", name)
}

/// Runs trc_pkt_lister on a snapshot and returns its log; panics unless it
/// ran to the end (it can crash: 1.3.3's full decoder segfaults on some
/// synthetic traces, which `lister::run` reports).
fn run_lister(lister: &str, dir: &Path, args: &[&str], log: &str) -> String {
    let (text, done) = lister::run(lister, dir, args, &tmp(log));
    assert!(done, "trc_pkt_lister {args:?} on {} did not finish", dir.display());
    text
}

/// A packet line split into its parts: index, ID, raw bytes (None in
/// packets-only listings), name, description (whitespace normalised).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    idx: u64,
    id: String,
    bytes: Option<String>,
    name: String,
    desc: String,
}

/// The packet lines of a trc_pkt_lister log, from `Idx:` on (error messages
/// without a newline may precede it), element lines left out.
fn packet_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| {
            let l = &l[l.find("Idx:")?..];
            let after_id = &l[l.find("; ID:")? + 5..];
            let rest = after_id[after_id.find(';')? + 1..].trim_start_matches(' ');
            (rest.starts_with('[') || rest.starts_with("\tI_")).then_some(l.trim_end())
        })
        .collect()
}

fn parse_line(l: &str, hex_idx: bool) -> Option<Line> {
    let rest = l.strip_prefix("Idx:")?;
    let (idx, rest) = rest.split_once("; ID:")?;
    let (id, rest) = rest.split_once(';')?;
    let rest = rest.trim_start_matches(' ');
    let (bytes, rest) = match rest.strip_prefix('[') {
        Some(r) => {
            let (b, r) = r.split_once("];")?;
            (Some(b.split_whitespace().collect::<Vec<_>>().join(" ")), r)
        }
        None => (None, rest),
    };
    let rest = rest.trim();
    let (name, desc) = rest.split_once(" : ").unwrap_or((rest, ""));
    Some(Line {
        idx: if hex_idx { u64::from_str_radix(idx, 16).ok()? } else { idx.parse().ok()? },
        id: id.trim().to_string(),
        bytes,
        name: name.to_string(),
        desc: desc.split_whitespace().collect::<Vec<_>>().join(" "),
    })
}

/// Our listing of a buffer (one packet per line) and where the frame errors fell in it.
fn our_listing(
    data: &[u8],
    container: Container,
    framing: etm::Framing,
    configs: &[etm::EtmV4Config],
    listing: Listing,
) -> (String, Vec<(usize, etm::FrameError)>) {
    let mut r = PacketReader::with_container(data, container, framing, configs, ErrorRecovery::Continue);
    let mut printer = OpenCsdPrinter::new(listing);
    let (mut text, mut errors, mut lines) = (Vec::new(), Vec::new(), 0);
    while let Some(item) = r.next() {
        match item {
            Ok(p) => {
                let before = text.len();
                printer.write_packet(&mut text, &p);
                lines += (text.len() > before) as usize;
            }
            Err(e) => errors.push((lines, e)),
        }
    }
    (String::from_utf8(text).unwrap(), errors)
}

/// Compares line by line: first as text, then, where the text differs, by
/// parts. Returns (lines compared, disagreements on (Idx, ID, bytes, name),
/// disagreements on descriptions only).
fn compare(what: &str, theirs: &[&str], ours: &[&str], hex_idx: bool) -> (usize, usize, usize) {
    let (mut key, mut desc) = (0, 0);
    for (i, (t, o)) in theirs.iter().zip(ours).enumerate() {
        if !hex_idx && t == o {
            continue;
        }
        let (Some(t), Some(o)) = (parse_line(t, hex_idx), parse_line(o, false)) else {
            key += 1;
            continue;
        };
        if (t.idx, &t.id, &t.bytes, &t.name) != (o.idx, &o.id, &o.bytes, &o.name) {
            if key < 5 {
                eprintln!("{what}: line {i} differs:\n  theirs {t:?}\n  ours   {o:?}");
            }
            key += 1;
        } else if t.desc != o.desc {
            if desc < 5 {
                eprintln!("{what}: line {i} description differs:\n  theirs {}\n  ours   {}", t.desc, o.desc);
            }
            desc += 1;
        }
    }
    if theirs.len() != ours.len() {
        eprintln!("{what}: {} lines from trc_pkt_lister, {} from us", theirs.len(), ours.len());
        key += theirs.len().abs_diff(ours.len());
    }
    let n = theirs.len().min(ours.len());
    eprintln!("{what}: {n} lines compared, {key} disagreements on (Idx, ID, bytes, name), {desc} on descriptions");
    (n, key, desc)
}

fn assert_same(what: &str, theirs: &[&str], ours: &[&str]) {
    let (n, key, desc) = compare(what, theirs, ours, false);
    assert!(n > 0 || theirs.is_empty(), "{what}: nothing compared");
    assert_eq!((key, desc), (0, 0), "{what}: listings differ (see above)");
}

/// A real snapshot, both listings; frame errors are only allowed as a partial last frame.
fn real_snapshot(name: &str, lister_args: &[&str]) {
    let (Some(lister), Some(dir)) = (lister(), common::snapshot(name)) else {
        return;
    };
    let b = common::first_buffer(&dir);
    for (listing, mode_args, tag) in [(Listing::Decode, &["-decode"][..], "decode"), (Listing::PacketsOnly, &[][..], "packets")] {
        let args: Vec<&str> = mode_args.iter().chain(lister_args).copied().collect();
        let log = run_lister(lister, &dir, &args, &format!("{name}.{tag}.ppl"));
        let theirs = packet_lines(&log);
        let (text, errors) = our_listing(&b.data, b.container, b.framing, &b.configs, listing);
        let ours: Vec<&str> = text.lines().map(str::trim_end).collect();
        for (at, e) in &errors {
            assert!(*at == ours.len() && matches!(e.kind, FrameErrorKind::PartialFrame(_)), "{name}: frame error {e} at line {at}");
        }
        assert_same(&format!("{name} ({tag})"), &theirs, &ours);
    }
}

#[test]
fn juno_r1_1() {
    real_snapshot("juno_r1_1", &[]);
}

#[test]
fn juno_uname_001() {
    real_snapshot("juno-uname-001", &[]);
}

#[test]
fn bugfix_exact_match() {
    real_snapshot("bugfix-exact-match", &[]);
}

#[test]
fn a57_single_step() {
    real_snapshot("a57_single_step", &[]);
}

#[test]
fn init_short_addr() {
    real_snapshot("init-short-addr", &[]);
}

#[test]
fn a55_test_tpiu_dstream_blocks() {
    real_snapshot("a55-test-tpiu", &["-dstream_format"]);
}

/// Without `-dstream_format` OpenCSD reads the DSTREAM footers as trace and
/// stops at the first FSYNC they displace; we report the same fault and
/// must agree on every packet before it.
#[test]
fn a55_test_tpiu_footers_as_trace() {
    let (Some(lister), Some(dir)) = (lister(), common::snapshot("a55-test-tpiu")) else {
        return;
    };
    let b = common::first_buffer(&dir);
    let log = run_lister(lister, &dir, &["-decode"], "a55-test-tpiu.plain.ppl");
    assert!(log.contains("Data Path fatal error"), "OpenCSD no longer stops here");
    let theirs = packet_lines(&log);
    let (text, errors) = our_listing(&b.data, Container::Plain, b.framing, &b.configs, Listing::Decode);
    let ours: Vec<&str> = text.lines().map(str::trim_end).collect();
    let (at, first) = errors[0];
    assert_eq!(first.kind, FrameErrorKind::FsyncInFrame);
    assert_eq!(first.offset, 0x20c);
    assert_same("a55-test-tpiu without -dstream_format, up to the fault", &theirs, &ours[..at]);
}

/// OpenCSD's own reference logs for a57_single_step (older versions: the
/// packet text changed since, so only index, ID, bytes and name are compared).
#[test]
fn a57_single_step_reference_logs() {
    let Some(dir) = common::snapshot("a57_single_step") else {
        return;
    };
    let b = common::first_buffer(&dir);
    let (text, _) = our_listing(&b.data, b.container, b.framing, &b.configs, Listing::Decode);
    let ours: Vec<&str> = text.lines().map(str::trim_end).collect();
    for (log, hex) in [("trc_pkt_lister_a57ss.ppl", true), ("trc_pkt_lister_a57ss-1.ppl", false), ("trc_pkt_lister_a57ss-2.ppl", false)] {
        let text = std::fs::read_to_string(dir.join("pkt_proc_logs").join(log)).unwrap();
        // Only the first run in each log: some hold two.
        let mut theirs = packet_lines(&text);
        if let Some(again) = theirs.iter().skip(1).position(|l| l.starts_with("Idx:0;")) {
            theirs.truncate(again + 1);
        }
        let (n, key, _) = compare(log, &theirs, &ours, hex);
        assert!(n >= 9 && key == 0, "{log}");
    }
}

/// A synthetic snapshot: buffer format, sources, buffer, extra trc_pkt_lister options.
type Case<'a> = (&'a str, Vec<(&'a str, etm::EtmV4Config)>, Vec<u8>, Vec<&'a str>);

/// Every packet kind, valid and invalid, under four configurations, as
/// raw source data, as frames of two interleaved sources, and as a DSTREAM
/// capture with FSYNCs: our listing equals trc_pkt_lister's.
#[test]
fn synthetic_snapshots_every_packet_kind() {
    let Some(lister) = lister() else { return };
    let configs = synth::configs();
    let mut rng = Rng(0x5eed_e7a4);
    let (mut total, mut crashes) = (0, 0);
    for (round, pair) in [(0, 1), (2, 3), (1, 2), (3, 0)].into_iter().enumerate() {
        let (a, b) = (&configs[pair.0], &configs[pair.1]);
        for errors in [false, true] {
            let ta = synth::trace(&mut rng, &a.1, 600, errors);
            let tb = synth::trace(&mut rng, &b.1, 400, errors);
            let mut fsync_writer = FrameWriter::with_fsync_every(1 + rng.below(4) as u32);
            let cases: Vec<Case> = vec![
                // OpenCSD 1.3.3's full decoder refuses a single source whose trace ID is not 0.
                ("source_data", vec![(a.0, etm::EtmV4Config { traceidr: 0, ..a.1 })], ta.clone(), vec![]),
                (
                    "coresight",
                    vec![(a.0, a.1), (b.0, b.1)],
                    synth::frames(&mut rng, &[(a.1.trace_id(), ta.clone()), (b.1.trace_id(), tb.clone())], &mut FrameWriter::new()),
                    vec![],
                ),
                (
                    "dstream_coresight",
                    vec![(a.0, a.1), (b.0, b.1)],
                    synth::dstream_blocks(&synth::frames(&mut rng, &[(a.1.trace_id(), ta), (b.1.trace_id(), tb)], &mut fsync_writer)),
                    vec!["-dstream_format"],
                ),
            ];
            for (format, sources, buffer, extra) in cases {
                let name = format!("synth-{round}-{}-{}-{format}", a.0, if errors { "errors" } else { "clean" });
                let dir = tmp(&name);
                synth::write_snapshot(&dir, &sources, format, &buffer);
                let b = common::first_buffer(&dir);
                // Raw bytes are only listed with -decode, which OpenCSD refuses for some configurations.
                let decode = sources.iter().all(|s| synth::opencsd_decoder_accepts(&s.1));
                let listings = [(Listing::Decode, Some("-decode"), "decode"), (Listing::PacketsOnly, None, "packets")];
                for (listing, mode, tag) in listings.into_iter().filter(|l| decode || l.0 == Listing::PacketsOnly) {
                    let args: Vec<&str> = mode.into_iter().chain(extra.iter().copied()).collect();
                    let (log, done) = lister::run(lister, &dir, &args, &tmp(&format!("{name}.{tag}.ppl")));
                    let theirs = packet_lines(&log);
                    let (text, frame_errors) = our_listing(&b.data, b.container, b.framing, &b.configs, listing);
                    let mut ours: Vec<&str> = text.lines().map(str::trim_end).collect();
                    assert!(frame_errors.is_empty(), "{name}: {frame_errors:?}");
                    if !done {
                        // OpenCSD's full decoder died: what it printed before must still agree.
                        assert!(listing == Listing::Decode, "{name}: trc_pkt_lister {args:?} did not finish");
                        eprintln!("{name}: trc_pkt_lister {args:?} crashed after {} packet lines; comparing those", theirs.len());
                        crashes += 1;
                        ours.truncate(theirs.len());
                    }
                    assert_same(&format!("{name} ({tag})"), &theirs, &ours);
                    total += theirs.len();
                }
            }
        }
    }
    eprintln!("synthetic snapshots: {total} lines compared; trc_pkt_lister -decode crashed on {crashes} runs");
}
