//! The ground truth: every executed instruction of one CPU, with its time,
//! streamed to a compact file (varint time delta, zigzag varint address delta).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"PKTRUTH1";

pub struct TruthWriter {
    out: BufWriter<File>,
    last_time: u64,
    last_addr: u64,
    pub count: u64,
}

impl TruthWriter {
    pub fn create(path: &Path) -> std::io::Result<TruthWriter> {
        let mut out = BufWriter::with_capacity(1 << 16, File::create(path)?);
        out.write_all(MAGIC)?;
        Ok(TruthWriter { out, last_time: 0, last_addr: 0, count: 0 })
    }

    pub fn push(&mut self, time: u64, addr: u64) -> std::io::Result<()> {
        let mut buf = [0u8; 20];
        let mut n = varint(time - self.last_time, &mut buf);
        let delta = addr.wrapping_sub(self.last_addr) as i64;
        n += varint(((delta << 1) ^ (delta >> 63)) as u64, &mut buf[n..]);
        self.out.write_all(&buf[..n])?;
        self.last_time = time;
        self.last_addr = addr;
        self.count += 1;
        Ok(())
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn varint(mut v: u64, out: &mut [u8]) -> usize {
    let mut n = 0;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[n] = b;
            return n + 1;
        }
        out[n] = b | 0x80;
        n += 1;
    }
}

/// Reads a truth file back: (time, addr) per executed instruction.
pub struct TruthReader {
    input: BufReader<File>,
    time: u64,
    addr: u64,
}

impl TruthReader {
    pub fn open(path: &Path) -> std::io::Result<TruthReader> {
        let mut input = BufReader::with_capacity(1 << 16, File::open(path)?);
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: not a truth file", path.display())));
        }
        Ok(TruthReader { input, time: 0, addr: 0 })
    }

    fn varint(&mut self) -> std::io::Result<Option<u64>> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let mut b = [0u8; 1];
            if self.input.read(&mut b)? == 0 {
                return if shift == 0 { Ok(None) } else { Err(std::io::ErrorKind::UnexpectedEof.into()) };
            }
            v |= ((b[0] & 0x7f) as u64) << shift;
            if b[0] & 0x80 == 0 {
                return Ok(Some(v));
            }
        }
        Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "varint longer than 64 bits"))
    }
}

impl Iterator for TruthReader {
    type Item = std::io::Result<(u64, u64)>;
    fn next(&mut self) -> Option<Self::Item> {
        let dt = match self.varint() {
            Ok(Some(v)) => v,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let z = match self.varint() {
            Ok(Some(v)) => v,
            Ok(None) => return Some(Err(std::io::ErrorKind::UnexpectedEof.into())),
            Err(e) => return Some(Err(e)),
        };
        let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
        self.time += dt;
        self.addr = self.addr.wrapping_add(delta as u64);
        Some(Ok((self.time, self.addr)))
    }
}
