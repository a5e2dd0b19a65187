//! Read and write Linux `perf.data`: the file header, event attrs, typed
//! records (text pokes, ksymbols, AUX trace and the rest), and the feature
//! sections, in the layouts that Linux perf writes and reads.
//!
//! Reading is zero-copy over a memory map: records borrow their strings,
//! code bytes and trace payloads from the file. Every length is checked
//! against what is left before anything is sliced, and every error names the
//! file offset. Writing produces files that `perf report` and `perf script`
//! read, including perf.data directories with a `kcore_dir/`.
//!
//! It covers the file, directory (`DIR/data`) and pipe layouts, COMPRESSED
//! records (zstd, as `perf record -z` writes them), records in perf's
//! timestamp order as well as file order ([`PerfFile::sorted_records`]), the
//! Intel PT and CoreSight AUXTRACE_INFO payloads ([`auxtrace`]), the kernel's
//! ABI constants ([`abi`]) and a `kcore_dir` writer ([`kcore`]). It knows
//! nothing of decoding: the trace payloads are bytes for the decoders.
//!
//! ```no_run
//! let file = perfdata::PerfFile::open("perf.data")?;
//! for record in file.records() {
//!     if let perfdata::RecordBody::TextPoke(poke) = record?.body {
//!         println!("{:#x}: {:02x?} -> {:02x?}", poke.addr, poke.old, poke.new);
//!     }
//! }
//! # Ok::<(), perfdata::Error>(())
//! ```

pub mod abi;
mod attr;
pub mod auxtrace;
mod branch;
mod cursor;
mod error;
mod features;
mod file;
pub mod kcore;
mod loss;
pub mod mapped;
mod records;
mod sample;
mod sorted;
mod write;

pub use attr::{AttrWithIds, EventAttr, ATTR_SIZE_KNOWN, ATTR_SIZE_VER0, ATTR_SIZE_VER7};
pub use branch::{BranchEntry, BranchStack, BRANCH_ENTRY_SIZE};
pub use error::{Error, Result};
pub use features::{feature_name, AuxtraceIndexEntry, BuildIdEntry, EventDesc, FeatureSection, Features, NrCpus};
pub use file::{FileHeader, PerfFile, Records, Unfinished, FILE_HEADER_SIZE, MAGIC, PIPE_HEADER_SIZE};
pub use loss::{Losses, LostWindow};
pub use records::*;
pub use sample::{Sample, SampleId};
pub use sorted::SortedRecords;
pub use write::{create_private, create_private_dir, FeatureData, Writer};
