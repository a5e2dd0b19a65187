//! Reading a timeline back and checking its structure.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::Path;

use serde_json::Value;

pub struct Timeline {
    pub events: Vec<Value>,
    /// perf time of the file's time 0.
    base: u64,
}

/// An event's time in nanoseconds since the base (the file has
/// microseconds: three decimals of nanoseconds, three of rank).
fn ts_ns(e: &Value) -> u64 {
    (e["ts"].as_f64().unwrap() * 1000.0 + 0.0005).floor() as u64
}

fn track(e: &Value) -> (u64, u64) {
    (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())
}

impl Timeline {
    /// A timeline file, gzipped or not, which must be a JSON object with traceEvents.
    pub fn read(path: &Path) -> Timeline {
        let raw = std::fs::read(path).unwrap();
        let text = if path.extension().is_some_and(|e| e == "gz") {
            let mut s = String::new();
            flate2::read::GzDecoder::new(&raw[..]).read_to_string(&mut s).unwrap();
            s
        } else {
            String::from_utf8(raw).unwrap()
        };
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let base = v["otherData"]["perf_time_base_ns"].as_u64().unwrap();
        Timeline { events: v["traceEvents"].as_array().unwrap().clone(), base }
    }

    /// Every E ends the innermost open B of its track, with its name; times
    /// never go back on a track; nothing stays open at the end.
    pub fn check_structure(&self) {
        let mut open: HashMap<(u64, u64), Vec<&str>> = HashMap::new();
        let mut last: HashMap<(u64, u64), f64> = HashMap::new();
        for (i, e) in self.events.iter().enumerate() {
            let ph = e["ph"].as_str().unwrap();
            if ph == "M" {
                continue;
            }
            let (k, t) = (track(e), e["ts"].as_f64().unwrap());
            let prev = last.insert(k, t).unwrap_or(0.0);
            assert!(t >= prev, "event {i} {e}: time goes back from {prev}");
            let name = e["name"].as_str().unwrap();
            match ph {
                "B" => open.entry(k).or_default().push(name),
                "E" => {
                    let top = open.get_mut(&k).and_then(Vec::pop);
                    assert_eq!(top, Some(name), "event {i} {e}: ends what is not open");
                }
                "i" => assert_eq!(e["s"], "t"),
                other => panic!("event {i}: phase {other}"),
            }
        }
        for (k, v) in open {
            assert!(v.is_empty(), "track {k:?} ends with {v:?} open");
        }
    }

    /// thread_name metadata of the tracks whose pid passes `pid`.
    pub fn thread_names(&self, pid: impl Fn(u64) -> bool) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && pid(track(e).0))
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// (category, name) of each slice begun on the tracks `on` passes.
    pub fn slices<'a>(&'a self, on: impl Fn(u64, u64) -> bool + 'a) -> impl Iterator<Item = (String, String)> + 'a {
        self.events
            .iter()
            .filter(move |e| e["ph"] == "B" && on(track(e).0, track(e).1))
            .map(|e| (e["cat"].as_str().unwrap().into(), e["name"].as_str().unwrap().into()))
    }

    pub fn slice_names(&self, on: impl Fn(u64, u64) -> bool) -> BTreeSet<String> {
        self.slices(on).map(|(_, n)| n).collect()
    }

    pub fn slice_count(&self, pid: u64) -> usize {
        self.slices(|p, _| p == pid).count()
    }

    /// (perf time, args) of the instants of process `pid`, in file order.
    pub fn instants(&self, pid: u64) -> impl Iterator<Item = (u64, &Value)> {
        self.events.iter().filter(move |e| e["ph"] == "i" && track(e).0 == pid).map(|e| (self.base + ts_ns(e), &e["args"]))
    }

    /// The names of the instants on the decode track's "input" thread.
    pub fn input_problems(&self) -> Vec<String> {
        self.events.iter().filter(|e| e["ph"] == "i" && track(e) == (0x7fff_0002, 0x7fff_ffff)).map(|e| e["name"].as_str().unwrap().into()).collect()
    }

    /// The tids with slices under `pid`, sorted.
    pub fn tids_of(&self, pid: u64) -> Vec<u32> {
        let set: BTreeSet<u32> = self.events.iter().filter(|e| e["ph"] == "B" && track(e).0 == pid).map(|e| track(e).1 as u32).collect();
        set.into_iter().collect()
    }

    /// First and last slice times (perf ns) under `pid`.
    pub fn span_ns(&self, pid: u64) -> (u64, u64) {
        let ts = self.events.iter().filter(|e| (e["ph"] == "B" || e["ph"] == "E") && track(e).0 == pid).map(|e| self.base + ts_ns(e));
        ts.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)))
    }

    /// How many distinct nanoseconds the slices under `pid` begin at.
    pub fn distinct_begin_times(&self, pid: u64) -> usize {
        let ts: BTreeSet<u64> = self.events.iter().filter(|e| e["ph"] == "B" && track(e).0 == pid).map(ts_ns).collect();
        ts.len()
    }

    /// (phase, pid, tid, perf time, name) of every event but metadata, in file order.
    pub fn events_with_perf_times(&self) -> Vec<(String, u64, u64, u64, String)> {
        let events = self.events.iter().filter(|e| e["ph"] != "M");
        events.map(|e| (e["ph"].as_str().unwrap().into(), track(e).0, track(e).1, self.base + ts_ns(e), e["name"].as_str().unwrap().into())).collect()
    }

    /// (pid, tid, name) of each thread_name metadata event, in file order.
    pub fn thread_tracks(&self) -> Vec<(u64, u64, String)> {
        let named = self.events.iter().filter(|e| e["ph"] == "M" && e["name"] == "thread_name");
        named.map(|e| (track(e).0, track(e).1, e["args"]["name"].as_str().unwrap().into())).collect()
    }
}
