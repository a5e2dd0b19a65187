//! What part of the trace goes into the timeline: `--cpu`, `--tid`,
//! `--time` and `--kernel-only`, parsed as perf parses them.

use anyhow::{bail, Context, Result};

/// The lines kept.
#[derive(Default)]
pub struct Filter {
    /// perf's CPU list (`0-2,5`); None: all.
    pub cpus: Option<Vec<u32>>,
    pub tids: Option<Vec<i32>>,
    /// perf times in ns, both ends included.
    pub start: u64,
    pub end: u64,
    pub kernel_only: bool,
}

impl Filter {
    pub fn parse(cpu: Option<&str>, tid: Option<&str>, time: Option<&str>, kernel_only: bool) -> Result<Filter> {
        let cpus = cpu.map(cpu_list).transpose()?;
        let tids = tid
            .map(|s| s.split(',').map(|t| t.trim().parse::<i32>().with_context(|| format!("--tid {s}: '{t}' is not a thread id"))).collect())
            .transpose()?;
        let (start, end) = time.map_or(Ok((0, u64::MAX)), time_range)?;
        Ok(Filter { cpus, tids, start, end, kernel_only })
    }

    pub fn cpu(&self, cpu: u32) -> bool {
        self.cpus.as_ref().is_none_or(|c| c.contains(&cpu))
    }

    pub fn tid(&self, tid: Option<i32>) -> bool {
        match (&self.tids, tid) {
            (None, _) => true,
            (Some(t), Some(tid)) => t.contains(&tid),
            (Some(_), None) => false,
        }
    }
}

/// perf's `-C` list: numbers and ranges separated by commas.
fn cpu_list(s: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let num = |n: &str| n.trim().parse::<u32>().with_context(|| format!("--cpu {s}: '{n}' is not a CPU number"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a > 1 << 16 {
                    bail!("--cpu {s}: {part} is not a range of CPUs");
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    Ok(cpus)
}

/// perf's `--time START,END`: seconds with up to nine decimals, either end may be empty.
fn time_range(s: &str) -> Result<(u64, u64)> {
    let Some((a, b)) = s.split_once(',') else { bail!("--time {s}: expected START,END (perf's syntax, seconds: 1.5,2 or 1.5,)") };
    if s.contains('%') || b.contains(',') {
        bail!("--time {s}: only one START,END range in seconds is supported (no percentages, no lists)");
    }
    let t = |v: &str, none: u64| {
        if v.trim().is_empty() {
            Ok(none)
        } else {
            seconds(v.trim()).with_context(|| format!("--time {s}: '{v}' is not a time in seconds"))
        }
    };
    let (start, end) = (t(a, 0)?, t(b, u64::MAX)?);
    if start > end {
        bail!("--time {s}: START is after END");
    }
    Ok((start, end))
}

/// `S[.F]` seconds as nanoseconds.
fn seconds(v: &str) -> Result<u64> {
    let (s, f) = v.split_once('.').unwrap_or((v, ""));
    if f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) || !s.bytes().all(|b| b.is_ascii_digit()) || s.is_empty() {
        bail!("not S.NNNNNNNNN");
    }
    let frac = if f.is_empty() { 0 } else { f.parse::<u64>()? * 10u64.pow(9 - f.len() as u32) };
    s.parse::<u64>()?.checked_mul(1_000_000_000).and_then(|n| n.checked_add(frac)).context("too large")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_syntax_for_cpus_and_times() {
        assert_eq!(cpu_list("0-2,5").unwrap(), [0, 1, 2, 5]);
        assert!(cpu_list("2-1").is_err() && cpu_list("x").is_err());
        assert_eq!(time_range("1.5,2").unwrap(), (1_500_000_000, 2_000_000_000));
        assert_eq!(time_range(",1.000000002").unwrap(), (0, 1_000_000_002));
        assert_eq!(time_range("3,").unwrap(), (3_000_000_000, u64::MAX));
        for bad in ["1", "2,1", "10%,20%", "1.0000000001,", "a,b", "1,2,3,4"] {
            assert!(time_range(bad).is_err(), "{bad}");
        }
    }
}
