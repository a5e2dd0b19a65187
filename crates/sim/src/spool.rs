//! Trace bytes on their way to disk: an emitter appends to a [`Pending`]
//! buffer and marks where AUXTRACE buffers may begin; a [`Spool`] moves the
//! bytes to a per-CPU file as they come, so that a run of any length holds
//! only a bounded window of its trace in memory.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Bytes an emitter produced and the spool has not taken yet.
#[derive(Debug, Default)]
pub struct Pending {
    pub bytes: Vec<u8>,
    /// Stream offset of `bytes[0]`.
    pub base: u64,
    /// Stream offsets where a new AUXTRACE buffer begins, in order.
    pub cuts: Vec<u64>,
}

impl Pending {
    /// Stream offset of the next byte.
    pub fn pos(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }
}

/// Pending bytes are moved to the file once there are this many.
pub const SPOOL_AT: usize = 1 << 16;

/// One CPU's trace in a file, with the lengths of its AUXTRACE buffers.
pub struct Spool {
    path: PathBuf,
    file: BufWriter<File>,
    written: u64,
    chunk_start: u64,
    chunks: Vec<u64>,
}

impl Spool {
    pub fn create(path: &Path) -> std::io::Result<Spool> {
        let file = BufWriter::with_capacity(1 << 16, File::create(path)?);
        Ok(Spool { path: path.to_path_buf(), file, written: 0, chunk_start: 0, chunks: Vec::new() })
    }

    /// Takes everything pending: its bytes go to the file, its cuts end buffers.
    pub fn absorb(&mut self, p: &mut Pending) -> std::io::Result<()> {
        for &cut in &p.cuts {
            if cut > self.chunk_start {
                self.chunks.push(cut - self.chunk_start);
                self.chunk_start = cut;
            }
        }
        p.cuts.clear();
        self.file.write_all(&p.bytes)?;
        self.written += p.bytes.len() as u64;
        p.base += p.bytes.len() as u64;
        p.bytes.clear();
        Ok(())
    }

    /// Ends the last buffer and closes the file; returns its path and buffer lengths.
    pub fn finish(mut self) -> std::io::Result<(PathBuf, Vec<u64>)> {
        if self.written > self.chunk_start {
            self.chunks.push(self.written - self.chunk_start);
        }
        self.file.flush()?;
        Ok((self.path, self.chunks))
    }
}

/// Reads a finished spool back one buffer at a time, into one reused allocation.
pub struct SpoolReader {
    input: BufReader<File>,
    chunks: std::vec::IntoIter<u64>,
    buf: Vec<u8>,
}

impl SpoolReader {
    pub fn open(path: &Path, chunks: Vec<u64>) -> std::io::Result<SpoolReader> {
        Ok(SpoolReader { input: BufReader::with_capacity(1 << 16, File::open(path)?), chunks: chunks.into_iter(), buf: Vec::new() })
    }

    /// The next buffer's bytes, or None after the last.
    pub fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        let Some(n) = self.chunks.next() else { return Ok(None) };
        self.buf.resize(n as usize, 0);
        self.input.read_exact(&mut self.buf)?;
        Ok(Some(&self.buf))
    }
}
