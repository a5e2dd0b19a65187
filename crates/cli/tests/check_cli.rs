//! `poketrace check` on a run with exits (`simulate --exits`): the table and
//! the JSON carry the silent-wrong count, 0 for the timeline.

mod common;

use common::{poketrace, simulate};

#[test]
fn check_shows_silent_wrong_in_table_and_json() {
    let dir = testkit::scratch!("check-cli", "exits");
    simulate(&dir, &["--exits", "--cpus", "2", "--pokes", "100", "--instructions", "30000", "--tsc-period", "400"]);
    let d = dir.to_str().unwrap();
    let table = poketrace(&["check", d]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["mode", "instructions", "correct", "wrong", "missing", "errors", "uncertain", "silent", "wrong"], "{table}");
    let rows: Vec<serde_json::Value> = poketrace(&["check", d, "--json"]).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        let (wrong, silent) = (r["wrong"].as_u64().unwrap(), r["silent_wrong"].as_u64().unwrap());
        assert!(silent <= wrong, "{r}");
        let per_cpu: u64 = r["cpus"].as_array().unwrap().iter().map(|c| c["silent_wrong"].as_u64().unwrap()).sum();
        assert_eq!(per_cpu, silent, "{r}");
        // The table prints the JSON's number in its last column.
        let line = table.lines().find(|l| l.starts_with(r["mode"].as_str().unwrap())).unwrap();
        assert_eq!(line.split_whitespace().last().unwrap(), silent.to_string(), "{line}");
    }
    let timeline = rows.iter().find(|r| r["mode"] == "timeline").unwrap();
    assert_eq!((timeline["errors"].as_u64(), timeline["silent_wrong"].as_u64()), (Some(0), Some(0)), "{timeline}");
    let stat = rows.iter().find(|r| r["mode"] == "static").unwrap();
    assert!(stat["silent_wrong"].as_u64().unwrap() > 0, "{stat}");
}
