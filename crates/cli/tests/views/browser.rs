//! speedscope (from the npm registry, installed by scripts/setup.sh --tests) in
//! Debian's headless Chromium, served from 127.0.0.1 with a timeline: it
//! must import it with the expected thread and frame names and no warning.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

use super::chromium::{dump_dom, texts};
use super::tef::Timeline;
use super::{simulated, timeline};

/// speedscope's release files: `POKETRACE_SPEEDSCOPE`, else where setup.sh puts them.
fn speedscope_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("POKETRACE_SPEEDSCOPE") {
        return d.into();
    }
    let cache = std::env::var_os("POKETRACE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/poketrace"));
    cache.join("speedscope/node_modules/speedscope/dist/release")
}

/// Serves `GET /profile/NAME` from `profiles` and every other path from `site`, until the test ends.
fn serve(site: PathBuf, profiles: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = answer(stream, &site, &profiles);
        }
    });
    port
}

fn answer(mut stream: TcpStream, site: &Path, profiles: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let path = request.split(' ').nth(1).unwrap_or("/");
    let path = path.split(['?', '#']).next().unwrap_or("/");
    let file = match path.strip_prefix("/profile/") {
        Some(name) => profiles.join(name),
        None if path == "/" => site.join("index.html"),
        None => site.join(path.trim_start_matches('/')),
    };
    let body = if path.contains("..") { None } else { std::fs::read(&file).ok() };
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html",
        Some("js") => "text/javascript",
        Some("css") => "text/css",
        Some("json") => "application/json",
        Some("wasm") => "application/wasm",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    };
    match body {
        Some(b) => {
            write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", b.len())?;
            stream.write_all(&b)
        }
        None => stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    }
}

#[test]
fn speedscope_imports_the_timeline_in_chromium() {
    let site = speedscope_dir();
    if !testkit::have(
        site.join("index.html").is_file(),
        &format!("speedscope not installed in {} (scripts/setup.sh --tests installs it)", site.display()),
    ) || !super::chromium::available()
    {
        return;
    }
    let dir = simulated("browser", &["--cpus", "2", "--pokes", "20", "--instructions", "6000"]);
    for name in ["t.json", "t.json.gz"] {
        let (code, err) = timeline(&dir.join("run"), &dir.join(name), &[]);
        assert_eq!(code, 0, "{err}");
    }
    let t = Timeline::read(&dir.join("t.json"));
    let port = serve(site, dir.clone());
    for name in ["t.json", "t.json.gz"] {
        let url = format!("http://127.0.0.1:{port}/index.html#profileURL=/profile/{name}&view=sandwich");
        let (dom, console) = dump_dom(&url, &dir.join("chromium-profile"));
        let shown = texts(&dom);
        assert!(console.contains("Importing as Trace Event Format profile"), "{name}: not imported as Trace Event Format:\n{console}");
        for bad in ["Tried to end", "still open at end of profile", "Failed to load", "Unrecognized format", "Uncaught"] {
            assert!(!console.contains(bad), "{name}: speedscope said '{bad}':\n{console}");
        }
        assert!(!shown.iter().any(|s| s.contains("Something went wrong")), "{name}: {shown:?}");
        // The profile list: one entry per thread and CPU track, named as the file names them.
        for (process, thread, tid) in
            [("swapper", "swapper/0", 0x4000_0000u32), ("swapper", "swapper/1", 0x4000_0001), ("CPUs", "cpu 0", 0), ("CPUs", "cpu 1", 1)]
        {
            assert!(t.thread_names(|_| true).iter().any(|n| n == thread));
            let pid = if process == "swapper" { 0 } else { 0x7fff_0001 };
            let entry = format!("{process} (pid {pid}), {thread} (tid {tid})");
            assert!(shown.contains(&entry), "{name}: no profile '{entry}' in {shown:?}");
        }
        // The sandwich table of the first thread: its functions, all of them frames of that track.
        let frames = t.slice_names(|pid, tid| pid == 0 && tid == 0x4000_0000);
        let listed: BTreeSet<&String> = shown.iter().filter(|s| frames.contains(*s)).collect();
        assert!(listed.len() >= frames.len().min(10) && listed.len() > 3, "{name}: the table lists {listed:?} of {frames:?}");
        // The leaves have the most self time: the table, sorted by it, lists them first.
        for f in ["leaf_0", "leaf_1"].iter().filter(|f| frames.contains(**f)) {
            assert!(shown.iter().any(|s| s == f), "{name}: {f} not listed");
        }
    }
}
