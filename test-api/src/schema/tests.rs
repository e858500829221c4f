//! Table tests against the released CRDs: each expected text is what
//! kube-apiserver 1.32 answers for the same write.

use serde_json::{json, Value};

use super::*;

const BLOCKED: &str = "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

fn set() -> &'static CrdSet {
    match CrdSet::upstream_shared() {
        Ok(s) => s,
        Err(e) => panic!("the stored CRDs load: {e}"),
    }
}

fn condition(ty: &str) -> Value {
    json!({
        "type": ty,
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": "2026-12-01T21:00:00Z",
        "observedGeneration": 1
    })
}

fn machine(conditions: Vec<Value>) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default"},
        "spec": {
            "clusterName": "c1",
            "bootstrap": {"dataSecretName": "m1-bootstrap"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "m1"},
            "readinessGates": [{"conditionType": "sandbox-readiness.io/SandboxReady"}]
        },
        "status": {"conditions": conditions}
    })
}

fn machine_err(mut obj: Value) -> Invalid {
    match set().validate("cluster.x-k8s.io", "v1beta2", "Machine", &mut obj) {
        Ok(()) => panic!("expected a 422 for {obj}"),
        Err(e) => e,
    }
}

fn msg(causes: &[&str]) -> String {
    let head = "Machine.cluster.x-k8s.io \"m1\" is invalid";
    if causes.len() == 1 {
        format!("{head}: {}", causes[0])
    } else {
        format!("{head}: [{}]", causes.join(", "))
    }
}

#[test]
fn loading_is_quick() {
    // The test server loads these at every start (< 1 s budget in all).
    let t = std::time::Instant::now();
    let s = CrdSet::upstream().expect("loads");
    let took = t.elapsed();
    assert_eq!(s.kinds().count(), 6);
    assert!(took < std::time::Duration::from_millis(800), "{took:?}");
}

#[test]
fn kinds_list_the_stored_crds() {
    let s = set();
    let kinds: Vec<CrdKind> = s.kinds().collect();
    assert_eq!(kinds.len(), 6);
    let m = s.kind("cluster.x-k8s.io", "Machine").expect("Machine");
    assert_eq!(m.plural, "machines");
    assert_eq!(m.list_kind, "MachineList");
    assert_eq!(m.scope, Scope::Namespaced);
    assert_eq!(m.short_names, vec!["ma"]);
    let served: Vec<&str> = m.served_versions().map(|v| v.name.as_str()).collect();
    assert_eq!(served, vec!["v1beta1", "v1beta2"]);
    let storage = m.storage_version().expect("storage");
    assert_eq!(storage.name, "v1beta2");
    assert!(storage.status_subresource);
    assert!(!m.version("v1alpha3").expect("v1alpha3").served);
    assert!(storage.printer_columns.iter().any(|c| c.name == "Phase"));
    for (g, k, p) in [
        ("cluster.x-k8s.io", "MachineSet", "machinesets"),
        (
            "cluster.x-k8s.io",
            "MachineDeployment",
            "machinedeployments",
        ),
        ("cluster.x-k8s.io", "Cluster", "clusters"),
        ("bootstrap.cluster.x-k8s.io", "TalosConfig", "talosconfigs"),
        (
            "bootstrap.cluster.x-k8s.io",
            "TalosConfigTemplate",
            "talosconfigtemplates",
        ),
    ] {
        assert_eq!(s.kind(g, k).map(|c| c.plural.as_str()), Some(p), "{k}");
        assert_eq!(s.by_plural(g, p).map(|c| c.kind.as_str()), Some(k), "{p}");
    }
    let tc = s
        .kind("bootstrap.cluster.x-k8s.io", "TalosConfig")
        .expect("TalosConfig");
    let served: Vec<&str> = tc.served_versions().map(|v| v.name.as_str()).collect();
    assert_eq!(served, vec!["v1alpha3", "v1beta1"]);
}

