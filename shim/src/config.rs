//! The `VRAMSHARE_*` variables: parsed once when the library is loaded.
//!
//! An invalid value never means "no limit": the process prints one line naming
//! the variable, the value and the accepted forms, and exits with status 2
//! before the job starts. An empty variable counts as unset.

use std::fmt;

use vramshare_common::size::parse_quota;
pub use vramshare_common::size::{human_bytes, Limit, Quota, MAX_DEVICES, QUOTA_FORMS};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Spill {
    /// Over quota: managed memory placed on the host and mapped for the device.
    #[default]
    Host,
    /// Over quota: `cudaErrorMemoryAllocation`, so the framework raises its OOM.
    Off,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    #[default]
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub quota: Quota,
    pub spill: Spill,
    /// `VRAMSHARE_TRACE` as given; `%p` is replaced when the file is written.
    pub trace: Option<String>,
    pub log: Level,
}

pub const SPILL_FORMS: &str = "host, off";
pub const LOG_FORMS: &str = "error, warn, info, debug";

#[derive(Debug, PartialEq)]
pub struct ConfigError {
    pub variable: &'static str,
    pub value: String,
    pub reason: String,
    pub forms: &'static str,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vramshare: {}={:?} is not valid ({}); accepted forms: {}",
            self.variable, self.value, self.reason, self.forms
        )
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
                forms: QUOTA_FORMS,
            })?;
        }
        if let Some(value) = var("VRAMSHARE_SPILL") {
            config.spill = match value.trim().to_ascii_lowercase().as_str() {
                "host" => Spill::Host,
                "off" => Spill::Off,
                _ => {
                    return Err(invalid(
                        "VRAMSHARE_SPILL",
                        value,
                        "unknown mode",
                        SPILL_FORMS,
                    ))
                }
            };
        }
        if let Some(value) = var("VRAMSHARE_LOG") {
            config.log = match value.trim().to_ascii_lowercase().as_str() {
                "error" => Level::Error,
                "warn" => Level::Warn,
                "info" => Level::Info,
                "debug" => Level::Debug,
                _ => return Err(invalid("VRAMSHARE_LOG", value, "unknown level", LOG_FORMS)),
            };
        }
        config.trace = var("VRAMSHARE_TRACE");
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
    forms: &'static str,
) -> ConfigError {
    ConfigError {
        variable,
        value,
        reason: reason.to_string(),
        forms,
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
        assert_eq!(
            vars(&[("VRAMSHARE_LOG", "loud")]).unwrap_err().variable,
            "VRAMSHARE_LOG"
        );
    }
}
