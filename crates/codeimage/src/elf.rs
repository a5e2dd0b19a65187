//! An ELF file's executable segments, as its program headers place them.

use object::{Object, ObjectSegment};

/// One executable (PF_X) segment of an ELF file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecSegment<'d> {
    /// Its link-time virtual address.
    pub addr: u64,
    pub file_offset: u64,
    /// Its bytes in the file (empty when they lie past the file's end).
    pub bytes: &'d [u8],
}

/// The executable segments of `file`, parsed from `data`, in program-header order.
pub fn exec_segments<'d>(file: &object::File<'d>, data: &'d [u8]) -> Vec<ExecSegment<'d>> {
    file.segments()
        .filter(|seg| matches!(seg.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
        .map(|seg| {
            let (off, size) = seg.file_range();
            let bytes = usize::try_from(off)
                .ok()
                .zip(usize::try_from(off.saturating_add(size)).ok())
                .and_then(|(start, end)| data.get(start..end))
                .unwrap_or_default();
            ExecSegment { addr: seg.address(), file_offset: off, bytes }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The executable segments of this test's own binary: at least one,
    /// each's bytes the file's bytes at its offset.
    #[test]
    fn own_binary_has_executable_segments_with_its_bytes() {
        let path = std::env::current_exe().unwrap();
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&data[..]).unwrap();
        let segs = exec_segments(&file, &data);
        assert!(!segs.is_empty());
        for s in &segs {
            assert!(!s.bytes.is_empty());
            assert_eq!(s.bytes, &data[s.file_offset as usize..][..s.bytes.len()]);
        }
        let all: usize = file.segments().count();
        assert!(segs.len() < all, "the data segments are left out");
    }
}
