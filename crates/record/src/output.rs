//! The output directory: made private (0700, as perf makes kcore_dir) and
//! marked as poketrace's, so that only a directory poketrace made is ever
//! moved to `DIR.old` or deleted.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The file that marks a directory as a recording poketrace made.
pub const MARKER: &str = ".poketrace-recording";

/// Makes `dir` a new, empty, private directory holding only [`MARKER`]. An
/// earlier recording there (a marked directory, or a perf.data file) becomes
/// `DIR.old`, replacing an earlier `DIR.old` only when that is one too.
/// Symlinks are never followed; anything else is an error that names it.
pub fn prepare(dir: &Path) -> Result<()> {
    if std::fs::symlink_metadata(dir).is_ok() {
        if !is_recording(dir)? {
            return Err(Error::Environment(format!(
                "{} exists and is not a recording poketrace made (no {MARKER} in it) nor a perf.data file: choose another output",
                dir.display()
            )));
        }
        let old = old_path(dir);
        if std::fs::symlink_metadata(&old).is_ok() {
            if !is_recording(&old)? {
                return Err(Error::Environment(format!(
                    "{} exists and is not a recording poketrace made: move it away or choose another output",
                    old.display()
                )));
            }
            remove(&old)?;
        }
        std::fs::rename(dir, &old).map_err(Error::io(dir))?;
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(Error::io(parent))?;
    }
    // Exclusive: a directory or symlink planted here since the rename is an error.
    std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(Error::io(dir))?;
    let marker = dir.join(MARKER);
    File::create_new(&marker).map_err(Error::io(&marker))?;
    Ok(())
}

/// `DIR.old`.
fn old_path(dir: &Path) -> PathBuf {
    let mut old = dir.as_os_str().to_owned();
    old.push(".old");
    PathBuf::from(old)
}

/// A real directory (not a symlink) holding [`MARKER`], or a regular file with perf.data's magic.
fn is_recording(path: &Path) -> Result<bool> {
    let meta = std::fs::symlink_metadata(path).map_err(Error::io(path))?;
    if meta.is_dir() {
        return Ok(std::fs::symlink_metadata(path.join(MARKER)).is_ok_and(|m| m.is_file()));
    }
    if !meta.is_file() {
        return Ok(false);
    }
    let mut magic = [0u8; 8];
    Ok(File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok() && &magic == perfdata::MAGIC)
}

/// Deletes a recording; `remove_dir_all` does not follow symlinks inside it.
fn remove(path: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(Error::io(path))?;
    if meta.is_dir() {
        std::fs::remove_dir_all(path).map_err(Error::io(path))
    } else {
        std::fs::remove_file(path).map_err(Error::io(path))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("poketrace-output-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_new_output_is_private_and_marked() {
        let d = scratch("new").join("rec");
        prepare(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(d.join(MARKER).is_file());
        // A second run moves it to rec.old, and a third replaces that.
        std::fs::write(d.join("data"), b"first").unwrap();
        prepare(&d).unwrap();
        assert_eq!(std::fs::read(old_path(&d).join("data")).unwrap(), b"first");
        prepare(&d).unwrap();
        assert!(!old_path(&d).join("data").exists());
        assert!(old_path(&d).join(MARKER).is_file());
    }

    #[test]
    fn a_directory_poketrace_did_not_make_is_left_alone() {
        let root = scratch("foreign");
        // Holding a file named data is not enough.
        let dir = root.join("victim");
        std::fs::create_dir_all(dir.join("precious")).unwrap();
        std::fs::write(dir.join("data"), b"x").unwrap();
        std::fs::write(dir.join("precious/file"), b"keep").unwrap();
        let err = prepare(&dir).unwrap_err().to_string();
        assert!(err.contains("not a recording poketrace made"), "{err}");
        assert_eq!(std::fs::read(dir.join("precious/file")).unwrap(), b"keep");
        // An unmarked DIR.old is not deleted to make room.
        let rec = root.join("rec");
        prepare(&rec).unwrap();
        std::fs::create_dir_all(old_path(&rec).join("precious")).unwrap();
        std::fs::write(old_path(&rec).join("data"), b"x").unwrap();
        let err = prepare(&rec).unwrap_err().to_string();
        assert!(err.contains(".old exists and is not a recording"), "{err}");
        assert!(old_path(&rec).join("precious").is_dir());
        assert!(rec.join(MARKER).is_file(), "the current recording stays");
    }

    #[test]
    fn symlinks_are_not_followed() {
        let root = scratch("symlink");
        let target = root.join("target");
        prepare(&target).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(prepare(&link).is_err(), "a symlink to a recording is not a recording");
        assert!(target.join(MARKER).is_file());
        // A symlinked DIR.old is not a recording either: the target survives.
        let rec = root.join("rec");
        prepare(&rec).unwrap();
        std::os::unix::fs::symlink(&target, old_path(&rec)).unwrap();
        assert!(prepare(&rec).is_err());
        assert!(target.join(MARKER).is_file());
    }
}
