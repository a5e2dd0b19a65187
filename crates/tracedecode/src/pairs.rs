//! Counts by address pair in one flat open-addressing table: a slot holds
//! both addresses and the count, so an update touches one or two cache
//! lines and allocates nothing (until the table doubles); merging a small
//! table into a large one asks for the large one's slots ahead.

/// A slot: the pair and its count; a count of 0 marks it empty.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    a: u64,
    b: u64,
    n: u64,
}

/// Counts by address pair: `(source, target)` or `(start, end)`.
#[derive(Clone, Default)]
pub struct PairCounts {
    /// A power of two of slots, or none before the first count.
    slots: Vec<Slot>,
    len: usize,
    /// Pairs at which the table doubles: three quarters of its slots.
    limit: usize,
    /// `64 - log2(slots)`: a hash's top bits pick the first slot.
    shift: u32,
}

/// Slots in a table's first allocation.
const FIRST: usize = 64;
/// Pairs whose slots are asked for before the first of them is updated.
const GROUP: usize = 128;

/// Where `(a, b)` is looked for first: the top bits of a multiply of
/// both (addresses vary in their low bits).
#[inline(always)]
fn hash(a: u64, b: u64) -> u64 {
    (a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

impl PairCounts {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many pairs have a count.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn first_slot(&self, a: u64, b: u64) -> usize {
        (hash(a, b) >> self.shift) as usize
    }

    /// Adds `n` (at least 1) to the count of `(a, b)`.
    #[inline(always)]
    pub fn add(&mut self, a: u64, b: u64, n: u64) {
        if self.len >= self.limit {
            self.grow();
        }
        self.add_from(self.first_slot(a, b), a, b, n);
    }

    /// [`Self::add`] looking from slot `i` on, with room for one more pair.
    #[inline(always)]
    fn add_from(&mut self, mut i: usize, a: u64, b: u64, n: u64) {
        debug_assert!(n > 0 && self.len < self.limit);
        let mask = self.slots.len() - 1;
        loop {
            let s = &mut self.slots[i];
            if s.n == 0 {
                *s = Slot { a, b, n };
                self.len += 1;
                return;
            }
            if s.a == a && s.b == b {
                s.n += n;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Room for `more` pairs without doubling.
    #[inline(always)]
    fn reserve(&mut self, more: usize) {
        while self.len + more > self.limit {
            self.grow();
        }
    }

    /// Adds 1 for each of `pairs`, a group at a time: first each one's
    /// first slot asked for, then the counts added, so that the cache lines
    /// of a group come from memory at once.
    pub fn count_each(&mut self, pairs: &[(u64, u64)]) {
        for group in pairs.chunks(GROUP) {
            self.reserve(group.len());
            for &(a, b) in group {
                self.prefetch(self.first_slot(a, b));
            }
            for &(a, b) in group {
                self.add_from(self.first_slot(a, b), a, b, 1);
            }
        }
    }

    /// Twice the slots (or the first ones), every count moved over.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(FIRST);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); size]);
        self.shift = 64 - size.trailing_zeros();
        self.limit = size / 4 * 3;
        self.len = 0;
        for s in old.into_iter().filter(|s| s.n != 0) {
            self.add(s.a, s.b, s.n);
        }
    }

    /// The count of `(a, b)`, if it has one.
    pub fn get(&self, a: u64, b: u64) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.first_slot(a, b);
        loop {
            let s = &self.slots[i];
            if s.n == 0 {
                return None;
            }
            if s.a == a && s.b == b {
                return Some(s.n);
            }
            i = (i + 1) & mask;
        }
    }

    /// Every pair and its count, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = ((u64, u64), u64)> + '_ {
        self.slots.iter().filter(|s| s.n != 0).map(|s| ((s.a, s.b), s.n))
    }

    /// Asks for slot `i` to be brought into the cache (a hint: no effect
    /// on the counts).
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.slots.as_ptr().wrapping_add(i) as *const i8;
            // SAFETY: a prefetch reads nothing and cannot fault.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch(p, _MM_HINT_T0);
                // (A slot of 24 bytes may end in the next line.)
                _mm_prefetch(p.wrapping_add(std::mem::size_of::<Slot>() - 1), _MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    /// Adds `other`'s counts: the smaller table is counted into the larger,
    /// a group of slots at a time as in [`Self::count_each`].
    pub fn merge(&mut self, mut other: PairCounts) {
        if self.len < other.len {
            std::mem::swap(self, &mut other);
        }
        for group in other.slots.chunks(GROUP) {
            self.reserve(group.len());
            for s in group.iter().filter(|s| s.n != 0) {
                self.prefetch(self.first_slot(s.a, s.b));
            }
            for s in group.iter().filter(|s| s.n != 0) {
                self.add_from(self.first_slot(s.a, s.b), s.a, s.b, s.n);
            }
        }
    }
}

impl PartialEq for PairCounts {
    /// The same pairs with the same counts, wherever they sit.
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|((a, b), n)| other.get(a, b) == Some(n))
    }
}

impl Eq for PairCounts {}

impl std::fmt::Debug for PairCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut pairs: Vec<_> = self.iter().collect();
        pairs.sort_unstable();
        f.debug_map().entries(pairs.iter().map(|&((a, b), n)| ((a, b), n))).finish()
    }
}

impl FromIterator<((u64, u64), u64)> for PairCounts {
    fn from_iter<I: IntoIterator<Item = ((u64, u64), u64)>>(iter: I) -> Self {
        let mut t = PairCounts::new();
        for ((a, b), n) in iter {
            t.add(a, b, n);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random pairs (many repeated, some 0 and `u64::MAX`) counted in the
    /// table and in a `HashMap` give the same counts, after merges too.
    #[test]
    fn counts_as_a_hash_map_does() {
        let mut rng = testkit::Rng(0x5eed);
        for round in 0..50 {
            let (mut parts, mut want) = (Vec::new(), HashMap::new());
            for _ in 0..1 + rng.below(4) {
                let mut t = PairCounts::new();
                for _ in 0..rng.below(3000) {
                    let pick = |rng: &mut testkit::Rng| match rng.below(10) {
                        0 => 0,
                        1 => u64::MAX,
                        _ => 0x5555_0000_0000 + rng.below(400) * 4,
                    };
                    let (a, b, n) = (pick(&mut rng), pick(&mut rng), 1 + rng.below(3));
                    t.add(a, b, n);
                    *want.entry((a, b)).or_insert(0) += n;
                }
                parts.push(t);
            }
            let mut total = PairCounts::new();
            for t in parts {
                total.merge(t);
            }
            assert_eq!(total.len(), want.len(), "round {round}");
            for (&(a, b), &n) in &want {
                assert_eq!(total.get(a, b), Some(n), "round {round}: ({a:#x}, {b:#x})");
            }
            assert_eq!(total.iter().map(|e| e.1).sum::<u64>(), want.values().sum::<u64>());
            assert_eq!(total, want.iter().map(|(&k, &n)| (k, n)).collect::<PairCounts>());
        }
    }

    #[test]
    fn an_empty_table_finds_nothing() {
        let t = PairCounts::new();
        assert!(t.is_empty());
        assert_eq!(t.get(0, 0), None);
        assert_eq!(t.iter().count(), 0);
    }
}
