//! Records written at the start, as perf synthesizes them (time 0): the
//! kernel and module maps, which tie kcore_dir to kernel addresses, and the
//! names of the threads already running, so records name their task.

use std::fs::File;
use std::io::BufWriter;

use perfdata::abi::misc;
use perfdata::{Comm, Mmap, RecordBody, SampleId, Writer};

use crate::error::Result;
use crate::kernel::KernelSnapshot;

/// perf's pid for kernel maps (HOST_KERNEL_ID).
const KERNEL_PID: u32 = u32::MAX;

/// `[kernel.kallsyms]_text` at `_text` (pgoff `_text`: perf uses kcore_dir
/// only when kallsyms' `_text` equals it) and one MMAP per module.
pub(crate) fn kernel_maps(w: &mut Writer<BufWriter<File>>, k: &KernelSnapshot) -> Result<u64> {
    let Some((text, etext)) = k.text else { return Ok(0) };
    let sid = SampleId::default();
    let kernel = Mmap { pid: KERNEL_PID, tid: 0, addr: text, len: etext - text, pgoff: text, filename: b"[kernel.kallsyms]_text" };
    w.write(misc::KERNEL, &RecordBody::Mmap(kernel), &sid)?;
    let mut n = 1;
    for m in k.modules.iter().filter(|m| m.addr != 0) {
        let name = format!("[{}]", m.name);
        let map = Mmap { pid: KERNEL_PID, tid: 0, addr: m.addr, len: m.size, pgoff: 0, filename: name.as_bytes() };
        w.write(misc::KERNEL, &RecordBody::Mmap(map), &sid)?;
        n += 1;
    }
    Ok(n)
}

/// A COMM record for every thread in /proc. Threads that vanish while this
/// runs are skipped.
pub(crate) fn thread_names(w: &mut Writer<BufWriter<File>>) -> Result<u64> {
    let sid = SampleId::default();
    let mut n = 0;
    let Ok(procs) = std::fs::read_dir("/proc") else { return Ok(0) };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else { continue };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(comm) = std::fs::read(t.path().join("comm")) else { continue };
            let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
            w.write(0, &RecordBody::Comm(Comm { pid, tid, comm }), &sid)?;
            n += 1;
        }
    }
    Ok(n)
}
