//! Opening perf.data (file, directory or pipe-mode capture) and walking its records.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::abi::{record_type as rt, sample_type as st};
use crate::attr::{AttrWithIds, EventAttr, ATTR_SIZE_VER0};
use crate::cursor::{Cursor, Origin};
use crate::error::{Error, Result};
use crate::features::{slice_at, Features};
use crate::records::{parse_body, Auxtrace, Record, RecordBody};
use crate::sample::SampleId;

/// The magic of a little-endian perf.data file.
pub const MAGIC: &[u8; 8] = b"PERFILE2";
/// The magic as a big-endian host writes it.
const MAGIC_BIG_ENDIAN: &[u8; 8] = b"2ELIFREP";
/// Size of the file header in file mode.
pub const FILE_HEADER_SIZE: u64 = 104;
/// Where the header's data size is: after magic, size, attr_size, the
/// attrs' offset and size, and the data offset.
const DATA_SIZE_AT: u64 = 48;
/// Size of the header in pipe mode.
pub const PIPE_HEADER_SIZE: u64 = 16;
/// Decompressed bytes allowed per COMPRESSED record (perf uses 64 KiB chunks).
const MAX_DECOMPRESSED: u64 = 256 << 20;
/// Decompressed bytes allowed for the whole file: all of it is kept while the
/// file is open, so this bounds the memory a zstd bomb can take.
pub const MAX_DECOMPRESSED_TOTAL: u64 = 1 << 30;

/// The 104-byte header of a perf.data file (file mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileHeader {
    pub attr_size: u64,
    pub attrs_offset: u64,
    pub attrs_size: u64,
    pub data_offset: u64,
    pub data_size: u64,
    pub event_types_offset: u64,
    pub event_types_size: u64,
    /// 256 feature bits; see [`crate::abi::feature`].
    pub features: [u8; 32],
}

enum Bytes {
    Map(crate::mapped::MappedFile),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A file whose writer never finished (killed, or still writing): `perf
/// record` and `poketrace record` write the header first with a data size
/// of 0 and fix the sizes up at the end. perf warns of such a file ("data
/// size field is 0 ... Was the 'perf record' command properly terminated?")
/// and then reads none of its records; here they are read up to the end of
/// the file, after an [`Error::Unfinished`] that says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unfinished {
    /// Where the records start.
    pub data_offset: u64,
    /// Where the file ends.
    pub file_len: u64,
}

/// An open perf.data. Records borrow from it; the data file is memory-mapped.
pub struct PerfFile {
    data_path: PathBuf,
    dir: Option<PathBuf>,
    bytes: Bytes,
    /// None in pipe mode.
    header: Option<FileHeader>,
    attrs: Vec<AttrWithIds>,
    features: Features,
    unfinished: Option<Unfinished>,
    /// What the COMPRESSED records hold, made on first need.
    decompressed: OnceLock<Decompressed>,
}

