//! The report's access section: how much of what the launches touched the
//! shim could attribute, and the hottest and coldest blocks by bytes times
//! uses per step, with where they live.

use vramshare_common::size::human_bytes;
use vramshare_common::trace_json::{AccessJson, BlockAccessJson, ProcessJson};

use crate::show::escaped;

/// Blocks listed in each of the hottest and coldest tables.
const LISTED: usize = 10;

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.0}%", part as f64 * 100.0 / whole as f64)
}

/// The section, or nothing for a process that launched nothing.
pub fn access_section(process: &ProcessJson) -> String {
    let mut out = String::new();
    if !process.coverage.is_empty() {
        let launches: u64 = process.launches.values().sum();
        let kernel_coverage: Vec<_> = process
            .coverage
            .iter()
            .filter(|(api, _)| process.launches.contains_key(*api))
            .collect();
        let attributed: u64 = kernel_coverage
            .iter()
            .map(|(_, c)| c.named + c.unnamed + c.in_library)
            .sum();
        out.push_str(&format!(
            "  Access: {launches} launches, {} read for operands (their parameters, or the library call they were made for)\n",
            percent(attributed, launches)
        ));
        for (api, c) in &process.coverage {
            let all = c.named + c.unnamed + c.undecoded + c.in_library;
            out.push_str(&format!(
                "    {:<34} {all:>10}  named blocks {:>4}  named none {:>4}  undecoded {:>4}  in library calls {:>4}\n",
                escaped(api),
                percent(c.named, all),
                percent(c.unnamed, all),
                percent(c.undecoded, all),
                percent(c.in_library, all),
            ));
        }
    }
    if let Some(access) = &process.access {
        out.push_str(&profile(access));
    }
    out
}

fn profile(access: &AccessJson) -> String {
    let found = access.steps >= 2;
    let how = if access.marked {
        "marked by the job".to_string()
    } else if access.step_launches > 0 {
        format!(
            "found from the launch sequence, {} launches each",
            access.step_launches
        )
    } else {
        "none found".to_string()
    };
    let mut out = format!("    steps: {} ({how})\n", access.steps);
    if access.uses > 0 {
        out.push_str(&format!(
            "    uses of blocks: {}, {} of them found their block in host memory ({})\n",
            access.uses,
            access.uses_in_host,
            percent(access.uses_in_host, access.uses)
        ));
    }
    if let Some(step) = &access.last_step {
        out.push_str(&format!(
            "    last complete step ({}): launches named {} of the {} live ({}); by kernels' parameters {}, by library calls {}, by copies {}\n",
            step.step,
            human_bytes(step.touched_bytes),
            human_bytes(step.live_bytes),
            percent(step.touched_bytes, step.live_bytes),
            human_bytes(step.touched_by_kernels),
            human_bytes(step.touched_by_libraries),
            human_bytes(step.touched_by_copies),
        ));
    }
    let per_step = |b: &BlockAccessJson| b.uses_per_step(found);
    let weight = |b: &BlockAccessJson| b.size as u128 * per_step(b) as u128;
    let mut hottest: Vec<&BlockAccessJson> =
        access.blocks.iter().filter(|b| per_step(b) > 0).collect();
    hottest.sort_by_key(|b| std::cmp::Reverse(weight(b)));
    let mut coldest: Vec<&BlockAccessJson> = access
        .blocks
        .iter()
        .filter(|b| b.placement != "freed")
        .collect();
    coldest.sort_by_key(|b| (per_step(b), std::cmp::Reverse(b.size)));
    let unit = if found { "uses/step" } else { "uses" };
    for (title, blocks) in [("Hottest", hottest), ("Coldest", coldest)] {
        if blocks.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "    {title} blocks (bytes x {unit}):\n      {:<16} {:>10}  {:<9} {:>9}  {:>11}  {:>13}  {:<14}  via\n",
            "block", "size", "placement", unit, "steps used", "first-last", "stream"
        ));
        for block in blocks.iter().take(LISTED) {
            let span = block
                .last_step
                .as_ref()
                .map_or("-".to_string(), |s| format!("{}-{}", s.first, s.last));
            out.push_str(&format!(
                "      {:<16} {:>10}  {:<9} {:>9}  {:>11}  {:>13}  {:<14}  {}\n",
                escaped(&block.ptr),
                human_bytes(block.size),
                escaped(&block.placement),
                per_step(block),
                format!("{}/{}", block.steps_used, block.steps_alive),
                span,
                escaped(&block.stream),
                escaped(&block.via.join(",")),
            ));
        }
    }
    out
}
