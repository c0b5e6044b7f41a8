//! An allocation that waits for room the mover thread's moves out free,
//! on the fake runtime (`VRAMSHARE_MOVES=overlap`; mapping host memory made
//! to take 300 ms, so that the mover's moves end one by one): it goes on as
//! soon as a move has freed enough, not once every move the thread began
//! with it has ended.

mod common;

use common::*;

#[test]
fn an_allocation_waiting_for_room_goes_on_once_one_move_out_has_landed() {
    // Sixteen 2 MiB blocks fill a 32 MiB quota, their fills finished. i
    // (4 MiB) finds no room: two blocks go out for it on the job's thread,
    // then two more go to the mover thread, to keep an eighth of the quota
    // (4 MiB) free. j (2 MiB) finds no room either, while the mover's
    // moves end 300 ms apart: the first is enough for it.
    let names: Vec<String> = (0..16).map(|i| format!("b{i}")).collect();
    let mut steps: Vec<String> = names.iter().map(|n| format!("malloc:{n}:2M")).collect();
    for (byte, name) in names.iter().enumerate() {
        steps.push(format!("fill:{name}:{}:1", byte + 1));
    }
    steps.extend(["sync", "malloc:i:4M", "malloc:j:2M", "sync"].map(String::from));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = moving_beside("32MiB", &[("FAKE_CUDA_HOST_ACCESS_DELAY_MS", "300")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let j = run.field("malloc j", "ptr");
    let events = run.trace()["events"].as_array().unwrap().clone();
    let made_j = events
        .iter()
        .position(|e| e["op"] == "alloc" && hex(&j) == ptr_of(e))
        .expect("j's allocation in the trace");
    assert_eq!(
        events[made_j]["placement"], "device",
        "{:#}",
        events[made_j]
    );
    // The mover's second move out ended after j was handed out.
    let demotes_after = events[made_j..]
        .iter()
        .filter(|e| e["op"] == "demote" && e["rc"].as_i64().unwrap_or(0) == 0)
        .count();
    assert!(demotes_after >= 1, "{events:#?}");
    let moves = run.moves();
    assert!(moves["mover_moves"].as_u64().unwrap() >= 2, "{moves:#}");
    // And never above the quota.
    let peak = run.trace()["processes"][0]["peak_device"]["0"].as_u64();
    assert!(peak.unwrap() <= 32 * MIB, "{peak:?}");
}
