//! From a perf.data to decoded lines, between the trace decoders (intel-pt,
//! etm) and the programs that print or score them (`poketrace decode`,
//! `sim`'s check): the AUX queues per CPU or thread ([`Input`]), which task
//! ran where ([`Threads`]), each decoder's set-up from AUXTRACE_INFO
//! ([`setup`]), the image the decoders walk ([`ImageMode`]), perf's branch
//! samples made of the decoders' events ([`pt`], [`cs`]) or their counts
//! ([`Summary`]), and the merge of all queues' lines in time order on a bounded pool of threads.

mod aux;
pub mod cs;
pub mod filter;
pub mod flags;
mod input;
mod itrace;
mod lanes;
mod line;
mod merge;
mod mode;
mod pairs;
mod pool;
pub mod profile;
pub mod pt;
mod queue;
pub mod setup;
mod summary;
mod threads;
pub mod units;

pub use aux::AuxBytes;
pub use input::{Input, Trace};
pub use itrace::Itrace;
pub use line::{InsnBytes, Kind, Out};
pub use mode::ImageMode;
pub use queue::{AuxBreak, Queue};
pub use summary::Summary;
pub use threads::Threads;

/// What stops a decode before it starts, or part-way.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An `--itrace` value that is not understood.
    #[error("{0}")]
    Itrace(String),
    /// AUXTRACE_INFO asks for a set-up that is not decoded.
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Perf(#[from] perfdata::Error),
    /// Not one thread to decode on.
    #[error("cannot start a thread to decode on: {0}")]
    Spawn(std::io::Error),
}
