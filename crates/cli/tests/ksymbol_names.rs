//! Code a KSYMBOL record announces (here the simulator's OOL ftrace
//! trampoline) is named by that record from its time on, the same way by
//! `pokes`, `decode` (-F, --json), and `export` (pokes.parquet and branch
//! rows), and as `perf script` names it. The perf part needs Linux perf:
//! without it, it is skipped, unless CI (or POKETRACE_REQUIRE_PERF) is set:
//! then it fails (`testkit::required`).

mod common;

use std::fs::File;
use std::path::Path;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int32Type, UInt64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

use common::{poketrace, simulate};

/// A KSYMBOL record: from `time` on, `addr..end` is `name`, or nothing when `name` is `None`.
struct Ksym {
    time: u64,
    addr: u64,
    end: u64,
    name: Option<String>,
}

impl Ksym {
    /// The name `addr` has at `time` by these records (in time order):
    /// `Some(None)` inside a range no longer registered, `None` outside all.
    fn name_at(records: &[Ksym], addr: u64, time: u64) -> Option<Option<String>> {
        let mut named = None;
        for k in records.iter().filter(|k| k.time <= time && (k.addr..k.end).contains(&addr)) {
            named = Some(k.name.as_ref().map(|n| format!("{n}+{:#x}", addr - k.addr)));
        }
        named
    }
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// One column of a Parquet file's rows, by `get(batch, column, row)`.
fn column<T>(path: &Path, name: &str, get: impl Fn(&dyn Array, usize) -> T) -> Vec<T> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap().build().unwrap();
    let mut out = Vec::new();
    for b in reader {
        let b = b.unwrap();
        let col = b.column_by_name(name).unwrap_or_else(|| panic!("{}: no column {name}", path.display())).clone();
        out.extend((0..b.num_rows()).map(|i| get(col.as_ref(), i)));
    }
    out
}

fn u64s(path: &Path, name: &str) -> Vec<u64> {
    column(path, name, |c, i| c.as_primitive::<UInt64Type>().value(i))
}

/// A string column, plain or dictionary-encoded.
fn strings(path: &Path, name: &str) -> Vec<Option<String>> {
    column(path, name, |c, i| {
        c.is_valid(i).then(|| match c.as_dictionary_opt::<Int32Type>() {
            Some(d) => d.values().as_string::<i32>().value(d.keys().value(i) as usize).to_string(),
            None => c.as_string::<i32>().value(i).to_string(),
        })
    })
}

