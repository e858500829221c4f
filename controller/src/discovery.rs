//! The start-up check: readiness gates hold a rollout only from Cluster API
//! v1.11, the release that serves `cluster.x-k8s.io/v1beta2` and counts a
//! Machine available by its `Available` condition (`Ready`, which summarises
//! the gates, held for `minReadySeconds`). Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;
use thiserror::Error;

pub const GROUP: &str = "cluster.x-k8s.io";
pub const VERSION: &str = "v1beta2";

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum VersionError {
    #[error(
        "the management cluster does not serve {GROUP}/{VERSION} (it serves: {0}): readiness gates do not hold \
         rollouts before Cluster API 1.11"
    )]
    TooOld(String),
}

/// `Ok` when the API groups list `cluster.x-k8s.io/v1beta2`.
pub fn check(groups: &APIGroupList) -> Result<(), VersionError> {
    let g = groups.groups.iter().find(|g| g.name == GROUP);
    let served: Vec<&str> = g
        .map(|g| g.versions.iter().map(|v| v.version.as_str()).collect())
        .unwrap_or_default();
    if served.contains(&VERSION) {
        Ok(())
    } else if served.is_empty() {
        Err(VersionError::TooOld(format!("no {GROUP} version")))
    } else {
        Err(VersionError::TooOld(
            served
                .iter()
                .map(|v| format!("{GROUP}/{v}"))
                .collect::<Vec<_>>()
                .join(", "),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(json: serde_json::Value) -> APIGroupList {
        serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"))
    }

    fn group(versions: &[&str]) -> serde_json::Value {
        let vs: Vec<_> = versions
            .iter()
            .map(|v| serde_json::json!({"groupVersion": format!("{GROUP}/{v}"), "version": v}))
            .collect();
        serde_json::json!({"kind":"APIGroupList","apiVersion":"v1","groups":[
            {"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}]},
            {"name":GROUP,"versions":vs}]})
    }

    #[test]
    fn table() {
        assert_eq!(check(&groups(group(&["v1beta2", "v1beta1"]))), Ok(()));
        assert_eq!(check(&groups(group(&["v1beta2"]))), Ok(()));
        let e = check(&groups(group(&["v1beta1"])))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("before Cluster API 1.11") && e.contains("cluster.x-k8s.io/v1beta1"),
            "{e}"
        );
        let none = groups(serde_json::json!({"kind":"APIGroupList","apiVersion":"v1","groups":[]}));
        let e = check(&none)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("before Cluster API 1.11") && !e.contains('\n'),
            "{e}"
        );
    }

    /// docs/usage/troubleshooting.md quotes the refusal as it is printed.
    #[test]
    fn the_troubleshooting_page_quotes_the_refusal() {
        let e = check(&groups(group(&["v1beta1"])))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/usage/troubleshooting.md"
        ))
        .unwrap_or_else(|e| panic!("troubleshooting.md: {e}"));
        assert!(
            !e.is_empty() && page.contains(&format!("`{e}`")),
            "docs/usage/troubleshooting.md does not quote `{e}`"
        );
    }
}
