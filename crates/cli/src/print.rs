//! What `decode` prints, one module per layout: poketrace's own ([`text`]),
//! `perf script`'s ([`perf`]) and JSON ([`json`]); `--stat`'s counts ([`stat`]).

mod columns;
pub mod json;
pub mod perf;
pub mod stat;
pub mod text;

use tracedecode::Out;

use crate::symbols::Symbolizer;
use crate::text::Text;

/// The layout of `decode`'s lines.
pub enum Layout {
    /// poketrace's own.
    Text,
    /// `perf script -F` with these fields.
    Perf(perf::Fields),
    Json,
}

impl Layout {
    /// Whether lines show the bytes of their instructions (JSON's
    /// instruction lines, perf's `insn`): the decode then makes lines carry them.
    pub fn shows_insn_bytes(&self) -> bool {
        match self {
            Layout::Text => false,
            Layout::Perf(fields) => fields.insn(),
            Layout::Json => true,
        }
    }

    /// Writes `l` to `t`; `who` is the (pid, tid, comm) that ran it;
    /// `memo` keeps what the next line may copy.
    pub fn write(&self, t: &mut Text, l: &Out, who: Option<(i32, i32, &str)>, symbols: &Symbolizer, memo: &mut text::Memo) {
        match self {
            Layout::Text => text::write_line(t, l, l.cpu, who, symbols, memo),
            Layout::Perf(fields) => perf::write_perf_line(t, fields, l, l.cpu, who, symbols),
            Layout::Json => json::write_json_line(t, l, l.cpu, who, symbols),
        }
    }
}
