//! A list behind a lock whose length is read without it. Lists the hooks
//! look at before every use, and that are empty almost always (blocks
//! lending their memory, blocks a capture freed), cost each use a lock
//! taken and let go, and a cold cache line, only to find nothing: a look
//! at the length skips them. A look may miss an item pushed at that moment
//! by another thread, which the next look finds, as if the push had come
//! just after.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use super::lock;

pub struct Listed<T> {
    list: Mutex<Vec<T>>,
    len: AtomicUsize,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Listed {
            list: Mutex::new(Vec::new()),
            len: AtomicUsize::new(0),
        }
    }
}

impl<T> Listed<T> {
    /// Whether the list was empty at its last change.
    pub fn looks_empty(&self) -> bool {
        self.len.load(Relaxed) == 0
    }

    pub fn push(&self, item: T) {
        self.with(|list| list.push(item));
    }

    /// `f` on the list, under its lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
        let mut list = lock(&self.list);
        let result = f(&mut list);
        self.len.store(list.len(), Relaxed);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_follows_every_change() {
        let listed: Listed<u32> = Listed::default();
        assert!(listed.looks_empty());
        listed.push(1);
        listed.push(2);
        assert!(!listed.looks_empty());
        assert_eq!(listed.with(|list| list.pop()), Some(2));
        assert!(!listed.looks_empty());
        listed.with(|list| list.clear());
        assert!(listed.looks_empty());
    }
}
