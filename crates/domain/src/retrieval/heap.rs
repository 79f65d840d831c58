//! Heap bytes of the standard collections, from their capacities: what the allocator
//! was asked for, so an index can count its memory exactly instead of guessing per
//! episode (a guess that was far below the real heap let the cache overshoot its
//! budget).

use std::collections::HashMap;
use std::mem::{align_of, size_of};
use std::sync::Arc;

/// Bytes of a `Vec`'s buffer (its elements' own heap not included).
pub fn vec<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}

/// Bytes of a boxed slice's buffer (its elements' own heap not included).
pub fn boxed<T>(v: &[T]) -> usize {
    std::mem::size_of_val(v)
}

pub fn string(s: &String) -> usize {
    s.capacity()
}

pub fn boxed_str(s: &str) -> usize {
    s.len()
}

/// An interned string's allocation (two counts and the bytes, padded to the counts'
/// alignment), split evenly among its holders beside the interner (which holds one
/// reference), so summing over every holder counts it once (rounded down: rounding up
/// would count a byte per holder of a string held thousands of times).
pub fn interned_str(s: &Arc<str>) -> usize {
    let holders = Arc::strong_count(s).saturating_sub(1).max(1);
    (2 * size_of::<usize>() + s.len()).next_multiple_of(align_of::<usize>()) / holders
}

/// Control bytes the hash table reads at once (hashbrown's `Group::WIDTH`).
const GROUP_WIDTH: usize = if cfg!(all(
    any(target_arch = "x86", target_arch = "x86_64"),
    target_feature = "sse2"
)) {
    16
} else {
    8
};

/// Buckets of a hash table that reports `capacity` (a power of two holding it at a
/// load factor of 7/8; below 8 buckets, one is always left empty).
fn buckets(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        1..=3 => 4,
        4..=7 => 8,
        _ => (capacity * 8 / 7).next_power_of_two(),
    }
}

/// Bytes of a `HashMap`'s table: its entries and one control byte per bucket, plus a
/// group of control bytes (the keys' and values' own heap not included).
pub fn map<K, V, S>(m: &HashMap<K, V, S>) -> usize {
    let buckets = buckets(m.capacity());
    if buckets == 0 {
        return 0;
    }
    let align = align_of::<(K, V)>().max(GROUP_WIDTH);
    let entries = (buckets * size_of::<(K, V)>()).next_multiple_of(align);
    entries + buckets + GROUP_WIDTH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_counts_follow_the_capacity() {
        for wanted in [0usize, 1, 3, 4, 7, 8, 14, 15, 28, 29, 100, 1000, 5000] {
            let m: HashMap<u64, u32> = HashMap::with_capacity(wanted);
            let b = buckets(m.capacity());
            assert!(b == 0 || b.is_power_of_two(), "{wanted}: {b}");
            // The table holds what was asked for, in the fewest buckets that do.
            assert!(m.capacity() >= wanted);
            if b > 4 {
                let smaller = b / 2;
                let fits = if smaller < 8 {
                    smaller - 1
                } else {
                    smaller / 8 * 7
                };
                assert!(
                    fits < wanted,
                    "{wanted}: {b} buckets where {smaller} would do"
                );
            }
        }
        // A map grown one insert at a time reports a capacity of its bucket count.
        let mut m: HashMap<i64, u32> = HashMap::new();
        for i in 0..1000 {
            m.insert(i, 0);
            let b = buckets(m.capacity());
            let fits = if b < 8 { b - 1 } else { b / 8 * 7 };
            assert_eq!(fits, m.capacity(), "{i}");
        }
    }

    #[test]
    fn sizes_follow_capacities_not_lengths() {
        let mut v: Vec<u32> = Vec::with_capacity(10);
        v.push(1);
        assert_eq!(vec(&v), 40);
        let mut s = String::with_capacity(9);
        s.push('a');
        assert_eq!(string(&s), 9);
        assert_eq!(boxed_str(&Box::<str>::from("abc")), 3);
        assert_eq!(boxed::<u64>(&[1, 2]), 16);
        assert_eq!(map(&HashMap::<u8, u8>::new()), 0);
        // 4 buckets of 16 bytes, 4 control bytes and a group.
        let m: HashMap<u64, u64> = HashMap::with_capacity(3);
        assert_eq!(map(&m), 4 * 16 + 4 + GROUP_WIDTH);
    }
}
