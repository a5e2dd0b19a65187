//! What can stop a recording, each error with the fix where there is one.

use std::path::PathBuf;

/// A recording that could not start or could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory of the output, or a file of the system, failed.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A system call failed; `fix` says what to change, when something can.
    #[error("{call}: {source}{}", fix_suffix(fix))]
    Sys { call: String, source: std::io::Error, fix: String },
    /// The machine cannot record what was asked.
    #[error("{0}")]
    Environment(String),
    /// Writing `DIR/data` or `DIR/kcore_dir`.
    #[error(transparent)]
    PerfData(#[from] perfdata::Error),
}

fn fix_suffix(fix: &str) -> String {
    if fix.is_empty() {
        String::new()
    } else {
        format!("; {fix}")
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
