//! perf_event_open, its ioctls and its ring buffer mapping, with errors that
//! name the fix.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys as pe;
use perfdata::abi::read_format;
use perfdata::EventAttr;

use crate::error::{Error, Result};
use crate::ring::{for_each_record, unread, Drained};

/// One perf event on one CPU, with its ring buffer mapped.
pub(crate) struct Event {
    pub cpu: u32,
    /// Whether a read() gives the lost-record count (read_format LOST, Linux 6.0).
    counts_lost: bool,
    /// The id the kernel gave it (PERF_EVENT_IOC_ID): the IDENTIFIER in its records.
    pub id: u64,
    pub fd: OwnedFd,
    pub ring: MmapRing,
}

impl Event {
    /// Opens `attr` system-wide on `cpu` and maps a ring of `pages` data pages.
    pub fn open(attr: &EventAttr, cpu: u32, pages: usize) -> Result<Event> {
        let bytes = attr.to_bytes();
        // SAFETY: an all-zero perf_event_attr is valid; the copy fills at most
        // its size, with the same layout (the kernel's uapi struct).
        let mut kattr: pe::bindings::perf_event_attr = unsafe { std::mem::zeroed() };
        let n = bytes.len().min(std::mem::size_of::<pe::bindings::perf_event_attr>());
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), &mut kattr as *mut _ as *mut u8, n) };
        // SAFETY: kattr is a valid attr that outlives the call.
        let fd = unsafe { pe::perf_event_open(&mut kattr, -1, cpu as i32, -1, pe::bindings::PERF_FLAG_FD_CLOEXEC as _) };
        if fd < 0 {
            return Err(open_error(cpu, io::Error::last_os_error()));
        }
        // SAFETY: fd was just returned by the kernel and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer.
        if unsafe { pe::ioctls::ID(fd.as_raw_fd(), &mut id) } < 0 {
            let source = io::Error::last_os_error();
            return Err(Error::Sys { call: format!("ioctl(PERF_EVENT_IOC_ID) on CPU {cpu}"), source, fix: String::new() });
        }
        let ring = MmapRing::map(&fd, pages).map_err(|source| Error::Sys {
            call: format!("mmap of a {} KiB ring buffer for CPU {cpu}", pages * page_size() / 1024),
            fix: mmap_fix(&source),
            source,
        })?;
        Ok(Event { cpu, counts_lost: attr.read_format & read_format::LOST != 0, id, fd, ring })
    }

    /// Records the kernel could not write to this event's ring so far,
    /// reported by LOST records or not yet (it reports them lazily, with the
    /// next record that fits). None when the kernel does not count them.
    pub fn lost(&self) -> Option<u64> {
        let mut v = [0u64; 2]; // { value, lost }
                               // SAFETY: reads at most 16 bytes into v from our own fd.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr() as *mut libc::c_void, 16) };
        (self.counts_lost && n == 16).then_some(v[1])
    }

    pub fn enable(&self) -> Result<()> {
        // SAFETY: a plain ioctl on an fd we own.
        self.ioctl_result(unsafe { pe::ioctls::ENABLE(self.fd.as_raw_fd(), 0) }, "PERF_EVENT_IOC_ENABLE")
    }

    pub fn disable(&self) -> Result<()> {
        // SAFETY: a plain ioctl on an fd we own.
        self.ioctl_result(unsafe { pe::ioctls::DISABLE(self.fd.as_raw_fd(), 0) }, "PERF_EVENT_IOC_DISABLE")
    }

    fn ioctl_result(&self, rc: i32, what: &str) -> Result<()> {
        if rc < 0 {
            let source = io::Error::last_os_error();
            return Err(Error::Sys { call: format!("ioctl({what}) on CPU {}", self.cpu), source, fix: String::new() });
        }
        Ok(())
    }
}

/// Opens `attr` on every CPU. A kernel older than 6.0 rejects read_format
/// LOST: it is then opened without it.
pub(crate) fn open_all(attr: &EventAttr, cpus: &[u32], pages: usize) -> Result<(EventAttr, Vec<Event>)> {
    let mut attr = attr.clone();
    let mut events = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        match Event::open(&attr, cpu, pages) {
            Ok(e) => events.push(e),
            Err(Error::Sys { source, .. }) if events.is_empty() && attr.read_format != 0 && source.raw_os_error() == Some(libc::EINVAL) => {
                attr.read_format = 0;
                events.push(Event::open(&attr, cpu, pages)?);
            }
            Err(e) => return Err(e),
        }
    }
    Ok((attr, events))
}

/// A perf ring buffer: the control page, then `2^n` data pages.
pub(crate) struct MmapRing {
    base: *mut u8,
    len: usize,
    scratch: Vec<u8>,
}

// SAFETY: the mapping belongs to this value alone; nothing ties it to the
// thread that made it.
unsafe impl Send for MmapRing {}

impl MmapRing {
    fn map(fd: &OwnedFd, pages: usize) -> io::Result<MmapRing> {
        let len = (pages + 1) * page_size();
        // SAFETY: a fresh shared mapping of the event's ring; checked below.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MmapRing { base: base as *mut u8, len, scratch: Vec::new() })
    }

    fn page(&self) -> *mut pe::bindings::perf_event_mmap_page {
        self.base as *mut pe::bindings::perf_event_mmap_page
    }

