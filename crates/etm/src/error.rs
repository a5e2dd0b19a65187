//! Errors of reading snapshot descriptions and files. (Faults in trace data
//! are not errors of this kind: they are reported in the packet stream, at
//! their byte offset, and decoding goes on.)

use std::path::{Path, PathBuf};

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: {reason}")]
    Snapshot { path: PathBuf, line: usize, reason: String },
}

impl Error {
    pub(crate) fn snapshot(path: impl AsRef<Path>, line: usize, reason: impl Into<String>) -> Error {
        Error::Snapshot { path: path.as_ref().to_path_buf(), line, reason: reason.into() }
    }
}