#[test]
fn ksymbol_code_is_named_alike_by_every_command_and_perf() {
    let root = testkit::scratch!("ksymbol-names");
    let dir = root.join("sim");
    simulate(&dir, &["--cpus", "2", "--instructions", "20000", "--pokes", "200", "--seed", "1"]);
    let d = dir.to_str().unwrap();
    let records = json_lines(&poketrace(&["pokes", d, "--json"]));
    let ksyms: Vec<Ksym> = records
        .iter()
        .filter(|r| r["record"] == "KSYMBOL")
        .map(|r| {
            let addr = r["addr"].as_u64().unwrap();
            let name = (r["flags"].as_u64().unwrap() & 1 == 0).then(|| r["name"].as_str().unwrap().to_string());
            Ksym { time: r["time"].as_u64().unwrap(), addr, end: addr + r["len"].as_u64().unwrap(), name }
        })
        .collect();
    assert!(ksyms.len() >= 2, "the simulation announces its trampoline");

    // pokes: the sites in KSYMBOL code by their record.
    let pokes: Vec<(u64, u64, String)> = records
        .iter()
        .filter(|r| r["record"] == "TEXT_POKE")
        .map(|r| (r["time"].as_u64().unwrap(), r["addr"].as_u64().unwrap(), r["sym"].as_str().unwrap().to_string()))
        .collect();
    let mut in_ksym = 0;
    for (time, addr, sym) in &pokes {
        if let Some(want) = Ksym::name_at(&ksyms, *addr, *time) {
            assert_eq!(Some(sym), want.as_ref(), "pokes: {addr:#x} at {time}");
            in_ksym += 1;
        }
    }
    assert!(in_ksym >= 2, "{in_ksym} pokes in KSYMBOL code");

    // export's pokes.parquet: what `pokes` says, site by site.
    let out = root.join("export");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["export", d, "-o", out.to_str().unwrap()]).output().unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "export: {}", String::from_utf8_lossy(&o.stderr));
    let table = out.join("pokes.parquet");
    let exported: Vec<(u64, u64, String)> = u64s(&table, "time")
        .into_iter()
        .zip(u64s(&table, "addr"))
        .zip(strings(&table, "sym"))
        .map(|((t, a), s)| (t, a, s.unwrap_or_default()))
        .collect();
    assert_eq!(exported.len(), pokes.len(), "pokes.parquet's rows");
    let first = exported.iter().zip(&pokes).position(|(e, p)| e != p);
    assert_eq!(first, None, "pokes.parquet {:?} vs pokes {:?}", first.map(|i| &exported[i]), first.map(|i| &pokes[i]));

    // decode --json: every address in KSYMBOL code named by the record in force at the line's time.
    let decoded = json_lines(&poketrace(&["decode", d, "--itrace=be", "--json"]));
    let mut named = 0;
    for l in &decoded {
        let time = l["time"].as_u64().unwrap();
        for (at, sym) in [("ip", "sym"), ("addr", "addr_sym")] {
            let Some(addr) = l[at].as_u64() else { continue };
            if let Some(want) = Ksym::name_at(&ksyms, addr, time) {
                assert_eq!(l[sym].as_str(), Some(want.as_deref().unwrap_or("")), "decode --json: {l}");
                named += 1;
            }
        }
    }
    assert!(named >= 4, "{named} branches from or to KSYMBOL code");

    // decode's own text lines (the same lines): the same names, before and after ` => `.
    let text = poketrace(&["decode", d, "--itrace=be"]);
    let text: Vec<&str> = text.lines().collect();
    assert_eq!(text.len(), decoded.len(), "text and JSON lines");
    for (line, l) in text.iter().zip(&decoded) {
        let time = l["time"].as_u64().unwrap();
        let Some((from, to)) = line.split_once(" => ") else { continue };
        for (at, column) in [("ip", from), ("addr", to)] {
            let Some(addr) = l[at].as_u64() else { continue };
            if let Some(want) = Ksym::name_at(&ksyms, addr, time) {
                let named = want.as_ref().is_some_and(|w| column.split_whitespace().any(|c| c == w));
                assert_eq!(named, want.is_some(), "decode text: {line} against {l}");
            }
        }
    }

    // export's branch rows: the same names, without their offsets.
    let mut rows = 0;
    for f in walk(&out.join("branches")) {
        let (times, ips, addrs) = (u64s(&f, "time"), column(&f, "ip", opt_u64), column(&f, "addr", opt_u64));
        let (syms, addr_syms) = (strings(&f, "sym"), strings(&f, "addr_sym"));
        for i in 0..times.len() {
            for (addr, sym) in [(ips[i], &syms[i]), (addrs[i], &addr_syms[i])] {
                let Some(addr) = addr else { continue };
                if let Some(Some(want)) = Ksym::name_at(&ksyms, addr, times[i]) {
                    assert_eq!(sym.as_deref(), want.rsplit_once("+0x").map(|(n, _)| n), "branch row at {} {addr:#x}", times[i]);
                    rows += 1;
                }
            }
        }
    }
    assert_eq!(rows, named, "branch rows in KSYMBOL code");

    // decode -F and perf script: the same lines where they touch KSYMBOL code.
    let fields = ["--itrace=be", "-F", "ip,sym,addr"];
    let touching = |text: &str| -> Vec<String> {
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| {
                l.split_whitespace().filter_map(|w| u64::from_str_radix(w, 16).ok()).any(|a| ksyms.iter().any(|k| (k.addr..k.end).contains(&a)))
            })
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    let ours = touching(&poketrace(&[&["decode", d][..], &fields].concat()));
    assert_eq!(ours.len(), named, "decode -F lines in KSYMBOL code");
    assert!(ours.iter().all(|l| l.contains("ftrace_trampoline")), "{ours:?}");
    if testkit::perf_available() {
        let home = testkit::scratch!("ksymbol-names-home");
        let theirs = touching(&testkit::perf(&home, &[&["script", "-i", d][..], &fields].concat()));
        assert_eq!(ours, theirs, "decode -F vs perf script");
    }
}

fn opt_u64(c: &dyn Array, i: usize) -> Option<u64> {
    c.is_valid(i).then(|| c.as_primitive::<UInt64Type>().value(i))
}

/// The files under `dir`, at any depth.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
