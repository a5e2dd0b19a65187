//! Debian's headless Chromium, run as the machine allows (no sandbox as
//! root, no background networking), with a deadline.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether chromium is installed; a test without it skips, except in CI.
pub fn available() -> bool {
    testkit::have(testkit::runs("chromium", "--version"), "chromium not installed (scripts/setup.sh --tests installs it)")
}

/// Runs chromium headless on `url` with `args` (e.g. --dump-dom): its stdout and stderr (the console).
pub fn run(url: &str, profile_dir: &Path, args: &[&str]) -> (String, String) {
    let user_dir = testkit::fresh_dir(profile_dir);
    let mut child = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"])
        .args(["--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000"])
        .arg(format!("--user-data-dir={}", user_dir.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || std::io::read_to_string(&mut out).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(&mut err).unwrap_or_default());
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish in 120 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (out.join().unwrap(), err.join().unwrap())
}

/// The DOM of `url` after its scripts ran, and the console.
pub fn dump_dom(url: &str, profile_dir: &Path) -> (String, String) {
    run(url, profile_dir, &["--dump-dom"])
}

/// The DOM's text, one piece per element.
pub fn texts(dom: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = dom;
    while let Some(open) = rest.find('<') {
        let text = rest[..open].trim();
        if !text.is_empty() {
            out.push(text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"));
        }
        let close = rest[open..].find('>').map_or(rest.len(), |c| open + c + 1);
        let tag = &rest[open..close];
        rest = &rest[close..];
        // Skip script and style bodies.
        for skip in ["<script", "<style"] {
            if tag.starts_with(skip) {
                let end = format!("</{}", &skip[1..]);
                rest = rest.find(&end).map_or("", |e| &rest[e..]);
            }
        }
    }
    out
}
