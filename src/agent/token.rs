//! Tokens for cheap polling: `GetReport` and `Check` answer with a token,
//! and a caller that sends it back while it still holds gets "unchanged"
//! instead of the report.
//!
//! A token is 16 hex digits of a 64-bit hash. It is opaque to callers and
//! only ever compared with one this process computes: std's `DefaultHasher`
//! (SipHash with fixed keys) is stable within one build, and a token never
//! outlives the process anyway, since the agent's start time is hashed in.
//! Computed from what the published report already holds (its fingerprint),
//! so deciding "unchanged" never serialises the report.

use std::hash::{DefaultHasher, Hash, Hasher};

use prost::Message;

use crate::proto::v1::{DesiredState, Report};

/// What a `GetReport` answer depends on: the observed state and the agent
/// process that observed it (a restarted agent, or another node with the
/// same observed state, never matches an old token). `incomplete` is hashed
/// too: it is outside the fingerprint but changes what the caller is told.
fn report_hasher(report: &Report) -> DefaultHasher {
    let mut h = DefaultHasher::new();
    report.fingerprint.hash(&mut h);
    if let Some(agent) = &report.agent {
        agent.version.hash(&mut h);
        if let Some(t) = &agent.started_at {
            (t.seconds, t.nanos).hash(&mut h);
        }
        agent.incomplete.hash(&mut h);
    }
    h
}

/// The key of a `GetReport` answer carrying `report`.
pub fn report_key(report: &Report) -> u64 {
    let mut h = report_hasher(report);
    b'r'.hash(&mut h);
    h.finish()
}

/// The key of a `Check` answer: the report's and the effective desired
/// state's (its encoding: every field, present and future, counts, and a
/// desired state is a few hundred bytes at most).
pub fn check_key(report: &Report, desired: &DesiredState) -> u64 {
    let mut h = report_hasher(report);
    b'c'.hash(&mut h);
    desired.encode_to_vec().hash(&mut h);
    h.finish()
}

/// The token a caller sees for `key`.
pub fn token(key: u64) -> String {
    format!("{key:016x}")
}

/// Whether the caller's token is the one for `key` (exactly the text
/// [`token`] gives). Anything else (empty, malformed, from another agent or
/// an older state) is simply "changed".
pub fn holds(token: &str, key: u64) -> bool {
    token.len() == 16
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && u64::from_str_radix(token, 16).is_ok_and(|t| t == key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::proto::v1::{AgentInfo, SysctlExpectation};

    fn report(fingerprint: &str, started: i64) -> Report {
        Report {
            fingerprint: fingerprint.into(),
            generation: 3,
            agent: Some(AgentInfo {
                version: "1.0.0".into(),
                started_at: Some(pbjson_types::Timestamp {
                    seconds: started,
                    nanos: 5,
                }),
                observations: 7,
                ..AgentInfo::default()
            }),
            ..Report::default()
        }
    }

    fn desired(limit: &str) -> DesiredState {
        DesiredState {
            sysctls: vec![SysctlExpectation {
                name: "user.max_user_namespaces".into(),
                value: limit.into(),
            }],
            ..DesiredState::default()
        }
    }

    #[test]
    fn a_token_holds_for_the_same_state_only() {
        let r = report("aa", 100);
        let t = token(report_key(&r));
        assert_eq!(t.len(), 16);
        assert!(holds(&t, report_key(&r)));
        // Counters, timestamps and the generation are not the state.
        let mut later = r.clone();
        later.generation = 9;
        later.observed_at = Some(pbjson_types::Timestamp::default());
        later.agent.as_mut().unwrap().observations = 99;
        assert!(holds(&t, report_key(&later)));
        // A new observed state, a restarted agent, an incomplete observation.
        assert!(!holds(&t, report_key(&report("bb", 100))));
        assert!(!holds(&t, report_key(&report("aa", 101))));
        let mut partial = r.clone();
        partial.agent.as_mut().unwrap().incomplete = vec!["sysctls".into()];
        assert!(!holds(&t, report_key(&partial)));
    }

    #[test]
    fn check_tokens_cover_the_question() {
        let r = report("aa", 100);
        let k = check_key(&r, &desired("11255"));
        assert_eq!(k, check_key(&r, &desired("11255")));
        assert_ne!(k, check_key(&r, &desired("0")));
        assert_ne!(k, check_key(&r, &DesiredState::default()));
        let handlers = DesiredState {
            require_gvisor: true,
            ..desired("11255")
        };
        assert_ne!(k, check_key(&r, &handlers));
        assert_ne!(k, check_key(&report("bb", 100), &desired("11255")));
        // A GetReport token never answers a Check, nor the other way round.
        assert_ne!(report_key(&r), check_key(&r, &DesiredState::default()));
    }

    #[test]
    fn bad_tokens_are_changed_never_errors() {
        let k = report_key(&report("aa", 100));
        let good = token(k);
        for bad in [
            "",
            "zz",
            "0123456789abcdefg",
            &good[..15],
            &format!("{good} "),
            &format!("+{}", &good[1..]),
            "ffffffffffffffff",
            &good.to_uppercase(),
        ] {
            assert!(!holds(bad, k) || bad == good, "{bad:?}");
        }
        assert!(holds(&good, k));
    }
}
