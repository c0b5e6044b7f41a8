//! What the command shows of what it did not make: the counters and
//! command lines in the shared files and the sizes and strings in a trace
//! come from other processes, or from a file anyone may have written.

use std::borrow::Cow;
use std::fmt::Write;

/// The sum of sizes or counters, stopping at `u64::MAX`: a corrupt or
/// hostile input must not wrap to a small total ("3 blocks, 0 B"), nor
/// panic where overflow is checked.
pub fn total(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

/// Characters a terminal may act on rather than show: C0 and C1 controls
/// and DEL (escape sequences, newlines, bells), and the marks that reorder
/// or break the text around them (bidirectional overrides, line and
/// paragraph separators).
fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with each character a terminal may act on written as an escape
/// (`\n`, `\x1b`, `\u{9b}`), so that a command line or a trace cannot
/// clear the screen, retitle the window or forge rows of a table.
/// Backslashes are left alone, so that ordinary command lines read as they
/// were typed; `--json` and `dump` give the exact text.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() && acts_on_terminal(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if acts_on_terminal(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_a_terminal_acts_on_are_escaped() {
        assert_eq!(
            escaped("a\x1b[2J\x07b\nc\rd\te\x7f"),
            r"a\x1b[2J\x07b\nc\rd\te\x7f"
        );
        assert_eq!(
            escaped("\u{9b}31m \u{202e}gpj.exe \u{2028} \u{2066}"),
            r"\u{9b}31m \u{202e}gpj.exe \u{2028} \u{2066}"
        );
        // Printable text, backslashes and other scripts stay as they are.
        for plain in [r#"python -c 'print("a\nb")'"#, "train — données 学习", ""] {
            assert!(matches!(escaped(plain), Cow::Borrowed(_)), "{plain}");
        }
    }

    #[test]
    fn totals_stop_at_the_largest_u64() {
        assert_eq!(total([]), 0);
        assert_eq!(total([1, 2, 3]), 6);
        assert_eq!(total([u64::MAX - 1, 1]), u64::MAX);
        assert_eq!(total([u64::MAX - 1, u64::MAX - 1, 2]), u64::MAX);
    }
}
