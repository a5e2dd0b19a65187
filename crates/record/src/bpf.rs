//! BPF programs and their JIT code, through the bpf(2) system call, and the
//! `DIR/bpf/` store where their images go.
//!
//! For each program: `DIR/bpf/<id>-<tag>.elf`, an ELF core file (the layout of
//! `kcore_dir/kcore`) with one PT_LOAD per JIT function (the main program and
//! each subprogram) at the kernel address it runs at, and one JSON line in
//! `DIR/bpf/index.jsonl`. Decoders load the ELF like any other base code
//! (`codeimage::BaseImage::add_elf`), and take the time window in which that
//! address range belonged to the program from the KSYMBOL records of
//! `DIR/data` (register at load, unregister at unload): addresses are reused
//! by later programs, which is why every program has its own file.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use perfdata::abi::{bpf_event_type, ksymbol_type};
use perfdata::kcore::{kcore_elf, Machine, Segment};
use perfdata::{BpfEvent, Ksymbol, RecordBody, SampleId, Writer};
use serde_json::json;

use crate::error::{Error, Result};
use crate::summary::BpfStats;

const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// `struct bpf_prog_info` (linux/bpf.h, as of Linux 6.1).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct BpfProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
    ifindex: u32,
    gpl_compatible: u32,
    netns_dev: u64,
    netns_ino: u64,
    nr_jited_ksyms: u32,
    nr_jited_func_lens: u32,
    jited_ksyms: u64,
    jited_func_lens: u64,
    btf_id: u32,
    func_info_rec_size: u32,
    func_info: u64,
    nr_func_info: u32,
    nr_line_info: u32,
    line_info: u64,
    jited_line_info: u64,
    nr_jited_line_info: u32,
    line_info_rec_size: u32,
    jited_line_info_rec_size: u32,
    nr_prog_tags: u32,
    prog_tags: u64,
    run_time_ns: u64,
    run_cnt: u64,
    recursion_misses: u64,
    verified_insns: u32,
    attach_btf_obj_id: u32,
    attach_btf_id: u32,
    pad: u32,
}

/// One JIT function of a program: where it runs and its bytes' place in the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JitFunc {
    pub addr: u64,
    pub len: u32,
    /// The kernel's symbol for it (`bpf_prog_<tag>_<name>`, as perf names it).
    pub name: String,
}

/// A loaded program and its JIT image.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub id: u32,
    pub prog_type: u32,
    pub tag: [u8; 8],
    pub name: String,
    pub image: Vec<u8>,
    pub funcs: Vec<JitFunc>,
}

fn bpf(cmd: libc::c_long, attr: &mut [u32]) -> io::Result<i64> {
    // SAFETY: attr is a valid, exclusively borrowed bpf_attr prefix of the
    // size passed; the kernel zero-extends it.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr) as u32) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The id of the next loaded program after `start`, or None at the end.
pub(crate) fn next_prog_id(start: u32) -> io::Result<Option<u32>> {
    let mut attr = [start, 0, 0];
    match bpf(BPF_PROG_GET_NEXT_ID, &mut attr) {
        Ok(_) => Ok(Some(attr[1])),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn prog_fd(id: u32) -> io::Result<OwnedFd> {
    let mut attr = [id, 0, 0];
    let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr)?;
    // SAFETY: a new fd from the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn prog_info(fd: &OwnedFd, info: &mut BpfProgInfo) -> io::Result<()> {
    let ptr = info as *mut BpfProgInfo as u64;
    // { u32 bpf_fd; u32 info_len; u64 info; } on a little-endian machine
    let mut attr = [fd.as_raw_fd() as u32, std::mem::size_of::<BpfProgInfo>() as u32, ptr as u32, (ptr >> 32) as u32];
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
}

/// Why a program's image could not be had.
#[derive(Debug)]
pub(crate) enum Miss {
    /// It was unloaded before it could be opened.
    Gone,
    Other(String),
}

/// A BPF program just loaded, opened (or not) at once.
pub(crate) struct Load {
    pub id: u32,
    /// perf time of its BPF_EVENT.
    pub time: Option<u64>,
    pub fd: std::result::Result<OwnedFd, Miss>,
}

impl Load {
    /// Opens program `id`, announced at `time`.
    pub fn open(id: u32, time: Option<u64>) -> Load {
        Load { id, time, fd: open(id) }
    }
}

/// Opens program `id`. Holding the fd keeps the program, and its JIT image,
/// from going away until the image is read.
fn open(id: u32) -> std::result::Result<OwnedFd, Miss> {
    prog_fd(id).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => Miss::Gone,
        Some(libc::EPERM | libc::EACCES) => {
            Miss::Other(format!("bpf(BPF_PROG_GET_FD_BY_ID): {e}; reading BPF programs needs CAP_SYS_ADMIN (run as root)"))
        }
        _ => Miss::Other(format!("bpf(BPF_PROG_GET_FD_BY_ID): {e}")),
    })
}

