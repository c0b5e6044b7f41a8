//! Sizes and quotas as people write them (`8GiB`, `50%`, `0=8GiB,1=4GiB`),
//! for the shim's `VRAMSHARE_QUOTA` and the command's `--quota` alike.

/// Device ordinals vramshare keeps state for (the process's own view, after
/// `CUDA_VISIBLE_DEVICES`).
pub const MAX_DEVICES: usize = 16;

/// A device number in the process's own numbering (after
/// `CUDA_VISIBLE_DEVICES`), below [`MAX_DEVICES`]: an index into every
/// per-device table that cannot be out of range, since it is checked once,
/// where it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Device(u8);

impl Device {
    /// Device `number`, if it is below [`MAX_DEVICES`].
    pub fn new(number: u32) -> Option<Device> {
        (number < MAX_DEVICES as u32).then_some(Device(number as u8))
    }

    /// Every device number there can be, in order.
    pub fn all() -> impl Iterator<Item = Device> {
        (0..MAX_DEVICES as u8).map(Device)
    }

    pub fn index(self) -> usize {
        self.0 as usize
    }

    pub fn number(self) -> u32 {
        self.0 as u32
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    Bytes(u64),
    /// A share of the device's total memory, resolved on first use.
    Percent(f64),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum Quota {
    /// No quota: every call passes through and is only traced.
    #[default]
    Unlimited,
    /// One limit for every device.
    All(Limit),
    /// Limits for the listed devices; the others are unlimited.
    PerDevice(Vec<(u32, Limit)>),
}

impl Quota {
    pub fn for_device(&self, device: u32) -> Option<Limit> {
        match self {
            Quota::Unlimited => None,
            Quota::All(limit) => Some(*limit),
            Quota::PerDevice(list) => list.iter().find(|(d, _)| *d == device).map(|(_, l)| *l),
        }
    }
}

/// The message for a setting that cannot be used, as the shim prints it at
/// start and the Slurm plugin at submission.
pub fn invalid_setting(variable: &str, value: &str, reason: &str, forms: &str) -> String {
    format!(
        "vramshare: {variable}={} is not valid ({reason}); accepted forms: {forms}",
        quoted(value)
    )
}

pub const QUOTA_FORMS: &str = "a size such as 8GiB, 8G, 512MiB, 1.5GB or 1048576 (bytes), \
     a share such as 50% of the device, or per device 0=8GiB,1=4GiB";
pub fn parse_quota(text: &str) -> Result<Quota, String> {
    let text = text.trim();
    if !text.contains('=') {
        return parse_limit(text).map(Quota::All);
    }
    let mut list: Vec<(u32, Limit)> = Vec::new();
    for entry in text.split(',') {
        let entry = entry.trim();
        let (device, limit) = entry
            .split_once('=')
            .ok_or_else(|| format!("entry {} is not DEVICE=SIZE", quoted(entry)))?;
        let device: u32 = device
            .trim()
            .parse()
            .map_err(|_| format!("device {} is not a device number", quoted(device.trim())))?;
        if device as usize >= MAX_DEVICES {
            return Err(format!(
                "device {device} is beyond the {MAX_DEVICES} supported"
            ));
        }
        if list.iter().any(|(d, _)| *d == device) {
            return Err(format!("device {device} is listed twice"));
        }
        list.push((device, parse_limit(limit)?));
    }
    Ok(Quota::PerDevice(list))
}

/// `8GiB`, `8G`, `512MiB`, `1.5GB`, `1048576`, `50%`. Binary multiples for
/// `K`/`M`/`G`/`T` and `KiB`..`TiB`, decimal for `KB`..`TB`, case-insensitive.
pub fn parse_limit(text: &str) -> Result<Limit, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty size".to_string());
    }
    if text.starts_with('-') {
        return Err(format!("{} is negative: a size is 0 or more", plain(text)));
    }
    if let Some(number) = text.strip_suffix('%') {
        let number = number.trim();
        let share: f64 = number
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite())
            .ok_or_else(|| format!("{} is not a number", quoted(number)))?;
        // The text as written: `1e300` printed as a float has 301 digits.
        if !(0.0..=100.0).contains(&share) {
            return Err(format!("{}% is outside 0% to 100%", plain(number)));
        }
        return Ok(Limit::Percent(share));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => return Err(format!("unknown unit {}", quoted(other))),
    };
    if number.is_empty() {
        return Err(format!("no number before {}", quoted(unit)));
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .map(Limit::Bytes)
            .ok_or_else(|| format!("{} does not fit in 64 bits", plain(text)));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{} is not a number", quoted(number)))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("{} does not fit in 64 bits", plain(text)));
    }
    Ok(Limit::Bytes(bytes as u64))
}

/// Characters of a value that a message echoes: a whole file pasted by
/// mistake should not fill the terminal, and whoever reads the message
/// will find the rest in what they wrote.
pub const ECHO_CHARS: usize = 64;

/// `text` as a message shows it: control characters escaped (as Rust
/// does), whole if that takes at most [`ECHO_CHARS`] characters, else cut
/// there, followed by "…" and the value's length.
fn plain(text: &str) -> String {
    let (shown, cut) = escaped(text);
    if cut {
        format!("{shown}… ({} characters)", text.chars().count())
    } else {
        shown
    }
}

/// [`plain`], in quotes, so that spaces at either end show.
pub fn quoted(text: &str) -> String {
    let (shown, cut) = escaped(text);
    if cut {
        format!("\"{shown}\"… ({} characters)", text.chars().count())
    } else {
        format!("\"{shown}\"")
    }
}

