//! The pool's desired state from every form, upstream fixtures first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;

const V113: &str = include_str!("../../tests/fixtures/desired/talos-worker-v1.13.yaml");
const V114: &str = include_str!("../../tests/fixtures/desired/talos-worker-v1.14-multidoc.yaml");
const COZY: &str = include_str!("../../tests/fixtures/desired/cozystack-tct.yaml");
const STRATEGIC: &str = include_str!("../../tests/fixtures/desired/cabpt-strategic.yaml");
const JSON6902: &str = include_str!("../../tests/fixtures/desired/cabpt-json6902.yaml");
const LIST: &str = include_str!("../../tests/fixtures/desired/talosconfigtemplates-list.json");

fn rows(p: &PoolDesired) -> Vec<(String, String, String)> {
    p.sysctls
        .iter()
        .map(|(k, s)| (k.clone(), s.value.clone(), s.source.clone()))
        .collect()
}

fn row(k: &str, v: &str, s: &str) -> (String, String, String) {
    (k.into(), v.into(), s.into())
}

fn no_marker(text: &str) {
    assert!(
        !text.contains("MARKER-SECRET"),
        "a secret marker leaked: {text}"
    );
}

#[test]
fn every_form_yields_its_sysctls_with_their_sources() {
    let p = parse(V113, "f", None).unwrap();
    assert_eq!(p.origin, "machine config");
    assert_eq!(rows(&p), [row("foo", "bar", "machine.sysctls")]);

    let p = parse(V114, "f", None).unwrap();
    assert_eq!(
        rows(&p),
        [
            row("foo", "bar", "SysctlConfig"),
            row("kernel.yama.ptrace_scope", "1", "SysctlConfig"),
            row("user.max_user_namespaces", "11255", "SysctlConfig"),
        ]
    );

    let p = parse(COZY, "f", None).unwrap();
    assert_eq!(
        p.origin,
        "TalosConfigTemplate tenant-a/kubernetes-tenant-a-md0"
    );
    assert_eq!(
        rows(&p),
        [row(
            "user.max_user_namespaces",
            "11255",
            "data (machine.sysctls)"
        )]
    );
    let agent = p.agent.as_ref().unwrap();
    assert!(agent.desired.require_userns);
    assert_eq!(crate::desired::covers(&agent.desired, &p.desired()), Ok(()));
    assert_eq!(
        p.source_of("user.max_user_namespaces").unwrap(),
        "TalosConfigTemplate tenant-a/kubernetes-tenant-a-md0: data (machine.sysctls)"
    );

    let p = parse(STRATEGIC, "f", None).unwrap();
    assert_eq!(
        rows(&p),
        [
            row(
                "user.max_user_namespaces",
                "11255",
                "strategicPatches[3] (SysctlConfig)"
            ),
            row(
                "vm.max_map_count",
                "262144",
                "strategicPatches[2] (machine.sysctls)"
            ),
        ]
    );
    assert!(p.agent.is_some());

    let p = parse(JSON6902, "f", None).unwrap();
    assert_eq!(
        rows(&p),
        [
            row(
                "user.max_user_namespaces",
                "11255",
                "configPatches[2] (machine.sysctls)"
            ),
            row(
                "vm.max_map_count",
                "262144",
                "configPatches[2] (machine.sysctls)"
            ),
        ]
    );
    assert!(p.agent.is_none());
}

#[test]
fn a_list_needs_one_item_or_a_name() {
    let e = parse(LIST, "--desired-from l.json", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--desired-from l.json: the list holds 2 items: pick one with --desired-name [NAMESPACE/]NAME"
    );
    let p = parse(LIST, "f", Some("tenant-b/pool-b-md0-7d1e0c")).unwrap();
    assert_eq!(p.origin, "TalosConfigTemplate tenant-b/pool-b-md0-7d1e0c");
    let p = parse(LIST, "f", Some("kubernetes-tenant-a-md0")).unwrap();
    assert_eq!(p.sysctls["user.max_user_namespaces"].value, "11255");
    let e = parse(LIST, "f", Some("tenant-a/pool-b-md0-7d1e0c")).unwrap_err();
    assert!(e.message.contains("no item named"), "{e}");
    let e = parse(COZY, "f", Some("other")).unwrap_err();
    assert!(e.message.contains("is not \"other\""), "{e}");
}

#[test]
fn an_add_of_the_whole_map_replaces_it_and_patches_follow_cabpts_order() {
    let tc = r#"{"apiVersion":"bootstrap.cluster.x-k8s.io/v1alpha3","kind":"TalosConfig",
      "metadata":{"name":"w","namespace":"ns"},
      "spec":{"generateType":"none","data":"version: v1alpha1\nmachine:\n  sysctls:\n    a.b: \"1\"\n    c.d: \"2\"\n",
        "configPatches":[{"op":"add","path":"/machine/sysctls","value":{"e.f":"3"}}],
        "strategicPatches":["machine:\n  sysctls:\n    e.f: 4\n"]}}"#;
    let p = parse(tc, "f", None).unwrap();
    assert_eq!(
        rows(&p),
        [row("e.f", "4", "strategicPatches[0] (machine.sysctls)")]
    );
}

