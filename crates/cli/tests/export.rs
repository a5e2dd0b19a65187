//! `poketrace export --format parquet`: the rows read back with the parquet
//! crate equal `decode --json`'s lines, a buffer's files in unit order its
//! lines line for line; unit by unit equals all at once; a rerun replaces
//! and never duplicates; a damaged unit gives error rows and leaves the
//! others as they were; a unit that cannot be written leaves no file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int32Type, UInt64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{json, Value};

mod common;

fn poketrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap()
}

/// `export DIR -o OUT ARGS`, which ends with status `status`.
fn export(dir: &Path, out: &Path, args: &[&str], status: i32) {
    let o = poketrace(&[&["export", dir.to_str().unwrap(), "-o", out.to_str().unwrap()][..], args].concat());
    assert_eq!(o.status.code(), Some(status), "export {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.lines().last().unwrap_or("").contains(" lines, "), "the summary closes stderr: {stderr}");
}

/// `decode DIR --json ARGS`' lines as rows ([`row_of_json`]), each CPU's apart.
fn decoded(dir: &Path, args: &[&str]) -> BTreeMap<i64, Vec<Value>> {
    let o = poketrace(&[&["decode", dir.to_str().unwrap(), "--json"][..], args].concat());
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&o.stderr));
    let mut by_cpu: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
    for l in String::from_utf8(o.stdout).unwrap().lines() {
        let row = row_of_json(&serde_json::from_str(l).unwrap());
        by_cpu.entry(row["cpu"].as_i64().unwrap()).or_default().push(row);
    }
    by_cpu
}

/// A `decode --json` line as the row export documents for it.
fn row_of_json(l: &Value) -> Value {
    let sym = |k: &str| match l[k].as_str() {
        None | Some("") => Value::Null,
        Some(s) => json!(s.rsplit_once("+0x").map_or(s, |(name, _)| name)),
    };
    let (kind, addr, error) = if let Some(flags) = l["flags"].as_array() {
        let words: Vec<&str> = flags.iter().map(|f| f.as_str().unwrap()).collect();
        (json!(words.join(" ")), l["addr"].clone(), Value::Null)
    } else if l.get("error").is_some() {
        (json!("error"), Value::Null, l["error"].clone())
    } else {
        (json!("insn"), Value::Null, Value::Null)
    };
    json!({
        "time": l["time"], "cpu": l["cpu"], "pid": l["pid"], "tid": l["tid"], "ip": l["ip"], "addr": addr, "kind": kind,
        "sym": sym("sym"), "addr_sym": sym("addr_sym"), "uncertain": l["uncertain"].as_bool().unwrap_or(false), "error": error,
    })
}

/// The rows of one `branches/` file.
fn rows_of(path: &Path) -> Vec<Value> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap().build().unwrap();
    let mut rows = Vec::new();
    for batch in reader {
        let b = batch.unwrap();
        let col = |name: &str| b.column_by_name(name).unwrap_or_else(|| panic!("no column {name}")).clone();
        let (time, cpu, pid, tid, ip, addr) = (col("time"), col("cpu"), col("pid"), col("tid"), col("ip"), col("addr"));
        let (kind, sym, addr_sym, insns, uncertain, error) = (col("kind"), col("sym"), col("addr_sym"), col("insns"), col("uncertain"), col("error"));
        let u64s = |a: &dyn Array, i: usize| if a.is_null(i) { Value::Null } else { json!(a.as_primitive::<UInt64Type>().value(i)) };
        let i32s = |a: &dyn Array, i: usize| if a.is_null(i) { Value::Null } else { json!(a.as_primitive::<Int32Type>().value(i)) };
        let dict = |a: &dyn Array, i: usize| {
            let d = a.as_dictionary::<Int32Type>();
            if d.is_null(i) {
                Value::Null
            } else {
                json!(d.values().as_string::<i32>().value(d.keys().value(i) as usize))
            }
        };
        for i in 0..b.num_rows() {
            let err = error.as_string::<i32>();
            rows.push(json!({
                "time": u64s(&time, i), "cpu": i32s(&cpu, i), "pid": i32s(&pid, i), "tid": i32s(&tid, i), "ip": u64s(&ip, i),
                "addr": u64s(&addr, i), "kind": dict(&kind, i), "sym": dict(&sym, i), "addr_sym": dict(&addr_sym, i),
                "uncertain": uncertain.as_boolean().value(i), "error": if err.is_null(i) { Value::Null } else { json!(err.value(i)) },
                "insns": u64s(&insns, i),
            }));
        }
    }
    rows
}