impl PerfFile {
    /// Opens a perf.data file, or a perf.data directory (`DIR/data`, with `kcore_dir/` beside it).
    pub fn open(path: impl AsRef<Path>) -> Result<PerfFile> {
        let path = path.as_ref();
        let (data_path, dir) = if path.is_dir() { (path.join("data"), Some(path.to_path_buf())) } else { (path.to_path_buf(), None) };
        let io_err = |source| Error::Io { path: data_path.clone(), source };
        let file = std::fs::File::open(&data_path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let bytes = if len == 0 { Bytes::Owned(Vec::new()) } else { Bytes::Map(crate::mapped::MappedFile::map(&file, &data_path).map_err(io_err)?) };
        Self::from_bytes(bytes, data_path, dir)
    }

    /// Lets the system drop from memory the pages wholly inside `bytes`, a
    /// slice of this file's data (a record's, say) that will not be read
    /// again soon: see [`crate::mapped::MappedFile::release`]. Bytes held in
    /// memory (a pipe, a decompressed record) are kept.
    pub fn release(&self, bytes: &[u8]) {
        let Bytes::Map(m) = &self.bytes else { return };
        let start = (bytes.as_ptr() as usize).wrapping_sub(m.as_ptr() as usize);
        if start <= m.len() && bytes.len() <= m.len() - start {
            m.release(start..start + bytes.len());
        }
    }

    /// Parses perf.data held in memory.
    pub fn from_vec(data: Vec<u8>) -> Result<PerfFile> {
        Self::from_bytes(Bytes::Owned(data), PathBuf::from("<memory>"), None)
    }

    fn from_bytes(bytes: Bytes, data_path: PathBuf, dir: Option<PathBuf>) -> Result<PerfFile> {
        let mut c = Cursor::new(&bytes, Origin::file(0), "perf.data header");
        let magic: [u8; 8] = c.array()?;
        if &magic == MAGIC_BIG_ENDIAN {
            return Err(Error::BigEndian);
        }
        if &magic != MAGIC {
            return Err(Error::BadMagic { magic });
        }
        let size = c.u64()?;
        let mut f = PerfFile {
            data_path,
            dir,
            header: None,
            attrs: Vec::new(),
            features: Features::default(),
            unfinished: None,
            decompressed: OnceLock::new(),
            bytes: Bytes::Owned(Vec::new()),
        };
        match size {
            PIPE_HEADER_SIZE => {}
            FILE_HEADER_SIZE => {
                let h = FileHeader {
                    attr_size: c.u64()?,
                    attrs_offset: c.u64()?,
                    attrs_size: c.u64()?,
                    data_offset: c.u64()?,
                    data_size: c.u64()?,
                    event_types_offset: c.u64()?,
                    event_types_size: c.u64()?,
                    features: c.array()?,
                };
                f.attrs = parse_attrs(&bytes, &h)?;
                let len = bytes.len() as u64;
                let table = h.data_offset.saturating_add(h.data_size);
                let unfinished = h.data_size == 0 && len > h.data_offset && !feature_table_at(&bytes, &h, h.data_offset);
                f.unfinished = unfinished.then_some(Unfinished { data_offset: h.data_offset, file_len: len });
                // The feature sections of an unfinished file were never written:
                // its bits (perf sets them at the start) would point into the records.
                f.features = match f.unfinished {
                    Some(_) => Features::default(),
                    None => Features::parse(&bytes, table, &h.features)
                        .unwrap_or_else(|e| Features { errors: vec![e.to_string()], ..Features::default() }),
                };
                f.header = Some(h);
            }
            other => {
                return Err(Error::invalid(
                    "perf.data header",
                    8,
                    format!("header size {other} is neither {FILE_HEADER_SIZE} (file) nor {PIPE_HEADER_SIZE} (pipe)"),
                ))
            }
        }
        f.bytes = bytes;
        Ok(f)
    }

    /// The data file's path (`DIR/data` for a directory).
    pub fn data_path(&self) -> &Path {
        &self.data_path
    }

    /// `DIR/kcore_dir` when opened as a directory that has one.
    pub fn kcore_dir(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("kcore_dir")).filter(|k| k.is_dir())
    }

    /// Whether the data file was cut short while it was read: the bytes past
    /// its new end read as zeros (see [`crate::mapped`]).
    pub fn cut_short(&self) -> bool {
        match &self.bytes {
            Bytes::Map(m) => m.cut_short(),
            Bytes::Owned(_) => false,
        }
    }

    /// The whole data file.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The file header; `None` for pipe-mode data.
    pub fn header(&self) -> Option<&FileHeader> {
        self.header.as_ref()
    }

    pub fn is_pipe(&self) -> bool {
        self.header.is_none()
    }

    /// Whether the header shows that the file was never finished; then
    /// [`PerfFile::records`] yields an [`Error::Unfinished`] first.
    pub fn unfinished(&self) -> Option<Unfinished> {
        self.unfinished
    }

    /// Event descriptions from the attrs section (pipe mode: none; they come as
    /// HEADER_ATTR records, which [`Records`] applies as it meets them).
    pub fn attrs(&self) -> &[AttrWithIds] {
        &self.attrs
    }

    pub fn features(&self) -> &Features {
        &self.features
    }

