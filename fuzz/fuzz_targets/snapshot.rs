//! Loads arbitrary bytes as an OpenCSD snapshot directory: the input is cut
//! at each `@@@@` into snapshot.ini, cpu_0.ini, etm_0.ini, trace.ini,
//! dump.bin and trace.bin, written to a private directory, then loaded and
//! read as `poketrace etm` does (devices, buffer set-ups, ETMv4 configs,
//! buffers, the memory dumps as a code image). Any panic, or memory past
//! libFuzzer's limits, is a bug; errors are fine.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 6] = ["snapshot.ini", "cpu_0.ini", "etm_0.ini", "trace.ini", "dump.bin", "trace.bin"];

/// A directory of this process's own, made once.
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("poketrace-fuzz-snapshot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

fuzz_target!(|input: &[u8]| {
    let dir = scratch();
    let mut parts = split(input, b"@@@@");
    for name in NAMES {
        let part = parts.next().unwrap_or(&[]);
        std::fs::write(dir.join(name), part).expect("scratch file");
    }
    let Ok(snapshot) = etm::snapshot::Snapshot::load(dir) else { return };
    for device in &snapshot.devices {
        let _ = snapshot.etm_config(device);
        let _ = snapshot.core_of(&device.name);
    }
    for buffer in &snapshot.buffers {
        let _ = snapshot.buffer_setup(&buffer.name);
        let _ = snapshot.read_buffer(buffer).map(|bytes| bytes.len());
    }
    let (code, problems) = snapshot.code_image();
    let _ = (code.base().regions().len(), problems.len());
});

/// `input` cut at each `sep`.
fn split<'a>(input: &'a [u8], sep: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    let mut rest = Some(input);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(sep.len()).position(|w| w == sep) {
            Some(i) => {
                rest = Some(&r[i + sep.len()..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}