#[test]
fn every_stored_rule_is_evaluated() {
    assert_eq!(set().unevaluated_rules(), vec![]);
}

#[test]
fn a_valid_v1beta2_machine_with_conditions_passes() {
    let mut obj = machine(vec![
        condition("Ready"),
        condition("sandbox-readiness.io/SandboxReady"),
    ]);
    let before = obj.clone();
    assert_eq!(
        set().validate("cluster.x-k8s.io", "v1beta2", "Machine", &mut obj),
        Ok(())
    );
    assert_eq!(obj, before, "nothing pruned or defaulted");
}

#[test]
fn the_422_table() {
    let long = "x".repeat(32_769);
    let cases: Vec<(&str, Value, Vec<String>)> = vec![
        (
            "condition without reason",
            {
                let mut c = condition("A");
                c.as_object_mut().map(|m| m.remove("reason"));
                machine(vec![c])
            },
            vec!["status.conditions[0].reason: Required value".into(), BLOCKED.into()],
        ),
        (
            "condition without lastTransitionTime",
            {
                let mut c = condition("A");
                c.as_object_mut().map(|m| m.remove("lastTransitionTime"));
                machine(vec![c])
            },
            vec!["status.conditions[0].lastTransitionTime: Required value".into(), BLOCKED.into()],
        ),
        (
            "a null reason is an absent one",
            {
                let mut c = condition("A");
                c["reason"] = Value::Null;
                machine(vec![c])
            },
            vec!["status.conditions[0].reason: Required value".into(), BLOCKED.into()],
        ),
        (
            "message over 32768",
            {
                let mut c = condition("A");
                c["message"] = json!(long);
                machine(vec![c])
            },
            vec![
                "status.conditions[0].message: Too long: may not be more than 32768 bytes".into(),
                BLOCKED.into(),
            ],
        ),
        (
            "a 33rd condition",
            machine((0..33).map(|i| condition(&format!("C{i}"))).collect()),
            vec!["status.conditions: Too many: 33: must have at most 32 items".into(), BLOCKED.into()],
        ),
        (
            "two conditions of one type",
            machine(vec![condition("Ready"), condition("Ready")]),
            vec!["status.conditions[1]: Duplicate value: map[string]interface {}{\"type\":\"Ready\"}".into()],
        ),
        (
            "reason not CamelCase",
            {
                let mut c = condition("A");
                c["reason"] = json!("not ready");
                machine(vec![c])
            },
            vec!["status.conditions[0].reason: Invalid value: \"not ready\": status.conditions[0].reason in body should match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'".into()],
        ),
        (
            "empty reason",
            {
                let mut c = condition("A");
                c["reason"] = json!("");
                machine(vec![c])
            },
            // The string validator stops at its first failure: no pattern error.
            vec!["status.conditions[0].reason: Invalid value: \"\": status.conditions[0].reason in body should be at least 1 chars long".into()],
        ),
        (
            "status not in the enum",
            {
                let mut c = condition("A");
                c["status"] = json!("Maybe");
                machine(vec![c])
            },
            vec![
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\"".into(),
                BLOCKED.into(),
            ],
        ),
        (
            "lastTransitionTime not a date-time",
            {
                let mut c = condition("A");
                c["lastTransitionTime"] = json!("yesterday");
                machine(vec![c])
            },
            vec!["status.conditions[0].lastTransitionTime: Invalid value: \"yesterday\": status.conditions[0].lastTransitionTime in body must be of type date-time: \"yesterday\"".into(), BLOCKED.into()],
        ),
        (
            "observedGeneration a string",
            {
                let mut c = condition("A");
                c["observedGeneration"] = json!("1");
                machine(vec![c])
            },
            vec!["status.conditions[0].observedGeneration: Invalid value: \"string\": status.conditions[0].observedGeneration in body must be of type integer: \"string\"".into(), BLOCKED.into()],
        ),
        (
            "observedGeneration a fraction",
            {
                let mut c = condition("A");
                c["observedGeneration"] = json!(1.5);
                machine(vec![c])
            },
            vec!["status.conditions[0].observedGeneration: Invalid value: \"number\": status.conditions[0].observedGeneration in body must be of type integer: \"number\"".into(), BLOCKED.into()],
        ),
        (
            "lastTransitionTime a number (the format names the type)",
            {
                let mut c = condition("A");
                c["lastTransitionTime"] = json!(1);
                machine(vec![c])
            },
            vec!["status.conditions[0].lastTransitionTime: Invalid value: \"int64\": status.conditions[0].lastTransitionTime in body must be of type date-time: \"int64\"".into(), BLOCKED.into()],
        ),
        (
            "a missing reason and a bad status: property errors before required",
            {
                let mut c = condition("A");
                c.as_object_mut().map(|m| m.remove("reason"));
                c["status"] = json!("Maybe");
                machine(vec![c])
            },
            vec![
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\"".into(),
                "status.conditions[0].reason: Required value".into(),
                BLOCKED.into(),
            ],
        ),
        (
            "observedGeneration below its minimum",
            {
                let mut c = condition("A");
                c["observedGeneration"] = json!(-1);
                machine(vec![c])
            },
            vec!["status.conditions[0].observedGeneration: Invalid value: -1: status.conditions[0].observedGeneration in body should be greater than or equal to 0".into()],
        ),
        (
            "CEL: a taint key of 64 characters",
            {
                let mut m = machine(vec![]);
                m["spec"]["taints"] = json!([{"key": "k".repeat(64), "effect": "NoSchedule", "propagation": "Always"}]);
                m
            },
            vec!["spec.taints[0].key: Invalid value: \"string\": key must be a valid qualified name of max size 63 characters with an optional subdomain prefix of max size 253 characters".into()],
        ),
        (
            "spec missing",
            {
                let mut m = machine(vec![]);
                m.as_object_mut().map(|o| o.remove("spec"));
                m
            },
            vec!["spec: Required value".into(), BLOCKED.into()],
        ),
    ];
    for (name, obj, causes) in cases {
        let e = machine_err(obj);
        let causes: Vec<&str> = causes.iter().map(String::as_str).collect();
        assert_eq!(e.message(), msg(&causes), "{name}");
        assert_eq!(e.http_status(), 422, "{name}");
        assert_eq!(e.causes.len(), causes.len(), "{name}");
    }
}