    /// Records in file order, COMPRESSED ones followed by what they hold.
    pub fn records(&self) -> Records<'_> {
        let (start, end) = self.data_range();
        let declared_end = match self.unfinished {
            Some(_) => None,
            None => self.header.map(|h| h.data_offset.saturating_add(h.data_size)),
        };
        let unfinished = self.unfinished.map(|u| Error::Unfinished {
            offset: DATA_SIZE_AT,
            reason: format!(
                "the header's data size is 0, as a recording that was killed or is still running leaves it: the records from \
                 {:#x} to the end of the file ({:#x}) are read, and there are no feature sections",
                u.data_offset, u.file_len
            ),
        });
        Records {
            file: self,
            layout: Layout::new(self.attrs.clone()),
            outer: Frame { data: &self.bytes, pos: start as usize, end: end as usize, origin: Origin::file(0) },
            declared_end,
            inner: None,
            unfinished,
            done: false,
            released: 0,
        }
    }

    fn decompressed(&self) -> &Decompressed {
        self.decompressed.get_or_init(|| {
            let (start, end) = self.data_range();
            Decompressed::build(&self.bytes[..end as usize], start as usize, Limits { per_record: MAX_DECOMPRESSED, total: MAX_DECOMPRESSED_TOTAL })
        })
    }

    /// The data section's bytes, clamped to the file (to its end when the
    /// data size was never written).
    fn data_range(&self) -> (u64, u64) {
        match &self.header {
            Some(h) if self.unfinished.is_some() => (h.data_offset, self.bytes.len() as u64),
            Some(h) => {
                let len = self.bytes.len() as u64;
                (h.data_offset.min(len), h.data_offset.saturating_add(h.data_size).min(len))
            }
            None => (PIPE_HEADER_SIZE, self.bytes.len() as u64),
        }
    }
}

/// Whether a feature section table starts at `at`: its first entry points
/// just past the table, where perf and [`crate::Writer`] put the first
/// section. (A finished file with no records has its table at the data
/// offset; a killed one has a record there, whose first eight bytes read as
/// an offset far past any file.)
fn feature_table_at(bytes: &[u8], h: &FileHeader, at: u64) -> bool {
    let sections: u64 = h.features.iter().map(|b| b.count_ones() as u64).sum();
    let first = usize::try_from(at).ok().and_then(|at| bytes.get(at..at.checked_add(8)?)).map(crate::cursor::u64_from_chunk);
    sections > 0 && first == Some(at + 16 * sections)
}

/// The records inside COMPRESSED records, by the offset of each COMPRESSED record.
///
/// perf compresses with one zstd stream: a frame may continue from one
/// COMPRESSED record into the next, and a record may be split between the
/// output of two. So all of them are decompressed in file order, once, and
/// each record's output holds whole records only (a cut tail moves to the next).
#[derive(Default)]
struct Decompressed {
    by_offset: HashMap<u64, std::result::Result<Box<[u8]>, String>>,
    /// Bytes of a record cut at the end of the last COMPRESSED record.
    leftover: usize,
}

/// Bounds on decompressed bytes, per COMPRESSED record and for the file.
#[derive(Clone, Copy)]
struct Limits {
    per_record: u64,
    total: u64,
}

impl Decompressed {
    fn build(data: &[u8], start: usize, limits: Limits) -> Decompressed {
        let mut kept: u64 = 0;
        let mut d = Decompressed::default();
        let mut decoder = match zstd::stream::raw::Decoder::new() {
            Ok(dec) => dec,
            Err(_) => return d,
        };
        let mut carry: Vec<u8> = Vec::new();
        let mut failed: Option<String> = None;
        let mut pos = start;
        while let Some(len) = framed_len(&data[pos..]) {
            let ty = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap());
            if ty == rt::COMPRESSED {
                let payload = &data[pos + 8..pos + len];
                let result = match &failed {
                    Some(why) => Err(format!("an earlier COMPRESSED record failed ({why})")),
                    None => {
                        let room = limits.per_record.min(limits.total - kept);
                        inflate(&mut decoder, carry, payload, room).map_err(|e| match e {
                            Inflate::TooBig if room < limits.per_record => {
                                format!("the file's COMPRESSED records hold more than {} bytes in all", limits.total)
                            }
                            Inflate::TooBig => format!("more than {} bytes", limits.per_record),
                            Inflate::Zstd(why) => why,
                        })
                    }
                };
                carry = Vec::new();
                let entry = result.map(|mut out| {
                    let whole = whole_records_len(&out);
                    carry = out.split_off(whole);
                    kept += out.len() as u64;
                    out.into_boxed_slice()
                });
                if let Err(e) = &entry {
                    failed.get_or_insert_with(|| e.clone());
                }
                d.by_offset.insert(pos as u64, entry);
            }
            pos += len;
        }
        d.leftover = carry.len();
        d
    }
}

