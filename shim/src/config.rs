//! The `VRAMSHARE_*` variables: parsed once when the library is loaded.
//!
//! An invalid value never means "no limit": the process prints one line naming
//! the variable, the value and the accepted forms, and exits with status 2
//! before the job starts. An empty variable counts as unset.

use std::fmt;

use vramshare_common::size::parse_quota;
pub use vramshare_common::size::{human_bytes, Device, Limit, Quota, MAX_DEVICES, QUOTA_FORMS};

use vramshare_common::settings::forms;
pub use vramshare_common::settings::{Level, Moves, Priority, Spill};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub quota: Quota,
    pub spill: Spill,
    pub moves: Moves,
    /// `VRAMSHARE_TRACE` as given; `%p` is replaced when the file is written.
    pub trace: Option<String>,
    pub log: Level,
    /// `VRAMSHARE_POOL`: the pool whose budget this process shares.
    pub pool: Option<String>,
    /// `VRAMSHARE_POOL_QUOTA`: the budget offered for a pool that has none.
    pub pool_quota: Quota,
    pub priority: Priority,
}

#[derive(Debug, PartialEq)]
pub struct ConfigError {
    pub variable: &'static str,
    pub value: String,
    pub reason: String,
    pub forms: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&vramshare_common::size::invalid_setting(
            self.variable,
            &self.value,
            &self.reason,
            &self.forms,
        ))
    }
}

impl Config {
    /// Reads the variables through `get` (the environment, or a map in tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut config = Config::default();
        if let Some(value) = var("VRAMSHARE_QUOTA") {
            config.quota = parse_quota(&value).map_err(|reason| ConfigError {
                variable: "VRAMSHARE_QUOTA",
                value: value.clone(),
                reason,
                forms: QUOTA_FORMS.to_string(),
            })?;
        }
        if let Some(value) = var("VRAMSHARE_SPILL") {
            config.spill = Spill::parse(&value).ok_or_else(|| {
                invalid(
                    "VRAMSHARE_SPILL",
                    value.clone(),
                    "unknown mode",
                    forms(Spill::NAMES),
                )
            })?;
        }
        if let Some(value) = var("VRAMSHARE_MOVES") {
            config.moves = Moves::parse(&value).ok_or_else(|| {
                invalid(
                    "VRAMSHARE_MOVES",
                    value.clone(),
                    "unknown mode",
                    forms(Moves::NAMES),
                )
            })?;
        }
        if let Some(value) = var("VRAMSHARE_LOG") {
            config.log = Level::parse(&value).ok_or_else(|| {
                invalid(
                    "VRAMSHARE_LOG",
                    value.clone(),
                    "unknown level",
                    forms(Level::NAMES),
                )
            })?;
        }
        config.trace = var("VRAMSHARE_TRACE");
        if let Some(value) = var("VRAMSHARE_POOL") {
            let name = value.trim().to_string();
            // The forms are said once, by the error itself.
            vramshare_common::pool::check_name(&name).map_err(|_| {
                invalid(
                    "VRAMSHARE_POOL",
                    value.clone(),
                    "not a pool name",
                    vramshare_common::pool::NAME_FORMS,
                )
            })?;
            config.pool = Some(name);
        }
        if let Some(value) = var("VRAMSHARE_POOL_QUOTA") {
            if config.pool.is_none() {
                return Err(invalid(
                    "VRAMSHARE_POOL_QUOTA",
                    value,
                    "set without VRAMSHARE_POOL",
                    "a pool budget goes with VRAMSHARE_POOL=NAME",
                ));
            }
            config.pool_quota = parse_quota(&value).map_err(|reason| ConfigError {
                variable: "VRAMSHARE_POOL_QUOTA",
                value: value.clone(),
                reason,
                forms: QUOTA_FORMS.to_string(),
            })?;
        }
        if let Some(value) = var("VRAMSHARE_PRIORITY") {
            config.priority = Priority::parse(&value).ok_or_else(|| {
                invalid(
                    "VRAMSHARE_PRIORITY",
                    value.clone(),
                    "unknown priority",
                    forms(Priority::NAMES),
                )
            })?;
        }
        Ok(config)
    }

    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }
}

