//! The trace and the code ptxed decodes: `--pt` read into memory, `--raw`
//! files placed into a code image that never changes (no pokes).

use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};

use super::options::{FileRange, Raw, Usage};

/// The bytes `range` names, with ptxed's messages for a file that cannot be
/// read or a range it does not hold.
pub fn load_trace(range: &FileRange) -> Result<Vec<u8>, Usage> {
    let name = range.path.display();
    let bytes = std::fs::read(&range.path).map_err(|e| Usage(format!("failed to open {name}: {}", e.raw_os_error().unwrap_or(0))))?;
    let size = bytes.len() as u64;
    if range.from >= size {
        return Err(Usage(format!("bad offset {:#x} into {name}", range.from)));
    }
    let end = match range.len {
        Some(len) => {
            let end = range.from.saturating_add(len);
            if end > size {
                return Err(Usage(format!("bad range {end:#x} in {name}")));
            }
            end
        }
        None => size,
    };
    Ok(bytes[range.from as usize..end as usize].to_vec())
}

/// The code of the `--raw` files. Where two overlap, the later one's bytes
/// win, as in libipt's image (a section added over another replaces the
/// part it covers).
pub fn load_code(raws: &[Raw]) -> Result<CodeTimeline, Usage> {
    let mut base = BaseImage::new();
    // BaseImage keeps the earlier bytes of an overlap: add the last first.
    for raw in raws.iter().rev() {
        let name = raw.file.path.display();
        let failed = |reason: String| Usage(format!("--raw: failed to load '{name}' at {:#x}: {reason}", raw.base));
        let size = std::fs::metadata(&raw.file.path).map_err(|e| failed(e.to_string()))?.len();
        if raw.file.from >= size {
            return Err(failed(format!("bad offset {:#x}", raw.file.from)));
        }
        base.add_raw_file(&raw.file.path, raw.file.from, raw.file.len, raw.base).map_err(|e| failed(e.to_string()))?;
    }
    if let Some((start, dropped, name)) = base.clipped.first() {
        return Err(Usage(format!("--raw: {name} at {start:#x}: {dropped:#x} bytes past the top of the address space")));
    }
    Ok(TimelineBuilder::new(base).build())
}
