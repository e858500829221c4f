//! deploy/: `kubectl kustomize deploy/` renders; every rendered object is
//! valid against Kubernetes 1.37's published schema (the definitions
//! reachable from the rendered kinds, kept in tests/data/k8s-v1.37-schema.json
//! with their source; extracted by controller/scripts/extract-k8s-schema.py):
//! types, required fields, enums, int-or-string, and no field the schema
//! does not know (as `kubectl apply --validate=strict` refuses them); the
//! validator is shown to fail on broken objects. It also matches the
//! k8s-openapi 0.29 (v1_37) typed structs (read in and written back: the
//! same JSON). The Deployment holds what
//! the README promises; and the controller runs under exactly the RBAC
//! deploy/ grants (deploy/ applied to the real management cluster with
//! the pinned kubectl, the controller with its ServiceAccount's token): a
//! missing permission fails this test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{path::Path, process::Command, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{Namespace, Service, ServiceAccount},
        policy::v1::PodDisruptionBudget,
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
    },
    serde::{de::DeserializeOwned, Serialize},
};
use serde_json::{json, Value};

use common::*;

/// Read into the typed struct and back: unknown fields are dropped by the
/// typed read, so any difference is a field the schema does not have.
fn typed_roundtrip<T: DeserializeOwned + Serialize>(obj: &Value) {
    let t: T = serde_json::from_value(obj.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", obj["kind"], obj["metadata"]["name"]));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        &back, obj,
        "{}: fields the schema does not know, or defaults changed",
        obj["kind"]
    );
}

/// The stored schema: `roots` (apiVersion/kind → definition) and
/// `definitions` (JSON Schema as openapi2jsonschema writes Kubernetes's
/// swagger definitions: `$ref` to `#/$defs/NAME`, nullable types as
/// `["T", "null"]`, int-or-string and Quantity as `oneOf`).
fn schema() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-v1.37-schema.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "null" => v.is_null(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        t => panic!("a schema type this validator does not know: {t}"),
    }
}

/// Validates `v` at `path` against `s`, pushing one line per fault. Every
/// keyword of the stored schema is handled or known to carry no rule for
/// a client (`x-kubernetes-*` are server-side merge and list semantics);
/// any other keyword fails the test, so a re-extraction that brings one
/// is not silently half-checked.
fn check(
    defs: &serde_json::Map<String, Value>,
    s: &Value,
    v: &Value,
    path: &str,
    errs: &mut Vec<String>,
) {
    let s = s.as_object().expect("a schema is an object");
    for k in s.keys() {
        let known = matches!(
            k.as_str(),
            "$ref"
                | "type"
                | "properties"
                | "additionalProperties"
                | "items"
                | "required"
                | "enum"
                | "oneOf"
                | "format"
        ) || k.starts_with("x-kubernetes-");
        assert!(known, "{path}: schema keyword {k} is not handled");
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/$defs/").expect("a local $ref");
        let d = defs
            .get(name)
            .unwrap_or_else(|| panic!("{path}: $ref {name} not stored"));
        check(defs, d, v, path, errs);
    }
    if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
        let n = alts
            .iter()
            .filter(|a| {
                let mut e = Vec::new();
                check(defs, a, v, path, &mut e);
                e.is_empty()
            })
            .count();
        if n != 1 {
            errs.push(format!(
                "{path}: {v} matches {n} of the {} alternatives (int-or-string, quantity)",
                alts.len()
            ));
        }
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => panic!("{path}: type {t}"),
        };
        if !types.iter().any(|t| type_ok(t, v)) {
            errs.push(format!("{path}: {v} is not of type {}", types.join(" or ")));
            return;
        }
    }
    if let Some(f) = s.get("format").and_then(Value::as_str) {
        let ok = match f {
            "int32" => v.as_i64().is_none_or(|i| i32::try_from(i).is_ok()),
            _ => true, // int64, date-time, byte, double: the type carries the rule here
        };
        if !ok {
            errs.push(format!("{path}: {v} is not {f}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !v.is_null() && !e.contains(v) {
            errs.push(format!(
                "{path}: {v} is not one of {}",
                Value::Array(e.clone())
            ));
        }
    }
    if let Some(items) = s.get("items") {
        for (i, x) in v.as_array().into_iter().flatten().enumerate() {
            check(defs, items, x, &format!("{path}[{i}]"), errs);
        }
    }
    let Some(obj) = v.as_object() else { return };
    for r in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let r = r.as_str().unwrap();
        if !obj.contains_key(r) {
            errs.push(format!("{path}: required field {r} missing"));
        }
    }
    let props = s.get("properties").and_then(Value::as_object);
    let extra = s.get("additionalProperties");
    for (k, x) in obj {
        let sub = format!("{path}.{k}");
        match (props.and_then(|p| p.get(k)), extra) {
            (Some(ps), _) => check(defs, ps, x, &sub, errs),
            (None, Some(Value::Bool(false))) => errs.push(format!("{sub}: unknown field")),
            (None, Some(a)) if a.is_object() => check(defs, a, x, &sub, errs),
            // No properties and no additionalProperties: a free-form
            // object (RawExtension, FieldsV1).
            (None, _) if props.is_none() => {}
            // Strict: a field the schema does not name.
            (None, _) => errs.push(format!("{sub}: unknown field")),
        }
    }
}

