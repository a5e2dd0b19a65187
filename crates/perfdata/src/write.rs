//! Writing perf.data files that Linux perf reads.
//!
//! Layout written: header (104 bytes), attr id arrays, attrs, data section,
//! feature section table, feature payloads. As perf does, the header goes
//! first with a data size of 0, and [`Writer::finish`] rewrites it with the
//! sizes and the feature bits. Until then the file is one that readers know
//! as unfinished ([`crate::Unfinished`]); [`Writer::flush`] (at the end of
//! each round, see [`Writer::finish_round`]) puts the records so far into
//! it, so a writer killed at any moment leaves them readable.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use crate::abi::{feature, misc, record_type as rt, sample_type as st, BRANCH_SAMPLE_HW_INDEX};
use crate::attr::{AttrWithIds, EventAttr};
use crate::branch::BranchStack;
use crate::error::{Error, Result};
use crate::features::{BuildIdEntry, NrCpus};
use crate::file::{FILE_HEADER_SIZE, MAGIC};
use crate::records::{Mmap2FileId, RecordBody};
use crate::sample::{Sample, SampleId};

/// Feature sections to write. HEADER_AUXTRACE is added by the writer itself
/// when AUXTRACE records were written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureData {
    pub hostname: Option<String>,
    pub osrelease: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    pub nrcpus: Option<NrCpus>,
    pub cpudesc: Option<String>,
    pub cpuid: Option<String>,
    pub cmdline: Option<Vec<String>>,
    pub build_ids: Vec<BuildIdEntry>,
    /// Event names for HEADER_EVENT_DESC, one per attr, in attr order.
    pub event_names: Option<Vec<String>>,
    /// HEADER_BRANCH_STACK (no payload): samples carry branch stacks.
    pub branch_stack: bool,
}

/// Streams records into a perf.data file.
pub struct Writer<W: Write + Seek> {
    out: W,
    attrs: Vec<AttrWithIds>,
    by_id: HashMap<u64, usize>,
    data_offset: u64,
    pos: u64,
    auxtrace_index: Vec<(u64, u64)>,
    scratch: Vec<u8>,
    /// Features written by [`Writer::finish`].
    pub features: FeatureData,
}

