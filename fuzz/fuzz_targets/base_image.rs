//! Reads arbitrary bytes as a kernel's code: as an ELF file (kcore, vmlinux,
//! a module) into a base image, as kcore segments, and as a kallsyms text,
//! then looks code up across the image. Any panic, or memory past
//! libFuzzer's limits, is a bug; errors are fine.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use codeimage::{BaseImage, TimelineBuilder};
use libfuzzer_sys::fuzz_target;
use perfdata::kcore::{read_kcore_segments, Kallsyms};

/// A file of this process's own for the ELF reader, which maps files.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        base.join(format!("poketrace-fuzz-elf-{}", std::process::id()))
    })
}

fuzz_target!(|input: &[u8]| {
    if let Ok(segments) = read_kcore_segments(input) {
        for (_, range) in segments {
            assert!(range.end <= input.len() && range.start <= range.end, "segment outside the file");
        }
    }
    let (symbols, _bad) = Kallsyms::parse(&String::from_utf8_lossy(input));
    for s in symbols.symbols().iter().take(64) {
        let _ = symbols.lookup(s.addr);
    }

    let path = scratch();
    std::fs::write(path, input).expect("scratch file");
    let mut base = BaseImage::new();
    if base.add_elf(path).is_err() {
        return;
    }
    let _ = base.overlap_summary();
    let probes: Vec<u64> = base.regions().iter().take(64).flat_map(|r| [r.start, r.end().saturating_sub(1), r.end()]).collect();
    for &addr in &probes {
        if let Some((region, off)) = base.find(addr) {
            assert!(off < region.bytes().len(), "find() gives an offset outside its region");
        }
    }
    let code = TimelineBuilder::new(base).build();
    for &addr in &probes {
        let _ = code.read(addr, 16, 0);
        let _ = code.read_during(addr, 16, 0, u64::MAX);
    }
});
