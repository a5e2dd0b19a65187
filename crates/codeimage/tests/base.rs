//! Base code from ELF files written with `object`, raw bytes and perf.data directories.

use std::path::{Path, PathBuf};

use codeimage::*;
use perfdata::kcore::{kcore_elf, Machine, Segment};

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("codeimage").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn kcore_segments_load_at_their_addresses() {
    let d = tmp("kcore");
    let segs = vec![
        Segment { vaddr: 0xffff_ffff_8100_0000, bytes: (0..=255u8).cycle().take(10_000).collect() },
        Segment { vaddr: 0xffff_ffff_a000_0000, bytes: vec![0xcc; 100] },
    ];
    std::fs::write(d.join("kcore"), kcore_elf(Machine::X86_64, &segs).unwrap()).unwrap();
    let mut base = BaseImage::new();
    base.add_elf(&d.join("kcore")).unwrap();
    assert_eq!(base.regions().len(), 2);
    let tl = TimelineBuilder::new(base).build();
    assert_eq!(tl.read(0xffff_ffff_8100_0000 + 300, 3, 0), Read::Exact(vec![44, 45, 46]));
    assert_eq!(tl.read(0xffff_ffff_a000_0000 + 98, 8, 0), Read::Exact(vec![0xcc, 0xcc]));
}

#[test]
fn a_relocatable_object_contributes_its_code_sections() {
    use object::write::{Object, StandardSection};
    let d = tmp("reloc");
    let mut obj = Object::new(object::BinaryFormat::Elf, object::Architecture::X86_64, object::Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    obj.append_section_data(text, &[0x55, 0x48, 0x89, 0xe5, 0xc3], 16);
    let bytes = obj.write().unwrap();
    std::fs::write(d.join("m.o"), &bytes).unwrap();
    // Relocatable sections sit at address 0: nothing to place, so nothing is added...
    let mut base = BaseImage::new();
    base.add_elf(&d.join("m.o")).unwrap();
    assert!(base.regions().is_empty());
    // ...unless told where the module loader put them.
    base.add_elf_sections(&d.join("m.o"), &[(".text", 0xffff_ffff_c000_0000)]).unwrap();
    let tl = TimelineBuilder::new(base.clone()).build();
    assert_eq!(tl.read(0xffff_ffff_c000_0000, 5, 0), Read::Exact(vec![0x55, 0x48, 0x89, 0xe5, 0xc3]));
    assert!(base.add_elf_sections(&d.join("m.o"), &[(".nope", 1)]).unwrap_err().to_string().contains(".nope"));
    let mut base = BaseImage::new();
    // ...and raw dumps go where they are told.
    base.add_raw_file(&d.join("m.o"), 0, Some(4), 0x4000).unwrap();
    assert_eq!(base.regions()[0].bytes(), &bytes[..4]);
    let err = base.add_raw_file(&d.join("m.o"), 0, Some(1 << 40), 0x8000).unwrap_err();
    assert!(err.to_string().contains("m.o"), "{err}");
}

#[test]
fn overlapping_regions_keep_the_first_and_say_so() {
    let mut base = BaseImage::new();
    base.add_bytes(0x1000, vec![1; 16], "a");
    base.add_bytes(0x1008, vec![2; 16], "b");
    assert_eq!(base.overlaps, vec![(0x1008, 0x1010, "b".to_string())]);
    let tl = TimelineBuilder::new(base).build();
    assert_eq!(tl.read(0x1006, 4, 0), Read::Exact(vec![1, 1, 1, 1]));
    assert_eq!(tl.read(0x1014, 4, 0), Read::Exact(vec![2, 2, 2, 2]));
    // Adjacent regions read as one.
    assert_eq!(tl.read(0x100e, 4, 0), Read::Exact(vec![1, 1, 2, 2]));
}

#[test]
fn bytes_past_the_top_of_the_address_space_are_clipped_and_said() {
    let mut base = BaseImage::new();
    base.add_bytes(u64::MAX - 3, vec![1, 2, 3, 4, 5, 6], "top");
    base.add_bytes(0, vec![9; 4], "bottom");
    assert_eq!(base.clipped, [(u64::MAX - 3, 3, "top".to_string())]);
    assert_eq!(base.regions().iter().map(|r| (r.start, r.len())).collect::<Vec<_>>(), [(0, 4), (u64::MAX - 3, 3)]);
    let tl = TimelineBuilder::new(base).build();
    assert_eq!(tl.read(u64::MAX - 3, 3, 0), Read::Exact(vec![1, 2, 3]));
    assert!(matches!(tl.read(u64::MAX - 1, 2, 0), Read::Exact(_) | Read::Unmapped { .. }));
}

#[test]
fn from_a_perf_data_directory() {
    use perfdata::abi::{ksymbol_type, misc};
    use perfdata::*;
    let d = tmp("perfdir");
    let text = 0xffff_ffff_8100_0000u64;
    let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let jmp = [0xe9, 0x10, 0x00, 0x00, 0x00];
    let mut code = vec![0xcc; 0x100];
    code[0x40..0x45].copy_from_slice(&nop5);
    perfdata::kcore::write_kcore_dir(
        &d.join("kcore_dir"),
        Machine::X86_64,
        &[Segment { vaddr: text, bytes: code }],
        "ffffffff81000000 T _text\n",
        "",
    )
    .unwrap();
    let mut w = testkit::perf::sideband_writer(d.join("data"));
    let sid = |t| SampleId { pid: Some(0), tid: Some(0), time: Some(t), cpu: Some(1), ..SampleId::default() };
    w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: text + 0x40, old: &nop5, new: &jmp }), &sid(1000)).unwrap();
    w.write(
        misc::KERNEL,
        &RecordBody::Ksymbol(Ksymbol { addr: 0xffff_ffff_c000_0000, len: 64, ksym_type: ksymbol_type::BPF, flags: 0, name: b"bpf_prog_x" }),
        &sid(1100),
    )
    .unwrap();
    w.write(misc::KERNEL, &RecordBody::TextPoke(TextPoke { addr: text + 0x40, old: &jmp, new: &nop5 }), &sid(2000)).unwrap();
    w.finish().unwrap();
    let file = PerfFile::open(&d).unwrap();
    let p = from_perf_data(&file, BaseImage::new()).unwrap();
    assert_eq!((p.pokes, p.non_kernel_pokes, p.errors.len()), (2, 0, 0));
    let tl = &p.timeline;
    assert!(tl.anomalies().is_empty());
    assert_eq!(tl.read(text + 0x40, 5, 999), Read::Exact(nop5.to_vec()));
    assert_eq!(tl.read(text + 0x40, 5, 1000), Read::Exact(jmp.to_vec()));
    assert_eq!(tl.read(text + 0x40, 5, 2000), Read::Exact(nop5.to_vec()));
    assert_eq!(tl.history(text + 0x42).len(), 3);
    match tl.read(0xffff_ffff_c000_0010, 4, 1500) {
        Read::Unmapped { nearest: Some(n) } => assert!(n.name.contains("BPF program bpf_prog_x"), "{n:?}"),
        other => panic!("{other:?}"),
    }
}

