//! When a handler's next canary is due: the pure rule the owner follows.
//!
//! A fresh node's first verdict waits on its canaries, so a canary that has
//! never passed is not left for a whole `--canary-interval`:
//! - NOT_RUN because the sandbox image is not in the runtime's store (on a
//!   fresh node kubelet pulls it with the first pod): run again as soon as
//!   the image is there; the owner asks the image store every
//!   [`IMAGE_POLL`] until then (a cheap question, no sandbox);
//! - any other outcome short of PASSED (FAILED, ERROR, INCONCLUSIVE, a CRI
//!   that could not be asked): run again after 15 s, 30 s, 60 s, 120 s,
//!   then every 120 s ([`BACKOFF`]);
//! - once it has passed, `--canary-interval` governs every later run,
//!   whatever its outcome (a node that was ready is not hammered).
//!
//! A retry is never later than the interval, so a short `--canary-interval`
//! stays in charge.

use std::time::Duration;

use crate::proto::v1::ProbeOutcome;

/// Pauses after the 1st, 2nd, 3rd and every later failure before the
/// handler's first pass.
pub const BACKOFF: [Duration; 4] = [
    Duration::from_secs(15),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(120),
];

/// How often the image store is asked while a canary waits for its image.
pub const IMAGE_POLL: Duration = Duration::from_secs(2);

/// The shortest interval the owner honours (a zero one must not spin).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// What one canary's result was, as far as its schedule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Passed,
    /// NOT_RUN for want of the sandbox image.
    ImageMissing,
    /// Anything else short of PASSED.
    NotPassed,
}

impl Kind {
    pub fn of(outcome: ProbeOutcome, image_missing: bool) -> Self {
        match outcome {
            ProbeOutcome::Passed => Self::Passed,
            _ if image_missing => Self::ImageMissing,
            _ => Self::NotPassed,
        }
    }
}

/// When the next canary is due, counted from when this one finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    /// Due this long after the result at the latest.
    pub after: Duration,
    /// Due earlier, as soon as the image store holds the sandbox image.
    pub on_image: bool,
}

/// One handler's history: whether it ever passed, and its failures since.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retry {
    passed_once: bool,
    failures: usize,
}

impl Retry {
    /// Records a result and says when the next canary is due.
    pub fn record(&mut self, kind: Kind, interval: Duration) -> Next {
        let interval = interval.max(MIN_INTERVAL);
        let every = |after| Next {
            after,
            on_image: false,
        };
        if kind == Kind::Passed {
            self.passed_once = true;
            self.failures = 0;
            return every(interval);
        }
        if self.passed_once {
            return every(interval);
        }
        match kind {
            // The interval stays a bound: should the image store keep
            // answering "absent" wrongly, the canary still runs again.
            Kind::ImageMissing => Next {
                after: interval,
                on_image: true,
            },
            _ => {
                let pause = BACKOFF[self.failures.min(BACKOFF.len() - 1)];
                self.failures += 1;
                every(pause.min(interval))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MIN: Duration = Duration::from_secs(600);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn failures_back_off_15_30_60_120_then_stay_at_120() {
        let mut r = Retry::default();
        let pauses: Vec<u64> = (0..7)
            .map(|_| r.record(Kind::NotPassed, TEN_MIN).after.as_secs())
            .collect();
        assert_eq!(pauses, [15, 30, 60, 120, 120, 120, 120]);
    }

    #[test]
    fn a_pass_hands_over_to_the_interval_for_good() {
        let mut r = Retry::default();
        r.record(Kind::NotPassed, TEN_MIN);
        assert_eq!(r.record(Kind::Passed, TEN_MIN).after, TEN_MIN);
        // A later failure or missing image waits the interval too.
        let next = r.record(Kind::NotPassed, TEN_MIN);
        assert_eq!((next.after, next.on_image), (TEN_MIN, false));
        let next = r.record(Kind::ImageMissing, TEN_MIN);
        assert_eq!((next.after, next.on_image), (TEN_MIN, false));
    }

    #[test]
    fn a_missing_image_waits_for_the_image_and_does_not_count_as_a_failure() {
        let mut r = Retry::default();
        let next = r.record(Kind::ImageMissing, TEN_MIN);
        assert!(next.on_image);
        assert_eq!(next.after, TEN_MIN);
        // The image came, the canary failed: the first pause, not the second.
        assert_eq!(r.record(Kind::NotPassed, TEN_MIN).after, secs(15));
    }

    #[test]
    fn a_short_interval_stays_in_charge_and_zero_does_not_spin() {
        let mut r = Retry::default();
        assert_eq!(r.record(Kind::NotPassed, secs(20)).after, secs(15));
        assert_eq!(r.record(Kind::NotPassed, secs(20)).after, secs(20));
        assert_eq!(r.record(Kind::Passed, Duration::ZERO).after, MIN_INTERVAL);
    }

    #[test]
    fn kinds_of_outcomes() {
        assert_eq!(Kind::of(ProbeOutcome::Passed, true), Kind::Passed);
        assert_eq!(Kind::of(ProbeOutcome::Skipped, true), Kind::ImageMissing);
        assert_eq!(Kind::of(ProbeOutcome::Skipped, false), Kind::NotPassed);
        assert_eq!(Kind::of(ProbeOutcome::Failed, false), Kind::NotPassed);
        assert_eq!(Kind::of(ProbeOutcome::Error, false), Kind::NotPassed);
        assert_eq!(Kind::of(ProbeOutcome::Inconclusive, false), Kind::NotPassed);
    }
}
