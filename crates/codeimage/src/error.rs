//! Errors of loading base code and building timelines.

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a usable ELF file: {reason}")]
    Elf { path: PathBuf, reason: String },
    #[error("{path}: region {start:#x}+{len:#x} {reason}")]
    Region { path: PathBuf, start: u64, len: u64, reason: String },
    #[error(transparent)]
    PerfData(#[from] perfdata::Error),
}

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}
