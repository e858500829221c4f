//! How many nodes the pool should have, from a Cluster API
//! `MachineDeployment` (`kubectl get machinedeployment NAME -o json`): its
//! `spec.replicas`, the count a rollout converges to. Pure: text in, a count
//! or a one-line error naming the source out; reading is in [`super::source`].

use serde_json::Value;
use thiserror::Error;

/// Why a document gives no expected count.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{origin}: {message}")]
pub struct ExpectError {
    pub origin: String,
    pub message: String,
}

/// `spec.replicas` of a `MachineDeployment` (Cluster API v1beta1 or
/// v1beta2: the field is the same in both), or of the one item of a list
/// (`kubectl get md -l … -o json` prints a `List`): a list of none or of
/// several is refused, since which pool is meant would be a guess.
/// `origin` names the source in errors ("--expect-from md.json").
pub fn parse_replicas(text: &str, origin: &str) -> Result<usize, ExpectError> {
    let err = |message: String| ExpectError {
        origin: origin.to_string(),
        message,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| {
        err(format!(
            "not JSON (expected `kubectl get machinedeployment NAME -o json`): {e}"
        ))
    })?;
    let kind = |v: &Value| {
        v.get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(80)
            .collect::<String>()
    };
    let md = match (kind(&v).as_str(), v.get("items")) {
        ("MachineDeployment", _) => &v,
        ("MachineDeploymentList" | "List", Some(Value::Array(items))) => match items.as_slice() {
            [one] if kind(one) == "MachineDeployment" => one,
            [one] => {
                return Err(err(format!(
                    "the list holds a {:?}, not a MachineDeployment",
                    kind(one)
                )))
            }
            _ => {
                return Err(err(format!(
                    "the list holds {} MachineDeployments: name one (kubectl get machinedeployment NAME -o json)",
                    items.len()
                )))
            }
        },
        (k, _) => {
            return Err(err(format!(
                "expected a MachineDeployment (kubectl get machinedeployment NAME -o json), found kind {k:?}"
            )))
        }
    };
    let name = md
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .chars()
        .take(80)
        .collect::<String>();
    let replicas = md
        .pointer("/spec/replicas")
        .ok_or_else(|| err(format!("MachineDeployment {name:?} has no spec.replicas")))?;
    match replicas.as_u64().and_then(|r| usize::try_from(r).ok()) {
        Some(0) => Err(err(format!(
            "MachineDeployment {name:?} has spec.replicas 0: no nodes to check"
        ))),
        Some(n) => Ok(n),
        None => Err(err(match replicas.as_i64() {
            Some(n) => format!("MachineDeployment {name:?}: spec.replicas {n} is not a count"),
            None => format!("MachineDeployment {name:?}: spec.replicas is not a count"),
        })),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const V1BETA1: &str = include_str!("../../tests/fixtures/capi/machinedeployment-v1beta1.json");
    const V1BETA2: &str = include_str!("../../tests/fixtures/capi/machinedeployment-v1beta2.json");

    fn with_replicas(doc: &str, replicas: &str) -> String {
        let mut v: Value = serde_json::from_str(doc).unwrap();
        v["spec"]["replicas"] = serde_json::from_str(replicas).unwrap();
        v.to_string()
    }

    #[test]
    fn replicas_of_both_api_versions_and_of_a_one_item_list() {
        assert_eq!(parse_replicas(V1BETA1, "f"), Ok(3));
        assert_eq!(parse_replicas(V1BETA2, "f"), Ok(3));
        let md: Value = serde_json::from_str(V1BETA2).unwrap();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [md]});
        assert_eq!(parse_replicas(&list.to_string(), "f"), Ok(3));
    }

    #[test]
    fn bad_documents_are_one_line_naming_the_source() {
        let md: Value = serde_json::from_str(V1BETA1).unwrap();
        let two = serde_json::json!({"kind": "MachineDeploymentList", "items": [md, md]});
        let none = serde_json::json!({"kind": "List", "items": []});
        let machine = serde_json::json!({"kind": "List", "items": [{"kind": "Machine"}]});
        let mut no_replicas = md.clone();
        no_replicas["spec"]
            .as_object_mut()
            .unwrap()
            .remove("replicas");
        let cases = [
            ("not json".to_string(), "not JSON"),
            (
                r#"{"kind":"NodeList","items":[]}"#.to_string(),
                "found kind \"NodeList\"",
            ),
            (two.to_string(), "holds 2 MachineDeployments"),
            (none.to_string(), "holds 0 MachineDeployments"),
            (machine.to_string(), "holds a \"Machine\""),
            (no_replicas.to_string(), "has no spec.replicas"),
            (
                with_replicas(V1BETA1, "-1"),
                "spec.replicas -1 is not a count",
            ),
            (with_replicas(V1BETA1, "\"3\""), "is not a count"),
            (with_replicas(V1BETA1, "2.5"), "is not a count"),
            (with_replicas(V1BETA1, "0"), "spec.replicas 0"),
        ];
        for (doc, want) in cases {
            let e = parse_replicas(&doc, "--expect-from md.json").unwrap_err();
            let line = e.to_string();
            assert!(
                line.starts_with("--expect-from md.json: ") && line.contains(want),
                "{want:?}: {line}"
            );
            assert!(!line.contains('\n'), "{line}");
        }
    }
}
