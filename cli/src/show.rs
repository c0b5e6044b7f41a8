//! What the command shows of numbers it did not make: the counters in the
//! shared files and the sizes in a trace come from other processes, or from
//! a file anyone may have written.

/// The sum of sizes or counters, stopping at `u64::MAX`: a corrupt or
/// hostile input must not wrap to a small total ("3 blocks, 0 B"), nor
/// panic where overflow is checked.
pub fn total(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_stop_at_the_largest_u64() {
        assert_eq!(total([]), 0);
        assert_eq!(total([1, 2, 3]), 6);
        assert_eq!(total([u64::MAX - 1, 1]), u64::MAX);
        assert_eq!(total([u64::MAX - 1, u64::MAX - 1, 2]), u64::MAX);
    }
}
