//! Read-only file maps that survive the file being cut short while mapped.
//!
//! Reading a page of a map past the end of a file that was truncated after
//! it was mapped raises SIGBUS, which kills the process. Reading files into
//! memory instead would double the memory of large traces, and checking the
//! size before reading cannot close the window between the check and the
//! read. So every map made here is registered, and a SIGBUS handler that
//! finds the faulting address in a registered map puts a page of zeros
//! there (`mmap` with `MAP_FIXED`, a system call safe in a signal handler)
//! and marks the map: the read goes on with zeros, which the parsers meet
//! as bad records or code, and [`cut_short_files`] names the file so the
//! command can say its output may be wrong. A SIGBUS anywhere else goes to
//! the handler that was there before (Rust's own, or the default action).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// Maps registered at once; past this, files are read into memory.
const SLOTS: usize = 4096;

/// A registered map: its address range (start 0: free) and whether a read
/// from it faulted.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // the initializer of the array below
const FREE: Slot = Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), faulted: AtomicBool::new(false) };
static REGISTRY: [Slot; SLOTS] = [FREE; SLOTS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALL: Once = Once::new();
/// The SIGBUS action before ours, written once before ours is installed.
static mut PREVIOUS: Option<libc::sigaction> = None;
/// Files whose map faulted, recorded when the map is dropped.
static CUT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The file of each live map by slot, beside the lock-free registry the handler reads.
static NAMES: Mutex<std::collections::BTreeMap<usize, PathBuf>> = Mutex::new(std::collections::BTreeMap::new());

/// The bytes of a file: mapped and registered, or read into memory when
/// every slot is taken.
pub struct MappedFile {
    bytes: Bytes,
    path: PathBuf,
}

enum Bytes {
    Map { map: memmap2::Mmap, slot: usize },
    Owned(Vec<u8>),
}

impl MappedFile {
    /// Maps `file` (opened from `path`, which names it in messages).
    pub fn map(file: &File, path: &Path) -> std::io::Result<MappedFile> {
        install();
        // SAFETY: a read-only map; a file cut short while mapped is handled
        // by the SIGBUS handler (see the module documentation).
        let map = unsafe { memmap2::Mmap::map(file) }?;
        let bytes = match register(map.as_ptr() as usize, map.len()) {
            Some(slot) => {
                NAMES.lock().unwrap_or_else(|e| e.into_inner()).insert(slot, path.to_path_buf());
                Bytes::Map { map, slot }
            }
            None => {
                drop(map);
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut &*file, &mut v)?;
                Bytes::Owned(v)
            }
        };
        Ok(MappedFile { bytes, path: path.to_path_buf() })
    }

    /// Whether a read hit a page the file no longer had: those bytes read as zeros.
    pub fn cut_short(&self) -> bool {
        match &self.bytes {
            Bytes::Map { slot, .. } => REGISTRY[*slot].faulted.load(Ordering::Acquire),
            Bytes::Owned(_) => false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lets the system drop from memory the pages wholly inside
    /// `range` (bytes of the file) until they are read again: a map reads
    /// them back from the file then, so the bytes stay the same; bytes held
    /// in memory are kept. For data read once, so that the memory a large
    /// file takes stays bounded.
    pub fn release(&self, range: std::ops::Range<usize>) {
        let Bytes::Map { map, .. } = &self.bytes else { return };
        let page = PAGE.load(Ordering::Relaxed);
        let (start, end) = (range.start.next_multiple_of(page), range.end.min(map.len()) / page * page);
        if start < end {
            // SAFETY: a read-only map of a file, never written through: its
            // pages dropped are read from the file again when touched (or,
            // where the file was cut short, the SIGBUS handler's zeros, as
            // on the first read).
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }
}

impl std::ops::Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Map { map, .. } => map,
            Bytes::Owned(v) => v,
        }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if let Bytes::Map { slot, .. } = self.bytes {
            let s = &REGISTRY[slot];
            if s.faulted.swap(false, Ordering::AcqRel) {
                CUT.lock().unwrap_or_else(|e| e.into_inner()).push(self.path.clone());
            }
            NAMES.lock().unwrap_or_else(|e| e.into_inner()).remove(&slot);
            s.start.store(0, Ordering::Release);
            s.len.store(0, Ordering::Release);
        }
    }
}

/// The files this process read that were cut short while mapped, each once.
pub fn cut_short_files() -> Vec<PathBuf> {
    let mut paths = CUT.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    for (slot, path) in names.iter() {
        if REGISTRY[*slot].faulted.load(Ordering::Acquire) {
            paths.push(path.clone());
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

/// Claims a free slot for `len` bytes at `start`.
fn register(start: usize, len: usize) -> Option<usize> {
    if len == 0 {
        return None;
    }
    for (i, s) in REGISTRY.iter().enumerate() {
        if s.len.compare_exchange(0, len, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            s.faulted.store(false, Ordering::Release);
            s.start.store(start, Ordering::Release);
            return Some(i);
        }
    }
    None
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: sigaction with a zeroed, then filled, struct; PREVIOUS is
        // written here once, before the handler that reads it is installed.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                return;
            }
            PREVIOUS = Some(previous);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

/// The SIGBUS handler: zeros over a faulting page of a registered map, else
/// the previous action.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in REGISTRY.iter() {
        let start = s.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr - start >= s.len.load(Ordering::Acquire) {
            continue;
        }
        let at = addr & !(page - 1);
        // SAFETY: replaces one page of our own read-only file map, which the
        // kernel no longer backs, by a private page of zeros.
        let p =
            unsafe { libc::mmap(at as *mut libc::c_void, page, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED, -1, 0) };
        if p != libc::MAP_FAILED {
            s.faulted.store(true, Ordering::Release);
            return;
        }
    }
    // SAFETY: PREVIOUS was written before this handler was installed.
    let previous = unsafe { *std::ptr::addr_of!(PREVIOUS) };
    match previous {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN && p.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous handler, called as it was installed to be.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(p.sa_sigaction) };
            f(sig, info, context);
        }
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            // SAFETY: as above, a handler installed without SA_SIGINFO.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
            f(sig);
        }
        _ => {
            // The default action: the fault repeats on return and kills, as without us.
            // SAFETY: resetting SIGBUS's action, async-signal-safe.
            unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MappedFile;

    #[test]
    fn released_pages_read_the_same() {
        let path = std::env::temp_dir().join(format!("perfdata-release-{}", std::process::id()));
        let bytes: Vec<u8> = (0..5 * 4096 + 100).map(|i: usize| (i * 7 + i / 4096) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let map = MappedFile::map(&std::fs::File::open(&path).unwrap(), &path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&map[..], &bytes[..]);
        // Unaligned ends, an empty range, past the end: the bytes stay.
        for range in [100..3 * 4096 + 5, 0..map.len(), 7..7, 0..usize::MAX] {
            map.release(range.clone());
            assert!(map[..] == bytes[..], "{range:?}");
        }
    }
}
