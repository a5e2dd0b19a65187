//! The bytes of one AUX buffer as one slice, without holding them in the
//! process's memory: one AUXTRACE record's data is read where the input is
//! mapped; the data of several, which other records separate in the file,
//! is written one after the other to a temporary file of its own and mapped.
//! A map's pages are read in as the decoder reaches them and can be dropped
//! once it is past them ([`AuxBytes::release`]), so the memory a decode
//! takes does not grow with the trace.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::{Deref, Range};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};

use perfdata::PerfFile;

/// An AUX buffer's bytes.
pub enum AuxBytes<'f> {
    /// One record's data, in the input's map.
    Mapped { file: &'f PerfFile, bytes: &'f [u8] },
    /// Several records' data, in a temporary file (already unlinked).
    Spooled(memmap2::Mmap),
    /// In memory: made so, or no temporary file could be written.
    Held(Vec<u8>),
}

impl<'f> AuxBytes<'f> {
    /// The records' data of `file`, one after the other.
    pub(crate) fn join(file: &'f PerfFile, records: &[&'f [u8]]) -> AuxBytes<'f> {
        match records {
            [] => AuxBytes::Held(Vec::new()),
            [one] => AuxBytes::Mapped { file, bytes: one },
            _ => match spool(file, records) {
                Ok(map) => AuxBytes::Spooled(map),
                // (No room for a temporary file: the bytes go in memory.)
                Err(_) => AuxBytes::Held(records.concat()),
            },
        }
    }

    /// Lets the system drop from memory the pages wholly inside `range`
    /// until they are read again (the bytes stay the same): for bytes the
    /// decode is past. Bytes in memory are kept.
    pub fn release(&self, range: Range<usize>) {
        let range = range.start.min(self.len())..range.end.min(self.len());
        match self {
            AuxBytes::Mapped { file, bytes } => file.release(&bytes[range]),
            AuxBytes::Spooled(map) => {
                let page = page_size();
                let (start, end) = (range.start.next_multiple_of(page), range.end / page * page);
                if start < end {
                    // SAFETY: a read-only map of a file only this process
                    // has (unlinked, written before it was mapped): the
                    // pages dropped are read from it again when touched.
                    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
                }
            }
            AuxBytes::Held(_) => {}
        }
    }
}

impl From<Vec<u8>> for AuxBytes<'_> {
    fn from(bytes: Vec<u8>) -> Self {
        AuxBytes::Held(bytes)
    }
}

impl Deref for AuxBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            AuxBytes::Mapped { bytes, .. } => bytes,
            AuxBytes::Spooled(map) => map,
            AuxBytes::Held(v) => v,
        }
    }
}

/// `records` written to a new temporary file, unlinked at once, and
/// mapped; each record's pages of the input released once written.
fn spool(file: &PerfFile, records: &[&[u8]]) -> std::io::Result<memmap2::Mmap> {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let name = format!("poketrace-aux-{}-{}", std::process::id(), MADE.fetch_add(1, Ordering::Relaxed));
    let path = std::env::temp_dir().join(name);
    let mut out: File = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path)?;
    std::fs::remove_file(&path)?;
    for r in records {
        out.write_all(r)?;
        file.release(r);
    }
    // SAFETY: the file is this process's alone (unlinked) and no longer
    // written, so the map's bytes never change under it.
    unsafe { memmap2::Mmap::map(&out) }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as usize
    } else {
        4096
    }
}

/// Lets go of a buffer's bytes behind a decode as it moves on, a few
/// hundred kilobytes at a time (each step is a system call).
pub(crate) struct Behind<'q, 'f> {
    bytes: &'q AuxBytes<'f>,
    released: usize,
}

/// Bytes the decode moves on between two releases.
const STEP: usize = 1 << 19;

impl<'q, 'f> Behind<'q, 'f> {
    pub(crate) fn new(bytes: &'q AuxBytes<'f>) -> Self {
        Behind { bytes, released: 0 }
    }

    /// The decode will read nothing before `at` again.
    pub(crate) fn past(&mut self, at: usize) {
        if at >= self.released + STEP {
            // (From the start each time: the page a step ended in is
            // dropped with the next.)
            self.bytes.release(0..at);
            self.released = at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A perf.data without records, for the AUX bytes' file.
    fn empty_file() -> PerfFile {
        let attr = perfdata::AttrWithIds { attr: perfdata::EventAttr::default(), ids: vec![1] };
        let w = perfdata::Writer::new(std::io::Cursor::new(Vec::new()), vec![attr]).unwrap();
        PerfFile::from_vec(w.finish().unwrap().into_inner()).unwrap()
    }

    #[test]
    fn records_join_in_order_and_read_the_same_after_release() {
        let file = empty_file();
        let data: Vec<u8> = (0..3 << 20).map(|i: usize| (i * 13 + i / 4096) as u8).collect();
        let (a, b, c) = (&data[..5], &data[5..(1 << 20) + 3], &data[(1 << 20) + 3..]);
        let one = AuxBytes::join(&file, &[a]);
        assert!(matches!(one, AuxBytes::Mapped { .. }) && *one == *a);
        let all = AuxBytes::join(&file, &[a, b, c]);
        assert!(matches!(all, AuxBytes::Spooled(_)), "several records go to a file");
        assert!(*all == data[..]);
        let mut behind = Behind::new(&all);
        for at in [10, 600_000, 600_001, 2 << 20, data.len()] {
            behind.past(at);
            assert!(*all == data[..], "released up to {at}");
        }
        all.release(4097..data.len() + 9);
        assert!(*all == data[..]);
        assert!(AuxBytes::join(&file, &[]).is_empty());
        assert!(AuxBytes::join(&file, &[&data[..0], &data[..0]]).is_empty(), "empty records: nothing to map");
    }
}
