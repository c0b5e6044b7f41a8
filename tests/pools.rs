//! Pools: processes sharing one budget (VRAMSHARE_POOL), on the fake runtime.

mod common;
#[path = "common/pools.rs"]
mod pools;

use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use pools::*;
use serde_json::Value;
use vramshare_common::files::open_existing;
use vramshare_common::registry::{Registry, RegistryFile};

#[test]
fn eight_processes_of_four_threads_never_pass_the_pools_budget() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let budget = 96 * MIB;
    let stop = AtomicBool::new(false);
    let highest = AtomicU64::new(0);
    let outputs = std::thread::scope(|s| {
        s.spawn(|| sample_until(&shm, "stress", &stop, &highest));
        let members: Vec<Child> = (0..8)
            .map(|i| {
                let seed = (11 + i).to_string();
                spawn_member(
                    &shm,
                    "stress",
                    &["4", "3000", "2097152", &seed, "sync"],
                    "stress",
                    "96MiB",
                )
            })
            .collect();
        let outputs: Vec<_> = members
            .into_iter()
            .map(|m| (m.id(), m.wait_with_output().unwrap()))
            .collect();
        stop.store(true, Ordering::Release);
        outputs
    });
    let highest = highest.load(Ordering::Relaxed);
    assert!(
        highest <= budget,
        "the pool held {highest} bytes against a budget of {budget}"
    );
    assert!(
        highest > budget / 2,
        "the members filled the pool ({highest})"
    );
    for (_, output) in &outputs {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Each member's ledger holds exactly its live blocks.
    for (pid, output) in outputs {
        let live = live_blocks(&String::from_utf8_lossy(&output.stdout));
        let trace: Value = serde_json::from_str(
            &std::fs::read_to_string(work.path().join(format!("trace-{pid}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(
            leaked_blocks(&trace),
            live,
            "pid {pid}: the ledger holds exactly the live blocks"
        );
        let process = &trace["processes"][0];
        assert!(
            process["peak_device"]["0"].as_u64().unwrap() <= budget,
            "peak {} counts {}",
            process["peak_device"]["0"],
            process["counts"]
        );
    }
    assert_eq!(
        pool_bytes(&shm, "stress"),
        None,
        "members that exit take their bytes out of the pool, and the last one frees it"
    );
}

#[test]
fn members_killed_with_sigkill_give_their_bytes_back_within_a_second() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let mut members: Vec<Child> = (0..6)
        .map(|_| {
            spawn_member(
                &shm,
                "client",
                &[
                    "malloc:a:8M",
                    "malloc:b:8M",
                    "sleep:2500",
                    "free:a",
                    "malloc:c:24M",
                ],
                "team",
                "128MiB",
            )
        })
        .collect();
    let doomed: Vec<Child> = (0..2)
        .map(|_| {
            spawn_member(
                &shm,
                "client",
                &["malloc:a:16M", "sleep:20000"],
                "team",
                "128MiB",
            )
        })
        .collect();
    wait_for_pool(&shm, "team", 128 * MIB);
    for mut member in doomed {
        member.kill().unwrap(); // SIGKILL: no exit handler runs
        member.wait().unwrap();
    }
    poll_until(
        Duration::from_secs(1),
        || pool_bytes(&shm, "team") == Some(96 * MIB),
        |waited| {
            format!(
                "after {waited:?} the pool still counts {:?}",
                pool_bytes(&shm, "team")
            )
        },
    );
    // The others never hang: each frees a and asks for c (24M), more than
    // the budget has for all six, so some c spill; none fail.
    for member in members.drain(..) {
        let output = member.wait_with_output().unwrap();
        assert!(output.status.success());
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("malloc c rc=0"), "{stdout}");
    }
    assert_eq!(
        pool_bytes(&shm, "team"),
        None,
        "the killed members were counted out, so the last to leave freed the pool"
    );
}

#[test]
fn a_second_budget_for_a_running_pool_is_named_and_not_applied() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let first = spawn_member(&shm, "client", &["malloc:a:4M", "sleep:1500"], "p", "64MiB");
    wait_for_pool(&shm, "p", 4 * MIB);
    let second = spawn_member(&shm, "client", &["malloc:a:4M", "meminfo"], "p", "32MiB")
        .wait_with_output()
        .unwrap();
    assert!(second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("pool p runs with a budget of 64.00 MiB on device 0; VRAMSHARE_POOL_QUOTA asks 32.00 MiB, and the running budget applies"),
        "{stderr}"
    );
    // cudaMemGetInfo: the pool's budget less what its members hold.
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(
        stdout.contains(&format!(
            "meminfo rc=0 free={} total={}",
            56 * MIB,
            64 * MIB
        )),
        "{stdout}"
    );
    first.wait_with_output().unwrap();
}

