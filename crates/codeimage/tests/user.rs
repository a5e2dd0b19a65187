//! User code named by MMAP records: only ELF executables and shared objects
//! with the recorded build-id are read, under `symfs` or from the build-id
//! cache when asked; anything else stays unmapped and is reported.

use std::path::{Path, PathBuf};

use codeimage::*;
use perfdata::abi::misc;
use perfdata::{BuildIdEntry, PerfFile, Writer};
use testkit::elf;
use testkit::le::put32;

const AT: u64 = 0x40_0000;
/// Where the code starts in the test executables (file offset = address - AT).
const CODE: u64 = 0x100;
const SECRET: &[u8] = b"root:$6$secret-hash:19000:0:99999:7:::\n";

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("codeimage-user").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A minimal x86-64 ELF of type `e_type` (2: executable, 3: shared object):
/// one PT_LOAD of the whole file at [`AT`], a PT_NOTE with the GNU build-id
/// when given, and `code` at file offset [`CODE`].
fn elf(e_type: u16, code: &[u8], build_id: Option<&[u8]>) -> Vec<u8> {
    let mut note = Vec::new();
    if let Some(id) = build_id {
        put32(&mut note, 4);
        put32(&mut note, id.len() as u32);
        put32(&mut note, 3); // NT_GNU_BUILD_ID
        note.extend_from_slice(b"GNU\0");
        note.extend_from_slice(id);
        note.resize(note.len().next_multiple_of(4), 0);
    }
    let phnum: u16 = if build_id.is_some() { 2 } else { 1 };
    let note_at = elf::EHSIZE + elf::PHENTSIZE * phnum as u64;
    let len = CODE + code.len() as u64;
    let mut b = Vec::new();
    elf::put_header(&mut b, &elf::Header { e_type, entry: AT + CODE, phnum, shentsize: 64, ..Default::default() });
    let phdr = |b: &mut Vec<u8>, p_type: u32, flags: u32, offset: u64, size: u64| {
        let align = if p_type == elf::PT_LOAD { 0x1000 } else { 4 };
        elf::put_phdr(b, &elf::Phdr { p_type, flags, offset, vaddr: AT + offset, paddr: AT + offset, filesz: size, memsz: size, align });
    };
    phdr(&mut b, elf::PT_LOAD, 5, 0, len); // R+X
    if build_id.is_some() {
        phdr(&mut b, elf::PT_NOTE, 4, note_at, note.len() as u64);
    }
    b.extend_from_slice(&note);
    assert!(b.len() as u64 <= CODE);
    b.resize(CODE as usize, 0);
    b.extend_from_slice(code);
    b
}

/// An executable mapping of `name` at `addr` (file offset 0), with a
/// build-id in the record when given.
struct Map<'a> {
    name: &'a str,
    addr: u64,
    build_id: Option<&'a [u8]>,
}

