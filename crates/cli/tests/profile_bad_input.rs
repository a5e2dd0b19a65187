//! `profile` on input it cannot count: a truncated trace, a binary the
//! trace never mapped, no binary at all, a format not built; each a clear
//! error, and the output file never written half (an older one is left
//! as it was, no temporary file stays).

mod profile_prog;

use std::ffi::OsStr;
use std::path::Path;

/// `profile ARGS -o OUT`: its exit status and stderr.
fn profile(args: &[&OsStr], out: &Path) -> (Option<i32>, String) {
    let mut all: Vec<&OsStr> = vec!["profile".as_ref()];
    all.extend_from_slice(args);
    all.extend(["-o".as_ref(), out.as_os_str()]);
    let o = profile_prog::poketrace(&all);
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The output file still holds `before`, and no temporary file is beside it.
fn untouched(out: &Path, before: &str) {
    assert_eq!(std::fs::read_to_string(out).unwrap(), before);
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(".tmp");
    assert!(!Path::new(&tmp).exists());
}

#[test]
fn bad_input_is_a_clear_error_and_no_profile_is_written_half() {
    let dir = testkit::scratch!("profile-bad-input");
    let Some(bin) = profile_prog::build(&dir, "gcc") else { return };
    let trace = profile_prog::trace(&dir, &bin, 20_000, 1);
    let out = dir.join("old.preagg");
    let before = "B 1 2 3 0\n";
    std::fs::write(&out, before).unwrap();
    let (t, b) = (trace.as_os_str(), bin.as_os_str());

    // A binary the trace did not map.
    let (code, err) = profile(&[t, "--format".as_ref(), "bolt".as_ref(), "--binary".as_ref(), "/bin/true".as_ref()], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--binary /bin/true: the trace maps no executable part of this file") && err.contains("hot"), "{err}");
    untouched(&out, before);

    // Neither --binary nor --kernel.
    let (code, err) = profile(&[t, "--format".as_ref(), "autofdo".as_ref()], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--binary"), "{err}");
    untouched(&out, before);

    // perf-inject samples the whole trace: a --binary is refused, not ignored.
    let (code, err) = profile(&[t, "--format".as_ref(), "perf-inject".as_ref(), "--binary".as_ref(), b], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--binary and --kernel are for the other formats"), "{err}");
    untouched(&out, before);

    // The trace cut in half.
    let data = trace.join("data");
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() / 2]).unwrap();
    for format in ["bolt", "fdata", "autofdo"] {
        let (code, err) = profile(&[t, "--format".as_ref(), format.as_ref(), "--binary".as_ref(), b], &out);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("the trace is incomplete") && err.contains("could not be read") && err.contains("no profile written"), "{err}");
        untouched(&out, before);
    }

    // Whole again, it is written.
    std::fs::write(&data, &bytes).unwrap();
    let (code, err) = profile(&[t, "--format".as_ref(), "bolt".as_ref(), "--binary".as_ref(), b], &out);
    assert_eq!(code, Some(0), "{err}");
    assert_ne!(std::fs::read_to_string(&out).unwrap(), before);
}
