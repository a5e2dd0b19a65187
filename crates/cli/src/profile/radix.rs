//! Counts by address pair sorted by the pair, a byte at a time from the
//! last (least significant radix sort): a few passes over the data where a
//! comparison sort takes twenty, and bytes that all pairs share are skipped.

/// A pair and its count.
pub type Counted = ((u64, u64), u64);

/// Fewer than this: a comparison sort is as quick.
const SMALL: usize = 256;

/// The `d`th byte of the pair as a 128-bit number (first address high).
#[inline(always)]
fn digit(e: &Counted, d: usize) -> usize {
    let ((a, b), _) = *e;
    let word = if d < 8 { b } else { a };
    (word >> (8 * (d % 8))) as u8 as usize
}

/// Sorts `v` by pair (first address, then second); pairs that are equal
/// keep no particular order.
pub fn sort_by_pair(v: &mut Vec<Counted>) {
    if v.len() < SMALL {
        v.sort_unstable_by_key(|e| e.0);
        return;
    }
    let mut counts = vec![[0usize; 256]; 16];
    for e in v.iter() {
        for (d, c) in counts.iter_mut().enumerate() {
            c[digit(e, d)] += 1;
        }
    }
    let mut other = vec![((0, 0), 0); v.len()];
    for (d, c) in counts.iter().enumerate() {
        if c.contains(&v.len()) {
            continue;
        }
        let mut at = [0usize; 256];
        let mut sum = 0;
        for (a, &n) in at.iter_mut().zip(c) {
            *a = sum;
            sum += n;
        }
        for e in v.iter() {
            let slot = &mut at[digit(e, d)];
            other[*slot] = *e;
            *slot += 1;
        }
        std::mem::swap(v, &mut other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs that differ in any byte, many equal ones, and few or many of
    /// them: sorted as a comparison sort sorts them.
    #[test]
    fn sorts_as_a_comparison_sort() {
        let mut rng = testkit::Rng(0x7ad1);
        for round in 0..60 {
            let n = rng.below(3000) as usize;
            let spread = [0xff, 0xffff_ffff, u64::MAX][round % 3];
            let mut v: Vec<Counted> = (0..n)
                .map(|_| {
                    let x = |rng: &mut testkit::Rng| (rng.next() & spread) ^ 0x5555_0000_0000;
                    ((x(&mut rng), x(&mut rng)), rng.below(5))
                })
                .collect();
            let mut want = v.clone();
            want.sort_unstable_by_key(|e| e.0);
            sort_by_pair(&mut v);
            assert_eq!(v.iter().map(|e| e.0).collect::<Vec<_>>(), want.iter().map(|e| e.0).collect::<Vec<_>>(), "round {round}");
            let (mut got_all, mut want_all) = (v.clone(), want);
            got_all.sort_unstable();
            want_all.sort_unstable();
            assert_eq!(got_all, want_all, "round {round}: the same pairs with the same counts");
        }
    }
}
