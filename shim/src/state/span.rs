//! Where a set of address ranges has ever lain: a launch's words outside
//! the ledger's span name no block, however stale the launches' index is,
//! and those outside the tier's are none of its blocks, so either is
//! passed over at one comparison.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The lowest start and highest end of every range taken in (it only
/// widens: a range freed stays inside).
pub struct AddressSpan {
    low: AtomicU64,
    high: AtomicU64,
}

impl Default for AddressSpan {
    fn default() -> Self {
        AddressSpan {
            low: AtomicU64::new(u64::MAX),
            high: AtomicU64::new(0),
        }
    }
}

impl AddressSpan {
    /// Takes in `[start, start + size)`. Reads first: once the span has
    /// settled, an allocation writes nothing here.
    pub fn widen(&self, start: u64, size: u64) {
        if start < self.low.load(Relaxed) {
            self.low.fetch_min(start, Relaxed);
        }
        // A block of no bytes still has its start inside.
        let end = start.saturating_add(size.max(1));
        if end > self.high.load(Relaxed) {
            self.high.fetch_max(end, Relaxed);
        }
    }

    /// `[low, high)`; low above high while nothing was recorded.
    pub fn get(&self) -> (u64, u64) {
        (self.low.load(Relaxed), self.high.load(Relaxed))
    }
}
