//! The settings every part of vramshare names: spill modes, pool
//! priorities and log levels. One table each gives the words the variables
//! take and the command prints, and the number the registry stores.

/// Makes a settings enum from its table: variant, word, number.
macro_rules! setting {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $word:literal, $code:literal; )* }
        default $default:ident
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $code, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }

        impl $name {
            /// The words, in the table's order.
            pub const NAMES: &'static [&'static str] = &[ $( $word, )* ];

            /// Its word.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )*
                }
            }

            /// The setting of this word, in any case.
            pub fn parse(text: &str) -> Option<$name> {
                let text = text.trim();
                $(
                    if text.eq_ignore_ascii_case($word) {
                        return Some($name::$variant);
                    }
                )*
                None
            }

            /// The number the registry stores.
            pub fn code(self) -> u32 {
                self as u32
            }

            /// The setting a registry number stands for; an unknown one (a
            /// corrupt slot, or a newer vramshare) reads as the default.
            pub fn from_code(code: u32) -> $name {
                $(
                    if code == $code {
                        return $name::$variant;
                    }
                )*
                $name::$default
            }
        }
    };
}

setting! {
    /// `VRAMSHARE_SPILL`: what an allocation over the quota gets.
    Spill {
        /// Managed memory placed on the host and mapped for the device.
        Host = "host", 0;
        /// `cudaErrorMemoryAllocation`, so the framework raises its OOM.
        Off = "off", 1;
    }
    default Host
}

setting! {
    /// `VRAMSHARE_MOVES`: whether blocks move between device and host
    /// memory as the job's kernels need them, each move waiting for the
    /// device to finish its work (`on`), or beside the kernels that do not
    /// name the moving blocks (`overlap`), or stay where they were
    /// allocated and are read in place over the link (`off`).
    Moves {
        On = "on", 1;
        Overlap = "overlap", 2;
        Off = "off", 0;
    }
    default On
}

setting! {
    /// `VRAMSHARE_PRIORITY`: who gives way when a pool is full.
    Priority {
        High = "high", 2;
        Normal = "normal", 1;
        Low = "low", 0;
    }
    default Normal
}

setting! {
    /// `VRAMSHARE_LOG`: what the shim says on stderr.
    Level {
        Error = "error", 0;
        Warn = "warn", 1;
        Info = "info", 2;
        Debug = "debug", 3;
    }
    default Error
}

/// The forms a setting's words make, for messages: "host, off".
pub fn forms(names: &[&str]) -> String {
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_numbers_and_order() {
        assert_eq!(Spill::parse(" OFF "), Some(Spill::Off));
        assert_eq!(Spill::parse("disk"), None);
        assert_eq!(Priority::from_code(2), Priority::High);
        assert_eq!(
            Priority::from_code(77),
            Priority::Normal,
            "unknown: the default"
        );
        assert_eq!(Priority::High.code(), 2);
        assert!(Priority::Low < Priority::High);
        assert!(Level::Error < Level::Debug);
        assert_eq!(forms(Level::NAMES), "error, warn, info, debug");
        assert_eq!(Spill::default().name(), "host");
    }
}
