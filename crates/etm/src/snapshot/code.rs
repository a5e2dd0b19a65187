//! A snapshot's memory dumps as a code image.

use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};

use super::Snapshot;

impl Snapshot {
    /// The memory dumps of every core of a snapshot as a code timeline (no
    /// pokes), and a note for each dump that could not be used as described: a
    /// missing file is skipped (OpenCSD skips it too), a length past the end of
    /// the file is cut to the file. Memory spaces (`space=`) are not told apart:
    /// one address space holds all dumps, the first dump wins where two overlap
    /// (a note counts the overlaps and names the first few).
    pub fn code_image(&self) -> (CodeTimeline, Vec<String>) {
        let mut base = BaseImage::new();
        let mut notes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for dev in &self.devices {
            for d in &dev.dumps {
                if !seen.insert((&d.file, d.address)) {
                    continue;
                }
                let size = match std::fs::metadata(&d.file) {
                    Ok(m) => m.len(),
                    Err(e) => {
                        notes.push(format!("{}: memory dump {} at {:#x} skipped: {e}", dev.path.display(), d.file.display(), d.address));
                        continue;
                    }
                };
                let offset = d.offset.unwrap_or(0);
                let avail = size.saturating_sub(offset);
                let len = match d.length {
                    Some(l) if l > avail => {
                        notes.push(format!(
                            "{}: memory dump {} at {:#x} says length {l:#x} but the file has {avail:#x} bytes from offset {offset:#x}: using those",
                            dev.path.display(),
                            d.file.display(),
                            d.address
                        ));
                        avail
                    }
                    Some(l) => l,
                    None => avail,
                };
                // The image ends below 2^64: a dump running past the top of the address space is cut.
                let room = u64::MAX - d.address;
                let len = if len > room {
                    notes.push(format!(
                        "{}: memory dump {} at {:#x} runs past the top of the address space: cut to {room:#x} bytes",
                        dev.path.display(),
                        d.file.display(),
                        d.address
                    ));
                    room
                } else {
                    len
                };
                if len == 0 {
                    continue;
                }
                if let Err(e) = base.add_raw_file(&d.file, offset, Some(len), d.address) {
                    notes.push(format!("{}: memory dump skipped: {e}", dev.path.display()));
                }
            }
        }
        notes.extend(base.overlap_summary());
        (TimelineBuilder::new(base).build(), notes)
    }
}
