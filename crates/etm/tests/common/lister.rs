//! Running OpenCSD's `trc_pkt_lister` (Debian libopencsd-bin) as an oracle.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `trc_pkt_lister` when installed; None (with a note) when not and not
/// required, a failure when POKETRACE_REQUIRE_PERF or CI is set
/// ([`testkit::required`]).
pub fn lister() -> Option<&'static str> {
    let ok = Command::new("trc_pkt_lister").arg("-help").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Trace Packet Lister"));
    testkit::have(ok, "trc_pkt_lister not found (apt-get install libopencsd-bin)").then_some("trc_pkt_lister")
}

/// A file under the test's temporary directory.
pub fn tmp(dir: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir);
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs trc_pkt_lister on a snapshot with `args` and returns its log and
/// whether it ran to the end.
pub fn run(lister: &str, dir: &Path, args: &[&str], log: &Path) -> (String, bool) {
    let _ = std::fs::remove_file(log); // trc_pkt_lister appends
    let out = Command::new(lister).arg("-ss_dir").arg(dir).args(args).arg("-logfilename").arg(log).output().unwrap();
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let done = out.status.success() && text.contains("Trace buffer done");
    (text, done)
}

/// The lines of a `-decode` log that a listing compares: packet and
/// element lines from `Idx:` on (error messages without a newline may
/// precede them) and the `ID:..<TAB>END OF TRACE DATA` lines, whitespace
/// runs made single spaces.
pub fn decode_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = match l.find("Idx:") {
                Some(i) => &l[i..],
                None if l.starts_with("ID:") && l.ends_with("END OF TRACE DATA") => l,
                None => return None,
            };
            Some(l.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .collect()
}
