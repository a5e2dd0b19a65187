//! Which lines a decode makes, from perf's `--itrace` letters.

use crate::Error;

/// What to print, from `--itrace` letters: b (branches), i (instructions),
/// e (errors), and perf's period for instructions where it is a count.
pub struct Itrace {
    pub branches: bool,
    pub instructions: bool,
    /// Print the error lines (the decoders make them always: they are counted).
    pub errors: bool,
    /// With `instructions`: a line every this many instructions (1: each).
    pub period: u64,
    /// Lines carry the bytes their instructions were decoded from (set
    /// when the output prints them; a far branch's always do, for its flags).
    pub insn_bytes: bool,
}

impl Itrace {
    /// perf's `--itrace` letters and period (`i1000i`: every 1000th
    /// instruction; `i0ns` or `i1i`: each). A period in time or ticks is
    /// refused unless zero (perf: as often as possible). `i` alone gives
    /// each instruction (perf's default period there, 100 us, is not taken).
    pub fn parse(s: &str) -> Result<Itrace, Error> {
        let mut t = Itrace { branches: false, instructions: false, errors: false, period: 1, insn_bytes: false };
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            if c.is_ascii_digit() {
                let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
                let n: u64 =
                    rest[..digits].parse().map_err(|e| Error::Itrace(format!("--itrace={s}: period {} is too large: {e}", &rest[..digits])))?;
                rest = &rest[digits..];
                let unit = ["i", "t", "ms", "us", "ns"].into_iter().find(|u| rest.starts_with(u));
                rest = &rest[unit.map_or(0, str::len)..];
                match unit {
                    Some("i") => t.period = n.max(1),
                    _ if n == 0 => t.period = 1,
                    unit => {
                        return Err(Error::Itrace(format!(
                            "--itrace={s}: a period of {n}{} is not supported: instructions are sampled by count (i1000i: every 1000th; i1i or i0ns: each)",
                            unit.unwrap_or("ns")
                        )))
                    }
                }
                continue;
            }
            match c {
                'b' => t.branches = true,
                'i' => t.instructions = true,
                'e' => t.errors = true,
                _ => return Err(Error::Itrace(format!("--itrace: '{c}' is not supported (b, i, e, and a period in instructions such as i1000i)"))),
            }
            rest = &rest[c.len_utf8()..];
        }
        Ok(t)
    }

    /// Whether the next instruction gets a line (every `period`-th, counted
    /// in `seen`, the instructions since the last that got one).
    #[inline]
    pub fn sampled(&self, seen: &mut u64) -> bool {
        *seen += 1;
        if *seen >= self.period {
            *seen = 0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// perf's `--itrace` periods: counts of instructions taken, zero
    /// anything meaning each one, other periods refused by name.
    #[test]
    fn itrace_periods_are_counts_of_instructions() {
        let parsed = |s: &str| Itrace::parse(s).map(|t| (t.branches, t.instructions, t.errors, t.period));
        assert_eq!(parsed("be").unwrap(), (true, false, true, 1));
        assert_eq!(parsed("i").unwrap(), (false, true, false, 1));
        assert_eq!(parsed("i1000ib").unwrap(), (true, true, false, 1000));
        assert_eq!(parsed("bi0i").unwrap(), (true, true, false, 1));
        assert_eq!(parsed("i0nse").unwrap(), (false, true, true, 1));
        assert_eq!(parsed("i0us").unwrap().3, 1);
        assert_eq!(parsed("i0").unwrap().3, 1);
        for (bad, says) in [
            ("i100us", "100us"),
            ("i10", "10ns"),
            ("i5t", "5t"),
            ("i2ms", "2ms"),
            ("ib99999999999999999999i", "too large"),
            ("bx", "'x'"),
            ("is", "'s'"),
        ] {
            let e = parsed(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let every = Itrace::parse("i3i").unwrap();
        let mut seen = 0;
        let got: Vec<bool> = (0..7).map(|_| every.sampled(&mut seen)).collect();
        assert_eq!(got, [false, false, true, false, false, true, false]);
    }
}
