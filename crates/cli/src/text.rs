//! Output lines built in a byte buffer: numbers written digit by digit and
//! columns padded in place. `format!` gives the same text, but its
//! machinery (a `Formatter` a field, a call a character) was most of
//! `poketrace decode`'s time; lines are what that command makes.

/// Two decimal digits for each of 0 to 99.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";
const HEX: &[u8; 16] = b"0123456789abcdef";

/// A line (or lines) of text being written. A column is written from
/// [`Text::mark`], then padded with [`Text::right`] or [`Text::left`], so a
/// field is written once whatever it holds.
#[derive(Default)]
pub struct Text(Vec<u8>);

impl Text {
    pub fn with_capacity(n: usize) -> Self {
        Text(Vec::with_capacity(n))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// The bytes, for writers that append to a `Vec` themselves.
    pub fn bytes_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }

    /// Where the next column starts, for [`Self::right`] and [`Self::left`].
    #[inline(always)]
    pub fn mark(&self) -> usize {
        self.0.len()
    }

    #[inline(always)]
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.0.extend_from_slice(s.as_bytes());
        self
    }

    #[inline(always)]
    pub fn byte(&mut self, b: u8) -> &mut Self {
        self.0.push(b);
        self
    }

    /// `n` spaces.
    #[inline(always)]
    pub fn spaces(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, b' ');
        self
    }

    /// Pads what was written since `from` to `width` characters, spaces
    /// before it (`{:>width}`).
    #[inline]
    pub fn right(&mut self, from: usize, width: usize) -> &mut Self {
        let n = chars(&self.0[from..]);
        if n < width {
            let pad = width - n;
            let end = self.0.len();
            self.0.resize(end + pad, b' ');
            self.0.copy_within(from..end, from + pad);
            self.0[from..from + pad].fill(b' ');
        }
        self
    }

    /// Pads what was written since `from` to `width` characters, spaces
    /// after it (`{:<width}`).
    #[inline]
    pub fn left(&mut self, from: usize, width: usize) -> &mut Self {
        let n = chars(&self.0[from..]);
        self.spaces(width.saturating_sub(n))
    }

    /// `s` in a column of `width`, spaces after it (`{s:<width}`).
    #[inline]
    pub fn str_left(&mut self, s: &str, width: usize) -> &mut Self {
        let from = self.mark();
        self.str(s).left(from, width)
    }

    /// `v` in decimal (`{v}`).
    #[inline]
    pub fn dec(&mut self, v: u64) -> &mut Self {
        let mut buf = [0u8; 20];
        let at = decimal(v, &mut buf);
        self.0.extend_from_slice(&buf[at..]);
        self
    }

    /// `v` in decimal, with its sign when negative (`{v}`).
    #[inline]
    pub fn int(&mut self, v: i64) -> &mut Self {
        if v < 0 {
            self.0.push(b'-');
        }
        self.dec(v.unsigned_abs())
    }

    /// `v` in decimal, zeros before it up to `width` characters, the sign
    /// included (`{v:0width}`).
    #[inline]
    pub fn int_zeros(&mut self, v: i64, width: usize) -> &mut Self {
        if v < 0 {
            self.0.push(b'-');
        }
        self.zeros(v.unsigned_abs(), width.saturating_sub((v < 0) as usize))
    }

    /// `v` in decimal, zeros before it up to `digits` digits (`{v:0digits}`).
    #[inline]
    pub fn zeros(&mut self, v: u64, digits: usize) -> &mut Self {
        // (Zeros before the digits already: one copy.)
        let mut buf = [b'0'; 20];
        let at = decimal(v, &mut buf);
        if digits > buf.len() {
            self.0.resize(self.0.len() + digits - buf.len(), b'0');
        }
        self.0.extend_from_slice(&buf[at.min(buf.len().saturating_sub(digits))..]);
        self
    }

    /// `v` in decimal, with its sign when negative, spaces before it up to
    /// `width` characters (`{v:>width}`).
    #[inline]
    pub fn int_right(&mut self, v: i64, width: usize) -> &mut Self {
        // (Spaces before the digits and sign already: one copy.)
        let mut buf = [b' '; 21];
        let mut start = decimal(v.unsigned_abs(), &mut buf);
        if v < 0 {
            start -= 1;
            buf[start] = b'-';
        }
        if width > buf.len() {
            self.spaces(width - buf.len());
        }
        self.0.extend_from_slice(&buf[start.min(buf.len().saturating_sub(width))..]);
        self
    }

    /// `s` in a column of `width`, spaces before it (`{s:>width}`).
    #[inline]
    pub fn str_right(&mut self, s: &str, width: usize) -> &mut Self {
        self.spaces(width.saturating_sub(chars(s.as_bytes()))).str(s)
    }

    /// `v` in lowercase hex, no prefix (`{v:x}`).
    #[inline]
    pub fn hex(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&hex16(v)[16 - hex_digits(v)..]);
        self
    }

    /// `v` in lowercase hex, spaces before it up to `width` (`{v:>width$x}`).
    #[inline]
    pub fn hex_right(&mut self, v: u64, width: usize) -> &mut Self {
        self.spaces(width.saturating_sub(hex_digits(v))).hex(v)
    }

    /// `v` in lowercase hex after `0x` (`{v:#x}`).
    #[inline]
    pub fn hex_0x(&mut self, v: u64) -> &mut Self {
        self.str("0x").hex(v)
    }

    /// `s` inside a JSON string, escaped as `serde_json` escapes it: `"`,
    /// `\\` and control characters (short forms where JSON has them).
    pub fn json_chars(&mut self, s: &str) -> &mut Self {
        let bytes = s.as_bytes();
        let mut from = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let short = match b {
                b'"' => b'"',
                b'\\' => b'\\',
                b'\n' => b'n',
                b'\r' => b'r',
                b'\t' => b't',
                0x08 => b'b',
                0x0c => b'f',
                0..=0x1f => 0,
                _ => continue,
            };
            self.0.extend_from_slice(&bytes[from..i]);
            from = i + 1;
            match short {
                0 => self.str("\\u00").hex_byte(b),
                c => self.byte(b'\\').byte(c),
            };
        }
        self.0.extend_from_slice(&bytes[from..]);
        self
    }

    /// A byte as two lowercase hex digits (`{b:02x}`).
    #[inline]
    pub fn hex_byte(&mut self, b: u8) -> &mut Self {
        self.0.extend_from_slice(&[HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        self
    }
}

/// Characters in UTF-8 `bytes` (what `format!` pads by): its bytes that
/// are not continuation bytes.
#[inline]
pub fn chars(bytes: &[u8]) -> usize {
    if bytes.is_ascii() {
        return bytes.len();
    }
    bytes.iter().filter(|&&b| b & 0xc0 != 0x80).count()
}

/// Decimal digits in `v` (1 for zero).
#[inline]
pub fn decimal_digits(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Hex digits in `v` (1 for zero).
#[inline]
fn hex_digits(v: u64) -> usize {
    (16 - v.leading_zeros() as usize / 4).max(1)
}

/// The 16 hex digits of `v`, most significant first, all at once: each
/// half's nibbles spread to a byte each, then made digits (`a`-`f` where
/// adding 6 carries out of the nibble).
#[inline]
fn hex16(v: u64) -> [u8; 16] {
    let digits = |x: u32| {
        let x = u64::from(x);
        let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
        let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
        let x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
        let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        (x + 0x3030_3030_3030_3030 + letters * (b'a' - b'0' - 10) as u64).to_be_bytes()
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&digits((v >> 32) as u32));
    out[8..].copy_from_slice(&digits(v as u32));
    out
}

/// Writes `v`'s decimal digits at the end of `buf`; where they start.
#[inline]
fn decimal<const N: usize>(mut v: u64, buf: &mut [u8; N]) -> usize {
    let mut at = buf.len();
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + v as u8;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers of every magnitude: each digit count, its edges, and random.
    fn numbers(rng: &mut testkit::Rng) -> Vec<u64> {
        let mut v = vec![0, 1, 9, 10, 99, 100, u64::MAX, u64::MAX - 1, i64::MAX as u64, 1 << 63];
        for shift in 0..64 {
            v.extend([1u64 << shift, (1u64 << shift) - 1, (1u64 << shift) + 1, rng.next() >> shift]);
        }
        for p in 1..20 {
            let ten = 10u64.pow(p);
            v.extend([ten - 1, ten, ten + 1]);
        }
        v
    }

    fn text(f: impl FnOnce(&mut Text)) -> String {
        let mut t = Text::default();
        t.str("<");
        f(&mut t);
        String::from_utf8(t.as_bytes()[1..].to_vec()).unwrap()
    }

    #[test]
    fn numbers_read_as_format_writes_them() {
        let mut rng = testkit::Rng(0x7e47);
        for v in numbers(&mut rng) {
            let w = rng.below(24) as usize;
            let i = v as i64;
            assert_eq!(text(|t| _ = t.dec(v)), format!("{v}"));
            assert_eq!(text(|t| _ = t.int(i)), format!("{i}"));
            assert_eq!(text(|t| _ = t.zeros(v, w)), format!("{v:0w$}"), "{v} {w}");
            assert_eq!(text(|t| _ = t.int_zeros(i, w)), format!("{i:0w$}"), "{i} {w}");
            assert_eq!(text(|t| _ = t.int_right(i, w)), format!("{i:>w$}"), "{i} {w}");
            assert_eq!(text(|t| _ = t.zeros(v, w + 8)), format!("{v:0w$}", w = w + 8), "{v} {w}");
            assert_eq!(decimal_digits(v), format!("{v}").len());
            assert_eq!(text(|t| _ = t.hex(v)), format!("{v:x}"));
            assert_eq!(text(|t| _ = t.hex_right(v, w)), format!("{v:>w$x}"), "{v} {w}");
            assert_eq!(text(|t| _ = t.hex_0x(v)), format!("{v:#x}"));
            assert_eq!(text(|t| _ = t.hex_byte(v as u8)), format!("{:02x}", v as u8));
            let from = |t: &Text| t.mark();
            assert_eq!(
                text(|t| {
                    let m = from(t);
                    t.int(i).right(m, w);
                }),
                format!("{i:>w$}"),
                "{i} {w}"
            );
            assert_eq!(
                text(|t| {
                    let m = from(t);
                    t.int(i).left(m, w);
                }),
                format!("{i:<w$}"),
                "{i} {w}"
            );
        }
    }

    #[test]
    fn json_strings_are_escaped_as_serde_json_escapes_them() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("naïve \u{2028} 日本");
        for s in ["", "dispatch+0x0", "a\"b\\c", "tab\there\nline\r\u{8}\u{c}\u{1}\u{1f}\u{7f}", &all] {
            assert_eq!(text(|t| _ = t.byte(b'"').json_chars(s).byte(b'"')), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn columns_pad_by_characters_as_format_does() {
        for s in ["", "a", "swapper", "perf-exec", "naïve", "日本語のスレッド", "exactly sixteen!", "longer than sixteen characters"] {
            for w in [0, 1, 5, 16, 32] {
                assert_eq!(text(|t| _ = t.str_left(s, w)), format!("{s:<w$}"), "{s:?} {w}");
                assert_eq!(text(|t| _ = t.str_right(s, w)), format!("{s:>w$}"), "{s:?} {w}");
                assert_eq!(
                    text(|t| {
                        let m = t.mark();
                        t.str(s).right(m, w);
                    }),
                    format!("{s:>w$}"),
                    "{s:?} {w}"
                );
            }
        }
    }
}
