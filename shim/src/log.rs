//! One-line messages on stderr, filtered by `VRAMSHARE_LOG`.
//!
//! Each message is formatted first and written with one `write(2)`, so lines
//! from several threads or processes never interleave, and no lock of std's
//! `Stderr` is taken (a lock that a `fork` could leave held).

use std::sync::atomic::{AtomicU8, Ordering};

use crate::config::Level;

static LEVEL: AtomicU8 = AtomicU8::new(Level::Error as u8);

#[cfg_attr(test, allow(dead_code))]
pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

pub fn write_line(level: Level, message: std::fmt::Arguments) {
    // Lines say "warning", as compilers and most tools do; the variable's
    // word is "warn".
    let tag = match level {
        Level::Warn => "warning",
        other => other.name(),
    };
    write_tagged(tag, message);
}

/// Writes one line whatever `VRAMSHARE_LOG` says (for what the user must
/// hear once, such as which pool budget applies).
pub fn write_tagged(tag: &str, message: std::fmt::Arguments) {
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    let line = format!("vramshare[{pid}]: {tag}: {message}\n");
    // SAFETY: writing a buffer we own to fd 2; a short or failed write is dropped.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::write_line($level, format_args!($($arg)*));
        }
    };
}
macro_rules! error { ($($arg:tt)*) => { log_at!($crate::config::Level::Error, $($arg)*) }; }
macro_rules! warn { ($($arg:tt)*) => { log_at!($crate::config::Level::Warn, $($arg)*) }; }
macro_rules! info { ($($arg:tt)*) => { log_at!($crate::config::Level::Info, $($arg)*) }; }
macro_rules! notice { ($($arg:tt)*) => { $crate::log::write_tagged("notice", format_args!($($arg)*)) }; }
macro_rules! debug { ($($arg:tt)*) => { log_at!($crate::config::Level::Debug, $($arg)*) }; }
