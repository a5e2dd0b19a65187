//! `poketrace ptdump` on bad input: a missing, empty or cut-off file, bad
//! option values. Each gets a message naming what is wrong and, where
//! nothing can be dumped, a non-zero exit; none a panic.

use std::process::{Command, Output};

fn ptdump(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("ptdump").args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str, bytes: &[u8]) -> String {
    let dir = testkit::fresh_dir(format!("{}/ptdump-cli/{name}", env!("CARGO_TARGET_TMPDIR")));
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn missing_and_empty_files_and_bad_ranges_are_named() {
    let o = ptdump(&["/nonexistent/trace.pt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("failed to open /nonexistent/trace.pt"), "{}", stderr(&o));
    let empty = scratch("empty.pt", &[]);
    let o = ptdump(&[&empty]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(&format!("bad offset 0x0 into {empty}")), "{}", stderr(&o));
    let small = scratch("small.pt", &[0; 8]);
    let o = ptdump(&[&format!("{small}:4-0x20")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad range 0x20"), "{}", stderr(&o));
}

#[test]
fn bad_option_values_are_named() {
    for (args, message) in [
        (&["--mtc-freq", "300", "t.pt"][..], "--mtc-freq: value too big: 300."),
        (&["--cpuid-0x15.eax", "x", "t.pt"][..], "--cpuid-0x15.eax: bad argument: x."),
        (&["--cpu", "6-142", "t.pt"][..], "cpu must be specified as f/m[/s]"),
        (&["--nom-freq"][..], "--nom-freq: missing argument."),
        (&["--frobnicate", "t.pt"][..], "unknown option: --frobnicate."),
        (&[][..], "No processor trace file specified."),
    ] {
        let o = ptdump(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&o).trim(), format!("ptdump: {message}"), "{args:?}");
    }
    assert!(ptdump(&["--help"]).status.success());
}

#[test]
fn a_trace_cut_inside_a_packet_ends_there() {
    let mut trace = intel_pt::PSB.to_vec();
    trace.extend_from_slice(&[0x02, 0x23, 0x19, 0x01, 0x02]);
    let path = scratch("cut.pt", &trace);
    let o = ptdump(&["--time", &path]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0000000000000000  psb\n0000000000000010  psbend\n");
}
