//! `poketrace decode`'s arguments: what it cannot do is refused with a
//! message naming it, before any input is read.

use std::process::Command;

fn decode(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("decode").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn unknown_fields_itrace_letters_and_images_are_named() {
    let (ok, err) = decode(&["/nonexistent", "-F", "ip,bogus"]);
    assert!(!ok && err.contains("-F bogus") && err.contains("symoff"), "{err}");
    let (ok, err) = decode(&["/nonexistent", "--itrace=bx"]);
    assert!(!ok && err.contains("'x'"), "{err}");
    let (ok, err) = decode(&["/nonexistent", "--image", "other"]);
    assert!(!ok && err.contains("--image other"), "{err}");
    // Valid arguments get as far as the missing input, and say which.
    let (ok, err) = decode(&["/nonexistent", "-F", "time,ip,sym", "--ns"]);
    assert!(!ok && err.contains("/nonexistent"), "{err}");
}
