//! A vector whose buffer is kept per thread for the thread's next use. A
//! launch's hook collects a few values (the words that fall in the tier's
//! addresses, the blocks they name) and lets them go at its end: a new
//! vector's growth to hold them cost more allocations a launch than the
//! rest of the hook made, and each allocation touches the allocator's own
//! code and data, cold between two of the job's launches.

use std::cell::Cell;
use std::ops::Deref;
use std::thread::LocalKey;

/// Where a thread keeps one kind of buffer between uses.
pub type Spare<T> = LocalKey<Cell<Vec<T>>>;

pub struct Reused<T: 'static> {
    items: Vec<T>,
    spare: &'static Spare<T>,
}

impl<T: 'static> Reused<T> {
    /// An empty one, whose buffer is taken from `spare` at its first push.
    pub const fn new(spare: &'static Spare<T>) -> Self {
        Reused {
            items: Vec::new(),
            spare,
        }
    }

    #[inline]
    pub fn push(&mut self, item: T) {
        if self.items.capacity() == 0 {
            self.items = self.spare.try_with(Cell::take).unwrap_or_default();
        }
        self.items.push(item);
    }

    /// Sorts the items and keeps one of each.
    pub fn sort_dedup(&mut self)
    where
        T: Ord,
    {
        self.items.sort_unstable();
        self.items.dedup();
    }
}

impl<T: 'static> Deref for Reused<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.items
    }
}

impl<T: 'static> Drop for Reused<T> {
    /// The buffer, emptied, is kept for the thread's next use (not while
    /// the thread is exiting: then it is freed).
    #[inline]
    fn drop(&mut self) {
        if self.items.capacity() != 0 {
            let mut items = std::mem::take(&mut self.items);
            items.clear();
            let _ = self.spare.try_with(|spare| spare.set(items));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static SPARE: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
    }

    #[test]
    fn a_buffer_let_go_serves_the_next_use_emptied() {
        let mut first = Reused::new(&SPARE);
        for item in [3, 1, 3, 2] {
            first.push(item);
        }
        first.sort_dedup();
        assert_eq!(&*first, &[1, 2, 3]);
        let address = first.as_ptr();
        drop(first);
        let mut second = Reused::new(&SPARE);
        assert!(second.is_empty());
        second.push(7);
        assert_eq!(second.as_ptr(), address, "the same buffer");
        assert_eq!(&*second, &[7]);
        // Two at once: the second takes a buffer of its own.
        let mut third = Reused::new(&SPARE);
        third.push(8);
        assert_ne!(third.as_ptr(), second.as_ptr());
        assert_eq!(third.len(), 1);
    }
}
