//! libipt's block decoder over a simulated run's Intel PT, as a whole
//! process for `scripts/bench-decode.sh`: every CPU's trace decoded with
//! `pt_blk_next` over an image section cache of the run's code, blocks
//! counted, nothing printed but a summary on stderr (with the decode's own
//! time, apart from loading the run).
//!
//!     cargo run --release -p intel-pt --example libipt_decode -- DIR

#[path = "../tests/common/flow.rs"]
mod common;

use std::time::Instant;

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: libipt_decode DIR (a perf.data directory written by `poketrace simulate`)");
        std::process::exit(2);
    };
    let run = common::load(std::path::Path::new(&dir));
    // The simulator's start TIP.PGE, which libipt refuses, as hardware would send it.
    let traces: Vec<Vec<u8>> = run.aux.iter().map(|t| common::without_start_pge(t).0).collect();
    let image = common::LibiptImage::new(&run, common::ImageKind::Cached);
    let start = Instant::now();
    let (mut insns, mut errors) = (0, 0);
    for t in &traces {
        let (n, e) = common::libipt_count(t, &image);
        insns += n;
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes: usize = traces.iter().map(Vec::len).sum();
    eprintln!("libipt_decode: {} traces, {bytes} bytes, {insns} instructions, {errors} errors, decode alone {secs:.3} s", traces.len());
}
