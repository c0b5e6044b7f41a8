//! `vramshare ps` on jobs that use GPUs in more ways than one process on
//! one device: the ranks of a distributed job, and devices renumbered by
//! `CUDA_VISIBLE_DEVICES`.

#[path = "common/command.rs"]
mod command;
mod common;

use std::process::Child;

use command::*;

#[test]
fn ps_shows_the_ranks_of_a_distributed_job_together_in_rank_order() {
    let dir = tempfile::tempdir().unwrap();
    let rank = |rank: &'static str| {
        [
            ("RANK", rank),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "job7"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]
    };
    let steps = ["malloc:a:1M", "sleep:20000"];
    let mut jobs = Vec::new();
    // Rank 1 first, then a job of its own, then rank 0.
    for env in [&rank("1")[..], &[], &rank("0")[..]] {
        let job = spawn_run_with(dir.path(), "32MiB", &steps, env);
        wait_for_row(dir.path(), job.id(), |r| {
            r["devices"]["0"]["allocations"] == 1
        });
        jobs.push(job);
    }
    let pids: Vec<u32> = jobs.iter().map(Child::id).collect();
    let rows = ps_json(dir.path());
    let order: Vec<u32> = rows
        .iter()
        .map(|r| r["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(order, [pids[2], pids[0], pids[1]], "{rows:?}");
    assert_eq!(
        (rows[0]["rank"].as_str(), rows[0]["world_size"].as_str()),
        (Some("0"), Some("2"))
    );
    assert!(rows[2].get("rank").is_none(), "{}", rows[2]);
    let table = text(&vramshare(&["ps", "--dir", dir.path().to_str().unwrap()]).stdout);
    let line_of = |pid: u32| {
        table
            .lines()
            .position(|l| l.trim_start().starts_with(&pid.to_string()))
            .unwrap_or_else(|| panic!("{pid} in {table}"))
    };
    assert!(
        line_of(pids[2]) < line_of(pids[0]) && line_of(pids[0]) < line_of(pids[1]),
        "{table}"
    );
    assert!(
        table.contains("[rank 0/2]") && table.contains("[rank 1/2]"),
        "{table}"
    );
    for mut job in jobs {
        let _ = job.kill();
        let _ = job.wait();
    }
}

#[test]
fn ps_shows_which_gpu_each_device_of_a_process_is_by_its_bus_id() {
    let dir = tempfile::tempdir().unwrap();
    // The process's device 0 is the machine's GPU 1, and its 1 GPU 0.
    let steps = ["malloc:a:1M", "device:1", "malloc:b:1M", "sleep:20000"];
    let mut job = spawn_run_with(
        dir.path(),
        "32MiB",
        &steps,
        &[("CUDA_VISIBLE_DEVICES", "1,0")],
    );
    let row = wait_for_row(dir.path(), job.id(), |r| {
        r["devices"]["1"]["allocations"] == 1
    });
    assert_eq!(row["devices"]["0"]["bus_id"], "00000000:19:00.0", "{row}");
    assert_eq!(row["devices"]["1"]["bus_id"], "00000000:18:00.0", "{row}");
    let _ = job.kill();
    let _ = job.wait();
}

#[test]
fn ps_shows_the_bytes_moved_a_second_and_the_share_of_uses_found_on_the_device() {
    let dir = tempfile::tempdir().unwrap();
    // Three blocks of which two fit, used in turn, twice each: a use of the
    // one in host memory brings it onto the device and sends another out.
    // (A block used once a trip would be read in place from its second
    // trip on.)
    let steps = [
        "malloc:a:6M",
        "malloc:b:6M",
        "malloc:c:6M",
        "repeat:3:6",
        "fill:a:1:0",
        "fill:a:1:0",
        "fill:b:2:0",
        "fill:b:2:0",
        "fill:c:3:0",
        "fill:c:3:0",
        "sync",
        "sleep:20000",
    ];
    let mut job = spawn_run_with(dir.path(), "16MiB", &steps, &[("FAKE_CUDA_DEVICES", "1")]);
    let row = wait_for_row(dir.path(), job.id(), |r| {
        r["devices"]["0"]["moved_bytes"].as_u64().unwrap_or(0) >= 5 * (6 << 20)
            && r["uses"].as_u64().unwrap_or(0) >= 6
    });
    let moved = row["devices"]["0"]["moved_bytes"].as_u64().unwrap();
    assert_eq!(moved % (6 << 20), 0, "whole blocks: {row}");
    assert!(
        row["moved_bytes_per_second"].as_f64().unwrap() > 0.0,
        "{row}"
    );
    let share = row["uses_on_device"].as_f64().unwrap();
    assert!(
        (0.0..1.0).contains(&share),
        "some uses found their block in host memory: {row}"
    );
    let table = text(&vramshare(&["ps", "--dir", dir.path().to_str().unwrap()]).stdout);
    assert!(
        table.lines().next().unwrap().contains("MOVED/S ON-GPU"),
        "{table}"
    );
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with(&job.id().to_string()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains("MiB") && line.contains('%'), "{table}");
    let _ = job.kill();
    let _ = job.wait();
}
