//! The real kernel: the agent inside a child user namespace whose
//! `user.max_user_namespaces` is 0, then 11255.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{in_userns, run};
use serde_json::Value;

fn probe_json(limit: u32) -> (i32, Value) {
    let out = run(in_userns(
        Some(limit),
        &[
            "probe",
            "--sysctl",
            "user.max_user_namespaces=11255",
            "--require-userns",
            "-o",
            "json",
        ],
    ));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), doc)
}

#[test]
fn limit_zero_fails_with_the_mismatch_and_the_failed_creation() {
    let (code, doc) = probe_json(0);
    assert_eq!(code, 1, "{doc:#}");
    let userns = &doc["report"]["userNamespaces"];
    assert_eq!(
        userns["initialUserNamespace"],
        Value::Bool(false),
        "{userns:#}"
    );
    assert!(userns["namespaceNote"]
        .as_str()
        .unwrap_or("")
        .contains("not in the initial user namespace"));
    assert_eq!(userns["usernsCreate"]["outcome"], "PROBE_OUTCOME_FAILED");
    assert_eq!(userns["usernsCreate"]["errnoName"], "ENOSPC");
    assert!(userns["usernsCreate"]["message"]
        .as_str()
        .unwrap_or("")
        .starts_with("user.max_user_namespaces limit reached"));
    let codes: Vec<&str> = doc["verdict"]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"SYSCTL_MISMATCH"), "{codes:?}");
    assert!(codes.contains(&"USERNS_CREATE_FAILED"), "{codes:?}");
    assert!(codes.contains(&"NOT_INITIAL_USER_NAMESPACE"), "{codes:?}");
    assert_eq!(doc["verdict"]["converged"], Value::Bool(false));
}

#[test]
fn limit_11255_converges() {
    let (code, doc) = probe_json(11255);
    assert_eq!(code, 0, "{doc:#}");
    let userns = &doc["report"]["userNamespaces"];
    assert_eq!(userns["usernsCreate"]["outcome"], "PROBE_OUTCOME_PASSED");
    assert_eq!(userns["idmapMount"]["outcome"], "PROBE_OUTCOME_PASSED");
    assert_eq!(doc["verdict"]["converged"], Value::Bool(true));
    let limit = userns["sysctls"]
        .as_array()
        .expect("sysctls")
        .iter()
        .find(|s| s["name"] == "user.max_user_namespaces")
        .expect("limit reported");
    assert_eq!(limit["value"], "11255");
}

#[test]
fn table_output_marks_the_failure_for_people() {
    let out = run(in_userns(Some(0), &["probe", "--require-userns"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("NOT in the initial user namespace"), "{text}");
    assert!(text.contains("✗ user.max_user_namespaces"), "{text}");
    assert!(text.contains("NOT CONVERGED"), "{text}");
}

#[test]
fn bad_usage_exits_2_with_one_line() {
    for args in [
        vec!["probe", "--sysctl", "../../etc/shadow=1"],
        vec!["probe", "--sysctl", "novalue"],
        vec!["probe", "--cri-timeout", "soon"],
        vec!["probe", "--require-runtime-handler", "Bad/Name"],
        vec!["probe", "--probe-timeout", "0s"],
        // A zero period would panic or spin, an absurd one overflow the clock.
        vec!["serve", "--poll-interval", "0"],
        vec!["serve", "--heartbeat", "0s"],
        vec!["serve", "--probe-interval", "0ms"],
        vec!["serve", "--min-refresh-interval", "100000d"],
        vec!["serve", "--request-timeout", "0s"],
    ] {
        let out = run({
            let mut c = std::process::Command::new(common::BIN);
            c.args(&args);
            c
        });
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines().next().unwrap_or("").starts_with("error:"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
}
