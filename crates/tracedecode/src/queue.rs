//! The input's AUX buffers (perf's queues).

/// One AUX buffer of the input (perf's queue): per CPU, or per thread.
pub struct Queue {
    /// The mmap index of its AUXTRACE records.
    pub idx: u32,
    /// The CPU (`u32::MAX` for a per-thread buffer followed across CPUs).
    pub cpu: u32,
    /// The traced thread of a per-thread buffer.
    pub thread: Option<i32>,
    pub trace: Vec<u8>,
}