/// Every fault of `obj` against the stored schema of its kind.
fn validate(schema: &Value, obj: &Value) -> Vec<String> {
    let key = format!(
        "{}/{}",
        obj["apiVersion"].as_str().unwrap_or(""),
        obj["kind"].as_str().unwrap_or("")
    );
    let Some(root) = schema["roots"][&key].as_str() else {
        return vec![format!("{key}: no schema stored for this kind")];
    };
    let defs = schema["definitions"].as_object().unwrap();
    let mut errs = Vec::new();
    check(
        defs,
        &json!({"$ref": format!("#/$defs/{root}")}),
        obj,
        &key,
        &mut errs,
    );
    errs
}

#[test]
fn rendered_objects_are_valid_against_the_upstream_schema() {
    let schema = schema();
    assert!(schema["source"]["upstream"]
        .as_str()
        .unwrap()
        .contains("v1.37.0"));
    for d in rendered() {
        let errs = validate(&schema, &d);
        assert!(
            errs.is_empty(),
            "{} {}: {errs:#?}",
            d["kind"],
            d["metadata"]["name"]
        );
    }
}

#[test]
fn the_schema_validator_refuses_broken_objects() {
    let schema = schema();
    let docs = rendered();
    let dep = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let crb = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    let broken = |base: &Value, f: &dyn Fn(&mut Value)| {
        let mut o = base.clone();
        f(&mut o);
        validate(&schema, &o)
    };
    let one = |errs: Vec<String>, want: &str| {
        assert!(
            errs.len() == 1 && errs[0].contains(want),
            "want one {want:?}, got {errs:#?}"
        );
    };
    // An unknown field, deep in the pod template (a typo kubectl strict refuses).
    one(
        broken(dep, &|o| {
            o["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = json!("Always")
        }),
        "Deployment.spec.template.spec.containers[0].imagePullPolicyy: unknown field",
    );
    // A wrong type.
    one(
        broken(dep, &|o| o["spec"]["replicas"] = json!("2")),
        "Deployment.spec.replicas: \"2\" is not of type integer",
    );
    // A missing required field.
    one(
        broken(dep, &|o| {
            o["spec"]["template"]["spec"]["containers"][0]
                .as_object_mut()
                .unwrap()
                .remove("name");
        }),
        "containers[0]: required field name missing",
    );
    one(
        broken(crb, &|o| {
            o.as_object_mut().unwrap().remove("roleRef");
        }),
        "required field roleRef missing",
    );
    // int-or-string: a probe port as a name or a number, not a bool.
    one(
        broken(dep, &|o| {
            o["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] =
                json!(true)
        }),
        "matches 0 of the 2 alternatives",
    );
    assert!(
        broken(dep, &|o| o["spec"]["template"]["spec"]["containers"][0]
            ["livenessProbe"]["httpGet"]["port"] =
            json!(8080))
        .is_empty()
    );
    // An enum: apiVersion/kind as the schema names them.
    one(
        broken(crb, &|o| o["roleRef"]["name"] = json!(7)),
        "is not of type string",
    );
    one(
        broken(dep, &|o| o["kind"] = json!("Deploymen")),
        "no schema stored",
    );
    // A map of strings (labels) with a non-string value.
    one(
        broken(dep, &|o| o["metadata"]["labels"]["x"] = json!(1)),
        "metadata.labels.x: 1 is not of type string",
    );
}

#[test]
fn manifests_render_and_match_the_upstream_schema() {
    let docs = rendered();
    let kinds: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    for want in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    ] {
        assert!(kinds.iter().any(|k| k == want), "{want} missing: {kinds:?}");
    }
    for d in &docs {
        match d["kind"].as_str().unwrap() {
            "Namespace" => typed_roundtrip::<Namespace>(d),
            "ServiceAccount" => typed_roundtrip::<ServiceAccount>(d),
            "ClusterRole" => typed_roundtrip::<ClusterRole>(d),
            "ClusterRoleBinding" => typed_roundtrip::<ClusterRoleBinding>(d),
            "Role" => typed_roundtrip::<Role>(d),
            "RoleBinding" => typed_roundtrip::<RoleBinding>(d),
            "Deployment" => typed_roundtrip::<Deployment>(d),
            "PodDisruptionBudget" => typed_roundtrip::<PodDisruptionBudget>(d),
            "Service" => typed_roundtrip::<Service>(d),
            k => panic!("an unchecked kind {k}"),
        }
        if d["kind"] != "Namespace" && !d["kind"].as_str().unwrap().starts_with("Cluster") {
            assert_eq!(d["metadata"]["namespace"], DEPLOY_NS, "{d}");
        }
    }
    let dep = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let spec = &dep["spec"]["template"]["spec"];
    assert_eq!(dep["spec"]["replicas"], 2);
    assert!(spec["affinity"]["podAntiAffinity"].is_object());
    let c = &spec["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(
        c["resources"]["requests"]["cpu"].is_string()
            && c["resources"]["requests"]["memory"].is_string()
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert!(spec["securityContext"]["runAsUser"].as_u64().unwrap() > 0);
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--leader-elect=true"), "{args:?}");
    assert!(args.contains(&"--http-listen=[::]:8080"), "{args:?}");
    // The binding names the ServiceAccount the Deployment runs as.
    let crb = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(crb["subjects"][0]["name"], spec["serviceAccountName"]);
    assert_eq!(crb["subjects"][0]["namespace"], DEPLOY_NS);
    // Secrets: get only (no list, no watch).
    let cr = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let secrets = cr["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"] == json!(["secrets"]))
        .unwrap();
    assert_eq!(secrets["verbs"], json!(["get"]));
}

/// deploy/ applied for real on the management cluster (`kubectl apply -k
/// deploy/`), the controller run with a token of its ServiceAccount: the
/// real RBAC authorizer decides every request.
#[test]
fn the_controller_runs_under_the_rbac_deploy_grants() {
    let env = Env::start();
    apply_deploy(&env.mgmt);
    let sa_kubeconfig = sa_kubeconfig(&env.mgmt, env.dir.path(), "replica-a");
    let sysctl = ("user.max_user_namespaces", "11255");
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[sysctl], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[sysctl]);

    // The server enforces: what deploy/ does not grant is refused.
    let out = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(&sa_kubeconfig)
        .args(["get", "secrets", "-A"])
        .output()
        .unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{out:?}"
    );

    let mark = env.mgmt.audit_mark();
    let ctl = env.controller_as(
        &sa_kubeconfig,
        &[
            "--leader-elect=true",
            "--leader-elect-resource-namespace",
            DEPLOY_NS,
        ],
        &[("POD_NAME", "replica-a")],
    );
    env.wait_status("m1", "True", Duration::from_secs(30));
    env.agent_writes("w1", "False", "SysctlMismatch", &[sysctl]);
    env.wait_status("m1", "False", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let lease = env
        .mgmt
        .get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{DEPLOY_NS}/leases/sandbox-readiness-controller"
        ))
        .expect("no Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "replica-a", "{lease}");
    assert!(
        !env.events("m1").is_empty(),
        "no Event recorded\n{}",
        ctl.log()
    );
    // Every write the controller made was the ServiceAccount's, and none
    // was refused; its reads cannot be seen in the audit log (writes only),
    // but a refused list or watch would have kept the Machine from True
    // and False, and is logged.
    // This test's: the other tests' controllers (as the admin, each with a
    // condition type of its own) write their own namespaces of the shared
    // management cluster meanwhile.
    let writes = env.mgmt.audit_writes_since(mark, |e| {
        let ns = e["objectRef"]["namespace"].as_str();
        by_controller(e) && (ns == Some(env.ns.as_str()) || ns == Some(DEPLOY_NS))
    });
    assert!(writes.len() >= 3, "{writes:#?}");
    for w in &writes {
        assert_eq!(w["user"]["username"], SA_USER, "{w:#}");
    }
    let denied: Vec<String> = writes
        .iter()
        .filter(|w| code(w) == 403)
        .map(|w| format!("{} {}", w["verb"], w["requestURI"]))
        .collect();
    assert!(
        denied.is_empty(),
        "the controller needed what deploy/ does not grant: {denied:?}\n{}",
        ctl.log()
    );
    let log = ctl.log();
    assert!(!log.contains("forbidden"), "{log}");
}
