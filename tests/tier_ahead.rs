//! Why blocks come ahead of need or not, as the trace counts it, on the
//! fake runtime (`VRAMSHARE_MOVES=overlap`, steps marked).

mod common;

use common::*;
use serde_json::Value;

/// A marked step's forward pass: each of `blocks` (2 MiB) made on the
/// first stream and filled with its number plus one, each fill waited for.
fn forward(blocks: &[String]) -> Vec<String> {
    let mut step = vec!["step".to_string()];
    for (byte, name) in blocks.iter().enumerate() {
        step.extend([
            format!("async:{name}:2M:1"),
            format!("fill:{name}:{}:1", byte + 1),
            "sync".into(),
        ]);
    }
    step
}

/// A marked step `times` times under 32 MiB, as a training step's forward
/// and backward passes: 24 blocks of 2 MiB made and filled in turn
/// ([`forward`]), then filled again in the reverse order and freed in
/// stream order, kept for the next step's. Each fill is waited for. With
/// `checked`, each block is copied to the host and its bytes counted
/// before the backward fills it again (a `hostcount` line each).
fn forward_and_backward(times: usize, checked: bool, more: &[(&str, &str)]) -> Run {
    let blocks: Vec<String> = (0..24).map(|i| format!("a{i}")).collect();
    let mut step = forward(&blocks);
    for (byte, name) in blocks.iter().enumerate().rev() {
        if checked {
            step.extend([
                format!("copyout:{name}:1"),
                "sync".into(),
                format!("hostcount:{}", byte + 1),
            ]);
        }
        step.extend([
            format!("fill:{name}:{}:1", byte + 101),
            "sync".into(),
            format!("freeasync:{name}:1"),
        ]);
    }
    step.push("sync".into());
    let mut steps = vec![format!("repeat:{times}:{}", step.len())];
    steps.extend(step);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let mut vars = moving_beside("32MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "1000")]);
    vars.extend_from_slice(more);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    run
}

/// That in each of `steps` checked steps of [`forward_and_backward`], every
/// block held what the forward wrote when the backward came to it.
fn assert_each_block_held_its_bytes(run: &Run, steps: usize) {
    let counts: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("hostcount"))
        .collect();
    assert_eq!(counts.len(), steps * 24);
    for line in counts {
        assert_eq!(log_field(line, "differ"), "0", "{line}");
        assert_eq!(log_field(line, "size"), (2 * MIB).to_string(), "{line}");
    }
}

#[test]
fn the_trace_says_why_blocks_came_ahead_or_not() {
    // In the forward, the uses to come name blocks not yet made, or on the
    // device: looks that find none in host memory. In the backward, the
    // blocks the forward sent out come back ahead as room is made, and a
    // look stops where there is no room to spare. Every fill is waited for,
    // so no block in host memory is still being read in place when looked
    // at.
    let run = forward_and_backward(5, false, &[]);
    let moves = run.moves();
    let last = run.last_sample();
    let count = |key: &str| last[key].as_u64().unwrap();
    assert!(moves["ahead_moves"].as_u64().unwrap() > 0, "{moves:#}");
    let (none, short) = (count("ahead_none_in_host"), count("ahead_short_of_room"));
    assert!(none > 0 && short > 0, "{last:#}");
    assert_eq!(count("ahead_passed_busy"), 0, "{last:#}");
    // At the end every block was freed in stream order and kept, those on
    // the device counted there, under the quota.
    let kept = count("kept_on_device_bytes");
    assert!((2 * MIB..=32 * MIB).contains(&kept), "{last:#}");
    assert_eq!(kept % (2 * MIB), 0, "{last:#}");
}

