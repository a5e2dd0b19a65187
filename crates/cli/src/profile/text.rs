//! Profile lines made in one reused buffer: numbers written digit by digit
//! (no formatting machinery, a line costs a few dozen instructions), the
//! buffer handed to the writer each time it fills.

use std::io::{self, Write};

/// Bytes of lines kept before they are written out.
const FLUSH: usize = 1 << 16;
/// Room kept for a number: 20 decimal digits, 16 hex.
const NUMBER: usize = 20;

/// Lines on their way to a writer.
pub struct Lines<'w> {
    w: &'w mut dyn Write,
    /// Lines made so far in `buf[..at]`; `buf` is larger than [`FLUSH`]
    /// by at least a line, and grows for a longer one.
    buf: Vec<u8>,
    at: usize,
}

impl<'w> Lines<'w> {
    pub fn new(w: &'w mut dyn Write) -> Self {
        Lines { w, buf: vec![0; FLUSH + 256], at: 0 }
    }

    /// `n` more bytes fit in `buf`.
    #[inline(always)]
    fn room(&mut self, n: usize) -> &mut [u8] {
        if self.at + n > self.buf.len() {
            self.buf.resize(self.at + n, 0);
        }
        &mut self.buf[self.at..self.at + n]
    }

    /// `v` in lower-case hex, no prefix (as `{:x}`).
    #[inline]
    pub fn hex(&mut self, v: u64) -> &mut Self {
        let digits = (64 - (v | 1).leading_zeros()).div_ceil(4) as usize;
        let mut v = v;
        for d in self.room(digits).iter_mut().rev() {
            *d = b"0123456789abcdef"[(v & 0xf) as usize];
            v >>= 4;
        }
        self.at += digits;
        self
    }

    /// `v` in decimal (as `{}`).
    #[inline]
    pub fn dec(&mut self, v: u64) -> &mut Self {
        let mut digits = [0u8; NUMBER];
        let (mut v, mut at) = (v, NUMBER);
        loop {
            at -= 1;
            digits[at] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.text(&digits[at..])
    }

    #[inline]
    pub fn text(&mut self, s: &[u8]) -> &mut Self {
        self.room(s.len()).copy_from_slice(s);
        self.at += s.len();
        self
    }

    /// Ends the line; the buffer goes out when full.
    #[inline]
    pub fn end(&mut self) -> io::Result<()> {
        self.text(b"\n");
        if self.at >= FLUSH {
            self.w.write_all(&self.buf[..self.at])?;
            self.at = 0;
        }
        Ok(())
    }

    /// Writes out what is left.
    pub fn finish(mut self) -> io::Result<()> {
        self.w.write_all(&self.buf[..self.at])?;
        self.at = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers come out as `format!` writes them, at their edges too.
    #[test]
    fn numbers_are_written_as_format_writes_them() {
        let mut values = vec![0u64, 1, 9, 10, 15, 16, 99, 100, 255, 256, u64::MAX, u64::MAX - 1, 1 << 63];
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend((0..64).map(|s| (1u64 << s) - 1));
        values.extend((1..20).map(|p| 10u64.pow(p)));
        values.extend((1..20).map(|p| 10u64.pow(p) - 1));
        let mut out = Vec::new();
        let mut want = String::new();
        let mut lines = Lines::new(&mut out);
        for &v in values.iter().cycle().take(values.len() * 300) {
            lines.text(b"B ").hex(v).text(b" ").dec(v).end().unwrap();
            want.push_str(&format!("B {v:x} {v}\n"));
        }
        lines.finish().unwrap();
        assert!(want.len() > FLUSH, "the buffer is written out part-way too");
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
