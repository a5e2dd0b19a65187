//! timeline's .pftrace, read with Perfetto's own compiled protos (the
//! `perfetto` package from PyPI, installed by scripts/setup.sh --tests): the same
//! tracks and events as the JSON of the same run.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::tef::Timeline;
use super::{simulated, timeline};

/// Decodes a Trace and prints one JSON line per TrackEvent: [phase, pid, tid, time, name],
/// and per thread track its name.
const READ: &str = r#"
import json, sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
trace = pb.Trace()
trace.ParseFromString(open(sys.argv[1], 'rb').read())
tracks, phase, names = {}, {1: 'B', 2: 'E', 3: 'i'}, {}
for p in trace.packet:
    if p.HasField('interned_data'):
        if p.sequence_flags & 1:
            names = {}
        for n in p.interned_data.event_names:
            names[n.iid] = n.name
    if p.HasField('track_descriptor') and p.track_descriptor.HasField('thread'):
        t = p.track_descriptor.thread
        tracks[p.track_descriptor.uuid] = (t.pid, t.tid)
        print(json.dumps(['M', t.pid, t.tid, 0, t.thread_name]))
    elif p.HasField('track_event'):
        e = p.track_event
        pid, tid = tracks[e.track_uuid]
        name = e.name if e.HasField('name') else names[e.name_iid]
        print(json.dumps([phase[e.type], pid, tid, p.timestamp, name]))
"#;

fn python_lib() -> PathBuf {
    let cache = std::env::var_os("POKETRACE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poketrace"));
    cache.join("python")
}

#[test]
fn perfetto_protobuf_holds_the_json_events() {
    let lib = python_lib();
    if !testkit::have(
        lib.join("perfetto/protos/perfetto/trace/perfetto_trace_pb2.py").is_file(),
        &format!("perfetto's Python protos not in {} (scripts/setup.sh --tests)", lib.display()),
    ) {
        return;
    }
    let dir = simulated("perfetto", &["--cpus", "2", "--pokes", "20", "--instructions", "6000"]);
    let (json, proto) = (dir.join("t.json"), dir.join("t.pftrace"));
    for out in [&json, &proto] {
        let (code, err) = timeline(&dir.join("run"), out, &[]);
        assert_eq!(code, 0, "{err}");
    }
    let o = Command::new("python3").env("PYTHONPATH", &lib).arg("-c").arg(READ).arg(&proto).output().unwrap();
    let text = String::from_utf8(testkit::success(o, "reading the .pftrace with perfetto_trace_pb2")).unwrap();
    let decoded: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: Vec<(u64, u64, &str)> =
        decoded.iter().filter(|e| e[0] == "M").map(|e| (e[1].as_u64().unwrap(), e[2].as_u64().unwrap(), e[4].as_str().unwrap())).collect();
    let events: Vec<(String, u64, u64, u64, String)> = decoded
        .iter()
        .filter(|e| e[0] != "M")
        .map(|e| {
            (e[0].as_str().unwrap().into(), e[1].as_u64().unwrap(), e[2].as_u64().unwrap(), e[3].as_u64().unwrap(), e[4].as_str().unwrap().into())
        })
        .collect();
    let t = Timeline::read(&json);
    assert_eq!(events, t.events_with_perf_times());
    let want: Vec<(u64, u64, String)> = t.thread_tracks();
    let got: Vec<(u64, u64, String)> = names.into_iter().map(|(p, t, n)| (p, t, n.to_string())).collect();
    assert_eq!(got, want);
    let (a, b) = (std::fs::metadata(&json).unwrap().len(), std::fs::metadata(&proto).unwrap().len());
    assert!(b * 3 < a, "protobuf {b} bytes, JSON {a}");
}
