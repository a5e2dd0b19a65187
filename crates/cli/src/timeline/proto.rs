//! Perfetto's protobuf trace (TracePacket with TrackDescriptor and
//! TrackEvent), the compact form of the timeline: each packet is encoded
//! into one reused buffer and written as a `Trace.packet` field; event
//! names and categories are interned (sent once, then referred to by id).

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;

use super::tracks::Track;

/// Field numbers of perfetto_trace.proto used here.
mod field {
    pub const TRACE_PACKET: u32 = 1;
    pub const TIMESTAMP: u32 = 8;
    pub const SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const INTERNED_CATEGORIES: u32 = 1;
    pub const INTERNED_NAMES: u32 = 2;
    pub const INTERNED_IID: u32 = 1;
    pub const INTERNED_NAME: u32 = 2;
    pub const EVENT_CATEGORY_IIDS: u32 = 3;
    pub const EVENT_NAME_IID: u32 = 10;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    pub const EVENT_ANNOTATIONS: u32 = 4;
    pub const EVENT_TYPE: u32 = 9;
    pub const EVENT_TRACK: u32 = 11;
    pub const ANNOTATION_UINT: u32 = 3;
    pub const ANNOTATION_INT: u32 = 4;
    pub const ANNOTATION_STRING: u32 = 6;
    pub const ANNOTATION_NAME: u32 = 10;
    pub const TRACK_UUID: u32 = 1;
    pub const TRACK_NAME: u32 = 2;
    pub const TRACK_PROCESS: u32 = 3;
    pub const TRACK_THREAD: u32 = 4;
    pub const PROCESS_PID: u32 = 1;
    pub const PROCESS_NAME: u32 = 6;
    pub const THREAD_PID: u32 = 1;
    pub const THREAD_TID: u32 = 2;
    pub const THREAD_NAME: u32 = 5;
}

/// TrackEvent.Type.
#[derive(Clone, Copy)]
pub enum EventType {
    SliceBegin = 1,
    SliceEnd = 2,
    Instant = 3,
}

/// One TrackEvent: what, on which track, at which perf time.
pub struct Event<'a> {
    pub kind: EventType,
    pub track: Track,
    pub t: u64,
    pub name: &'a str,
    pub cat: Option<&'a str>,
    pub args: Option<&'a serde_json::Value>,
}

/// The one packet sequence all events are written on.
const SEQUENCE: u64 = 1;
/// SEQ_INCREMENTAL_STATE_CLEARED on the first packet, SEQ_NEEDS_INCREMENTAL_STATE after.
const FIRST_FLAGS: u64 = 1;
const LATER_FLAGS: u64 = 2;

/// `v` as a protobuf varint: the bytes and how many.
fn encode(mut v: u64) -> ([u8; 10], usize) {
    let (mut b, mut n) = ([0u8; 10], 0);
    while v >= 0x80 {
        b[n] = v as u8 | 0x80;
        v >>= 7;
        n += 1;
    }
    b[n] = v as u8;
    (b, n + 1)
}

fn varint(buf: &mut Vec<u8>, v: u64) {
    let (b, n) = encode(v);
    buf.extend_from_slice(&b[..n]);
}

fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    varint(buf, (field as u64) << 3);
    varint(buf, v);
}

fn bytes(buf: &mut Vec<u8>, field: u32, b: &[u8]) {
    varint(buf, (field as u64) << 3 | 2);
    varint(buf, b.len() as u64);
    buf.extend_from_slice(b);
}

/// A length-delimited field whose body `body` writes; the length is patched in after.
fn nested(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    varint(buf, (field as u64) << 3 | 2);
    let at = buf.len();
    body(buf);
    let (prefix, n) = encode((buf.len() - at) as u64);
    buf.splice(at..at, prefix[..n].iter().copied());
}

/// Strings sent once on the sequence, by interning id.
#[derive(Default)]
struct Interned {
    ids: HashMap<Box<str>, u64>,
}

impl Interned {
    /// The id of `s`, and whether it is new (to be sent in this packet).
    fn id(&mut self, s: &str) -> (u64, bool) {
        if let Some(&id) = self.ids.get(s) {
            return (id, false);
        }
        let id = self.ids.len() as u64 + 1;
        self.ids.insert(s.into(), id);
        (id, true)
    }
}

/// Encodes packets into `out`.
pub struct ProtoWriter {
    packet: Vec<u8>,
    first: bool,
    names: Interned,
    categories: Interned,
    /// Track uuids, small numbers in order of first use (short varints).
    uuids: HashMap<Track, u64>,
}

impl ProtoWriter {
    pub fn new() -> ProtoWriter {
        ProtoWriter {
            packet: Vec::with_capacity(256),
            first: true,
            names: Interned::default(),
            categories: Interned::default(),
            uuids: HashMap::new(),
        }
    }

