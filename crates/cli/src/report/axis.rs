//! A time axis of a fixed number of bins that widens as later times come:
//! when a time falls past the end, neighbouring bins merge and each covers
//! twice the time. Memory stays the same whatever the trace's length.

use std::ops::AddAssign;

/// Bins per axis.
pub const BINS: usize = 512;

/// Per row (a CPU), per bin, a `T` summed over the times that fell in it.
pub struct Axis<T> {
    pub start: u64,
    /// Nanoseconds per bin.
    pub width: u64,
    pub rows: Vec<Vec<T>>,
}

impl<T: Default + Clone + AddAssign> Axis<T> {
    pub fn new(start: u64) -> Self {
        Axis { start, width: 1, rows: Vec::new() }
    }

    /// The bin of `t`, widening the axis until it covers `t` (times before the start go in bin 0).
    pub fn bin(&mut self, t: u64) -> usize {
        let d = t.saturating_sub(self.start);
        while d / self.width >= BINS as u64 {
            for row in &mut self.rows {
                for i in 0..BINS / 2 {
                    let mut merged = std::mem::take(&mut row[2 * i]);
                    merged += std::mem::take(&mut row[2 * i + 1]);
                    row[i] = merged;
                }
            }
            self.width *= 2;
        }
        (d / self.width) as usize
    }

    /// The cell of row `row` at time `t`.
    pub fn at(&mut self, row: usize, t: u64) -> &mut T {
        let bin = self.bin(t);
        if self.rows.len() <= row {
            self.rows.resize(row + 1, vec![T::default(); BINS]);
        }
        &mut self.rows[row][bin]
    }

    /// The time just past the last bin.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.width.saturating_mul(BINS as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts survive widening: each lands in the bin that covers its time.
    #[test]
    fn widening_keeps_every_count_in_its_time() {
        let mut a: Axis<u64> = Axis::new(1000);
        let times: Vec<u64> = (0..5000u64).map(|i| 1000 + i * i).collect();
        for &t in &times {
            *a.at(0, t) += 1;
        }
        assert!(a.end() > *times.last().unwrap());
        assert_eq!(a.rows[0].iter().sum::<u64>(), 5000);
        for (bin, &n) in a.rows[0].iter().enumerate() {
            let (lo, hi) = (a.start + bin as u64 * a.width, a.start + (bin as u64 + 1) * a.width);
            assert_eq!(n, times.iter().filter(|&&t| lo <= t && t < hi).count() as u64, "bin {bin}");
        }
    }
}