/// Runs `payload` through the stream decoder, after `carry`. perf flushes
/// the stream at the end of each COMPRESSED record without ending the frame,
/// so a stream that stops inside a frame is normal and not an error.
fn inflate(decoder: &mut zstd::stream::raw::Decoder<'static>, carry: Vec<u8>, payload: &[u8], limit: u64) -> std::result::Result<Vec<u8>, Inflate> {
    use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
    let mut out = carry;
    let mut input = InBuffer::around(payload);
    let mut chunk = vec![0u8; 128 << 10];
    loop {
        let mut output = OutBuffer::around(&mut chunk[..]);
        let before = input.pos();
        decoder.run(&mut input, &mut output).map_err(|e| Inflate::Zstd(e.to_string()))?;
        let produced = output.pos();
        if produced == 0 && input.pos() == before && input.pos() < payload.len() {
            return Err(Inflate::Zstd("the zstd decoder makes no progress".to_string()));
        }
        if (out.len() + produced) as u64 > limit {
            return Err(Inflate::TooBig);
        }
        out.extend_from_slice(&chunk[..produced]);
        if input.pos() == payload.len() && produced < chunk.len() {
            return Ok(out);
        }
    }
}

/// Why [`inflate`] failed.
enum Inflate {
    /// The output would pass the limit it was given.
    TooBig,
    Zstd(String),
}

/// Length of the framed record at the start of `data` (header.size plus an
/// AUXTRACE or TRACING_DATA payload), if it is sound and fits.
fn framed_len(data: &[u8]) -> Option<usize> {
    let header = data.get(..8)?;
    let ty = u32::from_le_bytes(header[..4].try_into().unwrap());
    let size = u16::from_le_bytes(header[6..8].try_into().unwrap()) as usize;
    if size < 8 {
        return None;
    }
    let trailing = match ty {
        rt::AUXTRACE => data.get(8..16).map(crate::cursor::u64_from_chunk)?,
        rt::HEADER_TRACING_DATA => (u32::from_le_bytes(data.get(8..12)?.try_into().unwrap()) as u64 + 7) & !7,
        _ => 0,
    };
    let len = (size as u64).checked_add(trailing)?;
    (len <= data.len() as u64).then_some(len as usize)
}

/// How many leading bytes of `data` are whole records. A record whose header
/// is not sound counts as whole, so that the reader reports it; so does one
/// whose `header.size` bytes are there but whose AUXTRACE or TRACING_DATA
/// payload is not (perf never compresses those; carrying it over would swallow
/// every later COMPRESSED record into a carry that never completes).
fn whole_records_len(data: &[u8]) -> usize {
    let mut pos = 0;
    while data.len() - pos >= 8 {
        let size = u16::from_le_bytes([data[pos + 6], data[pos + 7]]) as usize;
        if size < 8 {
            return data.len();
        }
        match framed_len(&data[pos..]) {
            Some(len) => pos += len,
            None if size <= data.len() - pos => return data.len(),
            None => break,
        }
    }
    pos
}

fn parse_attrs(file: &[u8], h: &FileHeader) -> Result<Vec<AttrWithIds>> {
    if h.attrs_size == 0 {
        return Ok(Vec::new());
    }
    if h.attr_size < ATTR_SIZE_VER0 as u64 + 16 || !h.attrs_size.is_multiple_of(h.attr_size) {
        return Err(Error::invalid(
            "attrs section",
            h.attrs_offset,
            format!("attr_size {} does not divide attrs size {} or is too small", h.attr_size, h.attrs_size),
        ));
    }
    let section = slice_at(file, h.attrs_offset, h.attrs_size, "attrs section")?;
    let mut attrs = Vec::new();
    // perf writes each attr's ids once; arrays that overlap could make the
    // ids take (number of attrs) x (file size) bytes.
    let mut ids_total = 0u64;
    for (i, entry) in section.chunks_exact(h.attr_size as usize).enumerate() {
        let at = h.attrs_offset + i as u64 * h.attr_size;
        let attr_bytes = &entry[..entry.len() - 16];
        let attr = EventAttr::parse(attr_bytes);
        let ids_off = crate::cursor::le_u64(entry, entry.len() - 16);
        let ids_size = crate::cursor::le_u64(entry, entry.len() - 8);
        if !ids_size.is_multiple_of(8) {
            return Err(Error::invalid("attr id array", at, format!("size {ids_size} is not a multiple of 8")));
        }
        ids_total = ids_total.saturating_add(ids_size);
        if ids_total > file.len() as u64 {
            return Err(Error::invalid(
                "attr id array",
                at,
                format!("the id arrays up to this attr take {ids_total} bytes, more than the {}-byte file", file.len()),
            ));
        }
        let ids = slice_at(file, ids_off, ids_size, "attr id array")?.chunks_exact(8).map(crate::cursor::u64_from_chunk).collect();
        attrs.push(AttrWithIds { attr, ids });
    }
    Ok(attrs)
}

