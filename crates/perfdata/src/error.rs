//! One error type for reading and writing, always saying what and where.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong reading or writing perf.data.
///
/// Offsets are byte offsets in the file (for records inside a COMPRESSED
/// record: the offset of that COMPRESSED record, plus the offset inside its
/// decompressed data).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("I/O error while writing: {0}")]
    Write(#[from] std::io::Error),
    #[error("not a perf.data file: magic {magic:02x?} (expected \"PERFILE2\")")]
    BadMagic { magic: [u8; 8] },
    #[error("big-endian perf.data (magic \"2ELIFREP\") is not supported; convert it on a big-endian host with `perf inject`")]
    BigEndian,
    #[error("truncated {what} at offset {offset:#x}{}: needs {needed} bytes, {available} left", in_compressed(*inner))]
    Truncated { what: &'static str, offset: u64, inner: Option<u64>, needed: u64, available: u64 },
    #[error("invalid {what} at offset {offset:#x}{}: {reason}", in_compressed(*inner))]
    Invalid { what: &'static str, offset: u64, inner: Option<u64>, reason: String },
    #[error("unfinished perf.data at offset {offset:#x}: {reason}")]
    Unfinished { offset: u64, reason: String },
    #[error("cannot decompress COMPRESSED record at offset {offset:#x}: {reason}")]
    Decompress { offset: u64, reason: String },
    #[error("cannot write {what}: {reason}")]
    Unwritable { what: &'static str, reason: String },
}

fn in_compressed(inner: Option<u64>) -> String {
    match inner {
        Some(o) => format!(" (+{o:#x} in its decompressed data)"),
        None => String::new(),
    }
}

impl Error {
    /// File offset where the problem was found, when the error has one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Truncated { offset, .. } | Error::Invalid { offset, .. } | Error::Decompress { offset, .. } | Error::Unfinished { offset, .. } => {
                Some(*offset)
            }
            _ => None,
        }
    }

    pub(crate) fn invalid(what: &'static str, offset: u64, reason: impl Into<String>) -> Error {
        Error::Invalid { what, offset, inner: None, reason: reason.into() }
    }
}