/// Reads an open program's JIT image and function addresses.
fn read(fd: &OwnedFd) -> std::result::Result<Program, Miss> {
    let info_err = |e: io::Error| Miss::Other(format!("bpf(BPF_OBJ_GET_INFO_BY_FD): {e}"));
    // SAFETY (both zeroed): BpfProgInfo is plain integers.
    let mut first: BpfProgInfo = unsafe { std::mem::zeroed() };
    prog_info(fd, &mut first).map_err(info_err)?;
    if first.jited_prog_len == 0 {
        let restrict = crate::sys::sysctl("/proc/sys/kernel/kptr_restrict").unwrap_or(0);
        return Err(Miss::Other(format!(
            "no JIT image: the BPF JIT is off (net.core.bpf_jit_enable=0) or the kernel hides it \
             (kernel.kptr_restrict={restrict}; dumping JIT code needs CAP_SYSLOG or kptr_restrict 0)"
        )));
    }
    let mut image = vec![0u8; first.jited_prog_len as usize];
    let mut ksyms = vec![0u64; first.nr_jited_ksyms as usize];
    let mut lens = vec![0u32; first.nr_jited_func_lens as usize];
    let mut tags = vec![[0u8; 8]; first.nr_prog_tags as usize];
    let mut info: BpfProgInfo = unsafe { std::mem::zeroed() };
    info.jited_prog_len = image.len() as u32;
    info.jited_prog_insns = image.as_mut_ptr() as u64;
    info.nr_jited_ksyms = ksyms.len() as u32;
    info.jited_ksyms = ksyms.as_mut_ptr() as u64;
    info.nr_jited_func_lens = lens.len() as u32;
    info.jited_func_lens = lens.as_mut_ptr() as u64;
    info.nr_prog_tags = tags.len() as u32;
    info.prog_tags = tags.as_mut_ptr() as u64;
    prog_info(fd, &mut info).map_err(info_err)?;
    // The program cannot change while we hold its fd; the lengths are the same.
    image.truncate(info.jited_prog_len as usize);
    let name_len = info.name.iter().position(|&b| b == 0).unwrap_or(info.name.len());
    let name = String::from_utf8_lossy(&info.name[..name_len]).into_owned();
    let funcs = split_funcs(&info, &ksyms, &lens, &tags, &name, image.len())
        .ok_or_else(|| Miss::Other("the kernel gave no JIT addresses (kernel.kptr_restrict hides them)".into()))?;
    Ok(Program { id: info.id, prog_type: info.prog_type, tag: info.tag, name, image, funcs })
}

