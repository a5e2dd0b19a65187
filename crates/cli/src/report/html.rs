//! The report as one HTML file: the data as inline JSON, drawn by inline
//! JavaScript on two canvases (a few DOM nodes however many pokes), and the
//! summary tables as plain HTML.

use std::fmt::Write as _;
use std::io::Write;

use anyhow::Result;
use serde_json::json;

use super::axis::{Axis, BINS};
use super::coverage::{Cell, Coverage};
use super::pokes::Pokes;

const STYLE: &str = "body{font:14px sans-serif;margin:20px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}\
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td.l,th.l{text-align:left}.scroll{max-height:640px;overflow:auto;border:1px solid #ddd}\
#tip{position:absolute;display:none;white-space:pre;background:#fffde7;border:1px solid #999;padding:4px 6px;font:12px monospace;pointer-events:none}\
.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}";

const PALETTE: [&str; 10] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/// `s` with HTML's special characters escaped.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn secs(t: u64) -> String {
    format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000)
}

/// The check table of a simulated run: per mode, `check --json`'s totals.
pub type CheckRows = Vec<(String, [u64; 6])>;

/// Writes the page.
pub fn write(out: &mut impl Write, title: &str, pokes: &Pokes, cov: &Coverage, check: Option<&CheckRows>, problems: &[String]) -> Result<()> {
    let axis = &cov.axis;
    let kinds: Vec<&str> = pokes.kinds.keys().copied().collect();
    let (sites, cpus) = (site_rows(pokes, axis, &kinds), cpu_rows(cov));
    // Columns up to the last with anything in it (the axis widens by doubling).
    let used = sites.iter().chain(&cpus).filter_map(|r| r["cells"].as_array()?.last()?[0].as_u64()).max().map_or(1, |b| b + 1);
    let data = json!({
        "start": axis.start, "width": axis.width, "bins": used, "kinds": kinds, "changes": pokes.changes, "sites": sites, "cpus": cpus,
    });
    let data = serde_json::to_string(&data)?.replace("</", "<\\/");
    let mut h = String::new();
    write!(h, "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>", esc(title))?;
    write!(
        h,
        "<h1>poketrace report</h1><p>{}: {} pokes at {} sites, {} CPUs traced, ",
        esc(title),
        pokes.pokes.len(),
        pokes.sites.len(),
        cov.rows.len()
    )?;
    write!(h, "from {} s to {} s ({} ns a column).</p>", secs(axis.start), secs(axis.end()), axis.width)?;
    if !problems.is_empty() {
        h.push_str("<ul id=\"problems\">");
        for p in problems {
            write!(h, "<li>{}</li>", esc(p))?;
        }
        h.push_str("</ul>");
    }
    h.push_str("<h2>Code changes</h2><p class=\"key\">One row per site; a column's colour is the kind of most of its pokes.");
    for (i, k) in kinds.iter().enumerate() {
        write!(h, "<span style=\"background:{}\"></span>{}", PALETTE[i % PALETTE.len()], esc(k))?;
    }
    h.push_str("</p><div class=\"scroll\"><canvas id=\"pokes\"></canvas></div>");
    h.push_str(
        "<h2>Trace coverage per CPU</h2><p class=\"key\"><span style=\"background:#4caf50\"></span>decoded\
<span style=\"background:#e6e6e6\"></span>no trace<span style=\"background:#ff9800\"></span>uncertain\
<span style=\"background:#d32f2f\"></span>decode error<span style=\"background:#7b1fa2\"></span>lost data or overflow</p>\
<div class=\"scroll\"><canvas id=\"coverage\"></canvas></div>",
    );
    tables(&mut h, pokes, cov, check)?;
    write!(
        h,
        "<div id=\"tip\"></div><script type=\"application/json\" id=\"data\">{data}</script><script>{}</script></body></html>",
        include_str!("page.js")
    )?;
    out.write_all(h.as_bytes())?;
    Ok(())
}

/// A site's column: [bin, pokes, kind of most, first time, cpu, change, last time], and its pokes per kind.
type SiteCell = ([u64; 7], Vec<u64>);

