//! An AUX buffer's data decodes the same whichever AUXTRACE records carry
//! it: cut inside a packet, inside a PSB, into many small records, or left
//! as one record per buffer (which is read where the file is mapped, while
//! the data of several is joined outside the process's memory), `decode`
//! prints what it prints for the records `simulate` wrote. A gap in the AUX
//! offsets between two records is reported and decoded around alike however
//! the data around it is cut.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use perfdata::{AttrWithIds, Auxtrace, PerfFile, RecordBody, Writer};

mod common;

/// A buffer's AUX data cut into records: the offsets in it where a record
/// starts (besides 0), and the one from which the AUX offsets jump 64
/// bytes (a gap).
struct Cuts {
    at: Vec<usize>,
    gap: Option<usize>,
}

/// Writes `src`'s records to `dst/data`, each buffer's AUX data cut into
/// records at `cuts(idx, data)` instead of where `src` cuts it (each new
/// record where the record holding its first byte was); `dst` is a copy
/// of the directory `src` otherwise.
fn rewrite(src: &Path, dst: &Path, cuts: impl Fn(u32, &[u8]) -> Cuts) {
    let file = PerfFile::open(src).unwrap();
    let mut data: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for r in file.records() {
        if let RecordBody::Auxtrace(a) = r.unwrap().body {
            let d = data.entry(a.idx).or_default();
            assert_eq!(a.offset, d.len() as u64, "simulate's records follow on");
            d.extend_from_slice(a.data);
        }
    }
    let cuts: BTreeMap<u32, Cuts> = data.iter().map(|(&idx, d)| (idx, cuts(idx, d))).collect();
    // The rest of the directory (the kernel's code in kcore_dir/) as it is.
    let copied = Command::new("cp").arg("-r").arg(src).arg(dst).status().unwrap();
    assert!(copied.success(), "cp -r {} {}", src.display(), dst.display());
    let attrs: Vec<AttrWithIds> = file.attrs().to_vec();
    let mut w = Writer::create(dst.join("data"), attrs).unwrap();
    let f = file.features();
    (w.features.hostname, w.features.osrelease, w.features.arch) = (f.hostname.clone(), f.osrelease.clone(), f.arch.clone());
    (w.features.nrcpus, w.features.cmdline, w.features.build_ids) = (f.nrcpus, f.cmdline.clone(), f.build_ids.clone());
    w.features.event_names = Some(f.event_desc.iter().map(|e| e.name.clone()).collect());
    for r in file.records() {
        let r = r.unwrap();
        let RecordBody::Auxtrace(a) = r.body else {
            w.write(r.misc, &r.body, &r.sample_id).unwrap();
            continue;
        };
        let (d, c) = (&data[&a.idx], &cuts[&a.idx]);
        let (from, to) = (a.offset as usize, a.offset as usize + a.data.len());
        let starts: Vec<usize> = std::iter::once(0).chain(c.at.iter().copied()).collect();
        for (i, &start) in starts.iter().enumerate().filter(|(_, &s)| (from..to).contains(&s)) {
            let end = starts.get(i + 1).copied().unwrap_or(d.len());
            let offset = start as u64 + if c.gap.is_some_and(|g| start >= g) { 64 } else { 0 };
            let piece = Auxtrace { offset, data: &d[start..end], ..a };
            w.write(r.misc, &RecordBody::Auxtrace(piece), &r.sample_id).unwrap();
        }
    }
    w.finish().unwrap();
}

/// Record starts of `d` (8-byte aligned, as perf pads records): inside
/// every other PSB, inside every 40th packet an aligned offset falls
/// inside, and every 3 KB.
fn awkward_cuts(d: &[u8]) -> Vec<usize> {
    let mut at = Vec::new();
    let mut psbs = 0;
    let mut from = 0;
    while let Some(p) = intel_pt::find_psb(&d[from..]) {
        if psbs % 2 == 0 {
            at.push((from + p) / 8 * 8 + 8);
        }
        psbs += 1;
        from += p + 16;
    }
    assert!(psbs > 3, "{psbs} PSBs");
    let mut packets = intel_pt::PacketDecoder::new(d);
    let (mut inside, mut start) = (0, packets.offset());
    while let Ok(Some(_)) = packets.next_packet() {
        let (end, aligned) = (packets.offset(), start / 8 * 8 + 8);
        if aligned < end {
            if inside % 40 == 0 {
                at.push(aligned);
            }
            inside += 1;
        }
        start = end;
    }
    assert!(inside > 40, "{inside} packets split");
    at.extend((1..d.len() / 3072).map(|k| k * 3072));
    at.retain(|&a| a > 0 && a < d.len());
    at.sort_unstable();
    at.dedup();
    at
}