#[test]
fn blocks_still_read_in_place_by_queued_work_are_passed_over() {
    // Twenty 2 MiB blocks under 32 MiB, each step filled in turn, then
    // each filled twice more, nothing waited for until the step's end, and
    // work run 5 ms after it is given. A block comes onto the device once a
    // step: in the second round those sent out for others are read in
    // place, and the look after a block's first fill there finds its second
    // fill coming while the first is still queued. How often depends on
    // how far the stream lags the launches (4 to 14 times in six steps on a
    // busy machine): six steps leave room for a slow one.
    let blocks: Vec<String> = (0..20).map(|i| format!("b{i}")).collect();
    let mut steps: Vec<String> = blocks.iter().map(|b| format!("malloc:{b}:2M")).collect();
    let mut step = vec!["step".to_string()];
    step.extend(blocks.iter().map(|b| format!("fill:{b}:1:1")));
    for b in &blocks {
        step.extend([format!("fill:{b}:2:1"), format!("fill:{b}:3:1")]);
    }
    step.push("sync".into());
    steps.push(format!("repeat:6:{}", step.len()));
    steps.extend(step);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = moving_beside("32MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "5000")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let last = run.last_sample();
    let count = |key: &str| last[key].as_u64().unwrap();
    assert!(count("ahead_passed_busy") >= 1, "{last:#}");
}

#[test]
fn the_trace_names_the_uses_the_step_before_did_not_foretell() {
    // Twenty 2 MiB blocks under 32 MiB, filled in turn each marked step;
    // the fourth step fills the second block first. The trace lists that
    // step's first misses: its first use named the second block where the
    // step before had named the first, one use on.
    let blocks: Vec<String> = (0..20).map(|i| format!("b{i}")).collect();
    let mut steps: Vec<String> = blocks.iter().map(|b| format!("malloc:{b}:2M")).collect();
    let fill = |b: &String| [format!("fill:{b}:1:1"), "sync".to_string()];
    let mut step = vec!["step".to_string()];
    step.extend(blocks.iter().flat_map(fill));
    steps.push(format!("repeat:3:{}", step.len()));
    steps.extend(step);
    let mut order: Vec<&String> = blocks.iter().collect();
    order.swap(0, 1);
    steps.push("step".into());
    steps.extend(order.into_iter().flat_map(fill));
    steps.push("step".into());
    steps.extend(fill(&blocks[0]));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    // Work runs 5 ms after it is given, so that the run lasts long enough
    // for the shim's thread to sample its counters on the way.
    let vars = moving_beside("32MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "5000")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let start = |name: &str| {
        let line = run.line(&format!("malloc {name}"));
        format!("older block at {:#x}", hex(&log_field(line, "ptr")))
    };
    let moves = run.moves();
    let first = &moves["replay_misses"][0];
    assert_eq!(first["at"], 0, "{moves:#}");
    assert_eq!(first["named"], start("b1"), "{moves:#}");
    assert_eq!(first["expected"], start("b0"), "{moves:#}");
    assert_eq!(first["found_at"], 1, "{moves:#}");
    // The samples taken on the way count the uses foretold so far: some,
    // never more than by the end.
    let samples = moves["samples"].as_array().unwrap();
    let on_the_way = &samples[..samples.len() - 1];
    let matched = |s: &Value| s["replay_matched"].as_u64().unwrap();
    let total = moves["replay_matched"].as_u64().unwrap();
    assert!(on_the_way.iter().any(|s| matched(s) > 0), "{moves:#}");
    assert!(on_the_way.iter().all(|s| matched(s) <= total), "{moves:#}");
    assert!(moves["replay_missed"].as_u64() >= Some(1), "{moves:#}");
}

#[test]
fn room_is_kept_free_for_blocks_ahead_only_while_they_come() {
    // Each step makes 48 MiB of blocks under 32 MiB: at its peak, as the
    // forward ends, 16 MiB must be out. While the forward fills the quota
    // no block in host memory is among the uses to come (those it sent out
    // come back as the backward ends), so only the move budget is kept
    // free; room kept for blocks ahead then would only send more out.
    let run = forward_and_backward(5, false, &[]);
    let moves = run.moves();
    let out = moves["bytes_to_host"].as_u64().unwrap();
    // Five steps: at least 16 MiB out each. With room kept for blocks ahead
    // all through, 20 MiB went out each step; with it kept only while they
    // come, 18.
    assert!((80 * MIB..=95 * MIB).contains(&out), "{moves:#}");
}

#[test]
fn blocks_needed_past_the_peak_go_out_before_room_runs_short() {
    // Each step makes 48 MiB of blocks under 32 MiB, the first ones next
    // used once the forward has ended: past the point where the step
    // before's live blocks required the most out. From the second step on,
    // they go out as soon as they are idle, while the quota still has
    // room, so fewer of the forward's blocks wait for room to be made.
    let run = forward_and_backward(5, false, &[]);
    let moves = run.moves();
    let count = |key: &str| moves[key].as_u64().unwrap();
    // Four steps with a step before: at least half of the 16 MiB each must
    // put out went early (12 MiB each here).
    assert!(count("out_before_peak_bytes") >= 4 * 8 * MIB, "{moves:#}");
    // The first step made 6 MiB of blocks by moving others out, and so did
    // each later one while the blocks waited for room to run short (30 MiB
    // in all); sent early, 2 MiB a later step (14 in all).
    assert!(count("made_with_room_bytes") <= 20 * MIB, "{moves:#}");
    // What went out comes back: every step still holds to the quota and
    // moves at least the 16 MiB over it each way.
    assert!(count("bytes_to_host") >= 5 * 16 * MIB, "{moves:#}");
    let last = run.last_sample();
    assert_eq!(
        last["out_before_peak_bytes"], moves["out_before_peak_bytes"],
        "{last:#}"
    );
}

#[test]
fn an_allocation_at_the_peak_makes_only_its_own_room() {
    // Six marked steps under 48 MiB: eight 2 MiB weights filled at each
    // step's start, then the forward and backward of forward_and_backward,
    // with an 8 MiB block made and freed at the forward's end that no work
    // names. What the live blocks required out, noted after uses, leaves
    // that block out, so once the blocks going out before the peak have
    // gone it finds too little room and makes its own on the job's thread.
    // That room alone: making the room kept for moves free again there (an
    // eighth of the quota) sent out blocks the backward brought straight
    // back, 180 MiB out over the run against 150.
    let weights: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    let blocks: Vec<String> = (0..24).map(|i| format!("a{i}")).collect();
    let mut steps: Vec<String> = weights.iter().map(|w| format!("async:{w}:2M:1")).collect();
    steps.push("sync".into());
    let mut step = vec!["step".to_string()];
    for w in &weights {
        step.extend([format!("fill:{w}:7:1"), "sync".into()]);
    }
    step.extend(forward(&blocks).into_iter().skip(1));
    step.extend([
        "async:big:8M:1".into(),
        "freeasync:big:1".into(),
        "sync".into(),
    ]);
    for (byte, name) in blocks.iter().enumerate().rev() {
        step.extend([
            format!("fill:{name}:{}:1", byte + 101),
            "sync".into(),
            format!("freeasync:{name}:1"),
        ]);
    }
    step.push("sync".into());
    steps.push(format!("repeat:6:{}", step.len()));
    steps.extend(step);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = moving_beside("48MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "1000")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let moves = run.moves();
    let count = |key: &str| moves[key].as_u64().unwrap();
    // The block at the peak made its own room in each step after the first.
    assert!(count("made_with_room_bytes") >= 5 * 8 * MIB, "{moves:#}");
    assert!(count("out_for_room_bytes") >= 5 * 8 * MIB, "{moves:#}");
    assert!(count("bytes_to_host") <= 160 * MIB, "{moves:#}");
    // Every byte sent out was chosen for one of the reasons the trace
    // counts: none for quota cuts here.
    let chosen =
        count("out_before_peak_bytes") + count("out_kept_free_bytes") + count("out_for_room_bytes");
    assert!(chosen >= count("bytes_to_host"), "{moves:#}");
    // Each step's peak is in the trace: what the next step aimed at.
    let peaks = moves["step_peaks"].as_array().unwrap();
    let noted = peaks
        .iter()
        .filter(|peak| peak["out_needed_bytes"].as_u64() > Some(0) && peak["at"].as_u64() > Some(0))
        .count();
    assert!(noted >= 5, "{moves:#}");
}

#[test]
fn blocks_coming_ahead_take_the_memory_of_kept_blocks_of_their_size() {
    // In the backward each block is freed in stream order after its last
    // fill and kept for the next step's: kept blocks fill the room the
    // blocks sent out in the forward come back into. A block coming ahead
    // takes the memory of a kept block of its size, its copy waiting on
    // the device for that block's free: over the five steps 36 of the 45
    // moves onto the device came ahead of need, against 24 while blocks
    // ahead took only free room.
    let run = forward_and_backward(5, false, &[]);
    let moves = run.moves();
    let count = |key: &str| moves[key].as_u64().unwrap();
    let (ahead, onto) = (count("ahead_moves"), count("to_device"));
    assert!(onto >= 32, "{moves:#}");
    assert!(3 * ahead >= 2 * onto, "{moves:#}");
    assert!(count("lent_bytes_to_device") >= 8 * 2 * MIB, "{moves:#}");
}

#[test]
fn blocks_coming_ahead_into_kept_memory_hold_their_own_bytes() {
    // As above, each block copied out and its bytes counted before the
    // backward fills it again: what came back into a kept block's memory
    // is what the forward wrote, not what the kept block held. Copies cost
    // link time here, so that copies onto the device wait for the lenders'
    // frees on the device rather than on the host.
    let run = forward_and_backward(5, true, &[("FAKE_CUDA_LINK_MIB_PER_S", "2000")]);
    assert_each_block_held_its_bytes(&run, 5);
    let moves = run.moves();
    assert!(
        moves["lent_bytes_to_device"].as_u64() >= Some(8 * 2 * MIB),
        "{moves:#}"
    );
}

#[test]
fn a_block_freed_before_its_copy_in_lands_is_reused_after_it() {
    // Four steps as above; then a fifth whose backward fills and frees the
    // later blocks on a second, slow stream, and frees the first ten on the
    // first stream before any work names them again, each time allocating
    // a new block of their size there and setting its bytes. Those ten may
    // be coming ahead into the memory of blocks whose frees wait behind the
    // second stream's slow work: the new blocks, which take their memory
    // back at once on the stream they were freed on, must not be written
    // over by those copies when they land.
    let blocks: Vec<String> = (0..24).map(|i| format!("a{i}")).collect();
    let mut step = forward(&blocks);
    let mut last = step.clone();
    for (byte, name) in blocks.iter().enumerate().rev() {
        step.extend([
            format!("fill:{name}:{}:1", byte + 101),
            "sync".into(),
            format!("freeasync:{name}:1"),
        ]);
        if byte >= 10 {
            last.extend([
                format!("fill:{name}:{}:2", byte + 101),
                format!("freeasync:{name}:2"),
            ]);
        } else {
            last.extend([
                format!("freeasync:{name}:1"),
                format!("async:c{byte}:2M:1"),
                format!("memset:c{byte}:{}:1", byte + 150),
            ]);
        }
    }
    step.push("sync".into());
    last.push("sync".into());
    for byte in (0..10).rev() {
        last.extend([
            format!("copyout:c{byte}:1"),
            "sync".into(),
            format!("hostcount:{}", byte + 150),
        ]);
    }
    let mut steps = vec![format!("repeat:4:{}", step.len())];
    steps.extend(step);
    steps.extend(last);
    steps.push("step".into());
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = moving_beside(
        "32MiB",
        &[
            ("FAKE_CUDA_STREAM_DELAY_US", "1000"),
            ("FAKE_CUDA_KERNEL_US", "30000"),
            ("FAKE_CUDA_LINK_MIB_PER_S", "2000"),
        ],
    );
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let counts: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("hostcount"))
        .collect();
    assert_eq!(counts.len(), 10, "{}", run.stdout);
    for line in counts {
        assert_eq!(log_field(line, "differ"), "0", "{line}");
    }
}

#[test]
fn where_cuda_refuses_stream_waits_blocks_still_hold_their_bytes() {
    // As above, with every wait of a stream for an event refused: the
    // tier orders its moves and the job's work on the host instead (and a
    // block coming ahead takes no kept block's memory whose free is not
    // reached: the job's thread would wait for it).
    let refused = [
        ("FAKE_CUDA_LINK_MIB_PER_S", "2000"),
        ("FAKE_CUDA_REFUSE_STREAM_WAITS", "1"),
    ];
    let run = forward_and_backward(5, true, &refused);
    assert_each_block_held_its_bytes(&run, 5);
    assert!(!run.calls_with(&["refused"]).is_empty(), "{:#?}", run.calls);
}
