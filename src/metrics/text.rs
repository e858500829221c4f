//! The Prometheus text exposition format, version 0.0.4, written by hand.
//!
//! Why no crate: `prometheus-client` only writes OpenMetrics, and the
//! `prometheus` crate brings a registry, protobuf and locking we do not
//! need, at a binary size the static agent (4 MiB hard limit) cannot pay.
//! Every series here is derived at scrape time from the published report and
//! a few counters, so a writer of HELP/TYPE lines and samples is all it
//! takes. The served text is checked by `promtool check metrics` in
//! tests/metrics.rs.

use std::fmt::Write as _;

/// The `Content-Type` of the served text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// Builds one exposition. Families must be written whole, one after the
/// other (the format forbids interleaving); names and label names are the
/// caller's constants, label values and HELP text are escaped here.
#[derive(Debug, Default)]
pub struct Encoder {
    out: String,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a family: its HELP and TYPE lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.out.push_str("# HELP ");
        self.out.push_str(name);
        self.out.push(' ');
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        self.out.push_str("\n# TYPE ");
        self.out.push_str(name);
        self.out.push(' ');
        self.out.push_str(kind.word());
        self.out.push('\n');
    }

    /// One sample line of the current family.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                push_label_value(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        push_float(&mut self.out, value);
        self.out.push('\n');
    }

    /// A whole unlabelled single-sample family.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// A whole histogram family without labels: `buckets` are the upper
    /// bounds with their *cumulative* counts, ascending; the `+Inf` bucket
    /// (= `count`) is added here.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        self.family(name, Kind::Histogram, help);
        let bucket = format!("{name}_bucket");
        let mut le = String::new();
        for &(upper, n) in buckets {
            le.clear();
            push_float(&mut le, upper);
            self.sample(&bucket, &[("le", &le)], n as f64);
        }
        self.sample(&bucket, &[("le", "+Inf")], count as f64);
        self.sample(&format!("{name}_sum"), &[], sum);
        self.sample(&format!("{name}_count"), &[], count as f64);
    }

    /// The exposition.
    pub fn finish(self) -> String {
        self.out
    }
}

fn push_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Go's `ParseFloat` reads Rust's shortest round-trip form; the three
/// special values need the format's spelling.
fn push_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_and_type_come_first_and_help_is_escaped() {
        let mut e = Encoder::new();
        e.single("a_total", Kind::Counter, "back\\slash\nnew \"quoted\"", 3.0);
        assert_eq!(
            e.finish(),
            "# HELP a_total back\\\\slash\\nnew \"quoted\"\n# TYPE a_total counter\na_total 3\n"
        );
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        let mut e = Encoder::new();
        e.family("g", Kind::Gauge, "h");
        e.sample("g", &[("a", "x\\y\"z\nw"), ("b", "ü")], 1.0);
        assert!(e.finish().ends_with("g{a=\"x\\\\y\\\"z\\nw\",b=\"ü\"} 1\n"));
    }

    #[test]
    fn floats_use_the_formats_spelling() {
        let f = |v: f64| {
            let mut s = String::new();
            push_float(&mut s, v);
            s
        };
        assert_eq!(f(f64::INFINITY), "+Inf");
        assert_eq!(f(f64::NEG_INFINITY), "-Inf");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(1.0), "1");
        assert_eq!(f(0.25), "0.25");
        assert_eq!(f(11255.0), "11255");
        assert_eq!(f(-2.5), "-2.5");
        assert_eq!(f(1e-7), "0.0000001");
        // u64 counters beyond 2^53 lose precision but stay parseable.
        assert_eq!(
            f(u64::MAX as f64).parse::<f64>().ok(),
            Some(u64::MAX as f64)
        );
    }

    #[test]
    fn histogram_has_cumulative_buckets_inf_sum_and_count() {
        let mut e = Encoder::new();
        e.histogram("d_seconds", "h", &[(0.1, 1), (1.0, 3)], 2.5, 4);
        assert_eq!(
            e.finish(),
            "# HELP d_seconds h\n# TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.1\"} 1\n\
             d_seconds_bucket{le=\"1\"} 3\n\
             d_seconds_bucket{le=\"+Inf\"} 4\n\
             d_seconds_sum 2.5\n\
             d_seconds_count 4\n"
        );
    }
}