    /// Hands every record written so far to `f`, then gives the space back
    /// to the kernel. Bytes after a bad header are skipped (and reported).
    pub fn drain<E>(&mut self, f: impl FnMut(&[u8]) -> std::result::Result<(), E>) -> std::result::Result<Drained, E> {
        let page = self.page();
        // SAFETY: the control page stays mapped while self lives. data_head is
        // written by the kernel: the acquire load orders the reads of the data
        // after it; data_tail is ours, published with a release store once the
        // bytes are no longer read.
        let (head, tail, data) = unsafe {
            let head = (*(std::ptr::addr_of!((*page).data_head) as *const AtomicU64)).load(Ordering::Acquire);
            let tail = std::ptr::addr_of!((*page).data_tail).read();
            let offset = std::ptr::addr_of!((*page).data_offset).read() as usize;
            let size = std::ptr::addr_of!((*page).data_size).read() as usize;
            if head == tail || offset + size > self.len || size == 0 {
                return Ok(Drained::default());
            }
            // Only [tail, head) is read, and the kernel does not write there
            // until data_tail moves past it.
            (head, tail, std::slice::from_raw_parts(self.base.add(offset), size))
        };
        let result = for_each_record(unread(data, tail, head), &mut self.scratch, f);
        // SAFETY: see above; every record up to head was handed out (or is skipped as bad).
        unsafe { (*(std::ptr::addr_of_mut!((*page).data_tail) as *const AtomicU64)).store(head, Ordering::Release) };
        result
    }
}

impl Drop for MmapRing {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in map(), unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// The online CPUs (`/sys/devices/system/cpu/online`: "0-3,5").
pub(crate) fn online_cpus() -> Result<Vec<u32>> {
    let path = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    parse_cpu_list(&text).ok_or_else(|| Error::Environment(format!("{path}: cannot read the CPU list {:?}", text.trim())))
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// A sysctl as an integer, if it can be read.
pub(crate) fn sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The kernel lockdown mode when it is not `none` (`integrity` or `confidentiality`).
pub(crate) fn lockdown() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?;
    let mode = text.split_whitespace().find(|w| w.starts_with('['))?.trim_matches(|c| c == '[' || c == ']');
    (mode != "none").then(|| mode.to_string())
}

fn open_error(cpu: u32, source: io::Error) -> Error {
    let fix = match source.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => {
            let paranoid = sysctl("/proc/sys/kernel/perf_event_paranoid").map_or("unknown".into(), |p| p.to_string());
            let mut fix = format!(
                "system-wide side-band events need CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8) or \
                 kernel.perf_event_paranoid <= 0 (it is {paranoid}): run as root, grant the capabilities \
                 (setcap cap_perfmon,cap_bpf,cap_syslog+ep poketrace), or sysctl kernel.perf_event_paranoid=0"
            );
            if let Some(mode) = lockdown() {
                fix.push_str(&format!("; the kernel is locked down ({mode}), which can forbid it even to root"));
            }
            fix
        }
        Some(libc::EINVAL | libc::E2BIG | libc::EOPNOTSUPP) => {
            format!("the kernel ({}) rejects the side-band event: text_poke needs Linux 5.9 or later, ksymbol and bpf_event 5.1", uname().release)
        }
        Some(libc::ENOENT | libc::ENODEV) => "this kernel has no software dummy event (Linux 4.10 or later)".into(),
        Some(libc::ENOSYS) => "this kernel is built without perf events (CONFIG_PERF_EVENTS)".into(),
        Some(libc::EMFILE | libc::ENFILE) => "too many open files: raise the limit (ulimit -n)".into(),
        _ => String::new(),
    };
    Error::Sys { call: format!("perf_event_open (dummy side-band event, CPU {cpu})"), source, fix }
}

fn mmap_fix(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::ENOMEM) => "the ring buffers exceed the locked-memory allowance: use a smaller --mmap-pages, raise \
             kernel.perf_event_mlock_kb, or ulimit -l"
            .into(),
        _ => String::new(),
    }
}

/// `uname(2)`.
pub(crate) struct Uname {
    pub nodename: String,
    pub release: String,
    pub machine: String,
}

pub(crate) fn uname() -> Uname {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::uname(&mut u) } == 0;
    let field = |f: &[libc::c_char]| {
        if !ok {
            return String::new();
        }
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Uname { nodename: field(&u.nodename), release: field(&u.release), machine: field(&u.machine) }
}

/// Waits until one of `fds` is readable, a signal arrives or `timeout` passes.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: std::time::Duration) -> Result<()> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: fds is a valid, exclusively borrowed array of pollfd.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(Error::Sys { call: "poll".into(), source: e, fix: String::new() });
        }
    }
    Ok(())
}

/// Set by SIGINT and SIGTERM: stop recording.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_child_signal(_: libc::c_int) {}

/// Catches SIGINT and SIGTERM (they stop the recording) and SIGCHLD (it
/// interrupts poll so the command's exit is seen at once). Returns the
/// previous dispositions for [`restore_signals`].
pub(crate) fn catch_signals() -> Result<Vec<(libc::c_int, libc::sigaction)>> {
    STOP.store(false, Ordering::SeqCst);
    let mut old = Vec::new();
    for (sig, handler) in
        [(libc::SIGINT, on_stop_signal as extern "C" fn(libc::c_int)), (libc::SIGTERM, on_stop_signal), (libc::SIGCHLD, on_child_signal)]
    {
        // SAFETY: installs an async-signal-safe handler (an atomic store or
        // nothing); no SA_RESTART, so poll returns EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut prev: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &sa, &mut prev) < 0 {
                let source = io::Error::last_os_error();
                return Err(Error::Sys { call: format!("sigaction({sig})"), source, fix: String::new() });
            }
            old.push((sig, prev));
        }
    }
    Ok(old)
}

/// Puts back the dispositions [`catch_signals`] replaced.
pub(crate) fn restore_signals(old: &[(libc::c_int, libc::sigaction)]) {
    for (sig, prev) in old {
        // SAFETY: prev came from sigaction itself.
        unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
    }
}

/// Whether SIGINT or SIGTERM arrived since [`catch_signals`].
pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5\n"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0\n"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list("\n"), None);
    }
}
