//! A streaming writer of the Trace Event Format (the JSON that Perfetto,
//! chrome://tracing and speedscope open) or of Perfetto's protobuf
//! ([`super::proto`]), gzipped when asked: events go out as they come, so
//! memory does not grow with the trace.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use flate2::write::GzEncoder;

use super::proto::{Event, EventType, ProtoWriter};
use super::tracks::Track;

/// Where the bytes go: a plain file or a gzip stream into one.
enum Sink {
    Plain(BufWriter<File>),
    Gzip(GzEncoder<BufWriter<File>>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
        }
    }
}

/// Writes `{"traceEvents":[...]}` one event a line. Times are perf
/// nanoseconds since `base`, written as the format's microseconds with six
/// decimals: three for the nanoseconds, three for the event's rank among
/// those of its track in the same nanosecond, so that viewers that sort by
/// time (speedscope) keep the order of calls and returns.
pub struct TefWriter {
    out: Sink,
    /// Perfetto's protobuf instead of JSON (files named .pftrace).
    proto: Option<ProtoWriter>,
    first: bool,
    base: u64,
    /// The last time written per track and its rank: a later event never goes before it.
    last: HashMap<Track, (u64, u16)>,
    /// Events whose time was raised to their track's last time.
    pub clamped: u64,
    pub events: u64,
}

impl TefWriter {
    /// Creates `path`; gzip when it ends in `.gz`, Perfetto's protobuf when
    /// it ends in `.pftrace` (or `.pftrace.gz`). JSON times are written from
    /// `base` (perf ns), which the file names as `otherData.perf_time_base_ns`;
    /// protobuf times are perf nanoseconds.
    pub fn create(path: &Path, base: u64) -> Result<TefWriter> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let buf = BufWriter::with_capacity(1 << 16, file);
        let mut out = match path.extension().is_some_and(|e| e == "gz") {
            true => Sink::Gzip(GzEncoder::new(buf, flate2::Compression::fast())),
            false => Sink::Plain(buf),
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let proto = (name.ends_with(".pftrace") || name.ends_with(".pftrace.gz")).then(ProtoWriter::new);
        if proto.is_none() {
            writeln!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{\"perf_time_base_ns\":{base}}},\"traceEvents\":[")?;
        }
        Ok(TefWriter { out, proto, first: true, base, last: HashMap::new(), clamped: 0, events: 0 })
    }

    /// The time and rank an event on `track` at `t` is written at: never before the track's last.
    fn at(&mut self, track: Track, t: u64) -> (u64, u16) {
        let last = self.last.entry(track).or_insert((t, 0));
        if t < last.0 {
            self.clamped += 1;
        }
        *last = if t > last.0 { (t, 0) } else { (last.0, (last.1 + 1).min(999)) };
        *last
    }

    fn open(&mut self, ph: &str, track: Track) -> Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.events += 1;
        write!(self.out, "{{\"ph\":\"{ph}\",\"pid\":{},\"tid\":{}", track.pid, track.tid)?;
        Ok(())
    }

    fn ts(&mut self, (t, rank): (u64, u16)) -> Result<()> {
        let t = t.saturating_sub(self.base);
        write!(self.out, ",\"ts\":{}.{:03}{rank:03}", t / 1000, t % 1000)?;
        Ok(())
    }

    fn name(&mut self, name: &str) -> Result<()> {
        self.out.write_all(b",\"name\":")?;
        serde_json::to_writer(&mut self.out, name)?;
        Ok(())
    }

    /// A slice begins; `cat` is the format's category.
    pub fn begin(&mut self, track: Track, t: u64, name: &str, cat: &str) -> Result<()> {
        let t = self.at(track, t);
        if let Some(p) = &mut self.proto {
            self.events += 1;
            return p.event(&mut self.out, Event { kind: EventType::SliceBegin, track, t: t.0, name, cat: Some(cat), args: None });
        }
        self.open("B", track)?;
        self.ts(t)?;
        self.name(name)?;
        write!(self.out, ",\"cat\":\"{cat}\"}}")?;
        Ok(())
    }

    /// A slice with arguments begins (shown by Perfetto on selection).
    pub fn begin_with(&mut self, track: Track, t: u64, name: &str, cat: &str, args: &serde_json::Value) -> Result<()> {
        let t = self.at(track, t);
        if let Some(p) = &mut self.proto {
            self.events += 1;
            return p.event(&mut self.out, Event { kind: EventType::SliceBegin, track, t: t.0, name, cat: Some(cat), args: Some(args) });
        }
        self.open("B", track)?;
        self.ts(t)?;
        self.name(name)?;
        write!(self.out, ",\"cat\":\"{cat}\",\"args\":")?;
        serde_json::to_writer(&mut self.out, args)?;
        self.out.write_all(b"}")?;
        Ok(())
    }

    /// The innermost open slice of `track`, named `name`, ends.
    pub fn end(&mut self, track: Track, t: u64, name: &str) -> Result<()> {
        let t = self.at(track, t);
        if let Some(p) = &mut self.proto {
            self.events += 1;
            return p.event(&mut self.out, Event { kind: EventType::SliceEnd, track, t: t.0, name, cat: None, args: None });
        }
        self.open("E", track)?;
        self.ts(t)?;
        self.name(name)?;
        self.out.write_all(b"}")?;
        Ok(())
    }

    /// An instant event on `track` with its arguments.
    pub fn instant(&mut self, track: Track, t: u64, name: &str, cat: &str, args: &serde_json::Value) -> Result<()> {
        let t = self.at(track, t);
        if let Some(p) = &mut self.proto {
            self.events += 1;
            return p.event(&mut self.out, Event { kind: EventType::Instant, track, t: t.0, name, cat: Some(cat), args: Some(args) });
        }
        self.open("i", track)?;
        self.ts(t)?;
        self.name(name)?;
        write!(self.out, ",\"s\":\"t\",\"cat\":\"{cat}\",\"args\":")?;
        serde_json::to_writer(&mut self.out, args)?;
        self.out.write_all(b"}")?;
        Ok(())
    }

    /// Names a process (`thread` None) or a thread; `order` sorts tracks in viewers.
    pub fn name_track(&mut self, track: Track, thread: Option<&str>, process: Option<&str>, order: Option<i64>) -> Result<()> {
        if let Some(p) = &mut self.proto {
            return p.describe(&mut self.out, track, thread, process);
        }
        for (what, name) in [("process_name", process), ("thread_name", thread)] {
            if let Some(name) = name {
                self.open("M", track)?;
                write!(self.out, ",\"name\":\"{what}\",\"args\":{{\"name\":")?;
                serde_json::to_writer(&mut self.out, name)?;
                self.out.write_all(b"}}")?;
            }
        }
        if let Some(order) = order {
            self.open("M", track)?;
            write!(self.out, ",\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{order}}}}}")?;
        }
        Ok(())
    }

    /// Closes the JSON (and the gzip stream) and flushes to disk.
    pub fn finish(mut self) -> Result<()> {
        if self.proto.is_none() {
            self.out.write_all(b"\n]}\n")?;
        }
        match self.out {
            Sink::Plain(mut w) => w.flush()?,
            Sink::Gzip(w) => w.finish()?.flush()?,
        }
        Ok(())
    }
}
