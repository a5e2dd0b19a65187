//! User code named by MMAP records: which file is read for a mapping, and
//! whether it may be. A perf.data file can name any path, so only a regular
//! file that is an ELF executable or shared object is read, and only when
//! its build-id is the one recorded for it (MMAP2 build-id, or the
//! HEADER_BUILD_ID feature), if one is. Like perf, the look-ups can be
//! rooted in a directory (`--symfs`), and a build-id cache is tried first.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectKind};
use perfdata::mapped::MappedFile;
use perfdata::{Mmap2FileId, PerfFile, Record, RecordBody};

/// Where the files of user mappings are looked up.
#[derive(Clone, Debug, Default)]
pub struct UserCode {
    /// Paths are taken relative to this directory (perf's `--symfs`).
    pub symfs: Option<PathBuf>,
    /// A perf build-id cache (`~/.debug`): `.build-id/xx/rest/elf` is tried
    /// first for a mapping whose build-id is recorded.
    pub build_id_dir: Option<PathBuf>,
}

/// An executable mapping of a file, as an MMAP or MMAP2 record gives it.
#[derive(Clone, Copy, Debug)]
pub struct UserMapping<'a> {
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub name: &'a [u8],
    /// The build-id recorded for the file, if any.
    pub build_id: Option<&'a [u8]>,
}

/// Every executable file mapping of `file` (MMAP2 with PROT_EXEC, MMAP
/// without MAP_DATA), in file order, with the build-id recorded for it.
pub fn user_mappings(file: &PerfFile) -> Vec<UserMapping<'_>> {
    let build_ids = BuildIds::of(file);
    file.records().flatten().filter_map(|r| mapping_of(&r, &build_ids)).collect()
}

/// The build-ids a perf.data's header records, by file name.
pub(crate) struct BuildIds<'a>(HashMap<&'a [u8], &'a [u8]>);

impl<'a> BuildIds<'a> {
    pub(crate) fn of(file: &'a PerfFile) -> BuildIds<'a> {
        BuildIds(file.features().build_ids.iter().map(|e| (e.filename.as_bytes(), &e.build_id[..])).collect())
    }
}

/// The executable file mapping `r` makes, if it makes one (see [`user_mappings`]).
pub(crate) fn mapping_of<'a>(r: &Record<'a>, build_ids: &BuildIds<'a>) -> Option<UserMapping<'a>> {
    let (addr, len, pgoff, name, own_id) = match &r.body {
        RecordBody::Mmap2(m) if m.prot & 4 != 0 => {
            let id = match m.file_id {
                Mmap2FileId::BuildId(id) => Some(id),
                Mmap2FileId::Inode { .. } => None,
            };
            (m.addr, m.len, m.pgoff, m.filename, id)
        }
        RecordBody::Mmap(m) if r.misc & perfdata::abi::misc::MMAP_DATA == 0 => (m.addr, m.len, m.pgoff, m.filename, None),
        _ => return None,
    };
    let build_id = own_id.or_else(|| build_ids.0.get(name).copied());
    Some(UserMapping { addr, len, pgoff, name, build_id })
}

/// What became of the user mappings: added, their file missing, or refused.
#[derive(Debug, Default)]
pub struct UserReport {
    /// Mappings whose bytes were added.
    pub added: usize,
    /// Files that do not exist (here, or under `symfs`), and names that are
    /// not paths (`[vdso]`).
    pub missing: usize,
    /// Files refused, each once: the first [`REFUSED_LISTED`] (name, why).
    pub refused: Vec<(String, String)>,
    pub refused_count: usize,
}

/// Refused files listed one by one in [`UserReport::refused`]; the rest are counted.
pub const REFUSED_LISTED: usize = 16;

impl UserReport {
    pub(crate) fn refuse(&mut self, name: &[u8], why: Refused) {
        if why.is_missing() {
            self.missing += 1;
            return;
        }
        self.refused_count += 1;
        if self.refused.len() < REFUSED_LISTED {
            self.refused.push((String::from_utf8_lossy(name).into_owned(), why.to_string()));
        }
    }

