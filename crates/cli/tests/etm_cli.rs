//! `poketrace etm --packets --format opencsd` prints what `trc_pkt_lister -decode`
//! prints for every packet of a real snapshot.

use std::path::Path;
use std::process::Command;

#[test]
fn packets_match_trc_pkt_lister_line_for_line() {
    let snap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/opencsd-snapshots/juno_r1_1");
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join("juno-trc_pkt_lister.ppl");
    // trc_pkt_lister appends to its log.
    let _ = std::fs::remove_file(&log);
    let ran = Command::new("trc_pkt_lister").arg("-ss_dir").arg(&snap).args(["-decode", "-logfilename"]).arg(&log).output();
    if !ran.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("CI").is_none() && std::env::var_os("POKETRACE_REQUIRE_PERF").is_none(), "trc_pkt_lister failed: {ran:?}");
        eprintln!("skipping: no trc_pkt_lister");
        return;
    }
    let theirs: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("Idx:") && !l.contains("OCSD_GEN_TRC_ELEM"))
        .map(|l| l.trim_end().to_string())
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["etm", "--packets"]).arg(&snap).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.trim_end().to_string()).collect();
    assert!(theirs.len() > 30_000, "{} lines", theirs.len());
    let first = theirs.iter().zip(&ours).position(|(a, b)| a != b);
    assert_eq!(first, None, "first difference: trc_pkt_lister {:?} ours {:?}", first.map(|i| &theirs[i]), first.map(|i| &ours[i]));
    assert_eq!(theirs.len(), ours.len());
}
