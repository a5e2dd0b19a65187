//! One line of ptdump output, in libipt's columns: the offset, the raw
//! bytes, the packet name, its payload, and a tracking column (a name such
//! as `ip`, `tsc` or `cr3` and a value). Each column has libipt's width and
//! is cut at it, as its fixed buffers cut them.

use std::fmt::Write as _;
use std::io::{self, Write};

/// Column widths (characters of content; the text is cut at these).
const OPCODE_MAX: usize = 9;
const PAYLOAD_MAX: usize = 24;
/// The payload column's width when a tracking column follows it.
const PAYLOAD_WIDTH: usize = 20;
/// A TNT's payload may be wider: up to 47 outcome characters.
const WIDE_PAYLOAD_MAX: usize = 47;
const TRACK_ID_MAX: usize = 4;
const TRACK_MAX: usize = 16;
const RAW_MAX: usize = 32;

/// The columns of the line being built; reused from packet to packet.
#[derive(Default)]
pub struct Line {
    pub raw: String,
    pub opcode: &'static str,
    pub payload: String,
    /// The payload is a TNT's outcomes, which may be wider.
    pub wide_payload: bool,
    pub track_id: &'static str,
    pub track: String,
    /// Do not print the line (`--no-pad`, `--no-timing`, `--no-cyc`).
    pub skip: bool,
    /// The packet does not update the time (CBR): no `tsc` column.
    pub skip_time: bool,
    /// The packet does not update the calibration (TMA, CYC): no `fcr`.
    pub skip_tcal: bool,
}

/// Writes `s` cut at `max` characters (all are ASCII), padded to `width`.
fn column(out: &mut impl Write, s: &str, max: usize, width: usize) -> io::Result<()> {
    let s = &s[..s.len().min(max)];
    write!(out, "{s:<width$}")
}

impl Line {
    pub fn clear(&mut self) {
        self.raw.clear();
        self.opcode = "";
        self.payload.clear();
        self.wide_payload = false;
        self.track_id = "";
        self.track.clear();
        self.skip = false;
        self.skip_time = false;
        self.skip_tcal = false;
    }

    /// The packet's bytes in hex, as `--raw` shows them.
    pub fn set_raw(&mut self, bytes: &[u8]) {
        for b in bytes.iter().take(RAW_MAX / 2) {
            let _ = write!(self.raw, "{b:02x}");
        }
    }

    /// Prints the line; `offset` is `None` under `--no-offset`.
    pub fn print(&self, offset: Option<usize>, out: &mut impl Write) -> io::Result<()> {
        let mut sep = "";
        if let Some(offset) = offset {
            write!(out, "{offset:016x} ")?;
            sep = " ";
        }
        if !self.raw.is_empty() {
            out.write_all(sep.as_bytes())?;
            column(out, &self.raw, RAW_MAX, RAW_MAX + 1)?;
            sep = " ";
        }
        out.write_all(sep.as_bytes())?;
        let payload_max = if self.wide_payload { WIDE_PAYLOAD_MAX } else { PAYLOAD_MAX };
        let payload = &self.payload[..self.payload.len().min(payload_max)];
        column(out, self.opcode, OPCODE_MAX, if payload.is_empty() { 0 } else { OPCODE_MAX + 1 })?;
        if !self.track_id.is_empty() {
            out.write_all(b" ")?;
            column(out, payload, PAYLOAD_MAX, PAYLOAD_WIDTH)?;
            out.write_all(b" ")?;
            column(out, self.track_id, TRACK_ID_MAX, 0)?;
            out.write_all(b" ")?;
            column(out, &self.track, TRACK_MAX, 0)?;
        } else if !payload.is_empty() {
            write!(out, " {payload}")?;
        }
        writeln!(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(line: &Line, offset: Option<usize>) -> String {
        let mut out = Vec::new();
        line.print(offset, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn libipt_columns() {
        let mut line = Line { opcode: "psb", ..Line::default() };
        assert_eq!(printed(&line, Some(0x10)), "0000000000000010  psb\n");
        line.payload.push_str("afafa0");
        line.opcode = "pip";
        line.track_id = "cr3";
        line.track.push_str("0000000000afafa0");
        assert_eq!(printed(&line, Some(0x86)), format!("0000000000000086  pip        afafa0{}cr3 0000000000afafa0\n", " ".repeat(15)));
        line.clear();
        line.opcode = "psbend";
        line.set_raw(&[0x02, 0x23]);
        assert_eq!(printed(&line, None), format!("0223{}psbend\n", " ".repeat(30)));
    }
}
