//! Groups of a step's allocations held in one tier block, on the fake
//! runtime (`VRAMSHARE_MOVES=overlap`, steps marked): blocks that the step
//! before made one after another and freed together are made as one block
//! at the first of them, the others placed inside it; the block moves as
//! one and is freed with its last member.

mod common;

use common::*;

/// Blocks of a step, as a training step's forward and backward passes:
/// made and filled in turn on stream 1; once all have landed, each checked
/// in the reverse order (copied to the host, a `hostcount` line each);
/// then, in that order, each filled again and freed in stream order: the
/// even ones filled once on stream 1, the odd three times on
/// `free_on_odd`. Nothing
/// waits for those last fills: the next step's forward is given while they
/// may still be queued. The first eight blocks live long enough to be
/// grouped (64 allocations and frees).
const BLOCKS: usize = 40;

fn step(free_on_odd: u32) -> Vec<String> {
    let names: Vec<String> = (0..BLOCKS).map(|i| format!("a{i}")).collect();
    let mut step = vec!["step".to_string()];
    for (byte, name) in names.iter().enumerate() {
        step.extend([
            format!("async:{name}:2M:1"),
            format!("fill:{name}:{}:1", byte + 1),
        ]);
    }
    step.push("sync".into());
    for (byte, name) in names.iter().enumerate().rev() {
        step.extend([
            format!("copyout:{name}:1"),
            "sync".into(),
            format!("hostcount:{}", byte + 1),
        ]);
    }
    for (byte, name) in names.iter().enumerate().rev() {
        let (stream, fills) = if byte % 2 == 1 {
            (free_on_odd, 3)
        } else {
            (1, 1)
        };
        for _ in 0..fills {
            step.push(format!("fill:{name}:{}:{stream}", byte + 101));
        }
        step.push(format!("freeasync:{name}:{stream}"));
    }
    step
}

fn run_steps(times: usize, free_on_odd: u32, quota: &str, delay_us: &str) -> Run {
    let step = step(free_on_odd);
    let mut steps = vec![format!("repeat:{times}:{}", step.len())];
    steps.extend(step);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = moving_beside(quota, &[("FAKE_CUDA_STREAM_DELAY_US", delay_us)]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    run
}

/// Every block held what the forward wrote when the backward came to it.
fn assert_each_block_held_its_bytes(run: &Run, steps: usize) {
    let counts: Vec<&str> = (run.stdout.lines())
        .filter(|l| l.starts_with("hostcount"))
        .collect();
    assert_eq!(counts.len(), steps * BLOCKS);
    for line in counts {
        assert_eq!(log_field(line, "differ"), "0", "{line}");
    }
}

/// Each allocation's address in the last step, in the order made.
fn last_addresses(run: &Run) -> Vec<u64> {
    let all: Vec<u64> = (run.stdout.lines())
        .filter(|l| l.starts_with("async "))
        .map(|l| hex(&log_field(l, "ptr")))
        .collect();
    all[all.len() - BLOCKS..].to_vec()
}

#[test]
fn a_steps_saved_blocks_share_one_block_after_the_first_step() {
    let run = run_steps(4, 1, "64MiB", "200");
    assert_each_block_held_its_bytes(&run, 4);
    let moves = run.moves();
    let made = moves["groups_made"].as_u64().unwrap();
    let members = moves["grouped_members"].as_u64().unwrap();
    // From the second step on, the first blocks come in groups of at most
    // 8 MiB (an eighth of the quota): four blocks, three placed inside.
    assert!(made >= 3 && members >= 3 * made, "{moves:#}");
    let at = last_addresses(&run);
    for i in 1..4 {
        assert_eq!(
            at[i],
            at[0] + i as u64 * 2 * MIB,
            "member {i} inside the group: {at:x?}"
        );
    }
    // The job freed everything: no group's block is left, and the device
    // never held more than the quota.
    assert!(leaked_blocks(run.trace()).is_empty(), "{:#}", run.trace());
    let process = &run.trace()["processes"][0];
    let peak = process["peak_device"]["0"].as_u64().unwrap();
    assert!(peak <= 64 * MIB, "{process:#}");
}

#[test]
fn members_freed_on_another_stream_leave_every_block_its_bytes() {
    // The odd blocks are filled again and freed on stream 2, which lags
    // (each item runs 2 ms after it is reached, and stream 2 has more of
    // the backward's items than stream 1): every block still holds what
    // the next step's forward wrote, and groups are made all the same.
    let run = run_steps(4, 2, "64MiB", "2000");
    assert_each_block_held_its_bytes(&run, 4);
    let moves = run.moves();
    assert!(moves["groups_made"].as_u64().unwrap() >= 3, "{moves:#}");
    assert!(leaked_blocks(run.trace()).is_empty(), "{:#}", run.trace());
}

/// Three steps of [`step`] under `quota` (groups of four 2 MiB blocks from
/// the second on under 64 MiB, of eight under 128 MiB, where nothing
/// moves), then a fourth step's forward, every fill landed, then `more`.
fn then(quota: &str, more: &[&str]) -> Run {
    let step = step(1);
    let mut steps = vec![format!("repeat:3:{}", step.len())];
    steps.extend(step);
    steps.push("step".into());
    for (byte, name) in (0..BLOCKS).map(|i| (i + 1, format!("a{i}"))) {
        steps.extend([
            format!("async:{name}:2M:1"),
            format!("fill:{name}:{byte}:1"),
        ]);
    }
    steps.push("sync".into());
    steps.extend(more.iter().map(|s| s.to_string()));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = moving_beside(quota, &[("FAKE_CUDA_STREAM_DELAY_US", "200")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    run
}

/// The lines of `run`'s output that begin `prefix`, the last `n`.
fn last_lines<'a>(run: &'a Run, prefix: &str, n: usize) -> Vec<&'a str> {
    let all: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with(prefix))
        .collect();
    all[all.len() - n..].to_vec()
}

