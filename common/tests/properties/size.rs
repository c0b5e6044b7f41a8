//! Sizes and quotas: any text is parsed or refused with a short message,
//! and what vramshare itself writes (numbers, units, `human_bytes`, quota
//! lists) parses back to the same value.

use proptest::prelude::*;
use vramshare_common::size::{human_bytes, parse_limit, parse_quota, Limit, Quota, MAX_DEVICES};

const UNITS: [(&str, u64); 13] = [
    ("", 1),
    ("b", 1),
    ("k", 1 << 10),
    ("kib", 1 << 10),
    ("m", 1 << 20),
    ("mib", 1 << 20),
    ("g", 1 << 30),
    ("gib", 1 << 30),
    ("t", 1 << 40),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
];

/// A unit from the table in any mix of cases, with its multiplier.
fn unit() -> impl Strategy<Value = (String, u64)> {
    (
        proptest::sample::select(&UNITS[..]),
        proptest::collection::vec(any::<bool>(), 3),
    )
        .prop_map(|((unit, multiplier), upper)| {
            let text = unit
                .chars()
                .zip(upper.iter().cycle())
                .map(|(c, up)| if *up { c.to_ascii_uppercase() } else { c })
                .collect();
            (text, multiplier)
        })
}

fn spaces() -> impl Strategy<Value = String> {
    "[ \t]{0,2}"
}

/// A limit as `parse_limit` returns it, with a text that says it.
fn limit() -> impl Strategy<Value = (String, Limit)> {
    prop_oneof![
        (any::<u64>(), unit()).prop_filter_map("fits", |(n, (unit, m))| {
            n.checked_mul(m)
                .map(|bytes| (format!("{n}{unit}"), Limit::Bytes(bytes)))
        }),
        (0.0..=100.0f64).prop_map(|p| (format!("{p}%"), Limit::Percent(p))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Never a panic, and a message short enough to read whatever the input.
    #[test]
    fn any_text_is_parsed_or_refused_briefly(text in prop_oneof![".*", "[0-9.%=, kKmMgGtTiIbB+-]{0,40}", "[0-9]{15,30}[kmgt]?"]) {
        for error in [parse_limit(&text).err(), parse_quota(&text).err()].into_iter().flatten() {
            prop_assert!(error.chars().count() <= 200, "{}", error);
        }
    }

    #[test]
    fn very_long_values_are_cut_in_messages(text in ".{65,200}", repeat in 1..200usize) {
        let long = text.repeat(repeat);
        for error in [parse_limit(&long).err(), parse_quota(&long).err()].into_iter().flatten() {
            prop_assert!(error.chars().count() <= 200, "{}", error);
        }
    }

    #[test]
    fn whole_numbers_with_a_unit_are_exact(
        n in prop_oneof![any::<u64>(), 0..10_000u64],
        (unit, multiplier) in unit(),
        (before, inside, after) in (spaces(), spaces(), spaces()),
    ) {
        let text = format!("{before}{n}{inside}{unit}{after}");
        match n.checked_mul(multiplier) {
            Some(bytes) => prop_assert_eq!(parse_limit(&text), Ok(Limit::Bytes(bytes))),
            None => prop_assert!(parse_limit(&text).unwrap_err().contains("does not fit in 64 bits")),
        }
    }

    #[test]
    fn negative_values_are_called_negative(text in "[0-9.]{1,10}[a-zA-Z%]{0,3}") {
        let error = parse_limit(&format!("-{text}")).unwrap_err();
        prop_assert!(error.ends_with("is negative: a size is 0 or more"), "{}", error);
    }

    /// What `human_bytes` prints reads back within its rounding (2 decimals
    /// of at least 1 unit: half a percent).
    #[test]
    fn human_sizes_read_back(bytes in prop_oneof![any::<u64>(), 0..1u64 << 20, 0..1u64 << 44]) {
        let text = human_bytes(bytes);
        match parse_limit(&text) {
            Ok(Limit::Bytes(back)) => {
                let error = (back as f64 - bytes as f64).abs();
                prop_assert!(error <= bytes as f64 * 0.005, "{} read as {}", text, back);
                if bytes < 1024 {
                    prop_assert_eq!(back, bytes);
                }
            }
            // 16 EiB shows as 16777216.00 TiB, a hair over 64 bits after rounding.
            Err(error) => prop_assert!(bytes > u64::MAX - (u64::MAX / 100) && error.contains("64 bits"), "{}: {}", text, error),
            other => prop_assert!(false, "{} read as {:?}", text, other),
        }
    }

    #[test]
    fn shares_read_back_exactly(share in 0.0..=100.0f64, (before, after) in (spaces(), spaces())) {
        prop_assert_eq!(parse_limit(&format!("{before}{share}{after}%")), Ok(Limit::Percent(share)));
    }

    /// A list of distinct devices with their limits parses to that list, in
    /// order; a lone limit applies to every device.
    #[test]
    fn quota_lists_parse_to_the_devices_given(
        devices in Just((0..MAX_DEVICES as u32).collect::<Vec<_>>()).prop_shuffle(),
        limits in proptest::collection::vec(limit(), 1..=MAX_DEVICES),
        space in spaces(),
    ) {
        let list: Vec<(u32, String, Limit)> = devices
            .iter()
            .zip(&limits)
            .map(|(d, (text, limit))| (*d, text.clone(), *limit))
            .collect();
        let text = list
            .iter()
            .map(|(d, limit, _)| format!("{space}{d}{space}={space}{limit}{space}"))
            .collect::<Vec<_>>()
            .join(",");
        let quota = parse_quota(&text).map_err(TestCaseError::fail)?;
        let expected: Vec<(u32, Limit)> = list.iter().map(|(d, _, l)| (*d, *l)).collect();
        prop_assert_eq!(&quota, &Quota::PerDevice(expected));
        for device in 0..MAX_DEVICES as u32 + 2 {
            let given = list.iter().find(|(d, _, _)| *d == device).map(|(_, _, l)| *l);
            prop_assert_eq!(quota.for_device(device), given);
        }
        let (one, limit) = &limits[0];
        prop_assert_eq!(parse_quota(one), Ok(Quota::All(*limit)));
        // The same device twice is refused, naming it.
        let (d, t, _) = &list[0];
        let twice = format!("{text},{d}={t}");
        prop_assert_eq!(parse_quota(&twice), Err(format!("device {d} is listed twice")));
    }
}