#[test]
fn two_of_eight_stressed_members_killed_are_reaped_within_a_second() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let mut members: Vec<Child> = (0..8)
        .map(|i| {
            let seed = (31 + i).to_string();
            spawn_member(
                &shm,
                "stress",
                &["4", "8000", "2097152", &seed, "sync"],
                "churn",
                "96MiB",
            )
        })
        .collect();
    let doomed: Vec<Child> = members.drain(..2).collect();
    // Killed once all eight are in the pool and it is busy.
    poll_until(
        Duration::from_secs(10),
        || joined_members(&shm) == 8 && pool_bytes(&shm, "churn").unwrap_or(0) >= 48 * MIB,
        |_| format!("{} members joined", joined_members(&shm)),
    );
    let pids: Vec<u32> = doomed.iter().map(|c| c.id()).collect();
    for mut member in doomed {
        member.kill().unwrap();
        member.wait().unwrap();
    }
    let reaped = || {
        let registry = Registry::new(open_existing::<RegistryFile>(&shm).unwrap()).unwrap();
        registry
            .gone()
            .iter()
            .filter(|p| pids.contains(&p.pid) && p.exited)
            .count()
    };
    poll_until(
        Duration::from_secs(1),
        || reaped() == 2,
        |waited| {
            format!(
                "{} of the 2 killed members reaped after {waited:?}",
                reaped()
            )
        },
    );
    for member in members {
        let output = member.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(
        pool_bytes(&shm, "churn"),
        None,
        "the pool is freed, holding nothing, once its members are gone, the killed ones counted \
         out too"
    );
}

#[test]
fn a_member_killed_in_the_middle_of_a_move_leaves_the_pool_exact() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let stay = spawn_member(
        &shm,
        "client",
        &["malloc:s:4M", "sleep:8000"],
        "mv",
        "32MiB",
    );
    wait_for_pool(&shm, "mv", 4 * MIB);
    // m spills (24 + 16 > 28 left); freeing x gives it room, and its move
    // back keeps the shim three seconds, as a large move over the link does.
    let mover = member_command(
        &shm,
        "client",
        &["malloc:x:24M", "malloc:m:16M", "free:x", "sleep:10000"],
        "mv",
        "32MiB",
        "normal",
    )
    .env("FAKE_CUDA_MOVE_DELAY_MS", "3000")
    .spawn()
    .unwrap();
    // In flight: the pool counts m's 16 MiB on the device already.
    wait_for_pool(&shm, "mv", 20 * MIB);
    let mut mover = mover;
    mover.kill().unwrap(); // SIGKILL, mid-move
    mover.wait().unwrap();
    poll_until(
        Duration::from_secs(1),
        || pool_bytes(&shm, "mv") == Some(4 * MIB),
        |waited| {
            format!(
                "after {waited:?} the pool still counts {:?}",
                pool_bytes(&shm, "mv")
            )
        },
    );
    assert!(stay.wait_with_output().unwrap().status.success());
    assert_eq!(
        pool_bytes(&shm, "mv"),
        None,
        "the last to leave freed the pool"
    );
}

#[test]
fn a_member_killed_while_the_spill_tier_moves_its_block_leaves_the_pool_exact() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let log = work.path().join("calls.log");
    let stay = spawn_member(
        &shm,
        "client",
        &["malloc:s:4M", "sleep:8000"],
        "tier",
        "32MiB",
    );
    wait_for_pool(&shm, "tier", 4 * MIB);
    // a, b, c fill the 28 MiB left; d is over the budget, in host memory.
    // Its kernel brings it in: a block moves out first, then d's bytes
    // cross, each copy keeping the shim three seconds.
    let mover = member_command(
        &shm,
        "client",
        &[
            "malloc:a:8M",
            "malloc:b:8M",
            "malloc:c:8M",
            "malloc:d:8M",
            "fill:d:1:0",
            "sleep:10000",
        ],
        "tier",
        "32MiB",
        "normal",
    )
    .env("VRAMSHARE_MOVES", "on")
    .env("FAKE_CUDA_DEVICES", "1")
    .env("FAKE_CUDA_MOVE_DELAY_MS", "3000")
    .env("FAKE_CUDA_LOG", &log)
    .spawn()
    .unwrap();
    // Killed once d's own copy has begun: its device memory is in the pool.
    poll_until(
        Duration::from_secs(10),
        || {
            let calls = std::fs::read_to_string(&log).unwrap_or_default();
            calls
                .lines()
                .filter(|l| l.contains("cuMemcpyAsync "))
                .count()
                >= 2
        },
        |_| std::fs::read_to_string(&log).unwrap_or_default(),
    );
    assert_eq!(
        pool_bytes(&shm, "tier"),
        Some(28 * MIB),
        "d counted in flight"
    );
    let mut mover = mover;
    mover.kill().unwrap(); // SIGKILL, mid-move
    mover.wait().unwrap();
    poll_until(
        Duration::from_secs(1),
        || pool_bytes(&shm, "tier") == Some(4 * MIB),
        |waited| {
            format!(
                "after {waited:?} the pool still counts {:?}",
                pool_bytes(&shm, "tier")
            )
        },
    );
    assert!(stay.wait_with_output().unwrap().status.success());
    assert_eq!(
        pool_bytes(&shm, "tier"),
        None,
        "the last to leave freed the pool"
    );
}