#[test]
fn message_length_counts_characters() {
    // maxLength is in characters (utf8.RuneCountInString): 32768 two-byte
    // characters are 65536 bytes and still valid.
    let mut c = condition("A");
    c["message"] = json!("é".repeat(32_768));
    let mut obj = machine(vec![c]);
    assert_eq!(
        set().validate("cluster.x-k8s.io", "v1beta2", "Machine", &mut obj),
        Ok(())
    );
}

#[test]
fn the_status_body_is_kube_apiservers() {
    let mut c = condition("A");
    c.as_object_mut().map(|m| m.remove("reason"));
    let e = machine_err(machine(vec![c]));
    assert_eq!(
        e.status(),
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": msg(&["status.conditions[0].reason: Required value", BLOCKED]),
            "reason": "Invalid",
            "details": {
                "name": "m1",
                "group": "cluster.x-k8s.io",
                "kind": "Machine",
                "causes": [
                    {"reason": "FieldValueRequired", "message": "Required value", "field": "status.conditions[0].reason"},
                    {"reason": "FieldValueInvalid", "message": "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation", "field": "<nil>"}
                ]
            },
            "code": 422
        })
    );
}

#[test]
fn unknown_fields_are_pruned_and_reported() {
    let mut c = condition("A");
    c["extra"] = json!("x");
    let mut obj = machine(vec![c]);
    obj["spec"]["foo"] = json!({"bar": 1});
    obj["status"]["nope"] = json!(true);
    obj["topLevel"] = json!(1);
    let warnings = set()
        .validate_with_warnings("cluster.x-k8s.io", "v1beta2", "Machine", &mut obj)
        .expect("valid once pruned");
    assert_eq!(obj, machine(vec![condition("A")]));
    assert_eq!(
        warnings,
        vec![
            "unknown field \"spec.foo\"",
            "unknown field \"status.conditions[0].extra\"",
            "unknown field \"status.nope\"",
            "unknown field \"topLevel\"",
        ]
    );
}

