//! Columns that poketrace's own layout and perf's share.

use crate::text::Text;

/// `seconds.nanoseconds`, as perf prints a time with `--ns`.
pub fn put_seconds(t: &mut Text, time: u64) {
    t.dec(time / 1_000_000_000).byte(b'.').zeros(time % 1_000_000_000, 9);
}

/// `[CPU]`, three digits at least (`-01` for a per-thread buffer's).
pub fn put_cpu(t: &mut Text, cpu: u32) {
    t.byte(b'[').int_zeros(i64::from(cpu as i32), 3).byte(b']');
}
