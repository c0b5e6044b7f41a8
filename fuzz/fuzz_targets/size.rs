//! Sizes and quotas from any text: parsed or refused with a short message,
//! and a lone limit means the same to both parsers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramshare_common::size::{human_bytes, parse_limit, parse_quota, Limit, Quota};

fuzz_target!(|text: &str| {
    let limit = parse_limit(text);
    let quota = parse_quota(text);
    for error in [limit.as_ref().err(), quota.as_ref().err()]
        .into_iter()
        .flatten()
    {
        assert!(error.chars().count() <= 200, "{error}");
    }
    if !text.contains('=') {
        assert_eq!(quota, limit.clone().map(Quota::All));
    }
    if let Ok(Limit::Bytes(bytes)) = limit {
        let _ = parse_limit(&human_bytes(bytes));
    }
    if let Ok(Quota::PerDevice(list)) = &quota {
        for (device, limit) in list {
            assert_eq!(quota.as_ref().unwrap().for_device(*device), Some(*limit));
        }
    }
});
