//! Numbers in ptdump's and ptxed's arguments, read as C reads them.

/// An unsigned number as C's `strtoull(s, .., 0)` reads a whole string:
/// `0x` hex, a leading `0` octal, else decimal; `None` if anything is left
/// over or it does not fit in 64 bits.
pub fn parse_c_number(s: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (hex, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_c_reads_them() {
        assert_eq!(parse_c_number("0x1f"), Some(31));
        assert_eq!(parse_c_number("017"), Some(15));
        assert_eq!(parse_c_number("0"), Some(0));
        assert_eq!(parse_c_number("12a"), None);
        assert_eq!(parse_c_number(""), None);
        assert_eq!(parse_c_number("0x"), None);
    }
}