/// Places the image's functions: `ksyms[i]` with `lens[i]` bytes each, in
/// order; a program without subprograms is one function.
fn split_funcs(info: &BpfProgInfo, ksyms: &[u64], lens: &[u32], tags: &[[u8; 8]], name: &str, image_len: usize) -> Option<Vec<JitFunc>> {
    if ksyms.is_empty() || ksyms.contains(&0) {
        return None;
    }
    let lens: Vec<u32> = if lens.len() == ksyms.len() && lens.iter().map(|&l| l as usize).sum::<usize>() == image_len {
        lens.to_vec()
    } else if ksyms.len() == 1 {
        vec![image_len as u32]
    } else {
        return None;
    };
    Some(
        ksyms
            .iter()
            .zip(lens)
            .enumerate()
            .map(|(i, (&addr, len))| JitFunc { addr, len, name: ksym_name(tags.get(i).unwrap_or(&info.tag), i, name) })
            .collect(),
    )
}

/// perf's name for a BPF function without BTF: `bpf_prog_<tag>_<name>` for
/// the main program, `bpf_prog_<tag>_F` for subprograms and unnamed ones.
fn ksym_name(tag: &[u8; 8], index: usize, name: &str) -> String {
    let suffix = if index == 0 && !name.is_empty() { name } else { "F" };
    format!("bpf_prog_{}_{suffix}", hex(tag))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `DIR/bpf/`: one ELF per program and `index.jsonl`, written as programs
/// come so nothing piles up in memory.
pub(crate) struct BpfStore {
    dir: PathBuf,
    index: BufWriter<File>,
    machine: Machine,
    /// Programs found at start; a load event for one of them is not captured twice.
    at_start: HashSet<u32>,
    pub stats: BpfStats,
}

impl BpfStore {
    pub fn create(dir: &Path) -> Result<BpfStore> {
        perfdata::create_private_dir(dir).map_err(Error::io(dir))?;
        let path = dir.join("index.jsonl");
        let index = BufWriter::new(perfdata::create_private(&path).map_err(Error::io(&path))?);
        let machine = if cfg!(target_arch = "aarch64") { Machine::Aarch64 } else { Machine::X86_64 };
        Ok(BpfStore { dir: dir.to_path_buf(), index, machine, at_start: HashSet::new(), stats: BpfStats::default() })
    }

    /// Saves every program loaded now and writes the KSYMBOL and BPF_EVENT
    /// records perf synthesizes for them (time 0). Returns the records written.
    pub fn capture_loaded(&mut self, writer: &mut Writer<BufWriter<File>>, warnings: &mut Vec<String>) -> Result<u64> {
        let mut records = 0;
        let mut id = 0;
        loop {
            id = match next_prog_id(id) {
                Ok(Some(next)) => next,
                Ok(None) => break,
                Err(e) => {
                    let fix = match e.raw_os_error() {
                        Some(libc::EPERM | libc::EACCES) => "; listing BPF programs needs CAP_SYS_ADMIN (run as root)",
                        _ => "",
                    };
                    warnings.push(format!("BPF programs loaded before the recording are not captured: bpf(BPF_PROG_GET_NEXT_ID): {e}{fix}"));
                    break;
                }
            };
            self.at_start.insert(id);
            let Some(p) = self.save(open(id).and_then(|fd| read(&fd)), None)? else { continue };
            let sid = SampleId::default();
            for f in &p.funcs {
                let k = Ksymbol { addr: f.addr, len: f.len, ksym_type: ksymbol_type::BPF, flags: 0, name: f.name.as_bytes() };
                writer.write(0, &RecordBody::Ksymbol(k), &sid)?;
                records += 1;
            }
            let e = BpfEvent { event_type: bpf_event_type::PROG_LOAD, flags: 0, id: p.id, tag: p.tag };
            writer.write(0, &RecordBody::BpfEvent(e), &sid)?;
            records += 1;
        }
        Ok(records)
    }

    /// Saves a program announced by a BPF_EVENT load, opened (or not) as
    /// soon as its record was read.
    pub fn capture(&mut self, load: Load) -> Result<()> {
        if !self.at_start.contains(&load.id) {
            self.save(load.fd.and_then(|fd| read(&fd)), Some(load.time.unwrap_or(0)))?;
        }
        Ok(())
    }

    /// Stores one program's image and index line, or counts why there is
    /// none; `time` is None for programs found at start.
    fn save(&mut self, program: std::result::Result<Program, Miss>, time: Option<u64>) -> Result<Option<Program>> {
        let p = match program {
            Ok(p) => p,
            Err(Miss::Gone) => {
                self.stats.gone += 1;
                return Ok(None);
            }
            Err(Miss::Other(reason)) => {
                self.stats.failed += 1;
                if self.stats.reasons.len() < 4 && !self.stats.reasons.contains(&reason) {
                    self.stats.reasons.push(reason);
                }
                return Ok(None);
            }
        };
        let file = format!("{}-{}.elf", p.id, hex(&p.tag));
        let mut segments = Vec::with_capacity(p.funcs.len());
        let mut at = 0usize;
        for f in &p.funcs {
            segments.push(Segment { vaddr: f.addr, bytes: p.image[at..at + f.len as usize].to_vec() });
            at += f.len as usize;
        }
        let path = self.dir.join(&file);
        let elf = kcore_elf(self.machine, &segments)?;
        perfdata::create_private(&path).and_then(|mut f| f.write_all(&elf)).map_err(Error::io(&path))?;
        let funcs: Vec<_> = p.funcs.iter().map(|f| json!({"addr": f.addr, "len": f.len, "ksym": f.name})).collect();
        let line = json!({
            "id": p.id,
            "tag": hex(&p.tag),
            "name": p.name,
            "prog_type": p.prog_type,
            "loaded": if time.is_some() { "during" } else { "before" },
            "time": time,
            "file": file,
            "jited_len": p.image.len(),
            "funcs": funcs,
        });
        let index_path = self.dir.join("index.jsonl");
        writeln!(self.index, "{line}").map_err(Error::io(&index_path))?;
        match time {
            Some(_) => self.stats.during += 1,
            None => self.stats.before += 1,
        }
        Ok(Some(p))
    }

    pub fn finish(mut self) -> Result<BpfStats> {
        let path = self.dir.join("index.jsonl");
        self.index.flush().map_err(Error::io(path))?;
        Ok(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JIT code sits at kernel addresses: owner-only, as kcore_dir.
    #[test]
    fn the_store_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("poketrace-bpf-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let store = BpfStore::create(&d.join("bpf")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&d.join("bpf")), 0o700);
        assert_eq!(mode(&d.join("bpf/index.jsonl")), 0o600);
        drop(store);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn prog_info_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<BpfProgInfo>(), 232);
        assert_eq!(std::mem::offset_of!(BpfProgInfo, nr_jited_ksyms), 104);
        assert_eq!(std::mem::offset_of!(BpfProgInfo, nr_prog_tags), 180);
        assert_eq!(std::mem::offset_of!(BpfProgInfo, attach_btf_id), 224);
    }

    #[test]
    fn functions_and_their_names() {
        // SAFETY: plain integers.
        let mut info: BpfProgInfo = unsafe { std::mem::zeroed() };
        info.tag = [0x59, 0xf4, 0xa9, 0x31, 0x74, 0x4d, 0xcd, 0xc6];
        let one = split_funcs(&info, &[0xffff_ffff_c000_10dc], &[20], &[info.tag], "poketrace_test", 20).unwrap();
        assert_eq!(one, vec![JitFunc { addr: 0xffff_ffff_c000_10dc, len: 20, name: "bpf_prog_59f4a931744dcdc6_poketrace_test".into() }]);
        let two = split_funcs(&info, &[0x1000, 0x3000], &[16, 8], &[[1; 8], [2; 8]], "", 24).unwrap();
        assert_eq!(two[0].name, "bpf_prog_0101010101010101_F");
        assert_eq!(two[1], JitFunc { addr: 0x3000, len: 8, name: "bpf_prog_0202020202020202_F".into() });
        assert_eq!(split_funcs(&info, &[0], &[20], &[], "x", 20), None);
        assert_eq!(split_funcs(&info, &[1, 2], &[20], &[], "x", 20), None);
    }
}