/// How to find the sample_id trailer and the attr of each record.
#[derive(Clone, Debug, Default)]
struct Layout {
    attrs: Vec<AttrWithIds>,
    by_id: HashMap<u64, usize>,
    /// Every attr has PERF_SAMPLE_IDENTIFIER: the id is the last word of a trailer.
    all_identifier: bool,
}

impl Layout {
    fn new(attrs: Vec<AttrWithIds>) -> Layout {
        let mut l = Layout { attrs: Vec::new(), ..Layout::default() };
        for a in attrs {
            l.add(a);
        }
        l
    }

    fn add(&mut self, a: AttrWithIds) {
        let index = self.attrs.len();
        for &id in &a.ids {
            self.by_id.insert(id, index);
        }
        // Kept up to date as attrs come (not recomputed: that is quadratic in the attrs).
        self.all_identifier = (index == 0 || self.all_identifier) && a.attr.sample_type & st::IDENTIFIER != 0;
        self.attrs.push(a);
    }

    /// The attr of a non-sample record whose trailer ends `record`.
    fn attr_for_trailer(&self, record: &[u8]) -> Option<&EventAttr> {
        let first = &self.attrs.first()?.attr;
        if self.all_identifier && self.attrs.len() > 1 && record.len() >= 16 {
            let id = crate::cursor::le_u64(record, record.len() - 8);
            if let Some(&i) = self.by_id.get(&id) {
                return Some(&self.attrs[i].attr);
            }
        }
        Some(first)
    }

    /// The attr of a SAMPLE record whose body (after the header) is `body`.
    fn attr_for_sample(&self, body: &[u8]) -> Option<&EventAttr> {
        let first = &self.attrs.first()?.attr;
        if self.attrs.len() == 1 {
            return Some(first);
        }
        let pos = if self.all_identifier { Some(0) } else { id_position(first.sample_type) };
        pos.and_then(|p| body.get(p..p + 8))
            .and_then(|b| self.by_id.get(&crate::cursor::u64_from_chunk(b)))
            .map(|&i| &self.attrs[i].attr)
            .or(Some(first))
    }
}

/// Byte offset of the ID field in a sample laid out by `sample_type`.
fn id_position(sample_type: u64) -> Option<usize> {
    if sample_type & st::IDENTIFIER != 0 {
        return Some(0);
    }
    if sample_type & st::ID == 0 {
        return None;
    }
    Some([st::IP, st::TID, st::TIME, st::ADDR].iter().filter(|&&b| sample_type & b != 0).count() * 8)
}

/// A byte range being walked: the file's data section or a decompressed buffer.
#[derive(Clone, Copy)]
struct Frame<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    origin: Origin,
}

/// What went wrong with one record: either it can be skipped (its size is sound) or not.
enum Failure {
    Skip(Error, usize),
    Stop(Error),
}

/// Iterator over records in file order. After an error in one record whose
/// framing is sound, it goes on with the next; after a framing error, it stops.
pub struct Records<'a> {
    file: &'a PerfFile,
    layout: Layout,
    outer: Frame<'a>,
    declared_end: Option<u64>,
    /// The decompressed records of the COMPRESSED record being walked.
    inner: Option<Frame<'a>>,
    /// Said before the first record: the file was never finished.
    unfinished: Option<Error>,
    done: bool,
    /// Where the pages of the file read so far were let go of
    /// ([`PerfFile::release`]) up to, so that a pass over a large file does
    /// not keep it all in the process's memory.
    released: usize,
}

/// Bytes of records read between two releases of the pages behind them.
const RELEASE_STEP: usize = 1 << 20;

impl<'a> Records<'a> {
    /// The attrs known so far (pipe mode adds them as HEADER_ATTR records pass).
    pub fn attrs(&self) -> &[AttrWithIds] {
        &self.layout.attrs
    }

