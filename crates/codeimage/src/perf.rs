//! Building a timeline from a perf.data file or directory.

use std::collections::HashMap;
use std::sync::Arc;

use perfdata::mapped::MappedFile;
use perfdata::PerfFile;

use crate::base::BaseImage;
use crate::error::Result;
use crate::sideband::{PerfTimeline, PokeEvents, Sideband};
use crate::user::{user_mappings, UserCode, UserMapping, UserReport};

/// Base code from the directory's `kcore_dir/kcore` (when there is one) plus
/// `extra` (vmlinux, modules, dumps), and every TEXT_POKE in time order.
/// KSYMBOL OOL and BPF ranges name the code they announce.
pub fn from_perf_data(file: &PerfFile, extra: BaseImage) -> Result<PerfTimeline> {
    from_perf_data_with(file, extra, PokeEvents::Single)
}

/// [`from_perf_data`] for a given way of announcing changes.
pub fn from_perf_data_with(file: &PerfFile, mut extra: BaseImage, events: PokeEvents) -> Result<PerfTimeline> {
    add_base(file, &mut extra)?;
    over_base(file, extra, events)
}

/// Every TEXT_POKE of `file` in time order over `base`, the code before any
/// change (as [`add_base`] makes it, for callers that need it on its own too),
/// with the ranges KSYMBOL records name.
pub fn over_base(file: &PerfFile, base: BaseImage, events: PokeEvents) -> Result<PerfTimeline> {
    Ok(Sideband::read(file, events).timeline(base))
}

/// The code of a perf.data before any change: `kcore_dir/kcore` and the
/// executable file mappings of user programs (looked up as
/// [`UserCode::default`] does), added to `base`.
pub fn add_base(file: &PerfFile, base: &mut BaseImage) -> Result<()> {
    add_base_with(file, base, &UserCode::default()).map(drop)
}

/// [`add_base`] with user files looked up as `user` says; returns what
/// became of the user mappings.
pub fn add_base_with(file: &PerfFile, base: &mut BaseImage, user: &UserCode) -> Result<UserReport> {
    add_base_mapped(file, &user_mappings(file), base, user)
}

/// [`add_base_with`] for the user `mappings` of `file` read already
/// ([`Sideband::mappings`]).
pub fn add_base_mapped(file: &PerfFile, mappings: &[UserMapping<'_>], base: &mut BaseImage, user: &UserCode) -> Result<UserReport> {
    if let Some(dir) = file.kcore_dir() {
        let kcore = dir.join("kcore");
        if kcore.is_file() {
            base.add_elf(&kcore)?;
        }
    }
    Ok(add_user_mappings(mappings, base, user))
}

/// A user file as MMAP records name it: its path and recorded build-id.
type FileKey<'a> = (&'a [u8], Option<&'a [u8]>);

/// User code: every executable file mapping whose file passes
/// [`UserCode::open`] is added as the kernel mapped it, file bytes from
/// `pgoff` at `addr`. One address space for all processes: where mappings
/// of different processes overlap, the first one wins (and is listed in
/// [`BaseImage::overlaps`]).
fn add_user_mappings(mappings: &[UserMapping<'_>], base: &mut BaseImage, user: &UserCode) -> UserReport {
    let mut report = UserReport::default();
    let mut opened: HashMap<FileKey<'_>, Option<Arc<MappedFile>>> = HashMap::new();
    for m in mappings {
        let map = opened.entry((m.name, m.build_id)).or_insert_with(|| match user.open(m.name, m.build_id) {
            Ok(f) => Some(f.map),
            Err(why) => {
                report.refuse(m.name, why);
                None
            }
        });
        let Some(map) = map else { continue };
        let avail = (map.len() as u64).saturating_sub(m.pgoff);
        if avail > 0 {
            // A mapping whose file changed since recording: skip what does not fit.
            let name = String::from_utf8_lossy(m.name).rsplit('/').next().unwrap_or_default().to_string();
            base.add_mapped(map.clone(), m.pgoff as usize, m.len.min(avail) as usize, m.addr, name);
            report.added += 1;
        }
    }
    report
}