/// An ELF64 whose `n` PT_LOADs all map the same `len` file bytes, each one byte above the last.
fn shifted_segments_elf(n: usize, len: u64, vaddr: u64) -> Vec<u8> {
    use testkit::elf;
    let data_at = elf::EHSIZE + elf::PHENTSIZE * n as u64;
    let mut f = Vec::new();
    elf::put_header(&mut f, &elf::Header { e_type: elf::ET_CORE, phnum: n as u16, ..Default::default() });
    for i in 0..n as u64 {
        let p = elf::Phdr { p_type: elf::PT_LOAD, flags: 5, offset: data_at, vaddr: vaddr + i, paddr: 0, filesz: len, memsz: len, align: 1 };
        elf::put_phdr(&mut f, &p);
    }
    f.extend((0..len).map(|i| i as u8));
    f
}

#[test]
fn many_overlapping_segments_are_counted_in_bounded_time_and_memory() {
    // 20,000 PT_LOADs of 64 KiB, each shifted by one byte: 1.2 MB of ELF, and
    // ~2*10^8 overlapping (segment, region) pairs if overlaps were listed per region.
    let d = tmp("shifted");
    let (n, len, at) = (20_000usize, 1u64 << 16, 0x1000u64);
    std::fs::write(d.join("kcore"), shifted_segments_elf(n, len, at)).unwrap();
    let t = std::time::Instant::now();
    let mut base = BaseImage::new();
    base.add_elf(&d.join("kcore")).unwrap();
    assert_eq!(base.overlap_count, n as u64 - 1);
    assert_eq!(base.overlap_bytes, (n as u64 - 1) * (len - 1));
    assert_eq!(base.overlaps.len(), OVERLAPS_LISTED);
    assert_eq!(base.overlaps[0], (at + 1, at + len, "kcore PT_LOAD 1".to_string()));
    // The first segment wins; each later one adds its last byte.
    assert_eq!(base.regions().len(), n);
    let tl = TimelineBuilder::new(base.clone()).build();
    assert_eq!(tl.read(at + 5, 1, 0), Read::Exact(vec![5]));
    assert_eq!(tl.read(at + len + 6, 1, 0), Read::Exact(vec![0xff]));
    let summary = base.overlap_summary().unwrap();
    assert!(summary.starts_with("19999 overlapping ranges"), "{summary}");
    assert!(t.elapsed() < std::time::Duration::from_secs(20), "took {:?}", t.elapsed());
}

/// Found by the base_image fuzz target: an ELF without loadable segments
/// whose code section says its bytes lie past the end of the file. It is
/// an error naming the file and the section, not a panic at first read.
#[test]
fn a_code_section_past_the_end_of_the_file_is_an_error() {
    use object::read::elf::FileHeader;
    use object::write::{Object, StandardSection};
    let d = tmp("section-past-end");
    let mut obj = Object::new(object::BinaryFormat::Elf, object::Architecture::X86_64, object::Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    obj.append_section_data(text, &[0x55, 0xc3], 16);
    let mut bytes = obj.write().unwrap();
    // Place .text at an address, then point its bytes far past the end.
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&*bytes).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, &*bytes).unwrap();
    let (index, _) = sections.iter().enumerate().find(|(_, s)| sections.section_name(endian, s).unwrap() == b".text").unwrap();
    let at = header.e_shoff(endian) as usize + index * header.e_shentsize(endian) as usize;
    bytes[at + 16..at + 24].copy_from_slice(&0x1000u64.to_le_bytes());
    bytes[at + 24..at + 32].copy_from_slice(&0x7474_7474_7474_7474u64.to_le_bytes());
    let path = d.join("bad.o");
    std::fs::write(&path, &bytes).unwrap();

    let err = BaseImage::new().add_elf(&path).unwrap_err().to_string();
    assert!(err.contains("bad.o") && err.contains(".text") && err.contains("past the end"), "{err}");
    let err = BaseImage::new().add_elf_sections(&path, &[(".text", 0xffff_ffff_c000_0000)]).unwrap_err().to_string();
    assert!(err.contains("bad.o") && err.contains(".text"), "{err}");
}
