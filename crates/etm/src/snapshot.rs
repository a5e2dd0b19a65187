//! OpenCSD / DS-5 trace snapshots ("ARM Trace and Debug Snapshot file
//! format 0v2"): `snapshot.ini` lists device files and the trace metadata
//! file; a core device has registers and memory dumps, a trace source
//! (ETMv4, STM, ...) its registers; `trace.ini` names the trace buffers and
//! which source writes into which buffer for which core.
//!
//! This module reads the description; [`Snapshot::code_image`] loads the
//! memory dumps as a code image, and buffers are read on request.

mod code;

use std::path::{Path, PathBuf};

use crate::config::{EtmV4Config, Profile};
use crate::error::{Error, Result};
use crate::frame::{Container, Framing};

/// One `[section]` of an ini file with its `key=value` lines.
#[derive(Clone, Debug)]
struct Section {
    name: String,
    line: usize,
    entries: Vec<(String, String, usize)>,
}

impl Section {
    fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|(k, _, _)| k.eq_ignore_ascii_case(key)).map(|(_, v, _)| v.as_str())
    }
}

fn parse_ini(path: &Path) -> Result<Vec<Section>> {
    let text = std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let text = String::from_utf8_lossy(&text);
    let mut sections: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let Some(name) = name.strip_suffix(']') else {
                return Err(Error::snapshot(path, i + 1, format!("unterminated section header {line:?}")));
            };
            sections.push(Section { name: name.trim().to_string(), line: i + 1, entries: Vec::new() });
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(Error::snapshot(path, i + 1, format!("expected key=value, found {line:?}")));
        };
        let Some(section) = sections.last_mut() else {
            return Err(Error::snapshot(path, i + 1, "key=value before any [section]"));
        };
        section.entries.push((k.trim().to_string(), v.trim().to_string(), i + 1));
    }
    Ok(sections)
}

fn section<'s>(sections: &'s [Section], name: &str) -> Option<&'s Section> {
    sections.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// `0x..` hex or decimal.
fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A register line of a device file: `NAME`, `NAME(0x004)`, `NAME(id:0x4)`,
/// `NAME(size:64)` or `NAME(id:0x100,size:64)` = value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Register {
    pub name: String,
    pub id: Option<u32>,
    pub size: Option<u32>,
    pub value: u64,
}

fn parse_register(key: &str, value: &str) -> std::result::Result<Register, String> {
    let (name, attrs) = match key.split_once('(') {
        Some((n, rest)) => (n.trim(), rest.strip_suffix(')').ok_or_else(|| format!("unclosed ( in register {key:?}"))?),
        None => (key.trim(), ""),
    };
    let mut reg = Register { name: name.to_string(), id: None, size: None, value: 0 };
    for attr in attrs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let (k, v) = attr.split_once(':').unwrap_or(("id", attr));
        let n = parse_num(v).ok_or_else(|| format!("bad number {v:?} in register {key:?}"))? as u32;
        match k.trim() {
            "id" => reg.id = Some(n),
            "size" => reg.size = Some(n),
            other => return Err(format!("unknown register attribute {other:?}")),
        }
    }
    reg.value = parse_num(value).ok_or_else(|| format!("bad value {value:?} for register {name}"))?;
    Ok(reg)
}

/// A raw memory image of a core (`[dump...]` section).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryDump {
    /// The file, relative paths resolved against the snapshot directory.
    pub file: PathBuf,
    pub address: u64,
    /// Bytes to use; None: the file's size (less `offset`).
    pub length: Option<u64>,
    /// Offset of the image in the file.
    pub offset: Option<u64>,
    /// Memory space (`EL2`, `S`, `N`, ...), when given.
    pub space: Option<String>,
}

/// One device file: a core, a trace source, or anything else.
#[derive(Clone, Debug)]
pub struct Device {
    pub name: String,
    /// `core`, `trace_source`, ...
    pub class: String,
    /// `Cortex-A53`, `ETM4`, `ETM4.2`, `STM`, ...
    pub kind: String,
    pub path: PathBuf,
    pub registers: Vec<Register>,
    pub dumps: Vec<MemoryDump>,
}

impl Device {
    /// A register's value by name (case-insensitive).
    pub fn register(&self, name: &str) -> Option<u64> {
        self.registers.iter().find(|r| r.name.eq_ignore_ascii_case(name)).map(|r| r.value)
    }

    /// Whether this is an ETMv4 trace source (`ETM4`, `ETM4.x`).
    pub fn is_etmv4(&self) -> bool {
        self.kind.split('.').next().is_some_and(|k| k.eq_ignore_ascii_case("ETM4"))
    }