/// A perf.data holding an MMAP2 (PROT_READ|PROT_EXEC) for each map, and
/// the HEADER_BUILD_ID entries given.
fn perf_data(maps: &[Map<'_>], build_ids: Vec<BuildIdEntry>) -> PerfFile {
    let mut w = Writer::new(std::io::Cursor::new(Vec::new()), testkit::perf::mmap2_attrs()).unwrap();
    w.features.build_ids = build_ids;
    for m in maps {
        w.write(misc::USER, &testkit::perf::exec_mmap2(m.name, m.addr, m.build_id), &testkit::perf::task7_at(1)).unwrap();
    }
    PerfFile::from_vec(w.finish().unwrap().into_inner()).unwrap()
}

fn image(file: &PerfFile, user: &UserCode) -> (CodeTimeline, UserReport) {
    let mut base = BaseImage::new();
    let report = add_base_with(file, &mut base, user).unwrap();
    (TimelineBuilder::new(base).build(), report)
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn only_elf_executables_are_read() {
    let d = tmp("kinds");
    let code = [0x55, 0x48, 0x89, 0xe5, 0xc3];
    std::fs::write(d.join("prog"), elf(2, &code, None)).unwrap();
    std::fs::write(d.join("lib.so"), elf(3, &code, None)).unwrap();
    std::fs::write(d.join("shadow"), SECRET).unwrap();
    std::fs::write(d.join("core"), perfdata::kcore::kcore_elf(perfdata::kcore::Machine::X86_64, &[]).unwrap()).unwrap();
    let fifo = d.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let inside = |f: &str| path_str(&d.join(f)).to_string();
    let names = [
        (inside("prog"), 0x10_0000),
        (inside("lib.so"), 0x20_0000),
        (inside("shadow"), 0x30_0000),
        ("/dev/zero".to_string(), 0x40_0000),
        (inside("fifo"), 0x50_0000),
        (inside("core"), 0x60_0000),
        (format!("{}/../kinds/prog", path_str(&d)), 0x70_0000),
        ("relative/prog".to_string(), 0x80_0000),
        (inside("missing"), 0x90_0000),
    ];
    let maps: Vec<Map<'_>> = names.iter().map(|(name, addr)| Map { name, addr: *addr, build_id: None }).collect();
    let (tl, report) = image(&perf_data(&maps, Vec::new()), &UserCode::default());
    assert_eq!(tl.read(0x10_0000 + CODE, 5, 2), Read::Exact(code.to_vec()), "an executable is read");
    assert_eq!(tl.read(0x20_0000 + CODE, 5, 2), Read::Exact(code.to_vec()), "a shared object is read");
    for addr in [0x30_0000, 0x40_0000, 0x50_0000, 0x60_0000, 0x70_0000, 0x80_0000, 0x90_0000] {
        assert!(matches!(tl.read(addr, 16, 2), Read::Unmapped { .. }), "{addr:#x}");
    }
    assert_eq!(report.added, 2);
    assert_eq!(report.missing, 2, "missing, and relative/prog (as [vdso]: not a path)");
    let why: Vec<&str> = report.refused.iter().map(|(_, why)| why.as_str()).collect();
    assert_eq!(
        why,
        [
            "not an ELF file",
            "not a regular file",
            "not a regular file",
            "an ELF file but not an executable or shared object (Core)",
            "the path has `..` in it",
        ]
    );
    let summary = report.summary().unwrap();
    assert!(summary.starts_with("5 user code files named by MMAP records were not read") && summary.contains("shadow: not an ELF file"), "{summary}");
}

#[test]
fn a_recorded_build_id_must_match() {
    let d = tmp("build-id");
    let code = [0x90, 0x90, 0xc3];
    let id: Vec<u8> = (1..=20).collect();
    let other: Vec<u8> = (101..=120).collect();
    std::fs::write(d.join("a"), elf(2, &code, Some(&id))).unwrap();
    std::fs::write(d.join("b"), elf(2, &code, None)).unwrap();
    std::fs::write(d.join("c"), elf(2, &code, Some(&id))).unwrap();
    let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
    let maps = [
        Map { name: path_str(&a), addr: 0x10_0000, build_id: Some(&id) },
        Map { name: path_str(&a), addr: 0x20_0000, build_id: Some(&other) },
        Map { name: path_str(&b), addr: 0x30_0000, build_id: Some(&id) },
        Map { name: path_str(&c), addr: 0x40_0000, build_id: None },
    ];
    // c's build-id comes from the header's table: the wrong one.
    let table = vec![BuildIdEntry { misc: misc::USER, pid: -1, build_id: other.clone(), filename: path_str(&c).to_string() }];
    let (tl, report) = image(&perf_data(&maps, table), &UserCode::default());
    assert_eq!(tl.read(0x10_0000 + CODE, 3, 2), Read::Exact(code.to_vec()), "the build-id matches");
    for addr in [0x20_0000, 0x30_0000, 0x40_0000] {
        assert!(matches!(tl.read(addr + CODE, 3, 2), Read::Unmapped { .. }), "{addr:#x}");
    }
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let why: Vec<&str> = report.refused.iter().map(|(_, why)| why.as_str()).collect();
    assert_eq!(
        why,
        [
            format!("its build-id {} is not the recorded {}", hex(&id), hex(&other)),
            format!("it has no build-id to match the recorded {}", hex(&id)),
            format!("its build-id {} is not the recorded {}", hex(&id), hex(&other)),
        ]
    );
}

/// `--symfs DIR`: `/usr/bin/prog` is read as `DIR/usr/bin/prog`, never as
/// itself; the build-id cache is tried first for a recorded build-id.
#[test]
fn symfs_and_the_build_id_cache_root_the_look_ups() {
    let d = tmp("symfs");
    let (in_symfs, in_cache) = ([0xc3u8], [0xccu8, 0xc3]);
    let id: Vec<u8> = (0xa0..0xb4).collect();
    std::fs::create_dir_all(d.join("root/usr/bin")).unwrap();
    std::fs::write(d.join("root/usr/bin/prog"), elf(2, &in_symfs, None)).unwrap();
    let cached = d.join("cache/.build-id/a0/a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3");
    std::fs::create_dir_all(&cached).unwrap();
    std::fs::write(cached.join("elf"), elf(2, &in_cache, Some(&id))).unwrap();
    // The older layout: the entry is the file itself.
    let old_id: Vec<u8> = (0xc0..0xd4).collect();
    std::fs::create_dir_all(d.join("cache/.build-id/c0")).unwrap();
    std::fs::write(d.join("cache/.build-id/c0/c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3"), elf(2, &in_cache, Some(&old_id))).unwrap();
    let maps = [
        Map { name: "/usr/bin/prog", addr: 0x10_0000, build_id: None },
        Map { name: "/usr/bin/cached-prog", addr: 0x20_0000, build_id: Some(&id) },
        Map { name: "/etc/passwd", addr: 0x30_0000, build_id: None },
        Map { name: "/usr/bin/old-cached-prog", addr: 0x40_0000, build_id: Some(&old_id) },
    ];
    let file = perf_data(&maps, Vec::new());
    let user = UserCode { symfs: Some(d.join("root")), build_id_dir: Some(d.join("cache")) };
    let (tl, report) = image(&file, &user);
    assert_eq!(tl.read(0x10_0000 + CODE, 1, 2), Read::Exact(in_symfs.to_vec()));
    assert_eq!(tl.read(0x20_0000 + CODE, 2, 2), Read::Exact(in_cache.to_vec()));
    assert!(matches!(tl.read(0x30_0000, 1, 2), Read::Unmapped { .. }), "/etc/passwd is looked up under symfs only");
    assert_eq!(tl.read(0x40_0000 + CODE, 2, 2), Read::Exact(in_cache.to_vec()));
    assert_eq!((report.added, report.missing, report.refused_count), (3, 1, 0));
}
