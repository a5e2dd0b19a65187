//! Profile lines made in one reused buffer: numbers written digit by digit
//! (no formatting machinery, a line costs a few dozen instructions), the
//! buffer handed to the writer each time it fills.

use std::io::{self, Write};

/// Bytes of lines kept before they are written out.
const FLUSH: usize = 1 << 16;

/// Lines on their way to a writer.
pub struct Lines<'w> {
    w: &'w mut dyn Write,
    buf: Vec<u8>,
}

impl<'w> Lines<'w> {
    pub fn new(w: &'w mut dyn Write) -> Self {
        Lines { w, buf: Vec::with_capacity(FLUSH + 256) }
    }

    /// `v` in lower-case hex, no prefix (as `{:x}`).
    #[inline]
    pub fn hex(&mut self, v: u64) -> &mut Self {
        let digits = (64 - (v | 1).leading_zeros()).div_ceil(4) as usize;
        let at = self.buf.len();
        self.buf.resize(at + digits, 0);
        let mut v = v;
        for d in self.buf[at..].iter_mut().rev() {
            *d = b"0123456789abcdef"[(v & 0xf) as usize];
            v >>= 4;
        }
        self
    }

    /// `v` in decimal (as `{}`).
    #[inline]
    pub fn dec(&mut self, v: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let (mut v, mut at) = (v, digits.len());
        loop {
            at -= 1;
            digits[at] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.buf.extend_from_slice(&digits[at..]);
        self
    }

    #[inline]
    pub fn text(&mut self, s: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(s);
        self
    }

    /// Ends the line; the buffer goes out when full.
    #[inline]
    pub fn end(&mut self) -> io::Result<()> {
        self.buf.push(b'\n');
        if self.buf.len() >= FLUSH {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes out what is left.
    pub fn finish(mut self) -> io::Result<()> {
        self.w.write_all(&self.buf)?;
        self.buf.clear();
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