#[test]
fn a_strategic_patch_may_be_a_json_patch_as_configpatcher_loads_it() {
    let tc = r#"{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta1","kind":"TalosConfig",
      "metadata":{"name":"w"},
      "spec":{"generateType":"worker","talosVersion":"v1.11",
        "strategicPatches":["- op: add\n  path: /machine/sysctls\n  value:\n    user.max_user_namespaces: \"11255\"\n"]}}"#;
    let p = parse(tc, "f", None).unwrap();
    assert_eq!(
        rows(&p),
        [row(
            "user.max_user_namespaces",
            "11255",
            "strategicPatches[0] (machine.sysctls)"
        )]
    );
    // From 1.12 the generated config has several documents: refused.
    let e = parse(&tc.replace("v1.11", "v1.12"), "f", None).unwrap_err();
    assert!(e.message.contains("multi-document"), "{e}");
    // A generated base sets nothing.
    let mut bare: Value = serde_json::from_str(tc).unwrap();
    bare["spec"]
        .as_object_mut()
        .unwrap()
        .remove("strategicPatches");
    assert!(parse(&bare.to_string(), "f", None)
        .unwrap()
        .sysctls
        .is_empty());
}

#[test]
fn bad_input_is_one_line_and_quotes_no_secret() {
    let data_secret = |data: &str| {
        format!(
            r#"{{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta1","kind":"TalosConfigTemplate","metadata":{{"name":"t","namespace":"n"}},"spec":{{"template":{{"spec":{{"generateType":"none","data":{}}}}}}}}}"#,
            serde_json::to_string(data).unwrap()
        )
    };
    let multi = COZY.replace("generateType: none", "generateType: none\n      configPatches:\n        - {op: add, path: /machine/sysctls, value: {a.b: \"1\"}}");
    let new_talos = JSON6902.replace("talosVersion: v1.6", "talosVersion: v1.12.0");
    let cases: Vec<(String, &str)> = vec![
        ("kind: Secret\napiVersion: v1\ndata: {token: MARKER-SECRET-X}\n".into(), "found kind \"Secret\""),
        ("{\"kind\":\"Machine\",\"apiVersion\":\"cluster.x-k8s.io/v1beta1\"}".into(), "found kind \"Machine\""),
        ("token: MARKER-SECRET-X\n  bad: [".into(), "not YAML or JSON"),
        (data_secret("token: MARKER-SECRET-X\n"), "not a Talos machine config"),
        (data_secret("version: v1alpha1\nmachine: {token: MARKER-SECRET-X\n"), "data: "),
        (data_secret("version: v1alpha1\nmachine:\n  token: MARKER-SECRET-X\n  sysctls:\n    a.b: [MARKER-SECRET-X]\n"), "a.b is not a scalar value"),
        (data_secret(""), "generateType none without data"),
        (multi, "multi-document"),
        (new_talos, "1.12 or later"),
        (JSON6902.replace("op: replace", "op: test"), "test \"/machine/install\""),
        (JSON6902.replace("generateType: controlplane", "generateType: bogus"), "unknown generateType"),
        (STRATEGIC.replace("params:\n            user.max_user_namespaces: \"11255\"", "params: [x]"), "strategicPatches[3]: SysctlConfig is not a mapping"),
        (COZY.replace("SANDBOX_READINESS_REQUIRE_USERNS=true", "SANDBOX_READINESS_REQUIRE_USERNS=yes"), "expected true or false"),
        (V114.replace("kind: HostnameConfig", "kind: SysctlConfig"), "appears twice"),
    ];
    for (doc, want) in cases {
        let e = parse(&doc, "--desired-from x", None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--desired-from x: "), "{e}");
        assert!(e.contains(want), "want {want:?}: {e}");
        assert!(!e.contains('\n'), "{e}");
        no_marker(&e);
    }
}

#[test]
fn no_secret_reaches_a_source_or_a_value() {
    for doc in [V113, V114, COZY, STRATEGIC, JSON6902] {
        let p = parse(doc, "f", None).unwrap();
        no_marker(&format!("{p:?}"));
    }
}

/// A sysctl value as YAML writes it, bare or quoted.
fn yaml_value(v: u32, quoted: bool) -> String {
    if quoted {
        format!("\"{v}\"")
    } else {
        v.to_string()
    }
}

proptest! {
    /// Over the forms CABPT accepts (JSON patches only on a single-document
    /// base before Talos 1.12): the effective value is the last stage's, in
    /// CABPT's order, whatever the quoting.
    #[test]
    fn cabpt_forms(
        base in proptest::option::of((0u32..70000, any::<bool>())),
        json in proptest::option::of(0u32..70000),
        strategic in proptest::collection::vec((0u32..70000, any::<bool>(), any::<bool>()), 0..4),
        multi_doc_base in any::<bool>(),
        template in any::<bool>(),
    ) {
        let key = "user.max_user_namespaces";
        let mut data = "version: v1alpha1\nmachine:\n  type: worker\n  token: MARKER-SECRET-T\n".to_string();
        if let Some((v, q)) = base {
            data.push_str(&format!("  sysctls:\n    {key}: {}\n", yaml_value(v, q)));
        }
        // JSON patches are accepted on single-document bases only.
        let multi_doc_base = multi_doc_base && json.is_none();
        if multi_doc_base {
            data.push_str("---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n");
        }
        let mut spec = serde_json::json!({"generateType": "none", "talosVersion": "v1.11", "data": data});
        let mut want = base.map(|(v, _)| v);
        if let Some(v) = json {
            spec["configPatches"] = serde_json::json!([{"op": "add", "path": "/machine/sysctls", "value": {key: v.to_string()}}]);
            want = Some(v);
        }
        let mut patches = Vec::new();
        for (v, q, as_doc) in &strategic {
            patches.push(if *as_doc {
                format!("apiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n  {key}: {}\n", yaml_value(*v, *q))
            } else {
                format!("machine:\n  sysctls:\n    {key}: {}\n", yaml_value(*v, *q))
            });
        }
        spec["strategicPatches"] = serde_json::json!(patches);
        // A SysctlConfig, once present, wins over every later machine.sysctls.
        let mut sysctl_config: Option<u32> = None;
        for (v, _, as_doc) in &strategic {
            if *as_doc { sysctl_config = Some(*v) } else { want = Some(*v) }
        }
        let want = sysctl_config.or(want);
        let obj = if template {
            serde_json::json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "TalosConfigTemplate",
                "metadata": {"name": "t", "namespace": "n"}, "spec": {"template": {"spec": spec}}})
        } else {
            serde_json::json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfig",
                "metadata": {"name": "t", "namespace": "n"}, "spec": spec})
        };
        let p = parse(&obj.to_string(), "f", None).unwrap();
        prop_assert_eq!(p.sysctls.get(key).map(|s| s.value.clone()), want.map(|v| v.to_string()));
        let shown = format!("{p:?}");
        prop_assert!(!shown.contains("MARKER-SECRET"));
    }
}