/// The escaped text, cut between characters (never inside an escape) to
/// at most [`ECHO_CHARS`] characters; whether it was cut.
fn escaped(text: &str) -> (String, bool) {
    let mut shown = String::new();
    let mut length = 0;
    for c in text.chars() {
        // As a string's `{:?}` does: a quote inside double quotes stays.
        let escape = c.escape_debug();
        let escape_len = if c == '\'' { 1 } else { escape.len() };
        if length + escape_len > ECHO_CHARS {
            return (shown, true);
        }
        length += escape_len;
        if c == '\'' {
            shown.push(c);
        } else {
            shown.extend(escape);
        }
    }
    (shown, false)
}

/// A size as people read it: `8.00 GiB`, `512.0 MiB`, `4096 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_every_accepted_form() {
        assert_eq!(parse_limit("8GiB"), Ok(Limit::Bytes(8 << 30)));
        assert_eq!(parse_limit("8G"), Ok(Limit::Bytes(8 << 30)));
        assert_eq!(parse_limit("8g"), Ok(Limit::Bytes(8 << 30)));
        assert_eq!(parse_limit("512MiB"), Ok(Limit::Bytes(512 << 20)));
        assert_eq!(parse_limit("1048576"), Ok(Limit::Bytes(1 << 20)));
        assert_eq!(parse_limit("2KB"), Ok(Limit::Bytes(2000)));
        assert_eq!(parse_limit("1.5GiB"), Ok(Limit::Bytes(3 << 29)));
        assert_eq!(parse_limit(" 4 MiB "), Ok(Limit::Bytes(4 << 20)));
        assert_eq!(parse_limit("0"), Ok(Limit::Bytes(0)));
        assert_eq!(parse_limit("50%"), Ok(Limit::Percent(50.0)));
        assert_eq!(parse_limit("12.5%"), Ok(Limit::Percent(12.5)));
    }

    #[test]
    fn malformed_sizes_say_what_is_wrong() {
        for (text, reason) in [
            ("", "empty size"),
            ("8XB", "unknown unit \"xb\""),
            ("GiB", "no number before \"GiB\""),
            ("1.2.3G", "\"1.2.3\" is not a number"),
            ("-4G", "-4G is negative: a size is 0 or more"),
            ("-0", "-0 is negative: a size is 0 or more"),
            ("150%", "150% is outside 0% to 100%"),
            ("abc%", "\"abc\" is not a number"),
            ("99999999999T", "99999999999T does not fit in 64 bits"),
        ] {
            assert_eq!(parse_limit(text), Err(reason.to_string()), "{text}");
        }
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "x".repeat(100_000);
        let head = "x".repeat(ECHO_CHARS);
        for (text, reason) in [
            (
                format!("1{long}"),
                format!("unknown unit \"{head}\"… (100000 characters)"),
            ),
            (
                format!("{long}%"),
                format!("\"{head}\"… (100000 characters) is not a number"),
            ),
            (
                format!("-{long}"),
                format!(
                    "-{}… (100001 characters) is negative: a size is 0 or more",
                    &head[1..]
                ),
            ),
            (
                "1e300%".to_string(),
                "1e300% is outside 0% to 100%".to_string(),
            ),
        ] {
            let error = parse_limit(&text).unwrap_err();
            assert_eq!(error, reason);
            assert!(error.len() < 200, "{}", error.len());
        }
        let error = parse_quota(&format!("0=1G,{long}")).unwrap_err();
        assert_eq!(
            error,
            format!("entry \"{head}\"… (100000 characters) is not DEVICE=SIZE")
        );
        let error = parse_quota(&format!("{long}=1G")).unwrap_err();
        assert!(error.starts_with(&format!("device \"{head}\"…")), "{error}");
        // Cut between characters, not inside one, nor inside an escape.
        let wide = "é".repeat(ECHO_CHARS + 1);
        assert_eq!(
            quoted(&wide),
            format!("\"{}\"… (65 characters)", "é".repeat(ECHO_CHARS))
        );
        let controls = "\u{1b}".repeat(ECHO_CHARS);
        assert_eq!(
            quoted(&controls),
            format!("\"{}\"… (64 characters)", "\\u{1b}".repeat(10))
        );
        assert_eq!(quoted("it's \"x\"\n"), r#""it's \"x\"\n""#);
        assert_eq!(
            quoted(&wide[..2 * ECHO_CHARS]),
            format!("{:?}", &wide[..2 * ECHO_CHARS]),
            "exactly 64: whole"
        );
    }

    #[test]
    fn per_device_quotas() {
        assert_eq!(
            parse_quota("0=8GiB,1=4GiB"),
            Ok(Quota::PerDevice(vec![
                (0, Limit::Bytes(8 << 30)),
                (1, Limit::Bytes(4 << 30))
            ]))
        );
        let quota = parse_quota("1=25%").unwrap();
        assert_eq!(quota.for_device(1), Some(Limit::Percent(25.0)));
        assert_eq!(quota.for_device(0), None);
        assert_eq!(
            parse_quota("8G").unwrap().for_device(7),
            Some(Limit::Bytes(8 << 30))
        );
        assert!(parse_quota("0=1G,0=2G")
            .unwrap_err()
            .contains("listed twice"));
        assert!(parse_quota("x=1G")
            .unwrap_err()
            .contains("not a device number"));
        assert!(parse_quota("0=1G,,1=2G")
            .unwrap_err()
            .contains("not DEVICE=SIZE"));
        assert!(parse_quota("64=1G").unwrap_err().contains("beyond"));
        assert!(parse_quota("0=").unwrap_err().contains("empty size"));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(4096), "4.00 KiB");
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(8 << 30), "8.00 GiB");
    }
}
