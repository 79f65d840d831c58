//! Heap bytes held by the standard containers, counted from their capacities (what the
//! allocator handed out, not what is in use), for the index cache's budget.

use std::collections::HashMap;
use std::sync::Arc;

/// A vector's buffer.
pub fn vec<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}

/// A hash map's table: its buckets, a control byte each and one group of trailing
/// control bytes (hashbrown's layout; keys' and values' own heap is not included).
pub fn map<K, V, S>(map: &HashMap<K, V, S>) -> usize {
    let capacity = map.capacity();
    if capacity == 0 {
        return 0;
    }
    // hashbrown keeps at most 7/8 of its (power-of-two) buckets full, all but one below 8.
    let buckets = if capacity < 8 {
        capacity + 1
    } else {
        (capacity / 7 * 8).next_power_of_two()
    };
    buckets * (size_of::<(K, V)>() + 1) + 16
}

/// An interned string's allocation (two counts and the bytes), split evenly among its
/// holders beside the interner (which holds one reference), so summing over every
/// holder counts it once.
pub fn interned_str(s: &Arc<str>) -> usize {
    let holders = Arc::strong_count(s).saturating_sub(1).max(1);
    (2 * size_of::<usize>() + s.len()).div_ceil(holders)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_counts_its_buckets_and_control_bytes() {
        let mut m: HashMap<u32, u32> = HashMap::new();
        assert_eq!(map(&m), 0);
        m.insert(1, 1);
        assert_eq!(map(&m), 4 * 9 + 16);
        for i in 0..100 {
            m.insert(i, i);
        }
        // 100 items need 128 buckets (at most 112 full).
        assert_eq!(map(&m), 128 * 9 + 16);
    }
}