/// Per site, per column with pokes: [bin, pokes, kind of most, first time, cpu, change, last time].
fn site_rows(pokes: &Pokes, axis: &Axis<Cell>, kinds: &[&str]) -> Vec<serde_json::Value> {
    let bin = |t: u64| ((t.saturating_sub(axis.start) / axis.width) as usize).min(BINS - 1);
    let mut cells: Vec<std::collections::BTreeMap<usize, SiteCell>> = vec![Default::default(); pokes.sites.len()];
    for p in &pokes.pokes {
        let kind = kinds.iter().position(|k| *k == p.kind).unwrap_or(0);
        let b = bin(p.time);
        let cpu = p.cpu.map_or(u64::MAX, u64::from);
        let (c, by_kind) =
            cells[p.site as usize].entry(b).or_insert_with(|| ([b as u64, 0, 0, p.time, cpu, p.change as u64, p.time], vec![0; kinds.len()]));
        c[1] += 1;
        c[6] = p.time;
        by_kind[kind] += 1;
    }
    pokes
        .sites
        .iter()
        .zip(cells)
        .map(|(s, cells)| {
            let cells: Vec<Vec<i64>> = cells
                .into_values()
                .map(|(mut c, by_kind)| {
                    c[2] = (0..by_kind.len()).max_by_key(|&k| by_kind[k]).unwrap_or(0) as u64;
                    let cpu = if c[4] == u64::MAX { -1 } else { c[4] as i64 };
                    vec![c[0] as i64, c[1] as i64, c[2] as i64, c[3] as i64, cpu, c[5] as i64, c[6] as i64]
                })
                .collect();
            json!({ "addr": format!("{:#x}", s.addr), "label": if s.sym.is_empty() { format!("{:#x}", s.addr) } else { s.sym.clone() }, "cells": cells })
        })
        .collect()
}

/// Per CPU, per column with anything: [bin, instructions, branches, errors, overflows, uncertain, lost].
fn cpu_rows(cov: &Coverage) -> Vec<serde_json::Value> {
    cov.rows
        .iter()
        .map(|(&cpu, &row)| {
            let cells: Vec<[u64; 7]> = cov.axis.rows[row]
                .iter()
                .enumerate()
                .filter(|(_, c)| **c != Cell::default())
                .map(|(b, c)| [b as u64, c.insns, c.branches, c.errors, c.overflows, c.uncertain, c.lost])
                .collect();
            json!({ "label": cpu_name(cpu), "cells": cells })
        })
        .collect()
}

fn cpu_name(cpu: u32) -> String {
    if cpu == u32::MAX {
        "per-thread buffers".into()
    } else {
        format!("cpu {cpu}")
    }
}

/// The summary tables, with the numbers also in data- attributes.
fn tables(h: &mut String, pokes: &Pokes, cov: &Coverage, check: Option<&CheckRows>) -> Result<()> {
    h.push_str("<h2>Pokes per kind</h2><table id=\"kinds\"><tr><th class=\"l\">kind</th><th>pokes</th></tr>");
    for (k, n) in &pokes.kinds {
        write!(h, "<tr data-kind=\"{k}\" data-pokes=\"{n}\"><td class=\"l\">{k}</td><td>{n}</td></tr>", k = esc(k))?;
    }
    h.push_str(
        "</table><h2>Pokes per site</h2><div class=\"scroll\"><table id=\"sites\"><tr><th class=\"l\">address</th><th class=\"l\">symbol</th>\
<th>pokes</th><th class=\"l\">kinds</th><th>first (s)</th><th>last (s)</th></tr>",
    );
    let mut sites: Vec<_> = pokes.sites.iter().collect();
    sites.sort_by_key(|s| s.addr);
    for s in sites {
        let kinds: Vec<String> = s.kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        write!(
            h,
            "<tr data-addr=\"{:#x}\" data-pokes=\"{}\"><td class=\"l\">{:016x}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
            s.addr,
            s.pokes,
            s.addr,
            esc(&s.sym),
            s.pokes,
            esc(&kinds.join(", ")),
            secs(s.first),
            secs(s.last)
        )?;
    }
    h.push_str(
        "</table></div><h2>Decode per CPU</h2><table id=\"cpus\"><tr><th class=\"l\">cpu</th><th>instructions</th><th>branches</th>\
<th>errors</th><th>overflows</th><th>uncertain</th></tr>",
    );
    for (&cpu, c) in &cov.totals {
        write!(
            h,
            "<tr data-cpu=\"{cpu}\" data-insns=\"{}\" data-branches=\"{}\" data-errors=\"{}\" data-uncertain=\"{}\"><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.insns,
            c.branches,
            c.errors,
            c.uncertain,
            cpu_name(cpu),
            c.insns,
            c.branches,
            c.errors,
            c.overflows,
            c.uncertain
        )?;
    }
    h.push_str("</table>");
    if let Some(rows) = check {
        h.push_str(
            "<h2>Check against the simulation's ground truth</h2><table id=\"check\"><tr><th class=\"l\">mode</th><th>instructions</th>\
<th>correct</th><th>wrong</th><th>missing</th><th>errors</th><th>uncertain</th></tr>",
        );
        for (mode, v) in rows {
            let attrs = ["instructions", "correct", "wrong", "missing", "errors", "uncertain"]
                .iter()
                .zip(v)
                .map(|(k, n)| format!(" data-{k}=\"{n}\""))
                .collect::<String>();
            write!(h, "<tr data-mode=\"{mode}\"{attrs}><td class=\"l\">{mode}</td>")?;
            for n in v {
                write!(h, "<td>{n}</td>")?;
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
    Ok(())
}
