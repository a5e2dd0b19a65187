//! `decode` of an input with a huge number of AUX queues (one per AUXTRACE
//! `idx`) ends with a result or an error, never a panic: the queues are
//! decoded on a bounded pool of threads, not one thread each.

use std::path::Path;
use std::process::Command;

use perfdata::abi::{attr_flag, auxtrace_type, sample_type as st};
use perfdata::auxtrace::IntelPtInfo;
use perfdata::*;

/// Queues in the input: one thread each would take 80 GB of stacks.
const QUEUES: u32 = 40_000;
const PT_PMU_TYPE: u32 = 8;

/// A perf.data with Intel PT's AUXTRACE_INFO and `QUEUES` AUXTRACE records,
/// each with an `idx` of its own and a PSB+ as its trace.
fn write_input(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let attr = EventAttr {
        type_: PT_PMU_TYPE,
        size: ATTR_SIZE_VER7,
        sample_type: st::TID | st::TIME | st::CPU,
        flags: attr_flag::SAMPLE_ID_ALL,
        ..EventAttr::default()
    };
    let mut w = Writer::create(dir.join("data"), vec![AttrWithIds { attr, ids: vec![1] }]).unwrap();
    let info = IntelPtInfo { pmu_type: PT_PMU_TYPE as u64, time_mult: 1, ..IntelPtInfo::default() }.to_priv_bytes();
    w.write(0, &RecordBody::AuxtraceInfo(AuxtraceInfo { auxtrace_type: auxtrace_type::INTEL_PT, priv_data: &info }), &SampleId::default()).unwrap();
    // PSB, PSBEND.
    let mut psb: Vec<u8> = [0x02, 0x82].repeat(8);
    psb.extend_from_slice(&[0x02, 0x23]);
    for idx in 0..QUEUES {
        let chunk = Auxtrace { offset: 0, reference: u64::from(idx), idx, tid: u32::MAX, cpu: idx % 4, data: &psb };
        w.write(0, &RecordBody::Auxtrace(chunk), &SampleId::default()).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn forty_thousand_queues_decode_under_an_address_space_limit() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("many-queues");
    write_input(&dir);
    // 4 GiB of address space: room for a pool of threads, not for 40,000 stacks.
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 4194304 && exec \"$0\" decode --itrace=be \"$1\""])
        .arg(env!("CARGO_BIN_EXE_poketrace"))
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "decode panicked: {stderr}");
    assert!(matches!(out.status.code(), Some(0..=2)), "decode ended by {:?}: {stderr}", out.status);
    assert!(stderr.contains(&format!("{QUEUES} trace buffers")), "every queue is decoded: {stderr}");
}
