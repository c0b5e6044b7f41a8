//! Calls and their time by name, for the hooks' costs
//! ([`super::host_costs`]): a fixed table of counters found by the address
//! of the name's text. Counting a call costs a few relaxed atomic adds and
//! takes no lock: a hooked call may come while another thread holds any
//! lock (and a lock held at a `fork` is never let go in the child), and a
//! lock, a string hash or an allocation at every call cost the job more
//! than the hook being counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize};
use std::sync::atomic::{
    Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

/// Names a table holds: well over the hooks and CUDA functions there are.
/// A name that finds the table full is not counted (`lost`).
const ROWS: usize = 1024;

/// One name's counts, on a cache line of its own: threads counting calls
/// of two names do not write to one line.
#[repr(align(64))]
pub struct Row {
    /// The name's text: its address (0 while the row is free) and its
    /// length (0 until written, which readers skip). A row is never freed
    /// nor given another name.
    name_at: AtomicUsize,
    name_len: AtomicUsize,
    /// What the table's user said of the name when the row was claimed.
    kind: AtomicU8,
    calls: AtomicU64,
    timed: AtomicU64,
    ns: AtomicU64,
}

impl Row {
    const fn new() -> Row {
        Row {
            name_at: AtomicUsize::new(0),
            name_len: AtomicUsize::new(0),
            kind: AtomicU8::new(0),
            calls: AtomicU64::new(0),
            timed: AtomicU64::new(0),
            ns: AtomicU64::new(0),
        }
    }

    /// What `kind` said of the row's name; asked again of `kind` while the
    /// claiming thread has yet to write it.
    pub fn kind(&self, name: &str, kind: impl FnOnce(&str) -> u8) -> u8 {
        if self.name_len.load(Acquire) == 0 {
            return kind(name);
        }
        self.kind.load(Relaxed)
    }

    /// One call; `ns` more nanoseconds if it was timed.
    pub fn add(&self, ns: Option<u64>) {
        self.calls.fetch_add(1, Relaxed);
        if let Some(ns) = ns {
            self.timed.fetch_add(1, Relaxed);
            self.ns.fetch_add(ns, Relaxed);
        }
    }
}

/// Calls, calls timed, and nanoseconds by name, as [`ByName::counts`]
/// reads them.
pub type Counts = HashMap<&'static str, (u64, u64, u64)>;

pub struct ByName {
    rows: [Row; ROWS],
    /// Calls not counted: their name found every row taken.
    pub lost: AtomicU64,
}

impl ByName {
    pub const fn new() -> ByName {
        ByName {
            rows: [const { Row::new() }; ROWS],
            lost: AtomicU64::new(0),
        }
    }

    /// The row of `name`, claimed for it (with what `kind` says of it) if
    /// it has none; `None` if every row is taken, with the call counted as
    /// lost.
    pub fn row(&self, name: &'static str, kind: impl FnOnce(&str) -> u8) -> Option<&Row> {
        let key = name.as_ptr() as usize;
        // Fibonacci hashing of the address, by the product's top bits: the
        // names' texts lie close together, and their rows should not.
        let hash = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut at = (hash >> (64 - ROWS.trailing_zeros())) as usize;
        let mut kind = Some(kind);
        for _ in 0..ROWS {
            let row = &self.rows[at];
            let held = match row.name_at.load(Acquire) {
                0 => match row.name_at.compare_exchange(0, key, AcqRel, Acquire) {
                    Ok(_) => {
                        if let Some(kind) = kind.take() {
                            row.kind.store(kind(name), Relaxed);
                        }
                        row.name_len.store(name.len(), Release);
                        key
                    }
                    Err(other) => other,
                },
                held => held,
            };
            if held == key {
                return Some(row);
            }
            at = (at + 1) % ROWS;
        }
        self.lost.fetch_add(1, Relaxed);
        None
    }

    /// One call of `name`, with `ns` nanoseconds if it was timed.
    pub fn add(&self, name: &'static str, ns: Option<u64>) {
        if let Some(row) = self.row(name, |_| 0) {
            row.add(ns);
        }
    }

    /// The counts so far by name (one name's rows added together: the
    /// same text may lie at two addresses).
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::new();
        for row in &self.rows {
            let (at, len) = (row.name_at.load(Acquire), row.name_len.load(Acquire));
            if at == 0 || len == 0 {
                continue;
            }
            // SAFETY: a row's address and length are written once, by the
            // thread that claimed it, from one `&'static str`
            // ([`ByName::row`]), and never changed after: they are that
            // text, valid UTF-8 for the whole run.
            let name = unsafe {
                std::str::from_utf8_unchecked(std::slice::from_raw_parts(at as *const u8, len))
            };
            let entry = counts.entry(name).or_default();
            entry.0 += row.calls.load(Relaxed);
            entry.1 += row.timed.load(Relaxed);
            entry.2 += row.ns.load(Relaxed);
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_add_up_by_name_across_threads() {
        static TABLE: ByName = ByName::new();
        let names: Vec<&'static str> = (0..300)
            .map(|i| &*Box::leak(format!("call{i}").into_boxed_str()))
            .collect();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for name in &names {
                        TABLE.add(name, Some(10));
                        TABLE.add(name, None);
                    }
                });
            }
        });
        let counts = TABLE.counts();
        assert_eq!(counts.len(), 300);
        assert!(names.iter().all(|name| counts[name] == (8, 4, 40)));
        assert_eq!(TABLE.lost.load(Relaxed), 0);
    }

    #[test]
    fn a_row_keeps_what_was_said_of_its_name() {
        static TABLE: ByName = ByName::new();
        let name: &'static str = "cuLaunchKernel";
        let row = TABLE.row(name, |text| text.len() as u8).unwrap();
        assert_eq!(row.kind(name, |_| 0), name.len() as u8);
        let again = TABLE.row(name, |_| 0).unwrap();
        assert!(std::ptr::eq(row, again), "one row a name");
    }

    #[test]
    fn one_text_at_two_addresses_is_one_name() {
        static TABLE: ByName = ByName::new();
        let first: &'static str = Box::leak("cuMemMap".to_string().into_boxed_str());
        let second: &'static str = Box::leak("cuMemMap".to_string().into_boxed_str());
        TABLE.add(first, Some(1));
        TABLE.add(second, Some(2));
        assert_eq!(TABLE.counts()["cuMemMap"], (2, 2, 3));
    }

    #[test]
    fn a_full_table_counts_what_it_lost() {
        static TABLE: ByName = ByName::new();
        for i in 0..ROWS + 3 {
            TABLE.add(Box::leak(format!("n{i}").into_boxed_str()), None);
        }
        assert_eq!(TABLE.counts().len(), ROWS);
        assert_eq!(TABLE.lost.load(Relaxed), 3);
    }
}
