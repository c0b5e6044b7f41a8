//! The shared files in `VRAMSHARE_DIR` (default `/dev/shm/vramshare-$UID`):
//! made by whichever process needs them first, mapped by everyone, and
//! checked before they are trusted.
//!
//! A file is made under a temporary name, filled in, and then linked into
//! place, so no process ever maps a half-made file. The folder is 0700 and
//! the files 0600; a folder or file owned by another user is refused.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};

/// The folder of the shared files.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("VRAMSHARE_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(format!("/dev/shm/vramshare-{}", crate::process::uid())),
    }
}

/// Why a shared file cannot be used.
#[derive(Debug)]
pub enum FileError {
    Missing(PathBuf),
    Io(PathBuf, io::Error),
    ForeignOwner {
        path: PathBuf,
        owner: u32,
        me: u32,
    },
    /// Wrong magic, version, size or layout: the reason in words.
    Invalid(PathBuf, String),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Missing(path) => write!(
                f,
                "{} does not exist (no process has run under vramshare with this VRAMSHARE_DIR)",
                path.display()
            ),
            FileError::Io(path, error) => write!(f, "{}: {error}", path.display()),
            FileError::ForeignOwner { path, owner, me } => {
                write!(
                    f,
                    "{} belongs to uid {owner}, not to you (uid {me}): refused",
                    path.display()
                )
            }
            FileError::Invalid(path, why) => write!(f, "{}: {why}", path.display()),
        }
    }
}

impl std::error::Error for FileError {}

/// A shared file's layout: a header (magic, version, slot size, slot
/// count), then a table of fixed-size slots. Making and checking a file
/// follow from these constants.
pub trait SharedFile {
    /// File name inside the folder.
    const NAME: &'static str;
    /// What it is, in messages ("trace ring").
    const WHAT: &'static str;
    const MAGIC: u64;
    const VERSION: u32;
    /// Bytes before the first slot.
    const HEADER_LEN: usize;
    const SLOT_SIZE: usize;
    /// Slots in a newly made file.
    const SLOTS: u64;

    /// Further checks of the slot count of a file whose header is right.
    fn check_count(_count: u64) -> Result<(), String> {
        Ok(())
    }
    /// Length of a newly made file.
    fn new_len() -> usize {
        Self::HEADER_LEN + Self::SLOT_SIZE * Self::SLOTS as usize
    }
    /// Writes the header of a newly made (zeroed) file.
    fn init(bytes: &mut [u8]) {
        write_header(
            bytes,
            Self::MAGIC,
            Self::VERSION,
            Self::SLOT_SIZE as u32,
            Self::SLOTS,
        );
    }
    /// Checks magic, version and layout against the file's length; returns
    /// the slot count.
    fn validate(bytes: &[u8]) -> Result<u64, String> {
        let count = check_header(
            bytes,
            Self::MAGIC,
            Self::VERSION,
            Self::SLOT_SIZE as u32,
            Self::HEADER_LEN,
            Self::WHAT,
        )?;
        Self::check_count(count)?;
        Ok(count)
    }
}

/// The slots of a validated file of layout `F`, as `T`s.
///
/// # Safety
/// `bytes` passed `F::validate`; `T` is the slot type of `F` (its size is
/// `F::SLOT_SIZE`), made of atomics only, and the mapping is page-aligned.
pub unsafe fn slots<F: SharedFile, T>(bytes: &[u8]) -> &[T] {
    debug_assert_eq!(std::mem::size_of::<T>(), F::SLOT_SIZE);
    let count = read_u64(bytes, 16) as usize;
    // SAFETY: per the caller, `count` slots of T follow the header, aligned.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().add(F::HEADER_LEN) as *const T, count) }
}

fn check_owner(path: &Path, metadata: &fs::Metadata) -> Result<(), FileError> {
    let me = crate::process::uid();
    if metadata.uid() != me {
        return Err(FileError::ForeignOwner {
            path: path.to_path_buf(),
            owner: metadata.uid(),
            me,
        });
    }
    Ok(())
}

fn ensure_dir(dir: &Path) -> Result<(), FileError> {
    match fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)
    {
        Ok(()) => {}
        Err(error) => return Err(FileError::Io(dir.to_path_buf(), error)),
    }
    let metadata = fs::metadata(dir).map_err(|e| FileError::Io(dir.to_path_buf(), e))?;
    check_owner(dir, &metadata)
}

