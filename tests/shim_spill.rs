//! Spilling and promotion under the shim: what goes over the quota lands in
//! host-placed managed memory with CUDA 12's or 13's advice (or, with spill
//! off, is refused), how much of a spilled block stays on the device, and how
//! freed room brings spilled blocks back. C programs on the fake runtime, as
//! in shim.rs.

mod common;

use common::*;
use serde_json::Value;

/// The advice calls the fake runtime logged for `ptr`, in order, as (size, advice, location).
fn advice_for(run: &Run, ptr: u64) -> Vec<(u64, u32, String)> {
    run.calls
        .iter()
        .filter(|c| c.contains("cudaMemAdvise") && c.contains(&format!("ptr={ptr:#x} ")))
        .map(|c| {
            assert_eq!(log_field(c, "rc"), "0", "{c}");
            (
                log_field(c, "size").parse().unwrap(),
                log_field(c, "advice").parse().unwrap(),
                log_field(c, "loc"),
            )
        })
        .collect()
}

fn assert_spilled_with_advice(run: &Run, abi: &str) {
    run.assert_ok();
    assert_eq!(run.rc("malloc a"), 0);
    assert_eq!(
        run.rc("malloc b"),
        0,
        "over quota with spill host still succeeds"
    );
    assert_eq!(
        run.line("touch b"),
        "touch b ok",
        "the spilled block is usable memory"
    );
    let b = hex(&run.field("malloc b", "ptr"));
    let managed = run.calls_with(&[
        "cudaMallocManaged",
        &format!("size={}", 16 * MIB),
        "flags=1",
    ]);
    assert_eq!(managed.len(), 1, "{:#?}", run.calls);
    assert_eq!(
        run.calls_with(&["cudaMemAdvise", &format!("abi={abi}")])
            .len(),
        2,
        "the {abi} form"
    );
    assert_eq!(
        advice_for(run, b),
        vec![
            (16 * MIB, 3, "host".to_string()),
            (16 * MIB, 5, "device:0".to_string())
        ],
        "preferred location host, accessed by the device"
    );
    let spilled: Vec<Value> = run
        .events("alloc")
        .into_iter()
        .filter(|e| e["placement"] == "host")
        .collect();
    assert_eq!(spilled.len(), 1);
    assert_eq!(spilled[0]["size"], 16 * MIB);
    let process = &run.trace()["processes"][0];
    assert_eq!(process["peak_spilled"]["0"], 16 * MIB);
    assert_eq!(process["peak_device"]["0"], 32 * MIB);
    assert_eq!(process["counts"]["0"]["spills"], 1);
}

fn spill_run(runtime: Runtime) -> Run {
    // a fills the quota: no room is left for any of b.
    let steps = [
        "malloc:a:32M",
        "malloc:b:16M",
        "touch:b",
        "free:b",
        "free:a",
    ];
    client(runtime, &[("VRAMSHARE_QUOTA", Q32)], &steps)
}

#[test]
fn over_quota_spills_to_host_with_cuda13_advice() {
    let run = spill_run(Runtime::Fake13);
    assert_spilled_with_advice(&run, "13");
    assert_eq!(run.trace()["processes"][0]["runtime_version"], 13000);
}

#[test]
fn over_quota_spills_to_host_with_cuda12_advice() {
    let run = spill_run(Runtime::Fake12);
    assert_spilled_with_advice(&run, "12");
    assert_eq!(run.trace()["processes"][0]["runtime_version"], 12080);
}