#[test]
fn preserved_fields_survive_and_metadata_is_kept() {
    let mut obj = json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3",
        "kind": "TalosConfig",
        "metadata": {"name": "t1", "namespace": "default", "labels": {"a": "b"}},
        "spec": {
            "generateType": "worker",
            "configPatches": [{"op": "add", "path": "/machine/sysctls", "value": {"user.max_user_namespaces": "11255"}}],
            "junk": 1
        }
    });
    set()
        .validate(
            "bootstrap.cluster.x-k8s.io",
            "v1alpha3",
            "TalosConfig",
            &mut obj,
        )
        .expect("valid");
    assert_eq!(
        obj["spec"]["configPatches"][0]["value"]["user.max_user_namespaces"],
        "11255"
    );
    assert_eq!(obj["metadata"]["labels"]["a"], "b");
    assert!(obj["spec"].get("junk").is_none());
}

#[test]
fn talosconfig_v1beta1_checks_generate_type_without_cel_cause() {
    let mut obj = json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "TalosConfig",
        "metadata": {"name": "t1", "namespace": "default"},
        "spec": {"generateType": "gpu"}
    });
    let e = set()
        .validate(
            "bootstrap.cluster.x-k8s.io",
            "v1beta1",
            "TalosConfig",
            &mut obj,
        )
        .expect_err("422");
    // No x-kubernetes-validations in this CRD: no blocked-rules cause.
    assert_eq!(
        e.message(),
        "TalosConfig.bootstrap.cluster.x-k8s.io \"t1\" is invalid: spec.generateType: Unsupported value: \"gpu\": supported values: \"controlplane\", \"worker\", \"init\", \"none\""
    );
}

// The served Cluster API versions carry no defaults (only the unserved
// v1alpha4 defaults replicas), so defaulting is tested on a small CRD.
const WIDGETS: &str = "kind: CustomResourceDefinition
spec:
  group: example.test
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer, default: 1, minimum: 0, maximum: 10}
              mode: {type: string, default: auto}
              note: {type: string, nullable: true}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              sizes:
                type: array
                items: {type: integer, default: 7}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                properties:
                  known:
                    type: object
                    properties: {x: {type: string}}
              embedded:
                type: object
                x-kubernetes-embedded-resource: true
                properties:
                  spec:
                    type: object
                    properties: {a: {type: string}}
              labels:
                type: object
                minProperties: 1
                maxProperties: 2
                additionalProperties: {type: string, maxLength: 3}
";

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}, "spec": spec})
}

fn widget_result(spec: Value) -> (Value, Result<(), Invalid>) {
    let s = CrdSet::from_yaml([("widgets.yaml", WIDGETS)]).expect("loads");
    let mut obj = widget(spec);
    let r = s.validate("example.test", "v1", "Widget", &mut obj);
    (obj, r)
}

#[test]
fn defaults_are_applied_and_nulls_dropped() {
    let (obj, r) = widget_result(json!({"mode": null, "note": null}));
    assert_eq!(r, Ok(()));
    assert_eq!(
        obj["spec"],
        json!({"replicas": 1, "mode": "auto", "note": null})
    );
    let (obj, r) = widget_result(json!({"sizes": [1, null]}));
    assert_eq!(r, Ok(()));
    assert_eq!(
        obj["spec"]["sizes"],
        json!([1, 7]),
        "a null item takes the items' default"
    );
    let (obj, r) = widget_result(json!({"replicas": 3}));
    assert_eq!(r, Ok(()));
    assert_eq!(obj["spec"]["replicas"], json!(3));
}