fn checked<F: SharedFile>(path: &Path, file: &fs::File, bytes: &[u8]) -> Result<(), FileError> {
    let metadata = file
        .metadata()
        .map_err(|e| FileError::Io(path.to_path_buf(), e))?;
    check_owner(path, &metadata)?;
    F::validate(bytes)
        .map(|_| ())
        .map_err(|why| FileError::Invalid(path.to_path_buf(), why))
}

/// Maps the file for writing, making it first if it does not exist.
pub fn open_or_create<F: SharedFile>(dir: &Path) -> Result<MmapMut, FileError> {
    ensure_dir(dir)?;
    let path = dir.join(F::NAME);
    for _ in 0..3 {
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => {
                // SAFETY: a shared mapping of a file that other processes also
                // map; every access to it goes through atomics or is checked.
                let map = unsafe { MmapMut::map_mut(&file) }
                    .map_err(|e| FileError::Io(path.clone(), e))?;
                checked::<F>(&path, &file, &map)?;
                return Ok(map);
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => create::<F>(dir, &path)?,
            Err(error) => return Err(FileError::Io(path, error)),
        }
    }
    Err(FileError::Io(
        path,
        io::Error::other("made, then gone again, three times"),
    ))
}

/// [`open_or_create`], and a file that fails its checks (left by another
/// vramshare version, or corrupt) is replaced by a fresh one if no process
/// has it mapped; `replaced` is told what was wrong with it. One mapped by
/// a running process is refused, naming the process. (After an upgrade the
/// folder holds the old version's files; nothing else could read them.)
pub fn open_or_replace<F: SharedFile>(
    dir: &Path,
    replaced: impl FnOnce(&FileError),
) -> Result<MmapMut, FileError> {
    let (path, why) = match open_or_create::<F>(dir) {
        Err(FileError::Invalid(path, why)) => (path, why),
        other => return other,
    };
    // One process replaces it; the others wait here, then use its file.
    let _lock = DirLock::exclusive(dir)?;
    match open_or_create::<F>(dir) {
        Err(FileError::Invalid(..)) => {}
        other => return other,
    }
    if let Some(pid) = mapped_by(&path) {
        return Err(FileError::Invalid(
            path,
            format!("{why}; process {pid} still uses it, so it stays: set VRAMSHARE_DIR apart for this process, or start it after that one ends"),
        ));
    }
    fs::remove_file(&path).map_err(|e| FileError::Io(path.clone(), e))?;
    replaced(&FileError::Invalid(path, why));
    open_or_create::<F>(dir)
}

/// An exclusive `flock` on a folder, released when dropped or when the
/// process dies (the kernel releases it: a dead process never holds it).
struct DirLock {
    _folder: fs::File,
}

impl DirLock {
    fn exclusive(dir: &Path) -> Result<DirLock, FileError> {
        let folder = fs::File::open(dir).map_err(|e| FileError::Io(dir.to_path_buf(), e))?;
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor we own.
        if unsafe { libc::flock(folder.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(FileError::Io(dir.to_path_buf(), io::Error::last_os_error()));
        }
        Ok(DirLock { _folder: folder })
    }
}

/// A process (other than this one) that has `path` mapped, from
/// `/proc/PID/maps`; processes whose maps cannot be read (other users',
/// who cannot open a 0700 folder of ours) are skipped.
fn mapped_by(path: &Path) -> Option<u32> {
    let path = fs::canonicalize(path).ok()?;
    let path = path.to_str()?;
    let deleted = format!("{path} (deleted)");
    let me = std::process::id();
    fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .find(|pid| {
            fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| {
                maps.lines()
                    .any(|line| line.ends_with(path) || line.ends_with(&deleted))
            })
        })
}