impl Writer<BufWriter<File>> {
    /// Creates `path` (a plain perf.data file).
    pub fn create(path: impl AsRef<Path>, attrs: Vec<AttrWithIds>) -> Result<Self> {
        let path = path.as_ref();
        let f = create_private(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        let mut w = Writer::new(BufWriter::with_capacity(1 << 20, f), attrs)?;
        w.flush()?;
        Ok(w)
    }
}

/// Creates (or truncates) a file readable by its owner only, as perf creates
/// perf.data: it may hold kernel addresses and code.
pub fn create_private(path: &Path) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Creates `dir` and its missing parents, mode 0700 (as perf makes
/// kcore_dir); an existing directory is left as it is.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

impl<W: Write + Seek> Writer<W> {
    /// Starts a file with these event descriptions (at least one).
    pub fn new(mut out: W, attrs: Vec<AttrWithIds>) -> Result<Self> {
        if attrs.is_empty() {
            return Err(Error::Unwritable { what: "perf.data", reason: "no attrs: perf needs at least one event".into() });
        }
        let attr_size = attrs[0].attr.size;
        if attrs.iter().any(|a| a.attr.size != attr_size) {
            return Err(Error::Unwritable { what: "attrs", reason: "all attrs must have the same size".into() });
        }
        let attrs_size = attrs.len() as u64 * attr_entry_size(&attrs);
        out.write_all(&file_header(&attrs, FILE_HEADER_SIZE + ids_size(&attrs) + attrs_size, 0, &[0; 32]))?;
        let mut pos = FILE_HEADER_SIZE;
        let mut by_id = HashMap::new();
        for (i, a) in attrs.iter().enumerate() {
            for id in &a.ids {
                out.write_all(&id.to_le_bytes())?;
                by_id.insert(*id, i);
            }
            pos += 8 * a.ids.len() as u64;
        }
        let mut ids_off = FILE_HEADER_SIZE;
        for a in &attrs {
            out.write_all(&a.attr.to_bytes())?;
            out.write_all(&ids_off.to_le_bytes())?;
            out.write_all(&(8 * a.ids.len() as u64).to_le_bytes())?;
            ids_off += 8 * a.ids.len() as u64;
            pos += a.attr.to_bytes().len() as u64 + 16;
        }
        Ok(Writer { out, attrs, by_id, data_offset: pos, pos, auxtrace_index: Vec::new(), scratch: Vec::new(), features: FeatureData::default() })
    }

    /// Where the next record goes.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Writes out every buffered record: a reader of the file as it is now,
    /// or after this process is killed, finds them all.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }

    /// Ends a round as perf does (a FINISHED_ROUND record: readers may sort
    /// what came before it by time) and [`Writer::flush`]es; returns the
    /// record's offset.
    pub fn finish_round(&mut self) -> Result<u64> {
        let offset = self.write(0, &RecordBody::FinishedRound, &SampleId::default())?;
        self.flush()?;
        Ok(offset)
    }

    fn attr_for(&self, id: Option<u64>) -> &EventAttr {
        let i = id.and_then(|id| self.by_id.get(&id)).copied().unwrap_or(0);
        &self.attrs[i].attr
    }

    /// Appends one record; returns its file offset. Non-sample kernel records
    /// get the sample_id trailer of the attr named by `sample_id`'s id (or the
    /// first attr). For SAMPLE the fields come from the body, laid out by the
    /// attr its id names.
    pub fn write(&mut self, misc_bits: u16, body: &RecordBody<'_>, sample_id: &SampleId) -> Result<u64> {
        let ty = body.record_type();
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(&[0u8; 8]);
        let mut misc_bits = misc_bits;
        let mut payload: &[u8] = &[];
        match body {
            RecordBody::Sample(s) => {
                let attr = self.attr_for(s.identifier.or(s.id)).clone();
                if let (true, Some(raw)) = (attr.sample_type & st::BRANCH_STACK != 0, s.branch_stack) {
                    let hw_index = attr.branch_sample_type & BRANCH_SAMPLE_HW_INDEX != 0;
                    BranchStack::parse(raw, hw_index, self.pos).map_err(|e| Error::Unwritable { what: "sample", reason: e.to_string() })?;
                }
                encode_sample(&mut buf, s, &attr);
            }
            RecordBody::Auxtrace(a) => {
                payload = a.data;
                put64(&mut buf, pad8(a.data.len()) as u64);
                put64(&mut buf, a.offset);
                put64(&mut buf, a.reference);
                put32(&mut buf, a.idx);
                put32(&mut buf, a.tid);
                put32(&mut buf, a.cpu);
                put32(&mut buf, 0);
            }
            _ => {
                encode_body(&mut buf, body, &mut misc_bits);
                if ty < rt::USER_TYPE_START {
                    let attr = self.attr_for(sample_id.attr_id()).clone();
                    encode_sample_id(&mut buf, sample_id, &attr);
                }
            }
        }
        let size = buf.len();
        if size > u16::MAX as usize {
            let what = crate::abi::record_type_name(ty).unwrap_or("record");
            return Err(Error::Unwritable { what, reason: format!("{size} bytes exceed the 65535 a record can hold") });
        }
        buf[0..4].copy_from_slice(&ty.to_le_bytes());
        buf[4..6].copy_from_slice(&misc_bits.to_le_bytes());
        buf[6..8].copy_from_slice(&(size as u16).to_le_bytes());
        let offset = self.pos;
        self.out.write_all(&buf)?;
        self.pos += size as u64;
        if ty == rt::AUXTRACE {
            self.out.write_all(payload)?;
            let pad = pad8(payload.len()) - payload.len();
            self.out.write_all(&[0u8; 8][..pad])?;
            self.pos += pad8(payload.len()) as u64;
            self.auxtrace_index.push((offset, size as u64));
        }
        self.scratch = buf;
        Ok(offset)
    }

    /// Appends one record exactly as given (header, body, sample_id trailer),
    /// as the kernel wrote it into a ring buffer; returns its file offset.
    /// Its header.size must be its length. AUXTRACE, whose payload follows
    /// the record, goes through [`Writer::write`].
    pub fn write_raw(&mut self, record: &[u8]) -> Result<u64> {
        let size = record.get(6..8).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
        let ty = record.get(0..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        if size != Some(record.len()) || ty == Some(rt::AUXTRACE) {
            let reason = format!("{} bytes with header type {ty:?} size {size:?}", record.len());
            return Err(Error::Unwritable { what: "raw record", reason });
        }
        let offset = self.pos;
        self.out.write_all(record)?;
        self.pos += record.len() as u64;
        Ok(offset)
    }

    /// Writes the feature sections and the final header; returns the output.
    pub fn finish(mut self) -> Result<W> {
        let data_size = self.pos - self.data_offset;
        let mut sections: Vec<(u32, Vec<u8>)> = Vec::new();
        let f = &self.features;
        let mut string = |bit, s: &Option<String>| {
            if let Some(s) = s {
                let mut b = Vec::new();
                put_perf_string(&mut b, s);
                sections.push((bit, b));
            }
        };
        string(feature::HOSTNAME, &f.hostname);
        string(feature::OSRELEASE, &f.osrelease);
        string(feature::VERSION, &f.version);
        string(feature::ARCH, &f.arch);
        string(feature::CPUDESC, &f.cpudesc);
        string(feature::CPUID, &f.cpuid);
        if !f.build_ids.is_empty() {
            let mut b = Vec::new();
            for e in &f.build_ids {
                let name_len = pad8(e.filename.len() + 1);
                put32(&mut b, rt::HEADER_BUILD_ID);
                put16(&mut b, e.misc | misc::BUILD_ID_SIZE);
                put16(&mut b, (8 + 4 + 24 + name_len) as u16);
                put32(&mut b, e.pid as u32);
                let mut id = [0u8; 24];
                let n = e.build_id.len().min(20);
                id[..n].copy_from_slice(&e.build_id[..n]);
                id[20] = n as u8;
                b.extend_from_slice(&id);
                put_padded(&mut b, e.filename.as_bytes(), name_len);
            }
            sections.push((feature::BUILD_ID, b));
        }
        if let Some(n) = f.nrcpus {
            let mut b = Vec::new();
            put32(&mut b, n.available);
            put32(&mut b, n.online);
            sections.push((feature::NRCPUS, b));
        }
        if let Some(args) = &f.cmdline {
            let mut b = Vec::new();
            put32(&mut b, args.len() as u32);
            for a in args {
                put_perf_string(&mut b, a);
            }
            sections.push((feature::CMDLINE, b));
        }
        if let Some(names) = &f.event_names {
            let mut b = Vec::new();
            put32(&mut b, self.attrs.len() as u32);
            put32(&mut b, self.attrs[0].attr.to_bytes().len() as u32);
            for (a, name) in self.attrs.iter().zip(names.iter().chain(std::iter::repeat(&String::new()))) {
                b.extend_from_slice(&a.attr.to_bytes());
                put32(&mut b, a.ids.len() as u32);
                put_perf_string(&mut b, name);
                for id in &a.ids {
                    put64(&mut b, *id);
                }
            }
            sections.push((feature::EVENT_DESC, b));
        }
        if f.branch_stack {
            sections.push((feature::BRANCH_STACK, Vec::new()));
        }
        if !self.auxtrace_index.is_empty() {
            let mut b = Vec::new();
            put64(&mut b, self.auxtrace_index.len() as u64);
            for &(off, sz) in &self.auxtrace_index {
                put64(&mut b, off);
                put64(&mut b, sz);
            }
            sections.push((feature::AUXTRACE, b));
        }
        sections.sort_by_key(|s| s.0);
        let mut bitmap = [0u8; 32];
        let mut payload_off = self.pos + 16 * sections.len() as u64;
        for (bit, data) in &sections {
            bitmap[(*bit / 8) as usize] |= 1 << (bit % 8);
            self.out.write_all(&payload_off.to_le_bytes())?;
            self.out.write_all(&(data.len() as u64).to_le_bytes())?;
            payload_off += data.len() as u64;
        }
        for (_, data) in &sections {
            self.out.write_all(data)?;
        }
        let h = file_header(&self.attrs, self.data_offset, data_size, &bitmap);
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&h)?;
        self.out.seek(SeekFrom::End(0))?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Bytes of the attr id arrays, which follow the header.
fn ids_size(attrs: &[AttrWithIds]) -> u64 {
    attrs.iter().map(|a| 8 * a.ids.len() as u64).sum()
}

/// Bytes of one attrs section entry: the attr and its id array's offset and size.
fn attr_entry_size(attrs: &[AttrWithIds]) -> u64 {
    attrs[0].attr.to_bytes().len() as u64 + 16
}

/// The 104-byte file header: the attrs follow the id arrays, the data the attrs.
fn file_header(attrs: &[AttrWithIds], data_offset: u64, data_size: u64, features: &[u8; 32]) -> Vec<u8> {
    let attr_entry = attr_entry_size(attrs);
    let mut h = Vec::with_capacity(FILE_HEADER_SIZE as usize);
    h.extend_from_slice(MAGIC);
    let attrs_at = FILE_HEADER_SIZE + ids_size(attrs);
    for v in [FILE_HEADER_SIZE, attr_entry, attrs_at, attr_entry * attrs.len() as u64, data_offset, data_size, 0, 0] {
        put64(&mut h, v);
    }
    h.extend_from_slice(features);
    h
}

fn pad8(n: usize) -> usize {
    (n + 7) & !7
}
fn put16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_padded(b: &mut Vec<u8>, s: &[u8], len: usize) {
    b.extend_from_slice(s);
    b.resize(b.len() + len - s.len(), 0);
}
/// A NUL-terminated string padded so the record stays 8-byte aligned.
fn put_c_string(b: &mut Vec<u8>, s: &[u8]) {
    let end = pad8(b.len() + s.len() + 1);
    b.extend_from_slice(s);
    b.resize(end, 0);
}
/// perf's header string: u32 length (NUL included, padded to 64 bytes as perf does) then bytes.
fn put_perf_string(b: &mut Vec<u8>, s: &str) {
    let len = (s.len() + 1).div_ceil(64) * 64;
    put32(b, len as u32);
    put_padded(b, s.as_bytes(), len);
}

fn encode_body(b: &mut Vec<u8>, body: &RecordBody<'_>, misc_bits: &mut u16) {
    match body {
        RecordBody::Mmap(m) => {
            put32(b, m.pid);
            put32(b, m.tid);
            put64(b, m.addr);
            put64(b, m.len);
            put64(b, m.pgoff);
            put_c_string(b, m.filename);
        }
        RecordBody::Mmap2(m) => {
            put32(b, m.pid);
            put32(b, m.tid);
            put64(b, m.addr);
            put64(b, m.len);
            put64(b, m.pgoff);
            match m.file_id {
                Mmap2FileId::Inode { maj, min, ino, ino_generation } => {
                    *misc_bits &= !misc::MMAP_BUILD_ID;
                    put32(b, maj);
                    put32(b, min);
                    put64(b, ino);
                    put64(b, ino_generation);
                }
                Mmap2FileId::BuildId(id) => {
                    *misc_bits |= misc::MMAP_BUILD_ID;
                    let n = id.len().min(20);
                    b.push(n as u8);
                    b.extend_from_slice(&[0; 3]);
                    put_padded(b, &id[..n], 20);
                }
            }
            put32(b, m.prot);
            put32(b, m.flags);
            put_c_string(b, m.filename);
        }
        RecordBody::Comm(c) => {
            put32(b, c.pid);
            put32(b, c.tid);
            put_c_string(b, c.comm);
        }
        RecordBody::Fork(f) | RecordBody::Exit(f) => {
            for v in [f.pid, f.ppid, f.tid, f.ptid] {
                put32(b, v);
            }
            put64(b, f.time);
        }
        RecordBody::Lost(l) => {
            put64(b, l.id);
            put64(b, l.lost);
        }
        RecordBody::LostSamples(l) => put64(b, l.lost),
        RecordBody::Throttle(t) | RecordBody::Unthrottle(t) => {
            put64(b, t.time);
            put64(b, t.id);
            put64(b, t.stream_id);
        }
        RecordBody::Aux(a) => {
            put64(b, a.aux_offset);
            put64(b, a.aux_size);
            put64(b, a.flags);
        }
        RecordBody::ItraceStart(i) => {
            put32(b, i.pid);
            put32(b, i.tid);
        }
        RecordBody::Switch | RecordBody::FinishedRound | RecordBody::FinishedInit => {}
        RecordBody::SwitchCpuWide(s) => {
            put32(b, s.next_prev_pid);
            put32(b, s.next_prev_tid);
        }
        RecordBody::Ksymbol(k) => {
            put64(b, k.addr);
            put32(b, k.len);
            put16(b, k.ksym_type);
            put16(b, k.flags);
            put_c_string(b, k.name);
        }
        RecordBody::BpfEvent(e) => {
            put16(b, e.event_type);
            put16(b, e.flags);
            put32(b, e.id);
            b.extend_from_slice(&e.tag);
        }
        RecordBody::TextPoke(p) => {
            put64(b, p.addr);
            put16(b, p.old.len() as u16);
            put16(b, p.new.len() as u16);
            b.extend_from_slice(p.old);
            b.extend_from_slice(p.new);
            b.resize(pad8(b.len()), 0);
        }
        RecordBody::HeaderAttr(h) => {
            b.extend_from_slice(&h.attr.to_bytes());
            b.extend_from_slice(h.ids);
        }
        RecordBody::IdIndex(ix) => {
            put64(b, ix.entries.len() as u64);
            for e in &ix.entries {
                for v in [e.id, e.idx, e.cpu, e.tid] {
                    put64(b, v);
                }
            }
        }
        RecordBody::AuxtraceInfo(i) => {
            put32(b, i.auxtrace_type);
            put32(b, 0);
            b.extend_from_slice(i.priv_data);
        }
        RecordBody::TimeConv(t) => {
            put64(b, t.time_shift);
            put64(b, t.time_mult);
            put64(b, t.time_zero);
            if let Some(x) = t.extended {
                put64(b, x.time_cycles);
                put64(b, x.time_mask);
                b.push(x.cap_user_time_zero as u8);
                b.push(x.cap_user_time_short as u8);
                b.extend_from_slice(&[0; 6]);
            }
        }
        RecordBody::Compressed(c) => b.extend_from_slice(c.data),
        RecordBody::Other { data, .. } => b.extend_from_slice(data),
        RecordBody::Sample(_) | RecordBody::Auxtrace(_) => unreachable!("written by Writer::write"),
    }
}

fn encode_sample_id(b: &mut Vec<u8>, s: &SampleId, attr: &EventAttr) {
    if !attr.sample_id_all() {
        return;
    }
    let t = attr.sample_type;
    if t & st::TID != 0 {
        put32(b, s.pid.unwrap_or(0));
        put32(b, s.tid.unwrap_or(0));
    }
    if t & st::TIME != 0 {
        put64(b, s.time.unwrap_or(0));
    }
    if t & st::ID != 0 {
        put64(b, s.id.or(s.identifier).unwrap_or(0));
    }
    if t & st::STREAM_ID != 0 {
        put64(b, s.stream_id.unwrap_or(0));
    }
    if t & st::CPU != 0 {
        put32(b, s.cpu.unwrap_or(0));
        put32(b, 0);
    }
    if t & st::IDENTIFIER != 0 {
        put64(b, s.identifier.or(s.id).unwrap_or(0));
    }
}

/// Lays out a sample by `attr.sample_type`; absent fields are written as zero
/// (variable-size ones as empty).
fn encode_sample(b: &mut Vec<u8>, s: &Sample<'_>, attr: &EventAttr) {
    let t = attr.sample_type;
    let has = |bit| t & bit != 0;
    let z = |v: Option<u64>| v.unwrap_or(0);
    if has(st::IDENTIFIER) {
        put64(b, s.identifier.or(s.id).unwrap_or(0));
    }
    if has(st::IP) {
        put64(b, z(s.ip));
    }
    if has(st::TID) {
        put32(b, s.pid.unwrap_or(0));
        put32(b, s.tid.unwrap_or(0));
    }
    if has(st::TIME) {
        put64(b, z(s.time));
    }
    if has(st::ADDR) {
        put64(b, z(s.addr));
    }
    if has(st::ID) {
        put64(b, s.id.or(s.identifier).unwrap_or(0));
    }
    if has(st::STREAM_ID) {
        put64(b, z(s.stream_id));
    }
    if has(st::CPU) {
        put32(b, s.cpu.unwrap_or(0));
        put32(b, 0);
    }
    if has(st::PERIOD) {
        put64(b, z(s.period));
    }
    if has(st::READ) {
        match s.read {
            Some(r) => b.extend_from_slice(r),
            None => {
                let rf = attr.read_format;
                let n = if rf & crate::abi::read_format::GROUP != 0 {
                    8 + 8 * ((rf & 3).count_ones() as usize)
                } else {
                    8 * ((rf & 3).count_ones() as usize) + attr.read_value_size()
                };
                b.resize(b.len() + n, 0);
            }
        }
    }
    if has(st::CALLCHAIN) {
        let cc = s.callchain.unwrap_or_default();
        put64(b, (cc.len() / 8) as u64);
        b.extend_from_slice(&cc[..cc.len() / 8 * 8]);
    }
    if has(st::RAW) {
        let raw = s.raw.unwrap_or_default();
        put32(b, raw.len() as u32);
        b.extend_from_slice(raw);
    }
    if has(st::BRANCH_STACK) {
        match s.branch_stack {
            Some(r) => b.extend_from_slice(r),
            None => {
                put64(b, 0);
                if attr.branch_sample_type & BRANCH_SAMPLE_HW_INDEX != 0 {
                    put64(b, 0);
                }
            }
        }
    }
    let raw_or_zero = |b: &mut Vec<u8>, v: Option<&[u8]>| match v {
        Some(r) => b.extend_from_slice(r),
        None => put64(b, 0),
    };
    if has(st::REGS_USER) {
        raw_or_zero(b, s.regs_user);
    }
    if has(st::STACK_USER) {
        raw_or_zero(b, s.stack_user);
    }
    if has(st::WEIGHT) || has(st::WEIGHT_STRUCT) {
        put64(b, z(s.weight));
    }
    if has(st::DATA_SRC) {
        put64(b, z(s.data_src));
    }
    if has(st::TRANSACTION) {
        put64(b, z(s.transaction));
    }
    if has(st::REGS_INTR) {
        raw_or_zero(b, s.regs_intr);
    }
    if has(st::PHYS_ADDR) {
        put64(b, z(s.phys_addr));
    }
    if has(st::CGROUP) {
        put64(b, z(s.cgroup));
    }
    if has(st::DATA_PAGE_SIZE) {
        put64(b, z(s.data_page_size));
    }
    if has(st::CODE_PAGE_SIZE) {
        put64(b, z(s.code_page_size));
    }
    if has(st::AUX) {
        let aux = s.aux.unwrap_or_default();
        put64(b, aux.len() as u64);
        b.extend_from_slice(aux);
    }
}
