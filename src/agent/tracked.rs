//! Sysctls the agent reads because a request asked about them (a `Check` or
//! `Watch` desired state), beside the ones its own defaults name.
//!
//! Clients choose these names, so the set is bounded twice: at most
//! [`MAX_TRACKED`] names (the least recently asked goes first), and a name
//! nobody asked about for [`TRACK_TTL`] is forgotten. A watcher renews its
//! names with every message it gets, so they stay while it listens.

use std::{collections::HashMap, time::Duration};

use tokio::time::Instant;

/// Most names tracked at once: four times what one desired state may name
/// (`evaluate::MAX_SYSCTLS`), so one request never evicts its own names.
pub const MAX_TRACKED: usize = 256;

/// A name not asked about for this long is no longer read.
pub const TRACK_TTL: Duration = Duration::from_secs(600);

/// The tracked names and when each was last asked about.
#[derive(Debug, Default)]
pub struct Tracked {
    asked: HashMap<String, Instant>,
}

impl Tracked {
    /// Marks `names` as asked about at `now`; true when one was not tracked.
    pub fn touch(&mut self, names: &[String], now: Instant) -> bool {
        let mut added = false;
        for n in names {
            added |= self.asked.insert(n.clone(), now).is_none();
        }
        while self.asked.len() > MAX_TRACKED {
            let Some(oldest) = self
                .asked
                .iter()
                .min_by_key(|(n, t)| (**t, (*n).clone()))
                .map(|(n, _)| n.clone())
            else {
                break;
            };
            self.asked.remove(&oldest);
        }
        added
    }

    /// Forgets names not asked about since `now - TRACK_TTL`; true when one
    /// was forgotten.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.asked.len();
        self.asked
            .retain(|_, t| now.saturating_duration_since(*t) < TRACK_TTL);
        self.asked.len() != before
    }

    /// The tracked names, sorted (reports list them in a stable order).
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.asked.keys().cloned().collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn touch_reports_new_names_and_renews_old_ones() {
        let t0 = Instant::now();
        let mut t = Tracked::default();
        assert!(t.touch(&names(&["a.b", "c.d"]), t0));
        assert!(!t.touch(&names(&["a.b"]), t0 + TRACK_TTL / 2));
        // c.d was asked at t0 only; a.b was renewed.
        assert!(t.expire(t0 + TRACK_TTL));
        assert_eq!(t.names(), names(&["a.b"]));
        assert!(!t.expire(t0 + TRACK_TTL));
    }

    #[test]
    fn the_least_recently_asked_goes_first_beyond_the_cap() {
        let t0 = Instant::now();
        let mut t = Tracked::default();
        for i in 0..MAX_TRACKED {
            t.touch(&[format!("n.{i:03}")], t0 + Duration::from_secs(i as u64));
        }
        // Renew the oldest, then add one more: n.001 is now the oldest.
        t.touch(&names(&["n.000"]), t0 + Duration::from_secs(1000));
        assert!(t.touch(&names(&["z.new"]), t0 + Duration::from_secs(1001)));
        let now = t.names();
        assert_eq!(now.len(), MAX_TRACKED);
        assert!(now.contains(&"n.000".to_string()));
        assert!(now.contains(&"z.new".to_string()));
        assert!(!now.contains(&"n.001".to_string()));
    }
}
