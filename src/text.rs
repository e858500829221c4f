//! Text for terminals and logs: one copy of the cleaning every printer
//! needs, and one way to render an error (with its causes) on one line.
//!
//! Text that came from elsewhere (an agent, a child's stderr, a file) goes
//! through [`clean_line`] or [`clean_text`] before it reaches a terminal:
//! escape sequences in it must not repaint the operator's screen, and a
//! cell or log line must stay one line.

use std::{error::Error, time::Duration};

/// Replaces control characters (escape sequences included) with `?` and
/// line breaks and tabs with spaces, so the text stays one harmless line.
pub fn clean_line(s: &str) -> String {
    s.chars().map(clean_char).collect()
}

/// [`clean_line`], and at most `max_chars` characters of it; a cut line
/// ends in `…`.
pub fn clean_capped(s: &str, max_chars: usize) -> String {
    let mut out: String = s.chars().take(max_chars).map(clean_char).collect();
    if s.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    out
}

/// The longest line [`report_line`] keeps.
pub const REPORT_LINE_CHARS: usize = 256;

/// A single line fit for a report (a child's error, a version string):
/// cleaned, and at most [`REPORT_LINE_CHARS`] characters.
pub fn report_line(s: &str) -> String {
    clean_capped(s, REPORT_LINE_CHARS)
}

/// Like [`clean_line`] but keeps line breaks (for multi-line report text).
pub fn clean_text(s: &str) -> String {
    s.lines().map(clean_line).collect::<Vec<_>>().join("\n")
}

fn clean_char(c: char) -> char {
    match c {
        '\n' | '\r' | '\t' => ' ',
        c if c.is_control() || is_format_or_separator(c) => '?',
        c => c,
    }
}

/// Unicode format characters (category Cf: bidi overrides and isolates that
/// reorder what a terminal shows, zero-width characters that hide text) and
/// the line and paragraph separators (Zl, Zp) that break a line where no
/// `\n` is. std has no category lookup, so the ranges are listed (Unicode 16).
fn is_format_or_separator(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

/// Every message in an error's source chain, each once, joined by ": ".
/// Layers that repeat their cause's text in their own message add nothing.
/// Not cleaned: pass the result through [`clean_line`] before printing it
/// if any part came from a remote party.
pub fn error_chain(e: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let s = err.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// An error and its causes as one clean line.
pub fn error_line(e: &(dyn Error + 'static)) -> String {
    clean_line(&error_chain(e))
}

/// `1.5s`, `200ms`, `5s`.
pub fn fmt_duration(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_stay_one_harmless_line() {
        assert_eq!(clean_line("evil\x1b[2J\nline\tx"), "evil?[2J line x");
        assert_eq!(clean_text("a\x1b\nb"), "a?\nb");
        assert_eq!(clean_capped("abcdef", 3), "abc…");
        assert_eq!(clean_capped("abc", 3), "abc");
        assert_eq!(clean_capped("a\x07c", 8), "a?c");
    }

    #[test]
    fn chains_name_each_cause_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot read x: {}", self.0)
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("gone"));
        assert_eq!(error_chain(&e), "cannot read x: gone");
        let e = std::io::Error::other(Outer(std::io::Error::other("x\ny")));
        assert_eq!(error_line(&e), "cannot read x: x y");
    }

    #[test]
    fn bidi_overrides_zero_widths_and_unicode_line_breaks_are_replaced() {
        // "evil" shown reversed by U+202E, a zero-width space, U+2028/U+2029,
        // a BOM and a tag character: each would change what the operator sees.
        let s = "ok \u{202E}live\u{202C} a\u{200B}b c\u{2028}d\u{2029}e \u{FEFF}\u{E0041}";
        assert_eq!(clean_line(s), "ok ?live? a?b c?d?e ??");
        // Letters, accents and wide characters stay.
        assert_eq!(clean_line("nœud ノード"), "nœud ノード");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(fmt_duration(Duration::from_secs(5)), "5s");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
    }
}
