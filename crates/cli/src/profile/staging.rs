//! An output that appears whole or not at all: made as OUT.tmp beside it,
//! then renamed. A perf.data directory (DIR/data and a copy of the input's
//! kcore_dir, as perf writes from a directory) or a plain file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The temporary output while it is being made.
pub struct Staging {
    tmp: PathBuf,
    /// Whether it is a perf.data directory.
    dir: bool,
}

impl Staging {
    /// Starts `out`'s temporary: a directory holding a copy of `kcore_dir`
    /// when there is one, else a file. A stale temporary is removed first.
    pub fn new(out: &Path, kcore_dir: Option<&Path>) -> Result<Staging> {
        let mut name = out.file_name().with_context(|| format!("{}: not a file name", out.display()))?.to_os_string();
        name.push(".tmp");
        let staging = Staging { tmp: out.with_file_name(name), dir: kcore_dir.is_some() };
        staging.abandon();
        if let Some(kcore) = kcore_dir {
            // Not its parents: a missing directory is the caller's error.
            let mut dir = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut dir, 0o700);
            dir.create(&staging.tmp).with_context(|| format!("creating {}", staging.tmp.display()))?;
            let to = staging.tmp.join("kcore_dir");
            let copied = dir.create(&to).with_context(|| format!("creating {}", to.display())).and_then(|()| copy_files(kcore, &to));
            if copied.is_err() {
                staging.abandon();
            }
            copied?;
        }
        Ok(staging)
    }

    /// Where the perf.data file goes.
    pub fn data(&self) -> PathBuf {
        if self.dir {
            self.tmp.join("data")
        } else {
            self.tmp.clone()
        }
    }

    /// Puts the finished output in `out`'s place (an earlier perf.data directory there is replaced).
    pub fn commit(self, out: &Path) -> Result<()> {
        if self.dir && out.is_dir() {
            std::fs::remove_dir_all(out).with_context(|| format!("removing the earlier {}", out.display()))?;
        }
        let renamed = std::fs::rename(&self.tmp, out).with_context(|| format!("renaming {} to {}", self.tmp.display(), out.display()));
        if renamed.is_err() {
            self.abandon();
        }
        renamed
    }

    /// Removes what was made.
    pub fn abandon(&self) {
        let _ = if self.tmp.is_dir() { std::fs::remove_dir_all(&self.tmp) } else { std::fs::remove_file(&self.tmp) };
    }
}

/// Copies the files of `from` (not its subdirectories) into `to`.
fn copy_files(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry.with_context(|| format!("reading {}", from.display()))?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}
