//! `poketrace report` in headless Chromium: its tables equal `pokes --json`
//! and `check --json`, its script draws, it stays small at 100,000 pokes,
//! and a screenshot is left for a person to look at.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::chromium;
use super::{common, simulated};

/// `poketrace report DIR -o OUT`: exit code and stderr.
fn report(dir: &Path, out: &Path) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace")).arg("report").arg(dir).arg("-o").arg(out).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The `data-` attributes of each `<tr>` in the table with id `id`.
fn rows(dom: &str, id: &str) -> Vec<BTreeMap<String, String>> {
    let start = dom.find(&format!("<table id=\"{id}\"")).unwrap_or_else(|| panic!("no table {id}"));
    let table = &dom[start..start + dom[start..].find("</table>").unwrap()];
    table
        .split("<tr")
        .skip(1)
        .map(|tr| {
            let tag = &tr[..tr.find('>').unwrap()];
            let mut attrs = BTreeMap::new();
            for part in tag.split(" data-").skip(1) {
                let (k, v) = part.split_once("=\"").unwrap();
                attrs.insert(k.to_string(), v[..v.find('"').unwrap()].to_string());
            }
            attrs
        })
        .filter(|a| !a.is_empty())
        .collect()
}

fn num(a: &BTreeMap<String, String>, k: &str) -> u64 {
    a[k].parse().unwrap_or_else(|_| panic!("{k} in {a:?}"))
}

#[test]
fn report_in_chromium_equals_pokes_and_check() {
    if !chromium::available() {
        return;
    }
    let dir = simulated("report", &["--cpus", "3", "--pokes", "60", "--instructions", "10000"]);
    let run = dir.join("run");
    let html = dir.join("report.html");
    let (code, err) = report(&run, &html);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    for outside in ["src=", "href=", "http://", "https://", "@import"] {
        assert!(!page.contains(outside), "the page refers to something outside it: {outside}");
    }
    let url = format!("file://{}", html.display());
    let (dom, console) = chromium::dump_dom(&url, &dir.join("chromium-profile"));
    assert!(!console.contains("Uncaught"), "{console}");
    assert!(dom.contains("data-drawn=\"pokes:"), "the script did not finish drawing:\n{console}");

    // Pokes per site and per kind: what pokes --json lists.
    let mut sites: BTreeMap<String, u64> = BTreeMap::new();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for r in common::poketrace(&["pokes", "--json", run.to_str().unwrap()]).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        if r["record"] == "TEXT_POKE" {
            *sites.entry(format!("{:#x}", r["addr"].as_u64().unwrap())).or_default() += 1;
            *kinds.entry(r["kind"].as_str().unwrap().to_string()).or_default() += 1;
        }
    }
    let shown: BTreeMap<String, u64> = rows(&dom, "sites").iter().map(|a| (a["addr"].clone(), num(a, "pokes"))).collect();
    assert_eq!(shown, sites);
    let shown: BTreeMap<String, u64> = rows(&dom, "kinds").iter().map(|a| (a["kind"].clone(), num(a, "pokes"))).collect();
    assert_eq!(shown, kinds);

    // check's totals per mode.
    let check: Vec<Value> =
        common::poketrace(&["check", "--json", run.to_str().unwrap()]).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let shown = rows(&dom, "check");
    assert_eq!(shown.len(), check.len());
    for (a, c) in shown.iter().zip(&check) {
        assert_eq!(a["mode"], c["mode"].as_str().unwrap());
        for k in ["instructions", "correct", "wrong", "missing", "errors", "uncertain"] {
            assert_eq!(num(a, k), c[k].as_u64().unwrap(), "{} {k}", a["mode"]);
        }
    }

    // Instructions per CPU: what decode --itrace=i prints.
    let mut insns: BTreeMap<String, u64> = BTreeMap::new();
    for l in common::poketrace(&["decode", "--itrace=i", "--json", run.to_str().unwrap()]).lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        *insns.entry(v["cpu"].to_string()).or_default() += 1;
    }
    let shown: BTreeMap<String, u64> = rows(&dom, "cpus").iter().map(|a| (a["cpu"].clone(), num(a, "insns"))).collect();
    assert_eq!(shown, insns);

    let png = dir.join("report.png");
    chromium::run(&url, &dir.join("chromium-profile"), &["--window-size=1400,1300", &format!("--screenshot={}", png.display())]);
    let shot = std::fs::read(&png).unwrap();
    assert!(shot.starts_with(b"\x89PNG") && shot.len() > 10_000, "{}", png.display());
    eprintln!("report screenshot: {}", png.display());
}

/// 100,000 pokes at 1,000 sites: a page of a few MB whose DOM holds the
/// tables and two canvases, not a node per poke.
#[test]
fn a_hundred_thousand_pokes_stay_readable() {
    if !chromium::available() {
        return;
    }
    let dir = testkit::scratch!("views", "report-large");
    let data = dir.join("pokes.data");
    let mut w = testkit::perf::sideband_writer(&data);
    for i in 0..100_000u64 {
        let (old, new) = if (i / 1000) % 2 == 0 { (&common::NOP5, &common::JMP) } else { (&common::JMP, &common::NOP5) };
        let poke = perfdata::TextPoke { addr: 0xffff_ffff_8100_0000 + (i % 1000) * 16, old, new };
        w.write(perfdata::abi::misc::KERNEL, &perfdata::RecordBody::TextPoke(poke), &common::at(1_000_000_000 + i * 100)).unwrap();
    }
    w.finish().unwrap();
    let html = dir.join("report.html");
    let (code, err) = report(&data, &html);
    assert_eq!(code, 1, "no trace in it: {err}");
    let size = std::fs::metadata(&html).unwrap().len();
    assert!(size < 8 << 20, "{size} bytes");
    let (dom, console) = chromium::dump_dom(&format!("file://{}", html.display()), &dir.join("chromium-profile"));
    assert!(!console.contains("Uncaught"), "{console}");
    let drawn = dom.split("data-drawn=\"pokes:").nth(1).unwrap();
    let cells: u64 = drawn[..drawn.find(' ').unwrap()].parse().unwrap();
    assert!((1000..=1000 * 512).contains(&cells), "{cells} columns drawn");
    let sites = rows(&dom, "sites");
    assert_eq!(sites.len(), 1000);
    assert!(sites.iter().all(|a| num(a, "pokes") == 100));
    let elements = dom.matches('<').count() - dom.matches("</").count();
    assert!(elements < 1000 * 8 + 300, "{elements} elements");
}
