//! `poketrace etm --packets --format opencsd` prints what `trc_pkt_lister -decode`
//! prints for every packet of a real snapshot.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The real snapshot the tests list.
fn juno() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/opencsd-snapshots/juno_r1_1")
}

/// The log of `trc_pkt_lister -decode` on `snap`, written to `log` under the
/// test's temporary dir; None (a skip) when it fails and is not required.
fn lister_decode(snap: &Path, log: &str) -> Option<String> {
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(log);
    // trc_pkt_lister appends to its log.
    let _ = std::fs::remove_file(&log);
    let ran = Command::new("trc_pkt_lister").arg("-ss_dir").arg(snap).args(["-decode", "-logfilename"]).arg(&log).output();
    let ok = ran.as_ref().is_ok_and(|o| o.status.success());
    testkit::have(ok, &format!("trc_pkt_lister failed: {ran:?}")).then(|| std::fs::read_to_string(&log).unwrap())
}

#[test]
fn packets_match_trc_pkt_lister_line_for_line() {
    let snap = juno();
    let Some(log) = lister_decode(&snap, "juno-trc_pkt_lister.ppl") else { return };
    let theirs: Vec<String> =
        log.lines().filter(|l| l.starts_with("Idx:") && !l.contains("OCSD_GEN_TRC_ELEM")).map(|l| l.trim_end().to_string()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["etm", "--packets"]).arg(&snap).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.trim_end().to_string()).collect();
    assert!(theirs.len() > 30_000, "{} lines", theirs.len());
    let first = theirs.iter().zip(&ours).position(|(a, b)| a != b);
    assert_eq!(first, None, "first difference: trc_pkt_lister {:?} ours {:?}", first.map(|i| &theirs[i]), first.map(|i| &ours[i]));
    assert_eq!(theirs.len(), ours.len());
}

/// `poketrace etm SNAP` (decoded elements, `--format opencsd`) prints what
/// `trc_pkt_lister -decode` prints: packet lines, element lines and the
/// end-of-trace lines, in the same order; `--format json` has an object per
/// element with the range fields.
#[test]
fn decoded_elements_match_trc_pkt_lister_line_for_line() {
    let snap = juno();
    let Some(log) = lister_decode(&snap, "juno-trc_pkt_lister-elements.ppl") else { return };
    let theirs: Vec<String> = log
        .lines()
        .filter(|l| l.starts_with("Idx:") || (l.starts_with("ID:") && l.ends_with("END OF TRACE DATA")))
        .map(|l| l.trim_end().to_string())
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("etm").arg(&snap).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.trim_end().to_string()).collect();
    let elements = theirs.iter().filter(|l| l.contains("OCSD_GEN_TRC_ELEM_")).count();
    assert!(elements > 15_000, "{elements} element lines");
    let first = theirs.iter().zip(&ours).position(|(a, b)| a != b);
    assert_eq!(first, None, "first difference: trc_pkt_lister {:?} ours {:?}", first.map(|i| &theirs[i]), first.map(|i| &ours[i]));
    assert_eq!(theirs.len(), ours.len());

    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("etm").arg(&snap).args(["--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let objs: Vec<serde_json::Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(objs.len(), elements);
    let ranges: Vec<&serde_json::Value> = objs.iter().filter(|o| o["elem"] == "INSTR_RANGE").collect();
    assert_eq!(ranges.len(), theirs.iter().filter(|l| l.contains("INSTR_RANGE")).count());
    // The first range, field by field, against trc_pkt_lister's text.
    let line = theirs.iter().find(|l| l.contains("INSTR_RANGE")).unwrap();
    let r = ranges[0];
    let want = format!(
        "Idx:{}; ID:{:x}; OCSD_GEN_TRC_ELEM_INSTR_RANGE(exec range={:#x}:[{:#x}] num_i({}) last_sz({}) (ISA={}) {} ",
        r["idx"],
        r["id"].as_u64().unwrap(),
        r["start"].as_u64().unwrap(),
        r["end"].as_u64().unwrap(),
        r["num_i"],
        r["last_sz"],
        r["isa"].as_str().unwrap(),
        r["atom"].as_str().unwrap()
    );
    assert!(line.starts_with(&want), "{line}\n{want}");
    assert!(r["last_type"].is_string());
}

/// A copy of the juno snapshot in the test's temporary dir, without the files
/// `leave_out`, with `extra` appended to cpu_0.ini.
fn juno_copy(name: &str, leave_out: &[&str], extra: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("etm-cli").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(juno()).unwrap() {
        let e = e.unwrap();
        let file = e.file_name();
        if !leave_out.iter().any(|l| file == *l) {
            std::fs::write(d.join(&file), std::fs::read(e.path()).unwrap()).unwrap();
        }
    }
    let cpu0 = std::fs::read_to_string(d.join("cpu_0.ini")).unwrap() + extra;
    std::fs::write(d.join("cpu_0.ini"), cpu0).unwrap();
    d
}

fn etm(snap: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("etm").arg(snap).output().unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// A trace source whose device file is missing is skipped with a word, the
/// rest decoded (as trc_pkt_lister does), and the exit status says so.
#[test]
fn a_missing_source_device_is_skipped_and_the_rest_decoded() {
    let (code, full, _) = etm(&juno_copy("whole", &[], ""));
    assert_eq!(code, Some(0));
    let (code, out, err) = etm(&juno_copy("no-device-6", &["device_6.ini"], ""));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("device skipped") && err.contains("device_6.ini"), "{err}");
    assert!(err.contains("has no device file: its bytes are skipped"), "{err}");
    assert!(out.lines().count() > 1000 && out.len() < full.len(), "{} of {} bytes", out.len(), full.len());
}

/// A memory dump that is listed but missing makes the exit status 1.
#[test]
fn a_missing_memory_dump_is_a_failure() {
    let (code, _, err) = etm(&juno_copy("no-dump", &[], "\n[dump9]\nfile=absent.bin\naddress=0x1000\n"));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("absent.bin") && err.contains("skipped"), "{err}");
}
