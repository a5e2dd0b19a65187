//! Running the poketrace binary, shared by the cli's integration tests.

#![allow(dead_code)] // each test binary uses its own part

use std::path::Path;
use std::process::Command;

use perfdata::auxtrace::IntelPtInfo;
use perfdata::{Auxtrace, AuxtraceInfo, Comm, PerfFile, RecordBody, SampleId, Writer};

/// The two contents of a jump-label site: a 5-byte NOP and a JMP rel32.
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
pub const JMP: [u8; 5] = [0xe9, 0x10, 0x00, 0x00, 0x00];

/// The sample_id of a side-band record written at `time` on CPU 2 by task 0.
pub fn at(time: u64) -> SampleId {
    SampleId { pid: Some(0), tid: Some(0), time: Some(time), cpu: Some(2), ..SampleId::default() }
}

/// `poketrace ARGS`, which must succeed: its stdout.
pub fn poketrace(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap();
    String::from_utf8(testkit::success(out, &format!("poketrace {args:?}"))).unwrap()
}

/// `poketrace simulate ARGS -o OUT`, which must succeed.
pub fn simulate(out: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("simulate").args(args).arg("-o").arg(out).output().unwrap();
    testkit::success(o, &format!("simulate {args:?}"));
}

/// Intel PT: overwrites 256 bytes after the middle PSB of `dir`'s trace, and a few bytes
/// across some PSBs after it, with a pattern the decoder reports errors for
/// (same size: the records stay whole).
pub fn damage_trace(dir: &Path) {
    let path = dir.join("data");
    let mut data = std::fs::read(&path).unwrap();
    let psb = [0x02, 0x82].repeat(8);
    let psbs: Vec<usize> = data.windows(16).enumerate().filter(|(_, w)| *w == psb.as_slice()).map(|(i, _)| i).collect();
    assert!(psbs.len() > 12, "{} PSBs", psbs.len());
    let at = psbs[psbs.len() / 2] + 64;
    for (i, b) in data[at..at + 256].iter_mut().enumerate() {
        *b = ((i * 151 + 7) % 256) as u8;
    }
    for &p in psbs[psbs.len() / 2 + 2..].iter().step_by(5) {
        data[p - 3..p + 2].copy_from_slice(&[0x5a, 0xa5, 0x5a, 0xa5, 0x5a]);
    }
    std::fs::write(&path, data).unwrap();
}

/// Rewrites the simulated single-CPU Intel PT trace `cpu_wide` into `out`
/// as thread 77's own buffer (pid 70, comm `worker`), as `perf record
/// --per-thread` records it, with a copy of its kcore_dir.
pub fn as_thread_buffer(cpu_wide: &Path, out: &Path) {
    std::fs::create_dir_all(out.join("kcore_dir")).unwrap();
    for f in std::fs::read_dir(cpu_wide.join("kcore_dir")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), out.join("kcore_dir").join(f.file_name())).unwrap();
    }
    let file = PerfFile::open(cpu_wide).unwrap();
    let mut w = Writer::create(out.join("data"), file.attrs().to_vec()).unwrap();
    let info = file
        .records()
        .find_map(|r| match r.unwrap().body {
            RecordBody::AuxtraceInfo(i) => Some(IntelPtInfo { per_cpu_mmaps: 0, ..IntelPtInfo::parse(&i).unwrap() }.to_priv_bytes()),
            _ => None,
        })
        .unwrap();
    let mut commed = false;
    for r in file.records() {
        let r = r.unwrap();
        let body = match r.body {
            RecordBody::AuxtraceInfo(i) => RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: i.auxtrace_type, priv_data: &info }),
            RecordBody::Auxtrace(a) => RecordBody::Auxtrace(Auxtrace { cpu: u32::MAX, tid: 77, ..a }),
            other => other,
        };
        if !commed && matches!(body, RecordBody::Auxtrace(_)) {
            let sid = SampleId { pid: Some(70), tid: Some(77), time: Some(1), cpu: Some(0), ..r.sample_id };
            w.write(0, &RecordBody::Comm(Comm { pid: 70, tid: 77, comm: b"worker" }), &sid).unwrap();
            commed = true;
        }
        w.write(r.misc, &body, &r.sample_id).unwrap();
    }
    w.finish().unwrap();
}