    fn load(path: &Path, dir: &Path) -> Result<Device> {
        let sections = parse_ini(path)?;
        let dev = section(&sections, "device").ok_or_else(|| Error::snapshot(path, 1, "no [device] section"))?;
        let mut d = Device {
            name: dev.get("name").unwrap_or_default().to_string(),
            class: dev.get("class").unwrap_or_default().to_string(),
            kind: dev.get("type").unwrap_or_default().to_string(),
            path: path.to_path_buf(),
            registers: Vec::new(),
            dumps: Vec::new(),
        };
        if let Some(regs) = section(&sections, "regs") {
            for (k, v, line) in &regs.entries {
                d.registers.push(parse_register(k, v).map_err(|r| Error::snapshot(path, *line, r))?);
            }
        }
        for s in sections.iter().filter(|s| s.name.to_ascii_lowercase().starts_with("dump")) {
            let bad = |what: &str| Error::snapshot(path, s.line, format!("[{}]: {what}", s.name));
            let num =
                |key: &str| -> Result<Option<u64>> { s.get(key).map(|v| parse_num(v).ok_or_else(|| bad(&format!("bad {key}={v}")))).transpose() };
            let file = s.get("file").ok_or_else(|| bad("no file="))?;
            d.dumps.push(MemoryDump {
                file: dir.join(file),
                address: num("address")?.ok_or_else(|| bad("no address="))?,
                length: num("length")?,
                offset: num("offset")?,
                space: s.get("space").map(str::to_string),
            });
        }
        Ok(d)
    }
}

/// How a trace buffer file is laid out (`format=` in trace.ini).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferFormat {
    /// `coresight`: 16-byte frames, memory aligned.
    Coresight,
    /// `source_data`: one source's bytes, unframed.
    SourceData,
    /// `dstream_coresight`: a DSTREAM probe's capture of a TPIU port:
    /// frames between FSYNCs, in 512-byte blocks with 8-byte footers.
    DstreamCoresight,
    Other(String),
}

