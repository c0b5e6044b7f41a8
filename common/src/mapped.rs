//! A mapping of a shared file, as [`crate::files`] hands it out: guarded
//! against a file cut short while it is mapped, and with an exclusive lock
//! on the file for the rare changes that must not race.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A mapping of a shared file, guarded against SIGBUS from a file cut
/// short ([`crate::fault_guard`]) for as long as it is mapped.
pub struct Mapped<M> {
    // Ends before `map` is unmapped: fields drop in order.
    _guard: crate::fault_guard::Registration,
    map: M,
    path: PathBuf,
}

impl<M: AsRef<[u8]>> Mapped<M> {
    pub(crate) fn new(map: M, path: &Path) -> Mapped<M> {
        let bytes = map.as_ref();
        let guard = crate::fault_guard::guard(bytes.as_ptr(), bytes.len());
        Mapped {
            _guard: guard,
            map,
            path: path.to_path_buf(),
        }
    }

    /// An exclusive lock on the file, for the rare changes that must not
    /// race (making and freeing a pool), waited for at most `patience`: a
    /// process stopped while holding it never hangs the others. The file is
    /// opened afresh for each lock, so a forked child and its parent (which
    /// share their open files) exclude each other too.
    pub fn lock(&self, patience: std::time::Duration) -> Option<FileLock> {
        use std::os::fd::AsRawFd;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&self.path)
            .ok()?;
        let start = std::time::Instant::now();
        loop {
            // SAFETY: a valid descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Some(FileLock { _file: file });
            }
            if start.elapsed() >= patience {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Held while a [`Mapped::lock`] lasts; the kernel releases it when the
/// file closes, or when its process dies.
pub struct FileLock {
    _file: fs::File,
}

impl<M: AsRef<[u8]>> AsRef<[u8]> for Mapped<M> {
    fn as_ref(&self) -> &[u8] {
        self.map.as_ref()
    }
}

impl<M: AsMut<[u8]>> AsMut<[u8]> for Mapped<M> {
    fn as_mut(&mut self) -> &mut [u8] {
        self.map.as_mut()
    }
}