#[test]
fn room_left_under_the_quota_keeps_a_spilled_blocks_head_on_the_device() {
    for runtime in [Runtime::Fake13, Runtime::Fake12] {
        let run = client(
            runtime,
            &[("VRAMSHARE_QUOTA", Q32)],
            &[
                "malloc:a:16M",
                "malloc:b:24M",
                "touch:b",
                "meminfo",
                "malloc:c:4M",
                "free:a",
                "meminfo",
                "touch:b",
                "free:b",
                "free:c",
            ],
        );
        run.assert_ok();
        let b = hex(&run.field("malloc b", "ptr"));
        // 16M of room, less a quarter of the quota kept free: b's first 8M
        // prefer the device; its other 16M live on the host, mapped for it.
        assert_eq!(
            advice_for(&run, b),
            [(8 * MIB, 3, "device:0".to_string())],
            "{runtime:?}"
        );
        assert_eq!(
            advice_for(&run, b + 8 * MIB)[..2],
            [
                (16 * MIB, 3, "host".to_string()),
                (16 * MIB, 5, "device:0".to_string())
            ]
        );
        assert_eq!(
            run.meminfo()[0],
            (8 * MIB, 32 * MIB),
            "the quarter kept free is there for later allocations"
        );
        assert_eq!(
            run.allocations()[2],
            ("cudaMalloc".to_string(), "device".to_string()),
            "c found it"
        );
        let b_alloc = &run.events("alloc")[1];
        assert_eq!(
            (&b_alloc["placement"], &b_alloc["device_part"]),
            (&"host".into(), &(8 * MIB).into()),
            "the trace says how much of b is on the device"
        );
        // Freeing a promotes b's host part (its tail), not the whole block.
        let promoted = run.events("promote");
        assert_eq!(promoted.len(), 1);
        assert_eq!(
            (
                hex(promoted[0]["ptr"].as_str().unwrap()),
                promoted[0]["size"].as_u64().unwrap()
            ),
            (b, 16 * MIB)
        );
        assert_eq!(
            advice_for(&run, b + 8 * MIB)[2],
            (16 * MIB, 3, "device:0".to_string())
        );
        let tail = format!("ptr={:#x}", b + 8 * MIB);
        assert_eq!(
            run.calls_with(&[
                "cudaMemPrefetchAsync",
                &tail,
                &format!("size={}", 16 * MIB),
                "loc=device:0"
            ])
            .len(),
            1
        );
        assert_eq!(
            run.meminfo()[1],
            (4 * MIB, 32 * MIB),
            "b, all 24M of it, and c on the device"
        );
        let process = &run.trace()["processes"][0];
        assert_eq!(process["peak_device"]["0"], 28 * MIB);
        assert_eq!(process["peak_spilled"]["0"], 16 * MIB);
        assert_eq!(process["device_in_use"]["0"], 0);
        assert_eq!(process["spilled_in_use"]["0"], 0);
    }
}

#[test]
fn spill_off_answers_out_of_memory() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", Q32), ("VRAMSHARE_SPILL", "off")],
        &["malloc:a:24M", "malloc:b:16M", "malloc:c:8M", "meminfo"],
    );
    run.assert_ok();
    assert_eq!(run.rc("malloc b"), 2, "cudaErrorMemoryAllocation");
    assert_eq!(run.rc("malloc c"), 0, "what still fits is allocated");
    assert!(run.calls_with(&["cudaMallocManaged"]).is_empty());
    assert_eq!(
        run.calls_with(&["cudaMalloc"]).len(),
        2,
        "the refused call never reached CUDA"
    );
    let rejects = run.events("reject");
    assert_eq!(rejects.len(), 1);
    assert_eq!(rejects[0]["rc"], 2);
    assert_eq!(rejects[0]["size"], 16 * MIB);
    assert_eq!(run.number("meminfo", "free"), 0);
    let process = &run.trace()["processes"][0];
    assert_eq!(process["counts"]["0"]["rejections"], 1);
    assert_eq!(process["spill"], "off");
}

