//! `poketrace record` refuses what cannot work before it touches the
//! previous recording: no root or perf needed, nothing is recorded.

use std::path::Path;
use std::process::Command;

/// A previous recording (marker and data), then `record -o` it with a
/// command that does not exist: an error naming the command, exit 2, and
/// the previous recording still in place, not moved to `DIR.old`.
#[test]
fn a_missing_command_leaves_the_previous_recording_in_place() {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("record-refused");
    let _ = std::fs::remove_dir_all(&d);
    let rec = d.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    std::fs::write(rec.join(".poketrace-recording"), "").unwrap();
    std::fs::write(rec.join("data"), b"PERFILE2 the previous recording").unwrap();
    for command in ["/nonexistent", "poketrace-no-such-program"] {
        let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["record", "-o"]).arg(&rec).args(["--", command]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("{command}: no such executable (nothing was recorded or moved)")), "{err}");
        assert_eq!(std::fs::read(rec.join("data")).unwrap(), b"PERFILE2 the previous recording");
        assert!(!d.join("rec.old").exists());
    }
}
