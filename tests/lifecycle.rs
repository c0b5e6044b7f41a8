//! The process's life under the shim: a forked child with a thread of its
//! own, calls that come after the exit handler, and panics inside the shim
//! (made on purpose by a debug build, `VRAMSHARE_TEST_PANIC`), on the fake
//! runtime.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;
use vramshare_common::files::{open_existing, open_existing_mut};
use vramshare_common::pool::{PoolFile, Pools};
use vramshare_common::registry::{ProcessInfo, Registry, RegistryFile};

fn spawn(shm: &Path, env: &[(&str, &str)], steps: &[&str]) -> Child {
    client_command(shm, env, steps).spawn().unwrap()
}

fn processes(shm: &Path, live: bool) -> Vec<ProcessInfo> {
    open_existing::<RegistryFile>(shm)
        .ok()
        .and_then(|map| Registry::new(map).ok())
        .map(|registry| {
            if live {
                registry.live()
            } else {
                registry.gone()
            }
        })
        .unwrap_or_default()
}

/// Polls `what` every 10 ms for up to `limit`; fails saying `why`.
fn wait_until(limit: Duration, mut what: impl FnMut() -> bool, why: &str) {
    let start = Instant::now();
    while !what() {
        assert!(start.elapsed() < limit, "{why} (after {limit:?})");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn spilled(info: &ProcessInfo) -> u64 {
    info.devices.iter().map(|(_, d)| d.spilled_bytes).sum()
}

#[test]
fn a_forked_childs_quota_raised_live_brings_its_spilled_block_back() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let child = spawn(
        &shm,
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:p:1M",
            "forkrest",
            "malloc:a:24M",
            "malloc:b:16M",
            "sleep:4000",
            "free:a",
            "free:b",
        ],
    );
    let parent = child.id();
    let mut forked = 0;
    wait_until(
        Duration::from_secs(10),
        || {
            let spilled_child = processes(&shm, true)
                .into_iter()
                .find(|p| p.pid != parent && spilled(p) == 16 * MIB);
            forked = spilled_child.map_or(0, |p| p.pid);
            forked != 0
        },
        "the child never spilled b",
    );
    // As `vramshare quota set --pid CHILD 64MiB` does it.
    let registry = Registry::new(open_existing_mut::<RegistryFile>(&shm).unwrap()).unwrap();
    registry.live_slot(forked).unwrap().devices()[0]
        .quota
        .store(64 * MIB, std::sync::atomic::Ordering::Release);
    wait_until(
        Duration::from_secs(2),
        || {
            processes(&shm, true)
                .iter()
                .find(|p| p.pid == forked)
                .is_some_and(|p| spilled(p) == 0)
        },
        "the child's own thread never promoted b after its quota was raised",
    );
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
}

#[test]
fn a_free_after_the_exit_handler_takes_nothing_from_the_pool_a_second_time() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let pool = [
        ("VRAMSHARE_POOL", "team"),
        ("VRAMSHARE_POOL_QUOTA", "256MiB"),
    ];
    let holder = spawn(&shm, &pool, &["malloc:x:49M", "sleep:4000", "free:x"]);
    let pool_bytes = || {
        open_existing::<PoolFile>(&shm)
            .ok()
            .and_then(|map| Pools::new(map).ok())
            .and_then(|pools| {
                pools
                    .find("team")
                    .map(|(_, p)| p.device_bytes(vramshare_common::size::Device::new(0).unwrap()))
            })
    };
    wait_until(
        Duration::from_secs(10),
        || pool_bytes() == Some(49 * MIB),
        "the holder never joined",
    );
    // Its handler is registered before its first CUDA call, so it runs
    // after the shim's own exit handler.
    let late = spawn(&shm, &pool, &["atexit_free:a", "malloc:a:32M"]);
    let late_pid = late.id();
    let output = late.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("atexit free a rc=0"),
        "{stdout}"
    );
    assert_eq!(
        pool_bytes(),
        Some(49 * MIB),
        "the pool counts the holder's 49 MiB, not less"
    );
    let gone = processes(&shm, false);
    let late = gone
        .iter()
        .find(|p| p.pid == late_pid)
        .expect("kept for dump");
    assert_eq!(
        late.devices[0].1.device_bytes,
        32 * MIB,
        "its registry slot keeps its numbers at exit"
    );
    assert!(holder.wait_with_output().unwrap().status.success());
}

#[test]
#[cfg_attr(not(debug_assertions), ignore)]
fn a_panic_in_the_exit_handler_never_takes_the_job_down() {
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "32MiB"),
            ("VRAMSHARE_TEST_PANIC", "exit"),
        ],
        &["malloc:a:1M", "free:a"],
    );
    run.assert_ok();
    assert!(run.stdout.contains("free a rc=0"), "{}", run.stdout);
}

#[test]
// Only a debug build panics on purpose (`config::panics_at`).
#[cfg_attr(not(debug_assertions), ignore)]
fn a_panic_after_the_real_call_never_makes_it_twice() {
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "32MiB"),
            ("VRAMSHARE_TEST_PANIC", "after-real"),
        ],
        &["malloc:a:1M", "free:a"],
    );
    run.assert_ok();
    assert_eq!(run.rc("malloc a"), 0, "{}", run.stdout);
    assert_eq!(
        run.calls_with(&["cudaMalloc", "size=1048576"]).len(),
        1,
        "one allocation: {:?}",
        run.calls
    );
    assert_eq!(
        run.calls_with(&["cudaFree"]).len(),
        1,
        "one free: {:?}",
        run.calls
    );
    assert!(run.stderr.contains("its answer 0 stands"), "{}", run.stderr);
}

#[test]
#[cfg_attr(not(debug_assertions), ignore)]
fn a_hook_that_fails_before_its_call_passes_it_on_and_the_next_move_waits_for_it() {
    // a and b are blocks of the spill tier; the hook of a's memset panics
    // before the real call, so the memset goes to CUDA unread (inside the
    // tier's gate, so that no drain comes between). c then needs room: a
    // block goes out only after the device is drained, with its bytes.
    let env = moving_beside(
        "4MiB",
        &[("VRAMSHARE_TEST_PANIC", "before-real:cudaMemsetAsync")],
    );
    let steps = [
        "malloc:a:2M",
        "fill:a:1:1",
        "memset:a:2:1",
        "malloc:b:2M",
        "fill:b:3:1",
        "malloc:c:2M",
        "fill:c:4:1",
        "copyout:a:1",
        "sync",
        "hostbytes",
    ];
    let run = client(Runtime::Fake13, &env, &steps);
    run.assert_ok();
    assert_eq!(run.rc("memset a"), 0, "{}", run.stdout);
    let said = run
        .stderr
        .matches("internal error in the cudaMemsetAsync hook")
        .count();
    assert_eq!(said, 1, "{}", run.stderr);
    let moves = run.moves();
    assert_eq!(moves["drains_unread"], 1, "{moves:#}");
    copied_bytes_hold(&run, "2");
}
