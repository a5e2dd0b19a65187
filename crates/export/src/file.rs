//! A file written under a temporary name and renamed into place when
//! complete: readers see it whole or not at all.

use std::fs::File;
use std::path::{Path, PathBuf};

/// A file being written to `.NAME.tmp-PID` next to its final path; removed
/// unless [`AtomicFile::commit`] renames it into place.
pub struct AtomicFile {
    temp: PathBuf,
    path: PathBuf,
    done: bool,
}

impl AtomicFile {
    /// Creates the temporary file for `path` (and `path`'s directory).
    pub fn create(path: &Path) -> std::io::Result<(AtomicFile, File)> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let name = path.file_name().ok_or_else(|| std::io::Error::other(format!("{}: not a file name", path.display())))?;
        let temp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
        let file = File::create(&temp)?;
        Ok((AtomicFile { temp, path: path.to_path_buf(), done: false }, file))
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the complete file into place, replacing one there.
    pub fn commit(mut self) -> std::io::Result<()> {
        std::fs::rename(&self.temp, &self.path)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_appears_only_when_committed() {
        let dir = std::env::temp_dir().join(format!("export-atomic-{}", std::process::id()));
        let path = dir.join("sub/t.parquet");
        let (f, mut w) = AtomicFile::create(&path).unwrap();
        w.write_all(b"half").unwrap();
        drop(f);
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(dir.join("sub")).unwrap().count(), 0, "the temporary file is removed");
        for content in [b"one", b"two"] {
            let (f, mut w) = AtomicFile::create(&path).unwrap();
            w.write_all(content).unwrap();
            f.commit().unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.join("sub")).unwrap().count(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