#[test]
fn preserve_unknown_and_embedded_resources_prune_as_upstream() {
    let s = CrdSet::from_yaml([("widgets.yaml", WIDGETS)]).expect("loads");
    let mut obj = widget(json!({
        "extra": {"free": {"deep": 1}, "known": {"x": "a", "y": 2}},
        "embedded": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {"a": "1", "b": 2}, "other": 3}
    }));
    let w = s
        .validate_with_warnings("example.test", "v1", "Widget", &mut obj)
        .expect("valid");
    assert_eq!(
        w,
        vec![
            "unknown field \"spec.embedded.other\"",
            "unknown field \"spec.embedded.spec.b\"",
            "unknown field \"spec.extra.known.y\"",
        ]
    );
    assert_eq!(
        obj["spec"]["extra"],
        json!({"free": {"deep": 1}, "known": {"x": "a"}})
    );
    assert_eq!(
        obj["spec"]["embedded"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {"a": "1"}})
    );
}

#[test]
fn widget_table() {
    let cases = [
        (json!({"replicas": 11}), "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"),
        (json!({"replicas": 1.5}), "spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""),
        (json!({"tags": ["a", "b", "a", "a"]}), "spec.tags[2]: Duplicate value: \"a\""),
        (json!({"labels": {}}), "spec.labels: Invalid value: 0: spec.labels in body should have at least 1 properties"),
        (json!({"labels": {"a": "1", "b": "2", "c": "3"}}), "spec.labels: Too many: 3: must have at most 2 items"),
        (json!({"labels": {"a": "long"}}), "spec.labels.a: Too long: may not be more than 3 bytes"),
    ];
    for (spec, want) in cases {
        let (_, r) = widget_result(spec.clone());
        let e = r.expect_err("422");
        assert_eq!(
            e.message(),
            format!("Widget.example.test \"w\" is invalid: {want}"),
            "{spec}"
        );
    }
    // An integral float is an integer, as Go's JSON decoding makes it.
    assert_eq!(widget_result(json!({"replicas": 2.0})).1, Ok(()));
}

#[test]
fn object_meta_is_checked_first() {
    let mut obj = machine(vec![]);
    obj["metadata"] = json!({"name": "M1", "labels": {"ok": "yes"}});
    let e = machine_err(obj);
    assert_eq!(
        e.message(),
        "Machine.cluster.x-k8s.io \"M1\" is invalid: [metadata.name: Invalid value: \"M1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), metadata.namespace: Required value, <nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
    );
}

#[test]
fn type_meta_must_match() {
    let mut obj = machine(vec![]);
    obj["apiVersion"] = json!("cluster.x-k8s.io/v1beta1");
    let e = machine_err(obj);
    assert_eq!(
        e.message(),
        msg(&["apiVersion: Invalid value: \"cluster.x-k8s.io/v1beta1\": must be cluster.x-k8s.io/v1beta2"])
    );
    let mut other = machine(vec![]);
    let r = set().validate("cluster.x-k8s.io", "v9", "Machine", &mut other);
    assert!(r.is_err());
}

#[test]
fn bad_crd_text_is_one_error() {
    let r = CrdSet::from_yaml([("x.yaml", "kind: [")]);
    assert!(matches!(r, Err(SchemaError::Parse { .. })));
    let r = CrdSet::from_yaml([("x.yaml", "kind: ConfigMap\nspec: {group: g, names: {kind: K, plural: ks}, scope: Cluster, versions: []}\n")]);
    assert!(matches!(r, Err(SchemaError::Parse { .. })));
    let bad_pattern = "kind: CustomResourceDefinition\nspec:\n  group: g\n  names: {kind: K, plural: ks}\n  scope: Cluster\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          a: {type: string, pattern: '('}\n";
    let r = CrdSet::from_yaml([("x.yaml", bad_pattern)]);
    assert!(
        matches!(r, Err(SchemaError::Pattern { .. })),
        "{:?}",
        r.err()
    );
}
