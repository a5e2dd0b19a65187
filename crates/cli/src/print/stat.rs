//! `decode --stat`: a decode's counts, as a table or as one JSON object.

use std::io::Write;

use tracedecode::Summary;

/// Writes `s` as name-count lines, or with `json` as one JSON object.
pub fn write_stat(out: &mut impl Write, s: &Summary, json: bool) -> std::io::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, s)?;
        return writeln!(out);
    }
    let rows = [
        ("trace buffers", s.buffers),
        ("instructions", s.instructions),
        ("  uncertain", s.uncertain),
        ("branches taken", s.taken_branches()),
        ("  conditional", s.cond_taken),
        ("  jump", s.jumps),
        ("  call", s.calls),
        ("  indirect jump", s.indirect_jumps),
        ("  indirect call", s.indirect_calls),
        ("  return", s.returns),
        ("  far", s.far),
        ("conditional not taken", s.cond_not_taken),
        ("traps and interrupts", s.traps),
        ("trace starts", s.trace_starts),
        ("trace ends", s.trace_ends),
        ("decode errors", s.errors),
        ("pokes crossed", s.pokes_crossed),
    ];
    for (name, n) in rows {
        writeln!(out, "{name:<24}{n:>14}")?;
    }
    Ok(())
}