    /// One line on the files refused, with the first three; None when none was.
    pub fn summary(&self) -> Option<String> {
        if self.refused_count == 0 {
            return None;
        }
        let first: Vec<String> = self.refused.iter().take(3).map(|(name, why)| format!("{name}: {why}")).collect();
        let more = if self.refused_count > first.len() { "; ..." } else { "" };
        Some(format!(
            "{} user code files named by MMAP records were not read, their code is left unmapped: {}{more}",
            self.refused_count,
            first.join("; ")
        ))
    }
}

/// A user file that passed the checks, mapped.
pub struct UserFile {
    /// The file read (under `symfs` or in the build-id cache, perhaps).
    pub path: PathBuf,
    pub map: Arc<MappedFile>,
}

/// Why a mapping's file is not read.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("not an absolute path")]
    NotAbsolute,
    #[error("the path has `..` in it")]
    DotDot,
    #[error("{0}")]
    Io(std::io::Error),
    #[error("not a regular file")]
    NotRegular,
    #[error("not an ELF file")]
    NotElf,
    #[error("an ELF file but not an executable or shared object ({0:?})")]
    NotExecutable(ObjectKind),
    #[error("its build-id {found} is not the recorded {recorded}")]
    BuildIdDiffers { recorded: String, found: String },
    #[error("it has no build-id to match the recorded {recorded}")]
    NoBuildId { recorded: String },
}

impl Refused {
    /// Whether there is no file to read, which is common and not worth a
    /// word each time: a file deleted since or on another machine, or a name
    /// that is not a path (`[vdso]`, `//anon`).
    pub fn is_missing(&self) -> bool {
        matches!(self, Refused::NotAbsolute) || matches!(self, Refused::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl UserCode {
    /// The file to read for a mapping named `name` with `build_id`, checked.
    pub fn open(&self, name: &[u8], build_id: Option<&[u8]>) -> Result<UserFile, Refused> {
        let path = Path::new(OsStr::from_bytes(name));
        if !path.is_absolute() {
            return Err(Refused::NotAbsolute);
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(Refused::DotDot);
        }
        if let (Some(dir), Some(id)) = (&self.build_id_dir, build_id) {
            if let Some(cached) = cache_paths(dir, id).into_iter().find(|p| p.is_file()) {
                return open_checked(&cached, build_id);
            }
        }
        let path = match &self.symfs {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_path_buf(),
        };
        open_checked(&path, build_id)
    }
}

/// perf's build-id cache entries for `id`: `DIR/.build-id/<2 hex digits>/<the
/// rest>/elf`, and the older layout without `/elf`.
fn cache_paths(dir: &Path, id: &[u8]) -> Vec<PathBuf> {
    let hex = hex(id);
    if hex.len() <= 2 {
        return Vec::new();
    }
    let entry = dir.join(".build-id").join(&hex[..2]).join(&hex[2..]);
    vec![entry.join("elf"), entry]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Opens `path` if it is a regular file (never blocking on a FIFO or
/// reading a device), an ELF executable or shared object, with `build_id`
/// when one is given.
fn open_checked(path: &Path, build_id: Option<&[u8]>) -> Result<UserFile, Refused> {
    const O_NONBLOCK: i32 = 0o4000;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(O_NONBLOCK).open(path).map_err(Refused::Io)?;
    if !f.metadata().map_err(Refused::Io)?.is_file() {
        return Err(Refused::NotRegular);
    }
    let map = MappedFile::map(&f, path).map_err(Refused::Io)?;
    if !map.starts_with(b"\x7fELF") {
        return Err(Refused::NotElf);
    }
    let elf = object::File::parse(&map[..]).map_err(|_| Refused::NotElf)?;
    match elf.kind() {
        ObjectKind::Executable | ObjectKind::Dynamic => {}
        other => return Err(Refused::NotExecutable(other)),
    }
    if let Some(recorded) = build_id {
        match elf.build_id().ok().flatten() {
            Some(found) if found == recorded => {}
            Some(found) => return Err(Refused::BuildIdDiffers { recorded: hex(recorded), found: hex(found) }),
            None => return Err(Refused::NoBuildId { recorded: hex(recorded) }),
        }
    }
    drop(elf);
    Ok(UserFile { path: path.to_path_buf(), map: Arc::new(map) })
}
