//! Decoded trace lines as Parquet files (`poketrace export --format parquet`),
//! written in bounded memory, each file complete or absent.
//!
//! # Layout (Hive-style), under the output directory `OUT`
//! - `branches/cpu=N/seg-ID.parquet`: one file per unit of `poketrace
//!   segments` (ID as it lists it, `BUFFER.START-END`) of a per-CPU buffer;
//!   `branches/tid=N/seg-ID.parquet` for a per-thread buffer.
//!   Its rows are `poketrace decode --json --segment ID`'s lines for the
//!   same `--itrace` with `e` added (error rows always), one row each, in
//!   the same order: the files of a
//!   buffer in the order of their IDs' START give that buffer's lines of
//!   the whole decode. The partition key repeats the file's own `cpu` or
//!   `tid` column (the buffer's; a line's `cpu` is -1 in a per-thread
//!   buffer): readers may ignore the partitioning.
//! - `pokes.parquet`: the TEXT_POKE records, in time order.
//! - `ksymbols.parquet`: the KSYMBOL records (code outside the kernel image:
//!   trampolines, BPF programs), in time order.
//! - `segments.parquet`: the units, as `poketrace segments --json` lists them.
//!
//! # Columns of `branches/` ([`branches::schema`])
//! | column | type | |
//! |---|---|---|
//! | `time` | UInt64 | ns, perf's clock: the time `decode` prints |
//! | `cpu` | Int32 | the line's CPU, -1 when not known (as `decode --json`) |
//! | `pid`, `tid` | Int32, null | the task that ran it, null when not known |
//! | `ip` | UInt64, null | branch: from; instruction: its address; error: where, null when not known |
//! | `addr` | UInt64, null | branch: to; null for instructions and errors |
//! | `kind` | Dictionary(Int32, Utf8) | branch: perf's flags, space-separated (`call`, `jcc`, `return`, `tr strt`, `tr end call`, `hw int`, ...); `insn`; `error` |
//! | `sym`, `addr_sym` | Dictionary(Int32, Utf8), null | the function holding `ip` / `addr` (no offset), null when none |
//! | `insns` | UInt64, null | branch: the instructions that ran since the buffer's branch row before, its `ip` included (0 after an error or a trace end); null for instructions and errors |
//! | `uncertain` | Boolean | an instruction whose content is not known (`decode --json`'s `uncertain`); false for others |
//! | `error` | Utf8, null | an error row's reason |
//!
//! With `--itrace=i` the same table holds one row per instruction (kind
//! `insn`), interleaved with branch rows when `b` is asked too, as `decode`
//! prints them.
//!
//! # Side tables
//! - `pokes`: `time` UInt64 null, `cpu` Int32 null, `addr` UInt64, `sym`
//!   Utf8 null (`name+0xoff`), `kind` Dictionary(Int32, Utf8) (isa's poke kind),
//!   `old` Binary, `new` Binary.
//! - `ksymbols`: `time` UInt64 null, `addr` UInt64, `len` UInt32, `ksym_type`
//!   UInt16, `unregister` Boolean, `name` Utf8.
//! - `segments`: `id` Utf8, `buffer` UInt32, `cpu` Int32 null, `tid` Int32
//!   null, `start` UInt64, `end` UInt64, `bytes` UInt64, `syncs` UInt64,
//!   `time_from` UInt64 null, `time_to` UInt64 null, `file` Utf8 (its
//!   branches file, relative to `OUT`).
//!
//! Every file is written to a hidden temporary name in its directory
//! (`.NAME.tmp-PID`) and renamed when complete: a rerun replaces a file,
//! never adds a second, and a failed unit leaves no file.

pub mod branches;
pub mod file;
mod settings;
pub mod table;

pub use branches::{BranchRow, BranchWriter};
pub use file::AtomicFile;

/// What stops an export.
#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    Parquet(parquet::errors::ParquetError),
    Arrow(arrow::error::ArrowError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Parquet(e) => write!(f, "parquet: {e}"),
            Error::Arrow(e) => write!(f, "arrow: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<parquet::errors::ParquetError> for Error {
    fn from(e: parquet::errors::ParquetError) -> Self {
        Error::Parquet(e)
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        Error::Arrow(e)
    }
}