/// Every file under `dir`, relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                todo.push(e.path());
            } else {
                all.push(e.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    all.sort();
    all
}

/// The rows of `out`'s `branches/` files, by partition, each partition's
/// files in the order of their units' start.
fn exported(out: &Path) -> BTreeMap<String, Vec<Value>> {
    let mut by_part: BTreeMap<String, Vec<(u64, PathBuf)>> = BTreeMap::new();
    for f in files(&out.join("branches")) {
        let part = f.parent().unwrap().to_string_lossy().into_owned();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let start: u64 = name.strip_prefix("seg-").unwrap().split(['.', '-']).nth(1).unwrap().parse().unwrap();
        by_part.entry(part).or_default().push((start, out.join("branches").join(&f)));
    }
    by_part.into_iter().map(|(part, mut fs)| (part, (fs.sort(), fs.iter().flat_map(|(_, f)| rows_of(f)).collect()).1)).collect()
}

/// Each CPU's exported rows equal its decoded lines, line for line.
fn assert_rows_are_decode(what: &str, out: &Path, decoded: &BTreeMap<i64, Vec<Value>>) {
    let rows = exported(out);
    let cpus: Vec<String> = decoded.keys().map(|c| format!("cpu={c}")).collect();
    assert_eq!(rows.keys().cloned().collect::<Vec<_>>(), cpus, "{what}: partitions");
    for (cpu, lines) in decoded {
        let got = &rows[&format!("cpu={cpu}")];
        assert_eq!(got.len(), lines.len(), "{what}: cpu {cpu}'s rows");
        for (i, (r, l)) in got.iter().zip(lines).enumerate() {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("insns");
            assert_eq!(&r, l, "{what}: cpu {cpu}, row {i}");
        }
    }
}

/// Each branch row's `insns` is the number of instruction lines `decode
/// --itrace=bie` prints since the branch line before (none after an error);
/// other rows have none.
fn assert_insns_counted(what: &str, out: &Path, dir: &Path) {
    let rows = exported(out);
    let mut branches = 0;
    for (cpu, lines) in decoded(dir, &["--itrace=bie"]) {
        let (mut ran, mut want) = (0u64, Vec::new());
        for l in &lines {
            match l["kind"].as_str().unwrap() {
                "insn" => ran += 1,
                "error" => ran = 0,
                _ => want.push(std::mem::take(&mut ran)),
            }
        }
        let got = &rows[&format!("cpu={cpu}")];
        let counted: Vec<u64> =
            got.iter().filter(|r| !matches!(r["kind"].as_str(), Some("insn" | "error"))).map(|r| r["insns"].as_u64().unwrap()).collect();
        assert!(got.iter().filter(|r| matches!(r["kind"].as_str(), Some("insn" | "error"))).all(|r| r["insns"].is_null()), "{what}: cpu {cpu}");
        assert_eq!(counted, want, "{what}: cpu {cpu}'s branch rows' insns");
        branches += counted.len();
    }
    assert!(branches > 100, "{what}: {branches} branch rows");
}

/// `segments.parquet`'s unit IDs.
fn unit_ids(out: &Path) -> Vec<String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(out.join("segments.parquet")).unwrap()).unwrap().build().unwrap();
    reader
        .flat_map(|b| {
            (0..b.as_ref().unwrap().num_rows())
                .map(move |i| b.as_ref().unwrap().column(0).as_string::<i32>().value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn intel_pt_rows_are_decode_json_lines() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/export-pt"));
    let dir = root.join("sim");
    common::simulate(&dir, &["--cpus", "4", "--instructions", "100000", "--protocol", "int3", "--pokes", "200", "--seed", "11"]);
    let all = root.join("all");
    export(&dir, &all, &["--target-bytes", "8000"], 0);
    let ids = unit_ids(&all);
    assert!(ids.len() >= 16, "{} units", ids.len());
    assert_eq!(files(&all.join("branches")).len(), ids.len(), "a file a unit");
    for side in ["pokes.parquet", "ksymbols.parquet", "segments.parquet"] {
        assert!(all.join(side).is_file(), "{side}");
    }
    let pokes = ParquetRecordBatchReaderBuilder::try_new(File::open(all.join("pokes.parquet")).unwrap()).unwrap().build().unwrap();
    assert!(pokes.map(|b| b.unwrap().num_rows()).sum::<usize>() >= 100, "the pokes");
    assert_rows_are_decode("b", &all, &decoded(&dir, &[]));
    assert_insns_counted("b", &all, &dir);

    // Unit by unit (as a distributed driver runs it): the same files, the same rows.
    let apart = root.join("apart");
    for id in &ids {
        export(&dir, &apart, &["--segment", id, "--target-bytes", "8000"], 0);
    }
    export(&dir, &apart, &["--tables", "pokes,ksymbols,segments", "--target-bytes", "8000"], 0);
    assert_eq!(files(&apart), files(&all));
    assert_eq!(exported(&apart), exported(&all));

    // A rerun replaces: the same files, no second copy, no temporary file left.
    export(&dir, &all, &["--target-bytes", "8000"], 0);
    export(&dir, &apart, &["--segment", &ids[3], "--target-bytes", "8000"], 0);
    assert_eq!(files(&all), files(&apart));
    assert_eq!(exported(&all), exported(&apart));
    // Other units (another target) replace the old ones.
    export(&dir, &all, &["--target-bytes", "30000"], 0);
    assert_eq!(files(&all.join("branches")).len(), unit_ids(&all).len());
    assert!(unit_ids(&all).len() < ids.len());
    assert_rows_are_decode("b, target 30000", &all, &decoded(&dir, &[]));

    // A row per instruction.
    let insns = root.join("insns");
    export(&dir, &insns, &["--itrace=i", "--target-bytes", "8000"], 0);
    assert_rows_are_decode("i", &insns, &decoded(&dir, &["--itrace=ie"]));
}

/// Overwrites 64 bytes in the middle of AUX bytes `start..end` of buffer
/// `idx` in `dir`'s perf.data with a pattern the decoder reports errors for.
fn damage_aux(dir: &Path, idx: u32, (start, end): (u64, u64)) {
    let path = dir.join("data");
    let mut data = std::fs::read(&path).unwrap();
    let u64_at = |d: &[u8], at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
    // The data section (header: attrs, then data offset and size), its records, buffer idx's AUX bytes in order.
    let (mut at, stop) = (u64_at(&data, 40) as usize, (u64_at(&data, 40) + u64_at(&data, 48)) as usize);
    let (target, mut aux) = ((start + end) / 2, 0u64);
    while at < stop {
        let (kind, size) = (u32::from_le_bytes(data[at..at + 4].try_into().unwrap()), u16::from_le_bytes([data[at + 6], data[at + 7]]) as usize);
        let mut next = at + size;
        // PERF_RECORD_AUXTRACE: header, size, offset, reference, idx, tid, cpu; its data follows.
        if kind == 71 {
            let len = u64_at(&data, at + 8);
            if u32::from_le_bytes(data[at + 32..at + 36].try_into().unwrap()) == idx && (aux..aux + len).contains(&target) {
                let from = next + (target - aux) as usize;
                let to = (from + 64).min(next + len as usize);
                data[from..to].iter_mut().enumerate().for_each(|(i, b)| *b = ((i * 151 + 7) % 256) as u8);
                std::fs::write(&path, data).unwrap();
                return;
            }
            aux += if u32::from_le_bytes(data[at + 32..at + 36].try_into().unwrap()) == idx { len } else { 0 };
            next += len as usize;
        }
        at = next;
    }
    panic!("no AUX byte {target} in buffer {idx}");
}

#[test]
fn a_damaged_unit_gives_error_rows_and_a_failed_unit_no_file() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/export-damage"));
    let (whole, dir) = (root.join("whole"), root.join("damaged"));
    for d in [&whole, &dir] {
        common::simulate(d, &["--cpus", "2", "--instructions", "100000", "--protocol", "int3", "--pokes", "200", "--seed", "7"]);
    }
    let (clean, out) = (root.join("clean-out"), root.join("out"));
    export(&whole, &clean, &["--target-bytes", "6000"], 0);
    let cpu0: Vec<PathBuf> = files(&clean.join("branches")).into_iter().filter(|f| f.starts_with("cpu=0")).collect();
    let mut in_order: Vec<(u64, u64, &PathBuf)> = cpu0
        .iter()
        .map(|f| {
            let name = f.file_name().unwrap().to_string_lossy();
            let range = name.strip_prefix("seg-0.").unwrap().strip_suffix(".parquet").unwrap().to_string();
            let (s, e) = range.split_once('-').unwrap();
            (s.parse().unwrap(), e.parse().unwrap(), f)
        })
        .collect();
    in_order.sort();
    assert!(in_order.len() >= 6, "{} units on cpu 0", in_order.len());
    let hit = in_order.len() / 2;
    damage_aux(&dir, 0, (in_order[hit].0, in_order[hit].1));
    export(&dir, &out, &["--target-bytes", "6000"], 1);
    assert_rows_are_decode("damaged", &out, &decoded(&dir, &[]));
    assert_insns_counted("damaged", &out, &dir);
    // The damaged unit has error rows; the units before it and the other buffer's are as in the clean trace, file for file.
    let rows = |root: &Path, f: &Path| rows_of(&root.join("branches").join(f));
    assert!(rows(&out, in_order[hit].2).iter().any(|r| r["kind"] == "error"), "error rows in the damaged unit");
    for (_, _, f) in &in_order[..hit] {
        assert_eq!(rows(&out, f), rows(&clean, f), "{}", f.display());
    }
    let cpu1: Vec<PathBuf> = files(&clean.join("branches")).into_iter().filter(|f| f.starts_with("cpu=1")).collect();
    assert_eq!(cpu1, files(&out.join("branches")).into_iter().filter(|f| f.starts_with("cpu=1")).collect::<Vec<_>>());
    for f in &cpu1 {
        assert_eq!(rows(&out, f), rows(&clean, f), "{}", f.display());
    }

    // A unit whose file cannot be written fails alone: no file, nor a half one, for it.
    let blocked = root.join("blocked");
    std::fs::create_dir_all(blocked.join("branches")).unwrap();
    std::fs::write(blocked.join("branches/cpu=1"), b"not a directory").unwrap();
    let o = poketrace(&["export", whole.to_str().unwrap(), "-o", blocked.to_str().unwrap(), "--target-bytes", "6000"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("units not written"), "{}", String::from_utf8_lossy(&o.stderr));
    let left = files(&blocked.join("branches"));
    assert!(left.iter().all(|f| !f.to_string_lossy().contains(".tmp")), "{left:?}");
    assert_eq!(left.into_iter().filter(|f| f.starts_with("cpu=0")).collect::<Vec<_>>(), cpu0, "cpu 0's units are written");
}

#[test]
fn coresight_rows_are_decode_json_lines() {
    let root = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/export-cs"));
    let dir = root.join("sim");
    common::simulate(&dir, &["--arch", "aarch64", "--cpus", "3", "--instructions", "30000", "--pokes", "20", "--seed", "5"]);
    let (out, apart) = (root.join("out"), root.join("apart"));
    export(&dir, &out, &[], 0);
    assert_rows_are_decode("cs b", &out, &decoded(&dir, &[]));
    assert_insns_counted("cs b", &out, &dir);
    for id in unit_ids(&out) {
        export(&dir, &apart, &["--segment", &id], 0);
    }
    assert_eq!(exported(&apart), exported(&out));
    let insns = root.join("insns");
    export(&dir, &insns, &["--itrace=i"], 0);
    assert_rows_are_decode("cs i", &insns, &decoded(&dir, &["--itrace=ie"]));
}
