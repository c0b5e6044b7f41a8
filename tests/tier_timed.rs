//! The tier on the fake runtime with its cost model on: the driver's
//! copies then run asynchronously on streams beside the kernels, taking the
//! link's time, as a GPU runs them, so that a move finished before its copy
//! landed, or a kernel let run before a copy of its block, shows up as wrong
//! bytes or as a fault.

mod common;

use common::*;

/// The fake's costs, scaled down from `bench/fake-training`'s so that a run
/// takes a few seconds: kernels 200 us, the link 2000 MiB/s each way.
const COSTS: [(&str, &str); 4] = [
    ("FAKE_CUDA_KERNEL_US", "200"),
    ("FAKE_CUDA_LINK_MIB_PER_S", "2000"),
    ("FAKE_CUDA_REMAP_US_PER_MIB", "80"),
    ("FAKE_CUDA_IN_PLACE_CROSSINGS", "16"),
];

/// A training loop in miniature, marked, under `quota`: six weights of 4
/// MiB; a forward making fifteen activations (72 MiB) in stream order, each
/// layer writing its weight and its activation; a backward writing each
/// again in reverse and freeing it; an optimizer writing each weight. Every
/// layer's work is waited for only at the step's end, so moves overlap
/// queued kernels. Then each weight is copied out and its bytes counted.
fn training(quota: &str) -> Run {
    training_with(quota, &[])
}

/// As [`training`], with more of the fake's costs.
fn training_with(quota: &str, more: &[(&'static str, &'static str)]) -> Run {
    let activations = [8u64, 8, 8, 8, 6, 6, 6, 4, 4, 4, 2, 2, 2, 2, 2];
    let mut all: Vec<String> = (0..6).map(|w| format!("malloc:w{w}:4M")).collect();
    all.extend((0..6).map(|w| format!("fill:w{w}:1:1")));
    all.push("sync".into());
    let mut step = vec!["step".to_string()];
    for (layer, mib) in activations.iter().enumerate() {
        step.extend([
            format!("async:a{layer}:{mib}M:1"),
            format!("fill:w{}:{}:1", layer % 6, layer + 1),
            format!("fill:a{layer}:{}:1", layer + 1),
        ]);
    }
    for layer in (0..activations.len()).rev() {
        step.extend([
            format!("fill:w{}:{}:1", layer % 6, layer + 1),
            format!("fill:a{layer}:{}:1", layer + 101),
            format!("freeasync:a{layer}:1"),
        ]);
    }
    step.extend((0..6).map(|w| format!("fill:w{w}:{}:1", w + 50)));
    step.push("sync".into());
    all.push(format!("repeat:6:{}", step.len()));
    all.extend(step);
    for w in 0..6 {
        all.extend([
            format!("copyout:w{w}:1"),
            "sync".into(),
            format!("hostcount:{}", w + 50),
        ]);
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let mut costs = COSTS.to_vec();
    costs.extend_from_slice(more);
    let run = client(Runtime::Fake13, &moving_beside(quota, &costs), &all);
    run.assert_ok();
    run
}

/// For each weight, how many of its bytes copied out at the end differ from
/// what the optimizer's last kernel wrote.
fn wrong_bytes(run: &Run) -> Vec<u64> {
    run.stdout
        .lines()
        .filter(|l| l.starts_with("hostcount "))
        .map(|l| {
            assert_eq!(log_field(l, "size"), (4 * MIB).to_string(), "{l}");
            log_field(l, "differ").parse().unwrap()
        })
        .collect()
}

#[test]
fn with_copies_beside_the_kernels_every_block_holds_its_last_bytes() {
    for (quota, over_peak) in [("72MiB", 24), ("48MiB", 48)] {
        let run = training(quota);
        assert_eq!(
            wrong_bytes(&run),
            vec![0; 6],
            "under {quota}:\n{}",
            run.stderr
        );
        // The bytes over the quota at each step's peak go out each step.
        let sample = run.last_sample();
        assert!(
            sample["bytes_to_host"].as_u64().unwrap() >= 6 * over_peak * MIB,
            "under {quota}, moves: {sample}"
        );
        assert!(
            !run.calls_with(&["cuStreamCreate", "streams=runtime's"])
                .is_empty(),
            "the driver's copies ran at once"
        );
    }
}

/// The fake's costs of the virtual memory API, as the replay of a GPU run
/// sets them (`bench/trace-loop`), reach the tier's own counters: pinning
/// host memory takes its time a MiB; and with setting access costing,
/// launches waiting for the copy under way, the bytes still come out right.
#[test]
fn the_fakes_memory_costs_hold_the_calls_that_make_them() {
    let more = [
        ("FAKE_CUDA_PIN_US_PER_MIB", "500"),
        ("FAKE_CUDA_ACCESS_US", "100"),
        ("FAKE_CUDA_HOST_ACCESS_US_PER_MIB", "50"),
        ("FAKE_CUDA_LAUNCH_WAITS_FOR_COPY", "1"),
    ];
    let run = training_with("48MiB", &more);
    assert_eq!(wrong_bytes(&run), vec![0; 6], "{}", run.stderr);
    let moves = run.moves();
    let pinned_mib = moves["pinned_bytes"].as_u64().unwrap() / MIB;
    let pinning_ms = moves["pinning_seconds"].as_f64().unwrap() * 1e3;
    assert!(pinned_mib >= 24, "{moves:#}");
    assert!(
        pinning_ms >= pinned_mib as f64 * 0.5,
        "{pinned_mib} MiB pinned in {pinning_ms} ms"
    );
}

/// The fake runtime's events behave as CUDA's where the tier relies on
/// them: a stream made to wait for an event waits for the record latest at
/// the wait, even once the event is recorded again on a stream that runs
/// ahead. (The tier passes an event on to other copies once the work that
/// needs it waits for it, and a fake whose waits followed the newest record
/// let a copy out read a block before the kernel writing it had run.)
#[test]
fn a_wait_holds_for_the_record_it_was_made_after() {
    let costs = [("FAKE_CUDA_KERNEL_US", "100000")];
    let run = client(
        Runtime::Fake13,
        &costs,
        &[
            "malloc:a:1M",
            "fill:a:1:1",
            "record:1",
            "waitevent:2",
            "record:3",
            "copyout:a:2",
            "sync",
            "hostbytes",
        ],
    );
    run.assert_ok();
    assert_eq!(
        run.field("hostbytes", "first"),
        "1",
        "the copy on stream 2 ran before the kernel it waited for"
    );
}
