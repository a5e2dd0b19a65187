//! The side-band read in one pass in perf's delivery order: mappings still
//! come in file order, every KSYMBOL's range is listed, and the timeline is
//! the one `from_perf_data` builds.

use codeimage::*;
use perfdata::abi::{ksymbol_type, misc, KSYMBOL_FLAG_UNREGISTER};
use perfdata::{Ksymbol, PerfFile, RecordBody, TextPoke, Writer};

/// Mappings written at falling times (delivered in time order), a KSYMBOL
/// registered and unregistered, and a poke inside it.
fn perf_data() -> PerfFile {
    let mut w = Writer::new(std::io::Cursor::new(Vec::new()), testkit::perf::mmap2_attrs()).unwrap();
    let at = testkit::perf::task7_at;
    for (i, name) in ["/a", "/b", "/c"].iter().enumerate() {
        w.write(misc::USER, &testkit::perf::exec_mmap2(name, 0x1000 * (i as u64 + 1), None), &at(30 - 10 * i as u64)).unwrap();
    }
    let k = |flags| Ksymbol { addr: 0xffff_ffff_a000_0000, len: 0x100, ksym_type: ksymbol_type::OOL, flags, name: b"tramp" };
    w.write(misc::KERNEL, &RecordBody::Ksymbol(k(0)), &at(40)).unwrap();
    let poke = TextPoke { addr: 0xffff_ffff_a000_0010, old: &[0x90], new: &[0xcc] };
    w.write(misc::KERNEL, &RecordBody::TextPoke(poke), &at(45)).unwrap();
    w.write(misc::KERNEL, &RecordBody::Ksymbol(k(KSYMBOL_FLAG_UNREGISTER)), &at(50)).unwrap();
    PerfFile::from_vec(w.finish().unwrap().into_inner()).unwrap()
}

#[test]
fn one_pass_gives_what_the_separate_readers_give() {
    let file = perf_data();
    let side = Sideband::read(&file, PokeEvents::Single);
    let names = |m: &[UserMapping<'_>]| m.iter().map(|m| (m.addr, m.name.to_vec())).collect::<Vec<_>>();
    assert_eq!(names(&side.mappings), names(&user_mappings(&file)));
    assert_eq!(side.mappings.iter().map(|m| m.name).collect::<Vec<_>>(), [b"/a", b"/b", b"/c"], "file order, not time order");
    let tramp = 0xffff_ffff_a000_0000..0xffff_ffff_a000_0100;
    assert_eq!(side.ksymbols, [tramp.clone(), tramp]);
    let mut base = BaseImage::new();
    base.add_bytes(0xffff_ffff_a000_0000, vec![0x90; 0x100], "tramp");
    let one = side.timeline(base.clone());
    let other = over_base(&file, base, PokeEvents::Single).unwrap();
    assert_eq!((one.pokes, one.errors.len()), (1, 0));
    for t in [44, 45] {
        assert_eq!(one.timeline.read(0xffff_ffff_a000_0010, 1, t), other.timeline.read(0xffff_ffff_a000_0010, 1, t));
    }
    assert_ne!(one.timeline.read(0xffff_ffff_a000_0010, 1, 44), one.timeline.read(0xffff_ffff_a000_0010, 1, 45), "the poke applies at 45");
}