#[test]
fn a_group_members_second_free_is_refused_and_leaves_the_others_their_bytes() {
    // a0 is its group's first member: its start is the group's. Freed
    // twice, the second free must not free the group under a1 to a3.
    let run = then(
        "64MiB",
        &[
            "freeasync:a0:1",
            "freeasync:a0:1",
            "async:x:8M:1",
            "fill:x:7:1",
            "sync",
            "copyout:a1:1",
            "sync",
            "hostcount:2",
        ],
    );
    let frees = last_lines(&run, "freeasync a0 ", 2);
    assert_eq!(log_field(frees[0], "rc"), "0", "{frees:?}");
    assert_ne!(log_field(frees[1], "rc"), "0", "{frees:?}");
    let count = last_lines(&run, "hostcount", 1)[0];
    assert_eq!(log_field(count, "differ"), "0", "{count}");
    let x = hex(&log_field(last_lines(&run, "async x ", 1)[0], "ptr"));
    let a0 = hex(&log_field(last_lines(&run, "async a0 ", 1)[0], "ptr"));
    assert_ne!(x, a0, "the group was handed out again");
}

#[test]
fn a_group_one_of_whose_members_a_graph_freed_is_never_handed_out_again() {
    // a1 is freed while stream 1 is captured: the graph frees it whenever
    // it runs. Its group's memory must not serve a later allocation, even
    // once the others are freed outside the capture.
    let mut more = vec!["capture:1", "freeasync:a1:1", "endcapture:1"];
    let frees: Vec<String> = [0, 2, 3, 4, 5, 6, 7]
        .iter()
        .map(|i| format!("freeasync:a{i}:1"))
        .collect();
    more.extend(frees.iter().map(String::as_str));
    more.push("sync");
    // Enough allocations of the group's size (eight 2 MiB blocks, at most
    // an eighth of 128 MiB, all on the device) to take every kept block of
    // that size.
    let xs: Vec<String> = (0..4).map(|i| format!("async:x{i}:16M:1")).collect();
    more.extend(xs.iter().map(String::as_str));
    let run = then("128MiB", &more);
    let a0 = hex(&log_field(last_lines(&run, "async a0 ", 1)[0], "ptr"));
    let a1 = hex(&log_field(last_lines(&run, "async a1 ", 1)[0], "ptr"));
    assert_eq!(a1, a0 + 2 * MIB, "a1 in a0's group");
    for line in last_lines(&run, "async x", 4) {
        let x = hex(&log_field(line, "ptr"));
        assert!(
            !(a0..a0 + 16 * MIB).contains(&x),
            "{line}: the group at {a0:#x} again"
        );
    }
}