impl BufferFormat {
    fn parse(s: &str) -> BufferFormat {
        match s.to_ascii_lowercase().as_str() {
            "coresight" => BufferFormat::Coresight,
            "source_data" => BufferFormat::SourceData,
            "dstream_coresight" => BufferFormat::DstreamCoresight,
            _ => BufferFormat::Other(s.to_string()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceBuffer {
    pub name: String,
    pub file: PathBuf,
    pub format: BufferFormat,
}

/// A parsed snapshot directory.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub dir: PathBuf,
    pub version: Option<String>,
    pub devices: Vec<Device>,
    /// Cluster name and its core names (`[clusters]`).
    pub clusters: Vec<(String, Vec<String>)>,
    /// In trace.ini order.
    pub buffers: Vec<TraceBuffer>,
    /// Trace source name to buffer name (`[source_buffers]`).
    pub source_buffers: Vec<(String, String)>,
    /// Core name to trace source name (`[core_trace_sources]`).
    pub core_trace_sources: Vec<(String, String)>,
    /// Device files of the device list that could not be read, skipped as
    /// trc_pkt_lister skips them: one line each.
    pub skipped_devices: Vec<String>,
}

/// What decoding one buffer needs: its framing and its ETMv4 sources.
#[derive(Clone, Debug)]
pub struct BufferSetup {
    pub buffer: TraceBuffer,
    pub framing: Framing,
    /// DSTREAM captures (`dstream_coresight`) come in blocks with footers.
    pub container: Container,
    /// ETMv4 sources writing into the buffer (name, configuration), by name.
    pub sources: Vec<(String, EtmV4Config)>,
    /// Other sources writing into it (name, type): not decoded.
    pub unsupported: Vec<(String, String)>,
    /// Sources writing into it that have no device (its file is missing): not decoded.
    pub missing: Vec<String>,
}

impl Snapshot {
    pub fn load(dir: impl AsRef<Path>) -> Result<Snapshot> {
        let dir = dir.as_ref();
        let path = dir.join("snapshot.ini");
        let sections = parse_ini(&path)?;
        let mut snap = Snapshot {
            dir: dir.to_path_buf(),
            version: section(&sections, "snapshot").and_then(|s| s.get("version")).map(str::to_string),
            devices: Vec::new(),
            clusters: Vec::new(),
            buffers: Vec::new(),
            source_buffers: Vec::new(),
            core_trace_sources: Vec::new(),
            skipped_devices: Vec::new(),
        };
        if let Some(list) = section(&sections, "device_list") {
            for (_, file, _) in &list.entries {
                match Device::load(&dir.join(file), dir) {
                    Ok(dev) => snap.devices.push(dev),
                    Err(e @ Error::Io { .. }) => snap.skipped_devices.push(format!("device skipped: {e}")),
                    Err(e) => return Err(e),
                }
            }
        }
        if let Some(clusters) = section(&sections, "clusters") {
            for (name, cores, _) in &clusters.entries {
                snap.clusters.push((name.clone(), cores.split(',').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect()));
            }
        }
        if let Some(meta) = section(&sections, "trace").and_then(|s| s.get("metadata")) {
            snap.load_trace_metadata(&dir.join(meta))?;
        }
        Ok(snap)
    }

    fn load_trace_metadata(&mut self, path: &Path) -> Result<()> {
        let sections = parse_ini(path)?;
        let list = section(&sections, "trace_buffers").and_then(|s| s.get("buffers")).unwrap_or_default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let s = section(&sections, name).ok_or_else(|| Error::snapshot(path, 1, format!("buffer {name} has no [{name}] section")))?;
            let bad = |what: &str| Error::snapshot(path, s.line, format!("[{name}]: {what}"));
            self.buffers.push(TraceBuffer {
                name: s.get("name").ok_or_else(|| bad("no name="))?.to_string(),
                file: self.dir.join(s.get("file").ok_or_else(|| bad("no file="))?),
                format: BufferFormat::parse(s.get("format").unwrap_or("coresight")),
            });
        }
        let pairs = |name: &str| -> Vec<(String, String)> {
            section(&sections, name).map(|s| s.entries.iter().map(|(k, v, _)| (k.clone(), v.clone())).collect()).unwrap_or_default()
        };
        self.source_buffers = pairs("source_buffers");
        self.core_trace_sources = pairs("core_trace_sources");
        Ok(())
    }

    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }

    pub fn buffer(&self, name: &str) -> Option<&TraceBuffer> {
        self.buffers.iter().find(|b| b.name == name)
    }

    /// The core a trace source traces, if trace.ini names one.
    pub fn core_of(&self, source: &str) -> Option<&Device> {
        let core = self.core_trace_sources.iter().find(|(_, s)| s == source)?;
        self.device(&core.0)
    }

    /// The configuration of an ETMv4 source, from its registers (OpenCSD's
    /// defaults for TRCIDR1 and TRCIDR8-13 when absent) and its core's type.
    pub fn etm_config(&self, source: &Device) -> Result<EtmV4Config> {
        let need = |reg: &str| {
            source
                .register(reg)
                .map(|v| v as u32)
                .ok_or_else(|| Error::snapshot(&source.path, 1, format!("ETMv4 source {} has no {reg}", source.name)))
        };
        let d = EtmV4Config::default();
        let opt = |reg: &str, default: u32| source.register(reg).map_or(default, |v| v as u32);
        Ok(EtmV4Config {
            configr: need("TRCCONFIGR")?,
            traceidr: need("TRCTRACEIDR")?,
            idr0: need("TRCIDR0")?,
            idr1: opt("TRCIDR1", d.idr1),
            idr2: need("TRCIDR2")?,
            idr8: opt("TRCIDR8", 0),
            idr9: opt("TRCIDR9", 0),
            idr10: opt("TRCIDR10", 0),
            idr11: opt("TRCIDR11", 0),
            idr12: opt("TRCIDR12", 0),
            idr13: opt("TRCIDR13", 0),
            profile: self.core_of(&source.name).map_or(Profile::A, |c| Profile::from_core_type(&c.kind)),
        })
    }

    /// Framing and ETMv4 sources of a buffer. A `source_data` buffer holds
    /// one source: the first by name, as OpenCSD takes it.
    pub fn buffer_setup(&self, buffer: &str) -> Result<BufferSetup> {
        let b = self.buffer(buffer).ok_or_else(|| Error::snapshot(self.dir.join("snapshot.ini"), 1, format!("no trace buffer named {buffer}")))?;
        let mut names: Vec<&str> = self.source_buffers.iter().filter(|(_, buf)| buf == buffer).map(|(s, _)| s.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        if b.format == BufferFormat::SourceData {
            names.truncate(1);
        }
        let container = if b.format == BufferFormat::DstreamCoresight { Container::Dstream } else { Container::Plain };
        let mut setup = BufferSetup {
            buffer: b.clone(),
            framing: Framing::Aligned { reset_on_4x_fsync: false },
            container,
            sources: Vec::new(),
            unsupported: Vec::new(),
            missing: Vec::new(),
        };
        for name in names {
            let Some(dev) = self.device(name) else {
                if self.skipped_devices.is_empty() {
                    return Err(Error::snapshot(self.dir.join("snapshot.ini"), 1, format!("trace source {name} is not in the device list")));
                }
                setup.missing.push(name.to_string());
                continue;
            };
            if dev.is_etmv4() {
                setup.sources.push((name.to_string(), self.etm_config(dev)?));
            } else {
                setup.unsupported.push((name.to_string(), dev.kind.clone()));
            }
        }
        setup.framing = match &b.format {
            BufferFormat::Coresight => Framing::Aligned { reset_on_4x_fsync: false },
            BufferFormat::DstreamCoresight => Framing::Synced { hsyncs: false },
            // OpenCSD reports a single source's packets under ID 0.
            BufferFormat::SourceData => Framing::Raw { trace_id: 0 },
            BufferFormat::Other(f) => return Err(Error::snapshot(self.dir.join("snapshot.ini"), 1, format!("buffer {buffer}: unknown format {f}"))),
        };
        Ok(setup)
    }

    /// The bytes of a buffer's file.
    pub fn read_buffer(&self, buffer: &TraceBuffer) -> Result<Vec<u8>> {
        std::fs::read(&buffer.file).map_err(|source| Error::Io { path: buffer.file.clone(), source })
    }
}