    fn read_one(&mut self, frame: Frame<'a>) -> std::result::Result<(Record<'a>, usize), Failure> {
        let Frame { data, pos, end, origin } = frame;
        let at = origin.advanced(pos as u64);
        let mut c = Cursor::new(&data[pos..end], at, "record header");
        let hdr = (|| Ok::<_, Error>((c.u32()?, c.u16()?, c.u16()?)))();
        let (ty, misc, size) = hdr.map_err(Failure::Stop)?;
        let what = crate::abi::record_type_name(ty).unwrap_or("record");
        if (size as usize) < 8 {
            let reason = format!("{what} record (type {ty}) has size {size}, below its 8-byte header");
            return Err(Failure::Stop(Error::Invalid { what: "record header", offset: at.offset, inner: at.inner, reason }));
        }
        let mut c = Cursor::new(&data[pos..end], at, what);
        let whole = c.bytes(size as usize).map_err(Failure::Stop)?;
        let mut next = pos + size as usize;
        // Payloads that follow the record without being counted in its size.
        let mut payload: &[u8] = &[];
        if ty == rt::AUXTRACE || ty == rt::HEADER_TRACING_DATA {
            let trailing = if ty == rt::AUXTRACE {
                whole.get(8..16).map(crate::cursor::u64_from_chunk)
            } else {
                whole.get(8..12).map(|b| (u32::from_le_bytes(b.try_into().unwrap()) as u64 + 7) & !7)
            };
            let trailing = trailing.ok_or_else(|| Failure::Stop(c.truncated(16)))?;
            payload = c.items(trailing, 1).map_err(|_| {
                Failure::Stop(Error::Truncated {
                    what,
                    offset: at.offset,
                    inner: at.inner,
                    needed: trailing,
                    available: (end - pos - size as usize) as u64,
                })
            })?;
            next += payload.len();
        }
        let body = &whole[8..];
        let skip = |e| Failure::Skip(e, next);
        let body_origin = at.advanced(8);
        let record = if ty == rt::SAMPLE {
            let attr = self.layout.attr_for_sample(body);
            let parsed = parse_body(ty, body, body_origin, misc, attr, what).map_err(skip)?;
            let sample_id = match &parsed {
                RecordBody::Sample(s) => s.sample_id(),
                _ => SampleId::default(),
            };
            Record { offset: at.offset, inner_offset: at.inner, misc, size, body: parsed, sample_id }
        } else if ty < rt::USER_TYPE_START {
            let (trailer_len, sample_type) = match self.layout.attr_for_trailer(whole) {
                Some(a) => (a.sample_id_size(), a.sample_type),
                None => (0, 0),
            };
            if trailer_len > body.len() {
                return Err(skip(Error::Invalid {
                    what,
                    offset: at.offset,
                    inner: at.inner,
                    reason: format!("record of {size} bytes cannot hold its {trailer_len}-byte sample_id"),
                }));
            }
            let (fields, trailer) = body.split_at(body.len() - trailer_len);
            let trailer_origin = body_origin.advanced(fields.len() as u64);
            let sample_id = SampleId::parse(&mut Cursor::new(trailer, trailer_origin, what), sample_type).map_err(skip)?;
            let parsed = parse_body(ty, fields, body_origin, misc, None, what).map_err(skip)?;
            Record { offset: at.offset, inner_offset: at.inner, misc, size, body: parsed, sample_id }
        } else if ty == rt::AUXTRACE {
            let mut b = Cursor::new(body, body_origin, what);
            let r = (|| {
                let _size = b.u64()?;
                Ok::<_, Error>(Auxtrace { offset: b.u64()?, reference: b.u64()?, idx: b.u32()?, tid: b.u32()?, cpu: b.u32()?, data: payload })
            })()
            .map_err(skip)?;
            Record { offset: at.offset, inner_offset: at.inner, misc, size, body: RecordBody::Auxtrace(r), sample_id: SampleId::default() }
        } else {
            let parsed = parse_body(ty, body, body_origin, misc, None, what).map_err(skip)?;
            if let RecordBody::HeaderAttr(h) = &parsed {
                self.layout.add(h.to_attr_with_ids());
            }
            Record { offset: at.offset, inner_offset: at.inner, misc, size, body: parsed, sample_id: SampleId::default() }
        };
        Ok((record, next))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.unfinished.take() {
            return Some(Err(e));
        }
        if let Some(frame) = self.inner.take() {
            if frame.pos < frame.end {
                return Some(match self.read_one(frame) {
                    Ok((r, next)) => {
                        self.inner = Some(Frame { pos: next, ..frame });
                        Ok(r)
                    }
                    Err(Failure::Skip(e, next)) => {
                        self.inner = Some(Frame { pos: next, ..frame });
                        Err(e)
                    }
                    Err(Failure::Stop(e)) => Err(e),
                });
            }
        }
        if self.done {
            return None;
        }
        if self.outer.pos >= self.outer.end {
            self.done = true;
            if let Some(declared) = self.declared_end {
                if declared > self.outer.end as u64 {
                    return Some(Err(Error::Truncated {
                        what: "data section",
                        offset: self.outer.end as u64,
                        inner: None,
                        needed: declared - self.outer.end as u64,
                        available: 0,
                    }));
                }
            }
            let leftover = self.file.decompressed.get().map_or(0, |d| d.leftover);
            if leftover > 0 {
                return Some(Err(Error::Truncated {
                    what: "record in COMPRESSED data",
                    offset: self.outer.end as u64,
                    inner: None,
                    needed: 8,
                    available: leftover as u64,
                }));
            }
            return None;
        }
        Some(match self.read_one(self.outer) {
            Ok((r, next)) => {
                let start = std::mem::replace(&mut self.outer.pos, next);
                if start >= self.released + RELEASE_STEP {
                    // (Up to this record, which is read next; from the
                    // start: the page the last release ended in goes too.)
                    self.file.release(&self.outer.data[..start]);
                    self.released = start;
                }
                if let RecordBody::Compressed(_) = r.body {
                    match self.file.decompressed().by_offset.get(&r.offset) {
                        Some(Ok(buf)) => {
                            let frame = Frame { data: buf, pos: 0, end: buf.len(), origin: Origin { offset: r.offset, inner: Some(0) } };
                            self.inner = Some(frame);
                        }
                        Some(Err(reason)) => return Some(Err(Error::Decompress { offset: r.offset, reason: reason.clone() })),
                        None => {}
                    }
                }
                Ok(r)
            }
            Err(Failure::Skip(e, next)) => {
                self.outer.pos = next;
                Err(e)
            }
            Err(Failure::Stop(e)) => {
                self.done = true;
                Err(e)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` COMPRESSED records, each a zstd frame of `each` bytes of FINISHED_ROUND records.
    fn bomb(n: usize, each: usize) -> (Vec<u8>, Vec<u64>) {
        let round = [rt::FINISHED_ROUND.to_le_bytes().as_slice(), &0u16.to_le_bytes(), &8u16.to_le_bytes()].concat();
        let frame = zstd::bulk::compress(&round.repeat(each / 8), 3).unwrap();
        let mut data = Vec::new();
        let mut offsets = Vec::new();
        for _ in 0..n {
            offsets.push(data.len() as u64);
            data.extend_from_slice(&rt::COMPRESSED.to_le_bytes());
            data.extend_from_slice(&0u16.to_le_bytes());
            data.extend_from_slice(&((8 + frame.len()) as u16).to_le_bytes());
            data.extend_from_slice(&frame);
        }
        (data, offsets)
    }

    #[test]
    fn total_decompressed_bytes_are_capped() {
        let (data, offsets) = bomb(20, 64 << 10);
        let d = Decompressed::build(&data, 0, Limits { per_record: 1 << 20, total: 256 << 10 });
        let kept: usize = offsets.iter().filter_map(|o| d.by_offset[o].as_ref().ok()).map(|b| b.len()).sum();
        assert_eq!(kept, 256 << 10, "exactly the first four records are kept");
        let first_error = offsets.iter().position(|o| d.by_offset[o].is_err()).unwrap();
        assert_eq!(first_error, 4);
        let why = d.by_offset[&offsets[4]].as_ref().unwrap_err();
        assert!(why.contains("in all") && why.contains(&(256u64 << 10).to_string()), "{why}");
        assert!(offsets[5..].iter().all(|o| d.by_offset[o].is_err()));
    }

    #[test]
    fn per_record_cap_is_reported_as_such() {
        let (data, offsets) = bomb(2, 64 << 10);
        let d = Decompressed::build(&data, 0, Limits { per_record: 32 << 10, total: 1 << 30 });
        let why = d.by_offset[&offsets[0]].as_ref().unwrap_err();
        assert_eq!(why, &format!("more than {} bytes", 32 << 10));
    }
}
