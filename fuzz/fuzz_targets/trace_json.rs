//! Trace JSON from any text: parsed or refused, and what parses writes out
//! to JSON that parses back to the same trace.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramshare_common::trace_json::TraceJson;

fuzz_target!(|text: &str| {
    let Ok(trace) = TraceJson::parse(text) else {
        return;
    };
    let written = serde_json::to_string(&trace).unwrap();
    assert_eq!(TraceJson::parse(&written), Ok(trace.clone()));
    for event in &trace.events {
        let _ = (
            event.op(),
            event.api(),
            event.placement(),
            event.ptr_value(),
        );
        assert!(event.spilled_bytes() <= event.size);
    }
});