/// Makes the file under a temporary name and links it into place; losing
/// the race to another process is fine (its file is used).
fn create<F: SharedFile>(dir: &Path, path: &Path) -> Result<(), FileError> {
    let temp = dir.join(format!(".{}.{}.tmp", F::NAME, std::process::id()));
    let io_error = |e| FileError::Io(temp.clone(), e);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io_error)?;
    let made = (|| {
        file.set_len(F::new_len() as u64)?;
        // SAFETY: the file is ours alone until it is linked into place.
        let mut map = unsafe { MmapMut::map_mut(&file) }?;
        F::init(&mut map);
        map.flush()?;
        fs::hard_link(&temp, path).or_else(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(())
            } else {
                Err(e)
            }
        })
    })();
    let _ = fs::remove_file(&temp);
    made.map_err(|e| FileError::Io(path.to_path_buf(), e))
}

/// Maps an existing file for writing, without ever making it (for
/// `vramshare quota set`, which changes a live process's quota in place).
pub fn open_existing_mut<F: SharedFile>(dir: &Path) -> Result<MmapMut, FileError> {
    let (path, file) = existing::<F>(dir, true)?;
    // SAFETY: a shared mapping, written only through atomics.
    let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| FileError::Io(path.clone(), e))?;
    checked::<F>(&path, &file, &map)?;
    Ok(map)
}

/// Maps an existing file for reading (the command never makes the shared
/// files, and changes only quotas).
pub fn open_existing<F: SharedFile>(dir: &Path) -> Result<Mmap, FileError> {
    let (path, file) = existing::<F>(dir, false)?;
    // SAFETY: read-only shared mapping; read through atomics or checked.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| FileError::Io(path.clone(), e))?;
    checked::<F>(&path, &file, &map)?;
    Ok(map)
}

/// Opens the file of layout `F` in `dir` if it exists (for writing too if
/// `write`).
fn existing<F: SharedFile>(dir: &Path, write: bool) -> Result<(PathBuf, fs::File), FileError> {
    let path = dir.join(F::NAME);
    match OpenOptions::new().read(true).write(write).open(&path) {
        Ok(file) => Ok((path, file)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Err(FileError::Missing(path)),
        Err(error) => Err(FileError::Io(path, error)),
    }
}

/// Reads a little-endian `u64` / `u32` at `offset` of a header.
pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(bytes[offset..offset + 8].try_into().unwrap())
}
pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

/// The checks every header starts with.
pub(crate) fn check_header(
    bytes: &[u8],
    magic: u64,
    version: u32,
    slot_size: u32,
    header_len: usize,
    what: &str,
) -> Result<u64, String> {
    if bytes.len() < header_len {
        return Err(format!(
            "truncated: {} bytes, shorter than the {header_len}-byte header of a {what}",
            bytes.len()
        ));
    }
    // The readers take the header and slots as atomics in place, which
    // must be 8-byte aligned. A mapping always is (page-aligned); bytes
    // from anywhere else may not be, and are refused rather than misread.
    if !(bytes.as_ptr() as usize).is_multiple_of(8) {
        return Err(format!(
            "a {what} at a misaligned address: not readable in place"
        ));
    }
    if read_u64(bytes, 0) != magic {
        return Err(format!("not a vramshare {what} (wrong magic number)"));
    }
    let found = read_u32(bytes, 8);
    if found != version {
        return Err(format!(
            "a {what} of format version {found}; this vramshare reads version {version}"
        ));
    }
    let found_slot = read_u32(bytes, 12);
    if found_slot != slot_size {
        return Err(format!(
            "{what} slots of {found_slot} bytes, expected {slot_size}"
        ));
    }
    let count = read_u64(bytes, 16);
    let expected = count
        .checked_mul(slot_size as u64)
        .and_then(|n| n.checked_add(header_len as u64));
    if expected != Some(bytes.len() as u64) {
        return Err(format!(
            "{} bytes, but its header says {count} slots ({} bytes): truncated or corrupt",
            bytes.len(),
            expected.map_or("overflowing".into(), |n| n.to_string())
        ));
    }
    Ok(count)
}

pub(crate) fn write_header(bytes: &mut [u8], magic: u64, version: u32, slot_size: u32, count: u64) {
    bytes[0..8].copy_from_slice(&magic.to_ne_bytes());
    bytes[8..12].copy_from_slice(&version.to_ne_bytes());
    bytes[12..16].copy_from_slice(&slot_size.to_ne_bytes());
    bytes[16..24].copy_from_slice(&count.to_ne_bytes());
}