#[test]
fn freed_room_promotes_spilled_blocks_largest_first() {
    let steps = [
        "malloc:a:32M",
        "malloc:b:16M",
        "malloc:d:8M",
        "free:a",
        "malloc:c:14M",
        "meminfo",
        "free:b",
        "free:d",
        "free:c",
    ];
    let run = client(Runtime::Fake13, &[("VRAMSHARE_QUOTA", Q32)], &steps);
    run.assert_ok();
    // a fills the quota: b and d spill whole. Freeing a makes 32M of room: b
    // (16M) and then d (8M) are promoted, largest first. c (14M) finds 8M of
    // room, the quarter of the quota a split leaves free: it spills whole.
    // Freeing b then makes room for c, promoted in turn.
    let [b, c, d] = ["b", "c", "d"].map(|n| hex(&run.field(&format!("malloc {n}"), "ptr")));
    let promoted: Vec<(u64, u64)> = run
        .events("promote")
        .iter()
        .map(|p| (hex(p["ptr"].as_str().unwrap()), p["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(promoted, vec![(b, 16 * MIB), (d, 8 * MIB), (c, 14 * MIB)]);
    assert!(run
        .events("promote")
        .iter()
        .all(|p| p["placement"] == "device" && p["rc"] == 0));
    assert_eq!(
        run.calls_with(&["cudaStreamCreateWithFlags", "flags=1"])
            .len(),
        1,
        "one non-blocking stream of the shim's own"
    );
    for (ptr, size) in [(b, 16 * MIB), (d, 8 * MIB), (c, 14 * MIB)] {
        let words = [format!("ptr={ptr:#x}"), format!("size={size}")];
        assert_eq!(
            run.calls_with(&[
                "cudaMemAdvise",
                &words[0],
                &words[1],
                "advice=3",
                "loc=device:0"
            ])
            .len(),
            1
        );
        assert_eq!(
            run.calls_with(&[
                "cudaMemPrefetchAsync",
                &words[0],
                &words[1],
                "loc=device:0",
                "stream=own"
            ])
            .len(),
            1,
            "{:#?}",
            run.calls
        );
    }
    let c_alloc = run
        .events("alloc")
        .into_iter()
        .find(|e| hex(e["ptr"].as_str().unwrap()) == c)
        .unwrap();
    assert_eq!(c_alloc["placement"], "host");
    assert!(c_alloc.get("device_part").is_none(), "spilled whole");
    assert_eq!(run.meminfo(), vec![(8 * MIB, 32 * MIB)]);
    assert_eq!(run.rc("free b"), 0);
    assert_eq!(
        run.rc("free c"),
        0,
        "a promoted block is freed like any other"
    );
    let process = &run.trace()["processes"][0];
    assert_eq!(process["leaked"], Value::Array(vec![]));
    assert_eq!(process["device_in_use"]["0"], 0);
    assert_eq!(process["spilled_in_use"]["0"], 0);
}

#[test]
fn only_blocks_that_fit_are_promoted() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", Q32)],
        &[
            "malloc:a:20M",
            "malloc:k:10M",
            "malloc:b:16M",
            "malloc:d:8M",
            "free:a",
        ],
    );
    run.assert_ok();
    // After a is freed, 22M of room: b (16M) fits, then d (8M) no longer does.
    let promotions = run.events("promote");
    assert_eq!(promotions.len(), 1);
    assert_eq!(
        hex(promotions[0]["ptr"].as_str().unwrap()),
        hex(&run.field("malloc b", "ptr"))
    );
    let process = &run.trace()["processes"][0];
    assert_eq!(process["device_in_use"]["0"], 26 * MIB);
    assert_eq!(process["spilled_in_use"]["0"], 8 * MIB);
}

#[test]
fn callers_managed_memory_counts_while_it_fits_then_lives_on_the_host() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", Q32), ("VRAMSHARE_SPILL", "off")],
        &[
            "managed:a:32M",
            "meminfo",
            "managed:b:16M",
            "touch:b",
            "free:b",
            "free:a",
        ],
    );
    run.assert_ok();
    assert_eq!(
        run.number("meminfo", "free"),
        0,
        "the caller's managed memory counts"
    );
    assert_eq!(
        run.rc("managed b"),
        0,
        "managed memory may live on the host even with spill off"
    );
    let b = format!("ptr={}", run.field("managed b", "ptr"));
    assert_eq!(
        run.calls_with(&["cudaMemAdvise", &b, "advice=3", "loc=host"])
            .len(),
        1
    );
    let placements: Vec<Value> = run
        .events("alloc")
        .iter()
        .map(|e| e["placement"].clone())
        .collect();
    assert_eq!(placements, vec!["device", "host"]);
}

#[test]
fn exporting_a_block_spilled_to_managed_memory_is_refused_and_says_why() {
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "4MiB"),
            ("VRAMSHARE_MOVES", "off"),
            ("VRAMSHARE_LOG", "warn"),
        ],
        &["malloc:a:2M", "malloc:b:8M", "ipc:b", "ipc:a"],
    );
    run.assert_ok();
    assert_eq!(
        run.allocations().last(),
        Some(&("cudaMalloc".to_string(), "host".to_string()))
    );
    assert_ne!(run.rc("ipc b"), 0, "CUDA's own refusal, passed on");
    assert!(
        run.stderr.contains("managed memory") && run.stderr.contains("VRAMSHARE_SPILL=off"),
        "{}",
        run.stderr
    );
    assert_eq!(run.rc("ipc a"), 0, "a block on the device exports");
}
