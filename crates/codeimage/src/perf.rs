//! Building a timeline from a perf.data file or directory.

use perfdata::abi::{ksymbol_type, misc};
use perfdata::{PerfFile, RecordBody};

use crate::base::BaseImage;
use crate::error::Result;
use crate::timeline::{CodeTimeline, Poke, TimelineBuilder};

/// A timeline built from perf.data, with what was read and what was not.
pub struct PerfTimeline {
    pub timeline: CodeTimeline,
    /// TEXT_POKE records applied.
    pub pokes: usize,
    /// TEXT_POKE records whose cpumode is not KERNEL (perf ignores them; they are applied here and counted).
    pub non_kernel_pokes: usize,
    /// Records that could not be read (their errors).
    pub errors: Vec<String>,
}

/// Base code from the directory's `kcore_dir/kcore` (when there is one) plus
/// `extra` (vmlinux, modules, dumps), and every TEXT_POKE in time order.
/// KSYMBOL OOL and BPF ranges name the code they announce.
pub fn from_perf_data(file: &PerfFile, mut extra: BaseImage) -> Result<PerfTimeline> {
    if let Some(dir) = file.kcore_dir() {
        let kcore = dir.join("kcore");
        if kcore.is_file() {
            extra.add_elf(&kcore)?;
        }
    }
    let mut b = TimelineBuilder::new(extra);
    let (mut pokes, mut non_kernel) = (0, 0);
    let mut errors = Vec::new();
    for r in file.sorted_records() {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        match r.body {
            RecordBody::TextPoke(p) => {
                pokes += 1;
                non_kernel += (r.cpumode() != misc::KERNEL) as usize;
                b.poke(Poke {
                    time: r.time().unwrap_or(0),
                    settled: None,
                    addr: p.addr,
                    old: p.old,
                    new: p.new,
                    cpu: r.sample_id.cpu,
                });
            }
            RecordBody::Ksymbol(k) if k.flags & perfdata::abi::KSYMBOL_FLAG_UNREGISTER == 0 => {
                let kind = match k.ksym_type {
                    ksymbol_type::BPF => "BPF program",
                    ksymbol_type::OOL => "out-of-line code",
                    _ => "kernel symbol",
                };
                b.name_range(k.addr, k.len as u64, format!("{kind} {}", String::from_utf8_lossy(k.name)));
            }
            _ => {}
        }
    }
    Ok(PerfTimeline { timeline: b.build(), pokes, non_kernel_pokes: non_kernel, errors })
}
