//! What is checked before a shared file is trusted: the folder's owner and
//! mode, links, the files' kind, owner and mode. Giving a file to another
//! user needs root; those tests say so and pass without it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use vramshare_common::files::{open_existing, open_or_create, open_or_replace, FileError};
use vramshare_common::registry::RegistryFile;

/// Another user's uid (Debian's `nobody`).
const OTHER: u32 = 65534;

fn root() -> bool {
    if vramshare_common::process::uid() != 0 {
        eprintln!("skipped: giving a file to another user needs root");
        return false;
    }
    true
}

fn message<T>(result: Result<T, FileError>) -> String {
    match result {
        Ok(_) => panic!("accepted"),
        Err(error) => error.to_string(),
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn another_users_link_in_place_of_the_folder_is_refused_and_nothing_is_removed_through_it() {
    if !root() {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    // The victim's real folder, holding a registry that fails validation
    // (which the shim would replace, removing the file).
    let mine = top.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    chmod(&mine, 0o700);
    std::fs::write(mine.join("registry"), b"not a registry").unwrap();
    chmod(&mine.join("registry"), 0o600);
    let link = top.path().join("planted");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(OTHER), None).unwrap();
    let refused = message(open_or_replace::<RegistryFile>(&link, |_| {}));
    assert!(
        refused.contains("belongs to uid 65534") && refused.contains("refused"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read(mine.join("registry")).unwrap(),
        b"not a registry",
        "nothing removed or made through the link"
    );
    let refused = message(open_existing::<RegistryFile>(&link));
    assert!(refused.contains("belongs to uid 65534"), "{refused}");
    // The user's own link is followed.
    std::os::unix::fs::lchown(&link, Some(0), None).unwrap();
    std::fs::remove_file(mine.join("registry")).unwrap();
    open_or_create::<RegistryFile>(&link).unwrap();
    assert!(mine.join("registry").exists());
}

#[test]
fn a_folder_or_file_that_others_can_write_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o777);
    let refused = message(open_or_create::<RegistryFile>(dir.path()));
    assert!(
        refused.contains("can be written by other users (mode 0777)")
            && refused.contains(&format!("chmod 700 {}", dir.path().display())),
        "{refused}"
    );
    chmod(dir.path(), 0o700);
    open_or_create::<RegistryFile>(dir.path()).unwrap();
    let file = dir.path().join("registry");
    chmod(&file, 0o666);
    for refused in [
        message(open_or_create::<RegistryFile>(dir.path())),
        message(open_existing::<RegistryFile>(dir.path())),
        message(open_or_replace::<RegistryFile>(dir.path(), |_| {
            panic!("a writable file is not replaced")
        })),
    ] {
        assert!(
            refused.contains("(mode 0666)")
                && refused.contains(&format!("chmod 600 {}", file.display())),
            "{refused}"
        );
    }
    assert!(file.exists(), "left for its owner to fix");
}

#[test]
fn a_fifo_or_folder_in_place_of_a_file_is_named_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o700);
    let fifo = dir.path().join("registry");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let start = Instant::now();
    let refused = message(open_existing::<RegistryFile>(dir.path()));
    assert!(start.elapsed() < Duration::from_secs(2), "did not block");
    assert!(
        refused.contains("a FIFO or pipe, not a regular file"),
        "{refused}"
    );
    std::fs::remove_file(&fifo).unwrap();
    std::fs::create_dir(&fifo).unwrap();
    let refused = message(open_existing::<RegistryFile>(dir.path()));
    assert!(
        refused.contains("a folder, not a regular file"),
        "{refused}"
    );
    let dangling = dir.path().join("gone");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    let refused = message(open_or_create::<RegistryFile>(&dangling));
    assert!(refused.contains("a symbolic link to nothing"), "{refused}");
    // A link in place of a file is never followed, even the user's own.
    std::fs::remove_dir(&fifo).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &fifo).unwrap();
    let refused = message(open_existing::<RegistryFile>(dir.path()));
    assert!(refused.contains("a symbolic link"), "{refused}");
}

#[test]
fn a_folder_squatted_by_another_user_names_its_owner() {
    if !root() {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let squatted = top.path().join("vramshare-0");
    std::fs::create_dir(&squatted).unwrap();
    chmod(&squatted, 0o755);
    std::os::unix::fs::chown(&squatted, Some(OTHER), None).unwrap();
    let refused = message(open_existing::<RegistryFile>(&squatted));
    assert!(
        refused.contains("belongs to uid 65534") && !refused.contains("does not exist"),
        "{refused}"
    );
    let refused = message(open_or_create::<RegistryFile>(&squatted));
    assert!(refused.contains("belongs to uid 65534"), "{refused}");
}
