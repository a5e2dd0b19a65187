//! perf.data pieces for tests of side-band: a writer for kernel side-band
//! (TEXT_POKE), and for user code the attr and the executable MMAP2
//! records that name files.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use perfdata::abi::{attr_flag, sample_type as st};
use perfdata::{AttrWithIds, EventAttr, Mmap2, Mmap2FileId, RecordBody, SampleId, Writer, ATTR_SIZE_VER7};

/// A perf.data writer with the one attr kernel side-band needs: TEXT_POKE
/// records with sample_id_all (tid, time, cpu), id 1.
pub fn sideband_writer(path: impl AsRef<Path>) -> Writer<BufWriter<File>> {
    let attr = EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        sample_type: st::TID | st::TIME | st::CPU,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::TEXT_POKE,
        ..EventAttr::default()
    };
    Writer::create(path, vec![AttrWithIds { attr, ids: vec![1] }]).unwrap()
}

/// The one attr (id 1) of user side-band: MMAP2 records with sample_id_all (tid, time).
pub fn mmap2_attrs() -> Vec<AttrWithIds> {
    let attr = EventAttr {
        type_: 1,
        size: ATTR_SIZE_VER7,
        sample_type: st::TID | st::TIME,
        flags: attr_flag::SAMPLE_ID_ALL | attr_flag::MMAP2,
        ..EventAttr::default()
    };
    vec![AttrWithIds { attr, ids: vec![1] }]
}

/// An executable mapping (PROT_READ|PROT_EXEC, MAP_PRIVATE) of 0x1000 bytes
/// of `name` from file offset 0 at `addr`, by task 7, with the file's
/// build-id in the record when given.
pub fn exec_mmap2<'a>(name: &'a str, addr: u64, build_id: Option<&'a [u8]>) -> RecordBody<'a> {
    let file_id = match build_id {
        Some(id) => Mmap2FileId::BuildId(id),
        None => Mmap2FileId::Inode { maj: 8, min: 1, ino: 42, ino_generation: 0 },
    };
    RecordBody::Mmap2(Mmap2 { pid: 7, tid: 7, addr, len: 0x1000, pgoff: 0, file_id, prot: 5, flags: 2, filename: name.as_bytes() })
}

/// The sample_id of a record by task 7 at `time`.
pub fn task7_at(time: u64) -> SampleId {
    SampleId { pid: Some(7), tid: Some(7), time: Some(time), ..SampleId::default() }
}
