//! Trace JSON: any text is parsed or refused without a panic, and a trace
//! that parses writes out to JSON that parses back to the same trace; the
//! same for valid traces cut, spliced and with fields replaced.

use proptest::prelude::*;
use vramshare_common::trace_json::{TraceJson, SCHEMA};

/// A trace with every kind of field, as the shim and `dump` write them.
const VALID: &str = r#"{ "schema": "vramshare-trace/1", "job": "j", "events_lost": 3,
  "processes": [ { "pid": 1234, "cmdline": "python train.py", "quota": {"0": 8589934592},
    "spill": "host", "peak_device": {"0": 1}, "peak_spilled": {"0": 0},
    "device_in_use": {"1": 5}, "spilled_in_use": {}, "counts": {"0": {"allocations": 1,
    "spills": 0, "promotions": 2, "rejections": 3}}, "events_dropped": 4,
    "runtime": "libcudart.so.13", "runtime_version": 13000,
    "leaked": [ {"ptr": "0x10", "size": 4096, "device": 1, "placement": "host", "api": "cudaMalloc"} ] } ],
  "events": [ { "seq": 7, "t_ns": 123456789, "pid": 1234, "tid": 1240, "device": 0,
    "op": "alloc", "api": "cudaMallocManaged", "ptr": "0x7f00", "size": 50331648,
    "placement": "host", "rc": 0, "device_part": 2097152 },
    { "seq": 8, "t_ns": 5, "pid": 1, "tid": 1, "device": -1, "op": "free", "api": "x",
    "ptr": "zz", "size": 0, "placement": null, "rc": -2 } ] }"#;

/// Parsing never panics; what parses survives a write and a read, and
/// the helpers on its events answer.
fn check(text: &str) -> Result<(), TestCaseError> {
    if let Ok(trace) = TraceJson::parse(text) {
        prop_assert_eq!(&trace.schema, SCHEMA);
        let written = serde_json::to_string(&trace).unwrap();
        prop_assert_eq!(TraceJson::parse(&written), Ok(trace.clone()));
        for event in &trace.events {
            let _ = (
                event.op(),
                event.api(),
                event.placement(),
                event.ptr_value(),
            );
            prop_assert!(event.spilled_bytes() <= event.size);
        }
    }
    Ok(())
}

/// Ways to damage a trace: cut it, splice text in, replace a value.
#[derive(Debug, Clone)]
enum Mutation {
    Cut(usize, usize),
    Insert(usize, String),
    Replace(usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let token = prop_oneof![
        Just("-1".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1e400".to_string()),
        Just("null".to_string()),
        Just("\"\\ud800\"".to_string()),
        Just("[".to_string()),
        Just("{}".to_string()),
        Just("\"schema\": \"x\"".to_string()),
        "[ -~]{0,8}",
        ".{0,4}",
    ];
    prop_oneof![
        (any::<usize>(), 0..40usize).prop_map(|(at, len)| Mutation::Cut(at, len)),
        (any::<usize>(), token.clone()).prop_map(|(at, t)| Mutation::Insert(at, t)),
        (any::<usize>(), token).prop_map(|(at, t)| Mutation::Replace(at, t)),
    ]
}

/// The nearest character boundary at or before `at % (len + 1)`.
fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &mut String, mutation: &Mutation) {
    match mutation {
        Mutation::Cut(at, len) => {
            let start = boundary(text, *at);
            let end = boundary(text, start + len);
            if end >= start {
                text.replace_range(start..end, "");
            }
        }
        Mutation::Insert(at, token) => text.insert_str(boundary(text, *at), token),
        // A value: from after a ':' to the next ',' or '}'.
        Mutation::Replace(at, token) => {
            let from = boundary(text, *at);
            if let Some(colon) = text[from..].find(':').map(|i| from + i + 1) {
                let end = text[colon..]
                    .find([',', '}'])
                    .map_or(text.len(), |i| colon + i);
                text.replace_range(colon..end, token);
            }
        }
    }
}

#[test]
fn the_valid_trace_is_valid() {
    let trace = TraceJson::parse(VALID).unwrap();
    assert_eq!(trace.events.len(), 2);
    assert_eq!(trace.events[0].spilled_bytes(), 50331648 - 2097152);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_text_is_parsed_or_refused(text in prop_oneof![".*", "[\\[\\]{}\":,0-9a-z -]{0,64}"]) {
        check(&text)?;
    }

    #[test]
    fn damaged_traces_are_parsed_or_refused(mutations in proptest::collection::vec(mutation(), 1..6)) {
        let mut text = VALID.to_string();
        for mutation in &mutations {
            apply(&mut text, mutation);
        }
        check(&text)?;
    }

    /// Deep nesting is refused (serde_json's recursion limit), not a stack
    /// overflow.
    #[test]
    fn deep_nesting_is_refused(depth in 100..20_000usize, open in prop_oneof![Just("["), Just("{\"a\":")]) {
        let text = format!("{{\"schema\": \"{SCHEMA}\", \"processes\": {}", open.repeat(depth));
        prop_assert!(TraceJson::parse(&text).is_err());
    }
}