    /// The uuid of a thread track (processes get theirs past every thread's).
    fn uuid(&mut self, t: Track) -> u64 {
        let next = self.uuids.len() as u64 + 1;
        *self.uuids.entry(t).or_insert(next)
    }

    fn flush(&mut self, out: &mut impl Write) -> Result<()> {
        let (key, k) = encode((field::TRACE_PACKET as u64) << 3 | 2);
        let (len, l) = encode(self.packet.len() as u64);
        out.write_all(&key[..k])?;
        out.write_all(&len[..l])?;
        out.write_all(&self.packet)?;
        self.packet.clear();
        Ok(())
    }

    fn start(&mut self, timestamp: Option<u64>) {
        let p = &mut self.packet;
        if let Some(t) = timestamp {
            uint(p, field::TIMESTAMP, t);
        }
        uint(p, field::SEQUENCE_ID, SEQUENCE);
        uint(p, field::SEQUENCE_FLAGS, if self.first { FIRST_FLAGS } else { LATER_FLAGS });
        self.first = false;
    }

    /// A TrackDescriptor: for a thread track (with its process), or a process alone.
    pub fn describe(&mut self, out: &mut impl Write, track: Track, thread: Option<&str>, process: Option<&str>) -> Result<()> {
        if let Some(name) = process {
            self.start(None);
            nested(&mut self.packet, field::TRACK_DESCRIPTOR, |d| {
                uint(d, field::TRACK_UUID, 1 << 63 | track.pid as u64);
                nested(d, field::TRACK_PROCESS, |p| {
                    uint(p, field::PROCESS_PID, track.pid as u64);
                    bytes(p, field::PROCESS_NAME, name.as_bytes());
                });
            });
            self.flush(out)?;
        }
        if let Some(name) = thread {
            let uuid = self.uuid(track);
            self.start(None);
            nested(&mut self.packet, field::TRACK_DESCRIPTOR, |d| {
                uint(d, field::TRACK_UUID, uuid);
                bytes(d, field::TRACK_NAME, name.as_bytes());
                nested(d, field::TRACK_THREAD, |t| {
                    uint(t, field::THREAD_PID, track.pid as u64);
                    uint(t, field::THREAD_TID, track.tid as u64);
                    bytes(t, field::THREAD_NAME, name.as_bytes());
                });
            });
            self.flush(out)?;
        }
        Ok(())
    }

    /// A TrackEvent; its arguments become debug annotations.
    pub fn event(&mut self, out: &mut impl Write, ev: Event<'_>) -> Result<()> {
        let Event { kind, track, t, name, cat, args } = ev;
        let uuid = self.uuid(track);
        let (name_id, new_name) = self.names.id(name);
        let category = cat.map(|c| self.categories.id(c));
        self.start(Some(t));
        if new_name || category.is_some_and(|c| c.1) {
            nested(&mut self.packet, field::INTERNED_DATA, |d| {
                if let (Some(c), Some((id, true))) = (cat, category) {
                    nested(d, field::INTERNED_CATEGORIES, |e| {
                        uint(e, field::INTERNED_IID, id);
                        bytes(e, field::INTERNED_NAME, c.as_bytes());
                    });
                }
                if new_name {
                    nested(d, field::INTERNED_NAMES, |e| {
                        uint(e, field::INTERNED_IID, name_id);
                        bytes(e, field::INTERNED_NAME, name.as_bytes());
                    });
                }
            });
        }
        nested(&mut self.packet, field::TRACK_EVENT, |e| {
            uint(e, field::EVENT_TYPE, kind as u64);
            uint(e, field::EVENT_TRACK, uuid);
            if let Some((id, _)) = category {
                uint(e, field::EVENT_CATEGORY_IIDS, id);
            }
            uint(e, field::EVENT_NAME_IID, name_id);
            for (k, v) in args.and_then(|a| a.as_object()).into_iter().flatten() {
                if v.is_null() {
                    continue;
                }
                nested(e, field::EVENT_ANNOTATIONS, |a| {
                    bytes(a, field::ANNOTATION_NAME, k.as_bytes());
                    match (v.as_u64(), v.as_i64(), v.as_str()) {
                        (Some(u), _, _) => uint(a, field::ANNOTATION_UINT, u),
                        (None, Some(i), _) => uint(a, field::ANNOTATION_INT, i as u64),
                        (None, None, Some(s)) => bytes(a, field::ANNOTATION_STRING, s.as_bytes()),
                        _ => bytes(a, field::ANNOTATION_STRING, v.to_string().as_bytes()),
                    }
                });
            }
        });
        self.flush(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_nested_lengths() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        let mut b = Vec::new();
        nested(&mut b, 3, |n| bytes(n, 1, &[7; 200]));
        // key 3/LEN, length 203 (two bytes), key 1/LEN, length 200 (two bytes), body.
        assert_eq!(&b[..6], &[0x1a, 0xcb, 0x01, 0x0a, 0xc8, 0x01]);
        assert_eq!(b.len(), 6 + 200);
    }
}
