//! The BPF watch thread: a BPF_EVENT-only event per CPU whose rings wake it
//! at every record, so a newly loaded program is opened at once, before it
//! can be unloaded. The open fd keeps the program (and its JIT image) alive
//! until the recording loop has saved it. The records themselves go to the
//! loop too, which writes them into the file with its own.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use perfdata::abi::{bpf_event_type, record_type as rt};

use crate::bpf::Load;
use crate::error::{Error, Result};
use crate::sys::{self, Event};

/// Records (and opened programs) in flight to the loop. A full queue stops
/// the thread until the loop catches up: its rings then fill and the kernel
/// counts what it drops in LOST records, so neither memory nor the number
/// of programs held open grows without bound.
const QUEUE: usize = 256;

/// One record of a watch ring, and the program it announces.
pub(crate) struct Watched {
    pub record: Vec<u8>,
    pub load: Option<Load>,
}

/// The running thread.
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    /// Taken by [`Watcher::finish`].
    thread: Option<JoinHandle<Result<u64>>>,
    pub queue: Receiver<Watched>,
    /// An eventfd the thread signals when it queued something: poll it
    /// beside the side-band rings, and [`Watcher::woken`] resets it.
    pub wake: Arc<OwnedFd>,
}

impl Watcher {
    /// Enables `events` and starts watching them.
    pub fn start(events: Vec<Event>) -> Result<Watcher> {
        for e in &events {
            e.enable()?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, queue) = sync_channel(QUEUE);
        // SAFETY: eventfd has no memory arguments; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::io("eventfd")(std::io::Error::last_os_error()));
        }
        // SAFETY: a new fd, owned by nobody else.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let (flag, signal) = (stop.clone(), wake.clone());
        let thread = std::thread::Builder::new()
            .name("bpf-watch".into())
            .spawn(move || watch(events, &flag, &tx, &signal))
            .map_err(Error::io("the BPF watch thread"))?;
        Ok(Watcher { stop, thread: Some(thread), queue, wake })
    }

    /// Resets the wake-up eventfd.
    pub fn woken(&self) {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into n from our own non-blocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), &mut n as *mut u64 as *mut libc::c_void, 8) };
    }

    /// Disables the events, drains them one last time and ends the thread,
    /// handing every record still on its way to `f`. Returns the records
    /// the watch rings lost that no LOST record reported.
    pub fn finish(mut self, mut f: impl FnMut(Watched) -> Result<()>) -> Result<u64> {
        self.stop.store(true, Ordering::SeqCst);
        // ends when the thread is done and drops its sender
        for w in self.queue.iter() {
            f(w)?;
        }
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            _ => Err(Error::Environment("the BPF watch thread panicked".into())),
        }
    }
}

impl Drop for Watcher {
    /// A recording that failed: the thread stops within one poll timeout,
    /// or at once when it next sends into the dropped queue.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn watch(mut events: Vec<Event>, stop: &AtomicBool, tx: &SyncSender<Watched>, wake: &OwnedFd) -> Result<u64> {
    let mut reported = vec![0u64; events.len()];
    let mut pollfds: Vec<libc::pollfd> = events.iter().map(|e| libc::pollfd { fd: e.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    loop {
        let last = stop.load(Ordering::SeqCst);
        if last {
            for e in &events {
                e.disable()?;
            }
        }
        for (e, reported) in events.iter_mut().zip(&mut reported) {
            let sent = e.ring.drain(|r| {
                if u32::from_le_bytes([r[0], r[1], r[2], r[3]]) == rt::LOST && r.len() >= 24 {
                    *reported += u64::from_le_bytes(r[16..24].try_into().unwrap_or_default());
                }
                tx.send(Watched { record: r.to_vec(), load: load(r) })?;
                let one = 1u64;
                // SAFETY: writes 8 bytes from `one` to our eventfd.
                unsafe { libc::write(wake.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
                Ok::<(), std::sync::mpsc::SendError<Watched>>(())
            });
            if sent.is_err() {
                return Ok(0); // the loop is gone
            }
        }
        if last {
            return Ok(events.iter().zip(&reported).filter_map(|(e, r)| Some(e.lost()?.saturating_sub(*r))).sum());
        }
        sys::poll(&mut pollfds, Duration::from_millis(100))?;
    }
}

/// Opens the program a BPF_EVENT load announces.
fn load(r: &[u8]) -> Option<Load> {
    let (id, time) = bpf_load(r)?;
    Some(Load::open(id, time))
}

/// Where TIME sits in the sample_id trailer ({pid, tid}, time, {cpu, res},
/// identifier), counted from the record's end.
const TIME_FROM_END: usize = 24;

/// A BPF_EVENT load's program id and time.
pub(crate) fn bpf_load(r: &[u8]) -> Option<(u32, Option<u64>)> {
    let ty = u32::from_le_bytes(r.get(..4)?.try_into().ok()?);
    if ty != rt::BPF_EVENT || r.len() < 24 + TIME_FROM_END || u16::from_le_bytes([r[8], r[9]]) != bpf_event_type::PROG_LOAD {
        return None;
    }
    let id = u32::from_le_bytes([r[12], r[13], r[14], r[15]]);
    let at = r.len() - TIME_FROM_END;
    Some((id, Some(u64::from_le_bytes(r[at..at + 8].try_into().ok()?))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpf_load_fields() {
        let mut r = vec![0u8; 8 + 16 + 32];
        r[..4].copy_from_slice(&rt::BPF_EVENT.to_le_bytes());
        r[6] = r.len() as u8;
        r[8] = 1;
        r[12..16].copy_from_slice(&98u32.to_le_bytes());
        let t = r.len() - TIME_FROM_END;
        r[t..t + 8].copy_from_slice(&170_879_913_001u64.to_le_bytes());
        assert_eq!(bpf_load(&r), Some((98, Some(170_879_913_001))));
        r[8] = 2;
        assert_eq!(bpf_load(&r), None);
        r[8] = 1;
        r[0] = rt::KSYMBOL as u8;
        assert_eq!(bpf_load(&r), None);
    }
}
