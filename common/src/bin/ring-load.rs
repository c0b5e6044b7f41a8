//! Load for the shared trace ring, for its tests and benchmark.
//!
//!   ring-load write DIR EVENTS       push EVENTS checkable events, print "pushed N dropped M"
//!   ring-load bench DIR [ROUNDS]     single-writer cost per push, two-writer throughput
//!
//! Each event's `ptr` and `size` are derived from its pid and counter
//! (`t_ns`), so a reader can tell a whole event from a torn one: see
//! [`vramshare_common::ring::check_load_event`].

use std::path::Path;
use std::time::Instant;

use vramshare_common::files::open_or_create;
use vramshare_common::ring::{load_event, Cursor, Ring, RingFile};

fn ring(dir: &Path) -> Ring<vramshare_common::files::Mapped<memmap2::MmapMut>> {
    let map = open_or_create::<RingFile>(dir).unwrap_or_else(|e| panic!("{e}"));
    Ring::new(map).unwrap()
}

fn write(dir: &Path, events: u64) {
    let ring = ring(dir);
    let pid = std::process::id();
    let mut dropped = 0;
    for n in 0..events {
        if !ring.push(&load_event(pid, n)) {
            dropped += 1;
        }
    }
    println!("pushed {events} dropped {dropped}");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn bench(dir: &Path, rounds: usize) {
    let ring = ring(dir);
    let pid = std::process::id();
    const BATCH: u64 = 100_000;
    // One writer: ns per push, median of batches.
    let single: Vec<f64> = (0..rounds * 5)
        .map(|round| {
            let start = Instant::now();
            for n in 0..BATCH {
                ring.push(&load_event(pid, round as u64 * BATCH + n));
            }
            start.elapsed().as_nanos() as f64 / BATCH as f64
        })
        .collect();
    // Two writers at once: events per second, all of them together.
    let pair: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..2 {
                    scope.spawn(|| {
                        for n in 0..BATCH * 10 {
                            ring.push(&load_event(pid, n));
                        }
                    });
                }
            });
            (2 * BATCH * 10) as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    // What the ring holds now must all be whole events.
    let mut cursor = Cursor::oldest(&ring);
    let mut events = Vec::new();
    cursor.drain(&ring, &mut events, true);
    let torn = events
        .iter()
        .filter(|e| !vramshare_common::ring::check_load_event(e))
        .count();
    println!(
        "one_writer_ns_per_push={:.1} two_writers_events_per_s={:.0} checked={} torn={} dropped={}",
        median(single),
        median(pair),
        events.len(),
        torn,
        ring.dropped()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("write") if args.len() == 4 => {
            write(Path::new(&args[2]), args[3].parse().expect("EVENTS"))
        }
        Some("bench") if args.len() >= 3 => bench(
            Path::new(&args[2]),
            args.get(3).map_or(5, |r| r.parse().expect("ROUNDS")),
        ),
        _ => {
            eprintln!("usage: ring-load write DIR EVENTS | ring-load bench DIR [ROUNDS]");
            std::process::exit(2);
        }
    }
}