/// `poketrace decode DIR ARGS`' stdout and stderr (status 0 or 1: a trace
/// with a gap or errors decodes incomplete).
fn decode(dir: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("decode").arg(dir).args(args).output().unwrap();
    let code = out.status.code();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(matches!(code, Some(0 | 1)), "decode {args:?}: status {code:?}\n{err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

const OUTPUTS: [&[&str]; 5] =
    [&["--itrace=be"], &["--itrace=e", "--threads", "1"], &["--itrace=e"], &["--stat", "--threads", "1"], &["--itrace=i", "--json"]];

/// Each output of `dir` equals that of `like`; with `gap`, stderr names it.
fn same_outputs(dir: &Path, like: &Path, gap: bool) {
    for args in OUTPUTS {
        let (got, err) = decode(dir, args);
        let (want, _) = decode(like, args);
        assert!(got == want, "{} {args:?} differs from {}", dir.display(), like.display());
        assert_eq!(err.contains("bytes of trace missing between AUX offsets"), gap, "{args:?}: {err}");
    }
}

#[test]
fn records_cut_anywhere_decode_as_the_joined_data() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/aux-records"));
    for (name, timing) in [("tsc", &[][..]), ("cyc", &["--mtc-freq", "3", "--cyc"][..])] {
        let sim = root.join(name);
        let mut args = vec!["--cpus", "2", "--instructions", "60000", "--protocol", "int3", "--pokes", "50", "--seed", "5"];
        args.extend_from_slice(timing);
        common::simulate(&sim, &args);
        let out = |v: &str| root.join(format!("{name}-{v}"));
        // simulate's own cuts, written again: the rewrite changes nothing else.
        let starts = record_starts(&sim);
        rewrite(&sim, &out("same"), |idx, _| Cuts { at: starts[&idx].clone(), gap: None });
        same_outputs(&out("same"), &sim, false);
        rewrite(&sim, &out("one"), |_, _| Cuts { at: Vec::new(), gap: None });
        same_outputs(&out("one"), &sim, false);
        rewrite(&sim, &out("awkward"), |_, d| Cuts { at: awkward_cuts(d), gap: None });
        same_outputs(&out("awkward"), &sim, false);
        // A gap inside a packet of buffer 0: two records around it, or many.
        let gap_at = |d: &[u8]| awkward_cuts(d)[awkward_cuts(d).len() / 2];
        rewrite(&sim, &out("gap"), |idx, d| Cuts { at: if idx == 0 { vec![gap_at(d)] } else { Vec::new() }, gap: (idx == 0).then(|| gap_at(d)) });
        rewrite(&sim, &out("gap-awkward"), |idx, d| Cuts { at: awkward_cuts(d), gap: (idx == 0).then(|| gap_at(d)) });
        same_outputs(&out("gap-awkward"), &out("gap"), true);
        let (with_gap, _) = decode(&out("gap"), &["--itrace=be"]);
        assert!(with_gap != decode(&sim, &["--itrace=be"]).0, "{name}: the gap loses trace");
    }
}

/// Where `dir`'s AUXTRACE records start in each buffer's data (but 0).
fn record_starts(dir: &Path) -> BTreeMap<u32, Vec<usize>> {
    let mut starts = BTreeMap::<u32, Vec<usize>>::new();
    for r in PerfFile::open(dir).unwrap().records() {
        if let RecordBody::Auxtrace(a) = r.unwrap().body {
            let s = starts.entry(a.idx).or_default();
            if a.offset > 0 {
                s.push(a.offset as usize);
            }
        }
    }
    starts
}
