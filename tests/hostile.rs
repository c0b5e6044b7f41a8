//! The job comes first: shared files that a full filesystem cannot hold,
//! that are cut short while mapped, trace targets that would eat the job's
//! output or hang its exit, a full registry, pools that come and go. Each
//! case runs the test client on the fake runtime under the shim.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vramshare_common::files::open_existing;
use vramshare_common::registry::{self, Registry, RegistryFile};

/// Waits for `child` at most `limit`; kills it and fails if it takes longer.
fn wait_within(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("still running after {limit:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Checks that the client exited 0 after `steps` steps that succeeded;
/// returns its stderr.
fn ran_every_step(output: std::process::Output, steps: usize) -> String {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "{:?}\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(
        stdout.matches("rc=0").count(),
        steps,
        "every step ran: {stdout}"
    );
    stderr
}

/// Where each allocation of the trace at `path` went, in order.
fn placements(path: &Path) -> Vec<String> {
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["op"] == "alloc")
        .map(|e| e["placement"].as_str().unwrap().to_string())
        .collect()
}

/// A small tmpfs of its own, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (the test says it is skipped) where mounting is not allowed.
    fn mount(at: PathBuf, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(&at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            return None;
        }
        Some(Tmpfs(at))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_shared_memory_filesystem_costs_the_listing_never_the_job() {
    let work = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(work.path().join("shm"), "8m") else {
        return;
    };
    // Filled up, as DataLoader workers fill a container's 64 MB /dev/shm
    // with shared tensors.
    let mut tensors = std::fs::File::create(fs.0.join("tensors")).unwrap();
    while std::io::Write::write_all(&mut tensors, &[1u8; 4096]).is_ok() {}
    let shm = fs.0.join("vramshare");
    let child = client_command(
        &shm,
        &[("VRAMSHARE_QUOTA", "8MiB")],
        &["malloc:a:4M", "touch:a", "malloc:b:8M", "free:a", "free:b"],
    )
    .spawn()
    .unwrap();
    let stderr = ran_every_step(wait_within(child, Duration::from_secs(20)), 4);
    assert_eq!(
        stderr.matches("cannot use the shared files").count(),
        1,
        "said once: {stderr}"
    );
    assert!(stderr.contains("cannot reserve"), "{stderr}");
}

#[test]
fn shared_files_cut_short_while_mapped_do_not_kill_the_job() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let trace = work.path().join("trace.json");
    let child = client_command(
        &shm,
        &[
            ("VRAMSHARE_QUOTA", "64MiB"),
            ("VRAMSHARE_TRACE", trace.to_str().unwrap()),
        ],
        &[
            "malloc:a:1M",
            "sleep:1500",
            "malloc:b:2M",
            "free:a",
            "free:b",
        ],
    )
    .spawn()
    .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let listed = || {
        open_existing::<RegistryFile>(&shm)
            .ok()
            .and_then(|map| Registry::new(map).ok())
            .is_some_and(|r| r.live().iter().any(|p| p.pid == pid))
    };
    while !listed() {
        assert!(start.elapsed() < Duration::from_secs(10), "never listed");
        std::thread::sleep(Duration::from_millis(10));
    }
    for name in ["registry", "ring"] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(shm.join(name))
            .unwrap();
        file.set_len(0).unwrap();
    }
    let stderr = ran_every_step(wait_within(child, Duration::from_secs(20)), 4);
    assert_eq!(
        stderr.matches("was cut short").count(),
        1,
        "said once: {stderr}"
    );
    assert_eq!(
        placements(&trace),
        ["device", "device"],
        "the quota is put back, not read as 0 from the lost page"
    );
}

#[test]
fn a_trace_target_that_is_not_a_regular_file_of_its_own_is_refused_before_the_job_runs() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let steps = ["malloc:a:1M", "free:a"];
    // Standard output to a file: the trace would have overwritten it.
    let out_path = work.path().join("job.out");
    std::fs::write(&out_path, "earlier output\n").unwrap();
    let out = std::fs::OpenOptions::new()
        .append(true)
        .open(&out_path)
        .unwrap();
    let child = client_command(&shm, &[("VRAMSHARE_TRACE", "/dev/stdout")], &steps)
        .stdout(out)
        .spawn()
        .unwrap();
    let output = wait_within(child, Duration::from_secs(10));
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("vramshare: VRAMSHARE_TRACE=\"/dev/stdout\" is not valid")
            && stderr.contains("standard output")
            && stderr.contains("accepted forms"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&out_path).unwrap(),
        "earlier output\n"
    );
    // A pipe, a FIFO, a character device: refused at once, no hang.
    let fifo = work.path().join("fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    for (target, why) in [
        ("/dev/stdout", "a FIFO or pipe"),
        (fifo.to_str().unwrap(), "a FIFO or pipe"),
        ("/dev/full", "a character device"),
    ] {
        let child = client_command(&shm, &[("VRAMSHARE_TRACE", target)], &steps)
            .spawn()
            .unwrap();
        let output = wait_within(child, Duration::from_secs(10));
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{target}: {stderr}");
        assert!(stderr.contains(why), "{target}: {stderr}");
    }
}

