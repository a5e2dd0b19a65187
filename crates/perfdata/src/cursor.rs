//! Bounds-checked little-endian reads over a byte slice that knows its file offset.

use crate::error::{Error, Result};

/// Reads fields front to back; every read is checked against what is left.
#[derive(Clone, Copy)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// Where `data[0]` is: the file offset, and for data inside a COMPRESSED
    /// record the offset inside its decompressed stream.
    pub(crate) origin: Origin,
    what: &'static str,
}

/// Position of a byte slice in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) offset: u64,
    pub(crate) inner: Option<u64>,
}

impl Origin {
    pub(crate) fn file(offset: u64) -> Origin {
        Origin { offset, inner: None }
    }

    pub(crate) fn advanced(self, by: u64) -> Origin {
        match self.inner {
            Some(i) => Origin { offset: self.offset, inner: Some(i + by) },
            None => Origin { offset: self.offset + by, inner: None },
        }
    }
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], origin: Origin, what: &'static str) -> Self {
        Cursor { data, pos: 0, origin, what }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub(crate) fn position(&self) -> Origin {
        self.origin.advanced(self.pos as u64)
    }

    pub(crate) fn truncated(&self, needed: usize) -> Error {
        let at = self.position();
        Error::Truncated { what: self.what, offset: at.offset, inner: at.inner, needed: needed as u64, available: self.remaining() as u64 }
    }

    pub(crate) fn invalid(&self, reason: impl Into<String>) -> Error {
        let at = self.position();
        Error::Invalid { what: self.what, offset: at.offset, inner: at.inner, reason: reason.into() }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let b = self.bytes(N)?;
        Ok(b.try_into().expect("length checked"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// `n` items of `item_size` bytes, with the product checked before slicing.
    pub(crate) fn items(&mut self, n: u64, item_size: usize) -> Result<&'a [u8]> {
        match n.checked_mul(item_size as u64) {
            Some(total) if total <= self.remaining() as u64 => self.bytes(total as usize),
            _ => Err(self.invalid(format!("count {n} of {item_size}-byte items exceeds the {} bytes left", self.remaining()))),
        }
    }

    /// Everything left.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.data[self.pos..];
        self.pos = self.data.len();
        s
    }

    /// A NUL-terminated string filling the rest (padding after the NUL is dropped).
    pub(crate) fn c_string_rest(&mut self) -> &'a [u8] {
        let s = self.rest();
        until_nul(s)
    }
}

/// The bytes before the first NUL (or all of them).
pub(crate) fn until_nul(s: &[u8]) -> &[u8] {
    match s.iter().position(|&b| b == 0) {
        Some(n) => &s[..n],
        None => s,
    }
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("caller checked length"))
}

/// A little-endian u64 from an 8-byte chunk.
pub(crate) fn u64_from_chunk(chunk: &[u8]) -> u64 {
    u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"))
}
