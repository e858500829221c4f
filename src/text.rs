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
        c if c.is_control() => '?',
        c => c,
    }
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
    fn durations_read_well() {
        assert_eq!(fmt_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(fmt_duration(Duration::from_secs(5)), "5s");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
    }
}