/// What tests/talos_oracle.rs found CABPT v0.6.11 (machinery v1.12.0) and
/// Talos v1.13.9 do and ours did not.
#[test]
fn as_cabpt_and_talos_do() {
    let tc = |spec: serde_json::Value| {
        serde_json::json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfig",
            "metadata": {"name": "t", "namespace": "n"}, "spec": spec})
        .to_string()
    };
    let data =
        "version: v1alpha1\nmachine:\n  type: worker\n  sysctls:\n    vm.max_map_count: 0x10\n";
    // A move or copy loses `from` in CABPT's configPatches type.
    let e = parse(
        &tc(serde_json::json!({"generateType": "none", "data": data,
            "configPatches": [{"op": "copy", "from": "/machine/type", "path": "/machine/x"}]})),
        "f",
        None,
    )
    .unwrap_err();
    assert!(e.message.contains("needs `from`"), "{e}");
    // JSON patches of a single-document `data` work whatever the talosVersion;
    // the value keeps its written text; an empty sysctls map is gone
    // after CABPT re-encodes `data`, so adding below it fails.
    let p = parse(
        &tc(
            serde_json::json!({"generateType": "none", "data": data, "talosVersion": "v1.13",
            "configPatches": [{"op": "replace", "path": "/machine/sysctls/a.b", "value": "1"}]}),
        ),
        "f",
        None,
    )
    .unwrap();
    assert_eq!(p.sysctls["vm.max_map_count"].value, "0x10");
    assert_eq!(p.sysctls["a.b"].value, "1");
    let empty = "version: v1alpha1\nmachine:\n  type: worker\n  sysctls: {}\n";
    assert!(parse(
        &tc(serde_json::json!({"generateType": "none", "data": empty,
            "strategicPatches": ["- op: add\n  path: /machine/sysctls/a.b\n  value: \"1\"\n"]})),
        "f",
        None
    )
    .is_err());
    // Without a talosVersion CABPT generates for 1.12: several documents
    // (a JSON patch cannot apply) until the HostnameConfig is deleted.
    let json_patch = "- op: add\n  path: /machine/sysctls\n  value: {a.b: \"1\"}\n";
    assert!(parse(
        &tc(serde_json::json!({"generateType": "worker", "strategicPatches": [json_patch]})),
        "f",
        None
    )
    .is_err());
    let p = parse(
        &tc(
            serde_json::json!({"generateType": "worker", "strategicPatches": [
            "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n", json_patch]}),
        ),
        "f",
        None,
    )
    .unwrap();
    assert_eq!(p.sysctls["a.b"].value, "1");
    // A mapping key twice is refused.
    let dup = "version: v1alpha1\nmachine:\n  sysctls:\n    a.b: \"1\"\n    a.b: \"2\"\n";
    assert!(parse(dup, "f", None).unwrap_err().message.contains("twice"));
}