#[test]
fn a_trace_target_turned_into_a_fifo_while_the_job_runs_is_refused_at_exit_without_a_hang() {
    let work = tempfile::tempdir().unwrap();
    let target = work.path().join("trace.json");
    let child = client_command(
        &work.path().join("shm"),
        &[("VRAMSHARE_TRACE", target.to_str().unwrap())],
        &["malloc:a:1M", "sleep:600", "free:a"],
    )
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let path = std::ffi::CString::new(target.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let output = wait_within(child, Duration::from_secs(10));
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot write the trace") && stderr.contains("a FIFO or pipe"),
        "{stderr}"
    );
}

/// Writes a registry with room for `slots` processes (as an older or
/// smaller vramshare might have made it).
fn small_registry(shm: &Path, slots: u64) {
    std::fs::create_dir_all(shm).unwrap();
    std::fs::set_permissions(shm, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut bytes = vec![0u8; registry::HEADER_LEN + registry::SLOT_SIZE * slots as usize];
    bytes[0..8].copy_from_slice(&registry::MAGIC.to_ne_bytes());
    bytes[8..12].copy_from_slice(&registry::VERSION.to_ne_bytes());
    bytes[12..16].copy_from_slice(&(registry::SLOT_SIZE as u32).to_ne_bytes());
    bytes[16..24].copy_from_slice(&slots.to_ne_bytes());
    std::fs::write(shm.join("registry"), bytes).unwrap();
    std::fs::set_permissions(
        shm.join("registry"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
}

#[test]
fn a_process_the_full_registry_cannot_list_says_so_and_stays_out_of_its_pool() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    small_registry(&shm, 1);
    let holder = client_command(&shm, &[], &["malloc:a:1M", "sleep:3000", "free:a"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let run = client_command(
        &shm,
        &[
            ("VRAMSHARE_POOL", "p"),
            ("VRAMSHARE_POOL_QUOTA", "8MiB"),
            (
                "VRAMSHARE_TRACE",
                work.path().join("trace.json").to_str().unwrap(),
            ),
        ],
        &["malloc:a:6M", "malloc:b:6M", "free:a", "free:b"],
    )
    .output()
    .unwrap();
    let stderr = text(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("the process registry in").count(),
        1,
        "said once, at the default level: {stderr}"
    );
    assert!(stderr.contains("not in pool p"), "{stderr}");
    assert_eq!(
        placements(&work.path().join("trace.json")),
        ["device", "host"],
        "the pool's budget holds it as a quota of its own"
    );
    let pool = open_existing::<vramshare_common::pool::PoolFile>(&shm)
        .ok()
        .and_then(|map| vramshare_common::pool::Pools::new(map).ok())
        .and_then(|pools| {
            pools
                .find("p")
                .map(|(_, p)| p.device_bytes(vramshare_common::size::Device::new(0).unwrap()))
        });
    assert_eq!(pool, None, "nothing of it counted in a pool");
    wait_within(holder, Duration::from_secs(10));
}

#[test]
fn pools_come_and_go_and_one_made_again_takes_its_new_members_budget() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let pooled = |pool: &str, budget: &str, steps: &[&str]| {
        let trace = work.path().join(format!("trace-{pool}-{budget}.json"));
        let output = client_command(
            &shm,
            &[
                ("VRAMSHARE_POOL", pool),
                ("VRAMSHARE_POOL_QUOTA", budget),
                ("VRAMSHARE_TRACE", trace.to_str().unwrap()),
            ],
            steps,
        )
        .output()
        .unwrap();
        let stderr = text(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(!stderr.contains("not in pool"), "{pool}: {stderr}");
        placements(&trace).remove(0)
    };
    // More pools, one after another, than the table has slots.
    for n in 0..(vramshare_common::pool::DEFAULT_POOLS + 6) {
        pooled(&format!("job-{n}"), "8MiB", &["malloc:a:1M", "free:a"]);
    }
    assert_eq!(pooled("x", "8MiB", &["malloc:a:16M", "free:a"]), "host");
    assert_eq!(
        pooled("x", "64MiB", &["malloc:a:16M", "free:a"]),
        "device",
        "a pool without members takes the next member's budget"
    );
}

#[test]
fn a_quota_for_a_device_the_process_does_not_see_is_said() {
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "0=64MiB,15=1GiB"),
            ("FAKE_CUDA_DEVICES", "2"),
        ],
        &["malloc:a:1M", "free:a"],
    );
    run.assert_ok();
    assert_eq!(
        run.stderr
            .matches("VRAMSHARE_QUOTA names device 15")
            .count(),
        1,
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("sees 2 devices"), "{}", run.stderr);
}
