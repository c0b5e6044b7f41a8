//! The command and the shim given shared files they cannot use: missing,
//! corrupt, cut short, or another user's; refused with one clear line, or
//! replaced once no process maps them.

#[path = "common/command.rs"]
mod command;
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use command::*;
use common::*;
use serde_json::Value;

/// Runs one client so that `dir` holds valid shared files.
fn make_files(dir: &Path) {
    let out = run_client(dir, &[], &["malloc:a:1M", "free:a"]);
    assert!(out.status.success());
}

fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.write_all(bytes).unwrap();
}

fn assert_refused(dir: &Path, command: &str, expect: &str) {
    let out = vramshare(&[command, "--dir", dir.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{command}: {}",
        text(&out.stderr)
    );
    let message = text(&out.stderr);
    assert!(
        message.starts_with("vramshare: ") && message.contains(expect),
        "{command}: {message}"
    );
    assert_eq!(message.lines().count(), 1);
}

#[test]
fn bad_shared_files_are_refused_clearly() {
    let empty = tempfile::tempdir().unwrap();
    assert_refused(empty.path(), "ps", "registry does not exist");
    assert_refused(empty.path(), "dump", "ring does not exist");

    let dir = tempfile::tempdir().unwrap();
    make_files(dir.path());
    patch(&dir.path().join("ring"), 0, b"garbage!");
    assert_refused(
        dir.path(),
        "dump",
        "not a vramshare trace ring (wrong magic number)",
    );
    assert!(
        vramshare(&["ps", "--dir", dir.path().to_str().unwrap()])
            .status
            .success(),
        "the registry is fine"
    );
    patch(&dir.path().join("registry"), 8, &99u32.to_ne_bytes());
    assert_refused(
        dir.path(),
        "ps",
        &format!(
            "format version 99; this vramshare reads version {}",
            vramshare_common::registry::VERSION
        ),
    );

    // A corrupt pool table: ps refuses it. A job asking for the pool while
    // another process has the table mapped says it is not in the pool, and
    // runs under its own quota.
    let dir = tempfile::tempdir().unwrap();
    let out = run_client(dir.path(), &["--pool", "team"], &["malloc:a:1M", "free:a"]);
    assert!(out.status.success());
    patch(&dir.path().join("pools"), 0, b"garbage!");
    assert_refused(
        dir.path(),
        "ps",
        "not a vramshare pool table (wrong magic number)",
    );
    let held = map_file(&dir.path().join("pools"));
    let out = run_client(
        dir.path(),
        &["--pool", "team", "--quota", "1MiB"],
        &["malloc:a:2M"],
    );
    assert!(out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("not a vramshare pool table"), "{stderr}");
    assert!(
        stderr.contains(&format!("process {} still uses it", std::process::id())),
        "{stderr}"
    );
    assert!(stderr.contains("not in pool team"), "{stderr}");
    assert!(
        !stderr.contains("cannot use the shared files"),
        "the registry and ring are still used: {stderr}"
    );
    assert!(text(&out.stdout).contains("malloc a rc=0"));
    // Once no process has it, the next job replaces it and joins the pool.
    drop(held);
    let out = run_client(
        dir.path(),
        &["--pool", "team"],
        &["malloc:a:1M", "sleep:300"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("notice: replaced")
            && stderr.contains("pools: not a vramshare pool table (wrong magic number)"),
        "{stderr}"
    );
    assert!(vramshare(&["ps", "--dir", dir.path().to_str().unwrap()])
        .status
        .success());

    let dir = tempfile::tempdir().unwrap();
    make_files(dir.path());
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("registry"))
        .unwrap()
        .set_len(1000)
        .unwrap();
    assert_refused(dir.path(), "ps", "truncated or corrupt");
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("ring"))
        .unwrap()
        .set_len(10)
        .unwrap();
    assert_refused(dir.path(), "dump", "truncated: 10 bytes");
}

#[test]
fn files_of_another_user_are_refused() {
    if vramshare_common::process::uid() != 0 {
        skipped("giving a file to another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_files(dir.path());
    std::os::unix::fs::chown(dir.path().join("registry"), Some(65534), None).unwrap();
    assert_refused(
        dir.path(),
        "ps",
        "belongs to uid 65534 (nobody), not to you (uid 0): refused",
    );
    std::os::unix::fs::chown(dir.path(), Some(65534), None).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // The shim refuses the folder too, and the job runs on, traced in memory.
    let run = client_in(dir.path(), &["malloc:a:1M", "free:a"]);
    run.assert_ok();
    assert_eq!(
        run.stderr.matches("cannot use the shared files").count(),
        1,
        "warned once: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("belongs to uid 65534"),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.trace()["events"].as_array().unwrap().len(),
        2,
        "traced into its own memory"
    );
}

/// The test client under the shim, with `dir` as its shared folder.
fn client_in(dir: &Path, steps: &[&str]) -> Run {
    run_in(
        fake_dir(Runtime::Fake13),
        "client",
        steps,
        &[("VRAMSHARE_DIR", dir.to_str().unwrap())],
        true,
    )
}

/// Maps `path` into this process (as a job under another vramshare would).
fn map_file(path: &Path) -> memmap2::Mmap {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: read-only, and never read.
    unsafe { memmap2::Mmap::map(&file) }.unwrap()
}

#[test]
fn a_corrupt_shared_file_is_refused_while_in_use_and_replaced_after() {
    let dir = tempfile::tempdir().unwrap();
    make_files(dir.path());
    let ring = dir.path().join("ring");
    patch(&ring, 0, b"garbage!");
    // Mapped by a process (this test): refused, and the job carries on,
    // traced in its own memory.
    let held = map_file(&ring);
    let run = client_in(dir.path(), &["malloc:a:1M", "malloc:b:1M", "free:a"]);
    run.assert_ok();
    assert_eq!(run.stderr.lines().count(), 1, "one warning: {}", run.stderr);
    assert!(
        run.stderr.contains("cannot use the shared files")
            && run.stderr.contains("wrong magic number")
            && run
                .stderr
                .contains(&format!("process {} still uses it", std::process::id())),
        "{}",
        run.stderr
    );
    assert_eq!(run.trace()["events"].as_array().unwrap().len(), 3);
    assert_eq!(&held[..8], b"garbage!", "left as it was");
    // Nobody maps it: the next job replaces it, says so once, and its
    // events are in the new ring.
    drop(held);
    let run = client_in(dir.path(), &["malloc:a:1M", "free:a"]);
    run.assert_ok();
    assert_eq!(run.stderr.lines().count(), 1, "one notice: {}", run.stderr);
    assert!(
        run.stderr.contains("notice: replaced")
            && run
                .stderr
                .contains("ring: not a vramshare trace ring (wrong magic number)")
            && run.stderr.contains("no process was using it"),
        "{}",
        run.stderr
    );
    let dump = vramshare(&["dump", "--dir", dir.path().to_str().unwrap()]);
    assert!(dump.status.success(), "{}", text(&dump.stderr));
    let dumped: Value = serde_json::from_slice(&dump.stdout).unwrap();
    assert_eq!(dumped["events"].as_array().unwrap().len(), 2);
}