fn invalid(
    variable: &'static str,
    value: String,
    reason: &str,
    forms: impl Into<String>,
) -> ConfigError {
    ConfigError {
        variable,
        value,
        reason: reason.to_string(),
        forms: forms.into(),
    }
}

/// Whether a debug build panics on purpose at `point`, for the tests of the
/// shim's panic walls (`VRAMSHARE_TEST_PANIC=after-real`, `exit`, or
/// `before-real:NAME`, before the first real call of the hook of NAME). A release
/// build never reads the variable.
pub fn panics_at(point: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        AT.get_or_init(|| std::env::var("VRAMSHARE_TEST_PANIC").ok())
            .as_deref()
            == Some(point)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = point;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn whole_configuration() {
        let config = vars(&[
            ("VRAMSHARE_QUOTA", "2GiB"),
            ("VRAMSHARE_SPILL", "OFF"),
            ("VRAMSHARE_LOG", "debug"),
            ("VRAMSHARE_TRACE", "/tmp/t-%p.json"),
        ])
        .unwrap();
        assert_eq!(config.quota, Quota::All(Limit::Bytes(2 << 30)));
        assert_eq!(config.spill, Spill::Off);
        assert_eq!(config.log, Level::Debug);
        assert_eq!(config.trace.as_deref(), Some("/tmp/t-%p.json"));
        assert_eq!(vars(&[]).unwrap(), Config::default());
        assert_eq!(
            vars(&[("VRAMSHARE_QUOTA", "  ")]).unwrap().quota,
            Quota::Unlimited
        );
    }

    #[test]
    fn errors_name_variable_value_and_forms() {
        let error = vars(&[("VRAMSHARE_SPILL", "disk")]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "vramshare: VRAMSHARE_SPILL=\"disk\" is not valid (unknown mode); accepted forms: host, off"
        );
        let error = vars(&[("VRAMSHARE_QUOTA", "8XB")]).unwrap_err();
        assert!(error
            .to_string()
            .starts_with("vramshare: VRAMSHARE_QUOTA=\"8XB\" is not valid"));
        assert!(error.to_string().contains("0=8GiB,1=4GiB"));
        let error = vars(&[("VRAMSHARE_POOL", "team a")]).unwrap_err();
        assert_eq!(error.variable, "VRAMSHARE_POOL");
        assert!(error.to_string().contains("letters, digits"));
        let long = "8".repeat(100_000) + "X";
        let error = vars(&[("VRAMSHARE_QUOTA", &long)]).unwrap_err().to_string();
        assert!(
            error.len() < 600,
            "a long value is cut where it is echoed: {} bytes",
            error.len()
        );
        let error = vars(&[("VRAMSHARE_POOL", "team a")]).unwrap_err();
        assert_eq!(
            error.to_string().matches("accepted forms").count(),
            1,
            "the forms said once: {error}"
        );
        assert_eq!(
            vars(&[("VRAMSHARE_POOL_QUOTA", "8GiB")])
                .unwrap_err()
                .reason,
            "set without VRAMSHARE_POOL"
        );
        assert_eq!(
            vars(&[("VRAMSHARE_PRIORITY", "urgent")]).unwrap_err().forms,
            "high, normal, low"
        );
        let pooled = vars(&[
            ("VRAMSHARE_POOL", "team-a"),
            ("VRAMSHARE_POOL_QUOTA", "0=8GiB"),
            ("VRAMSHARE_PRIORITY", "LOW"),
        ])
        .unwrap();
        assert_eq!(pooled.pool.as_deref(), Some("team-a"));
        assert_eq!(pooled.pool_quota.for_device(0), Some(Limit::Bytes(8 << 30)));
        assert_eq!(pooled.priority, Priority::Low);
        assert_eq!(
            vars(&[("VRAMSHARE_LOG", "loud")]).unwrap_err().variable,
            "VRAMSHARE_LOG"
        );
    }
}
