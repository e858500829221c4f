//! Every Kubernetes object the docs show is one the real API server takes:
//! each document of each fenced `yaml` block under docs/ that names an
//! `apiVersion` and `kind` is applied with a server-side dry run to a real
//! kube-apiserver (tests/support/cluster.rs) on which the real Cluster API
//! and CABPT managers run with their CRDs and their defaulting, validating
//! and conversion webhooks registered (`scripts/control-plane.sh capi`), and
//! the prometheus-operator CRDs from its module archive — so an example is
//! judged by the schema, CEL rules, admission and webhooks an operator's
//! cluster has, not by a reading of them. The Kustomization the controller
//! page shows is built over `deploy/` with the pinned kubectl and its output
//! dry-run the same way.
//!
//! Talos documents (`v1alpha1` machine-config documents) are not Kubernetes
//! objects: tests/talos_oracle.rs loads them with Talos's own machinery.

use std::{path::Path, sync::OnceLock};

use serde_json::Value;

use crate::support::{
    cluster::RealCluster,
    markdown::{docs_pages, fenced, rel, root},
};

/// `(apiVersion, kind, why)` of what the docs show but no API server here
/// takes. Any other kind must be accepted.
const NOT_APPLIED: &[(&str, &str, &str)] = &[
    (
        "v1alpha1",
        "ExtensionServiceConfig",
        "a Talos document (tests/talos_oracle.rs)",
    ),
    (
        "v1alpha1",
        "SysctlConfig",
        "a Talos document (tests/talos_oracle.rs)",
    ),
    (
        "v1alpha1",
        "NetworkRuleConfig",
        "a Talos document (tests/talos_oracle.rs)",
    ),
    (
        "kustomize.config.k8s.io/v1beta1",
        "Kustomization",
        "kustomize's input: built over deploy/ by the overlay test below",
    ),
    (
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        "FluxCD's CRD: Flux is not run here (the chart it installs is installed for real by \
         controller/tests/controller/chart.rs)",
    ),
    (
        "readiness.node.x-k8s.io/v1alpha1",
        "NodeReadinessRule",
        "node-readiness-controller's CRD: the module proxy refuses its module \
         (sigs.k8s.io/node-readiness-controller: 403), so its API cannot be registered here",
    ),
];

/// One Kubernetes object shown in the docs.
struct Example {
    origin: String,
    object: Value,
}

fn examples() -> (Vec<Example>, Vec<String>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for page in docs_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (start, body) in fenced(&text, "yaml") {
            for doc in serde_yaml_ng::Deserializer::from_str(&body) {
                let Ok(value) = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc)
                else {
                    continue; // the unit tier's parse check names it
                };
                let Ok(object) = serde_json::to_value(&value) else {
                    continue;
                };
                let (Some(api), Some(kind)) =
                    (object["apiVersion"].as_str(), object["kind"].as_str())
                else {
                    continue; // a fragment (a patch, a field list), not an object
                };
                let origin = format!("{}:{start}", rel(&page));
                if let Some((.., why)) =
                    NOT_APPLIED.iter().find(|(a, k, _)| *a == api && *k == kind)
                {
                    skipped.push(format!("{origin}: {api} {kind}: {why}"));
                    continue;
                }
                found.push(Example { origin, object });
            }
        }
    }
    (found, skipped)
}

/// The cluster every example is judged by: CAPI, CABPT and the
/// prometheus-operator CRDs registered; one for the module's tests (its
/// watchdog takes it down when the test binary ends).
fn judge() -> &'static RealCluster {
    static JUDGE: OnceLock<RealCluster> = OnceLock::new();
    JUDGE.get_or_init(start_judge)
}

fn start_judge() -> RealCluster {
    let cluster = RealCluster::private();
    cluster.start_capi();
    // The monitoring page's ServiceMonitor and PrometheusRule.
    cluster.register_prometheus_operator_crds();
    cluster
}

/// Creates (for real) the namespace a namespaced example names: a dry run
/// in a namespace that does not exist is refused before any validation.
fn ensure_namespace(cluster: &RealCluster, object: &Value) {
    if let Some(ns) = object["metadata"]["namespace"].as_str() {
        let (code, _, err) = cluster.kubectl(&["create", "namespace", ns]);
        assert!(
            code == 0 || err.contains("AlreadyExists"),
            "create namespace {ns}: {err}"
        );
    }
}

/// A server-side dry-run apply: the object as the server would store it
/// (defaulted by the webhooks), or the server's refusal.
fn dry_run(cluster: &RealCluster, object: &Value) -> Result<Value, String> {
    let (code, out, err) = cluster.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "--field-manager=docs-example",
            // Past a field another manager owns, to the webhooks' verdict.
            "--force-conflicts",
            "-o",
            "json",
            "-f",
            "-",
        ],
        Some(&object.to_string()),
    );
    if code != 0 {
        return Err(err.trim().to_string());
    }
    serde_json::from_str(&out).map_err(|e| format!("kubectl printed no object: {e}"))
}

#[test]
fn every_kubernetes_object_in_the_docs_is_accepted_by_the_real_server_with_capi_webhooks() {
    let (examples, skipped) = examples();
    eprintln!(
        "not applied (no API server here takes them):\n  {}",
        skipped.join("\n  ")
    );
    let kinds: Vec<&str> = examples
        .iter()
        .filter_map(|e| e.object["kind"].as_str())
        .collect();
    // The examples the gate's safety rests on must be among the judged.
    for needed in [
        "MachineHealthCheck",
        "TalosConfigTemplate",
        "RuntimeClass",
        "NetworkPolicy",
    ] {
        assert!(
            kinds.contains(&needed),
            "no {needed} among the docs' examples any more: {kinds:?}"
        );
    }
    let cluster = judge();
    let mut refused = Vec::new();
    for e in &examples {
        ensure_namespace(cluster, &e.object);
        match dry_run(cluster, &e.object) {
            Ok(stored) => {
                // CAPI's defaulting webhook ran on every MachineHealthCheck:
                // only it sets the cluster-name label (the schema has no
                // default for labels).
                if e.object["kind"] == "MachineHealthCheck" {
                    let cluster_name = &e.object["spec"]["clusterName"];
                    assert_eq!(
                        &stored["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
                        cluster_name,
                        "{}: CAPI's defaulting webhook did not run on this MachineHealthCheck",
                        e.origin
                    );
                }
            }
            Err(why) => refused.push(format!("{}: {}: {why}", e.origin, e.object["kind"])),
        }
    }
    assert!(
        refused.is_empty(),
        "the real server (CAPI v1.13.6, CABPT v0.6.11 webhooks) refuses these docs examples:\n{}",
        refused.join("\n")
    );
    eprintln!("{} docs examples accepted: {kinds:?}", examples.len());

    // The webhooks judge, not only the schema: a MachineHealthCheck whose
    // selector is empty passes the CRD's schema and is refused by CAPI's
    // validating webhook alone.
    let mut mhc = examples
        .iter()
        .find(|e| e.object["kind"] == "MachineHealthCheck")
        .unwrap()
        .object
        .clone();
    mhc["spec"]["selector"] = serde_json::json!({});
    let why = dry_run(cluster, &mhc).expect_err("an empty selector is refused by CAPI's webhook");
    assert!(
        why.contains("selector must not be empty"),
        "refused, but not by CAPI's validating webhook: {why}"
    );
}

#[test]
fn cabpt_makes_the_docs_talosconfigtemplate_immutable() {
    let (examples, _) = examples();
    let template = examples
        .iter()
        .find(|e| e.object["kind"] == "TalosConfigTemplate")
        .expect("a TalosConfigTemplate in the docs")
        .object
        .clone();
    let cluster = judge();
    ensure_namespace(cluster, &template);
    cluster.kubectl_ok(
        &["apply", "--server-side", "-f", "-"],
        Some(&template.to_string()),
    );
    // Any change of spec.template.spec is refused by CABPT's validating
    // webhook (TalosConfigTemplate.ValidateUpdate): a pool changes its
    // config by a new template, and the rollout that follows.
    let mut changed = template.clone();
    changed["spec"]["template"]["spec"]["talosVersion"] = Value::from("v1.99");
    let why = dry_run(cluster, &changed).expect_err("CABPT refuses a changed template");
    assert!(
        why.contains("immutable"),
        "refused, but not by CABPT's webhook: {why}"
    );
}

#[test]
fn the_controller_pages_overlay_over_deploy_is_accepted_by_the_real_server() {
    let page = std::fs::read_to_string(root().join("docs/deployment/controller.md")).unwrap();
    let overlay = fenced(&page, "yaml")
        .into_iter()
        .map(|(_, body)| body)
        .find(|b| b.contains("kind: Kustomization") && b.contains("images:"))
        .expect("the controller page's overlay with its image entry");
    let work = tempfile::tempdir().unwrap();
    copy_dir(&root().join("deploy"), &work.path().join("deploy"));
    std::fs::create_dir(work.path().join("overlay")).unwrap();
    std::fs::write(work.path().join("overlay/kustomization.yaml"), &overlay).unwrap();

    let cluster = judge();
    let built = cluster.kubectl_ok(
        &["kustomize", work.path().join("overlay").to_str().unwrap()],
        None,
    );
    assert!(
        built.contains("image: registry.example.com/platform/sandbox-readiness-controller@sha256:"),
        "the overlay did not pin the image by digest:\n{built}"
    );
    let mut n = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(&built) {
        let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).unwrap();
        let object = serde_json::to_value(&value).unwrap();
        if object["kind"] == "Namespace" {
            let name = object["metadata"]["name"].as_str().unwrap();
            let (code, _, err) = cluster.kubectl(&["create", "namespace", name]);
            assert!(code == 0 || err.contains("AlreadyExists"), "{err}");
            continue;
        }
        ensure_namespace(cluster, &object);
        dry_run(cluster, &object).unwrap_or_else(|why| {
            panic!(
                "deploy/ through the docs' overlay: {} refused: {why}",
                object["kind"]
            )
        });
        n += 1;
    }
    assert!(n >= 5, "only {n} objects built from deploy/");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The shell commands of a fenced `sh` block, continuation lines joined,
/// a quoted argument spanning lines and a here-document (`<<WORD` up to the
/// line `WORD`) kept whole.
fn shell_commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut heredoc: Option<String> = None;
    for line in block.lines() {
        let line = line.trim_end();
        if let Some(word) = &heredoc {
            cur.push_str(line);
            if line == word {
                heredoc = None;
                out.push(std::mem::take(&mut cur));
            } else {
                cur.push('\n');
            }
            continue;
        }
        if let Some((_, word)) = line.rsplit_once("<<") {
            if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                cur.push_str(line);
                cur.push('\n');
                heredoc = Some(word.to_string());
                continue;
            }
        }
        if cur.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            cur.push_str(head);
            continue;
        }
        cur.push_str(line);
        if cur.matches('\'').count() % 2 == 1 {
            cur.push('\n'); // inside a single-quoted argument
            continue;
        }
        out.push(std::mem::take(&mut cur));
    }
    out
}

/// The quick start's management-cluster commands (steps 4, 6 and 7:
/// create the copied templates, point the MachineDeployment at them,
/// annotate it for the mirror, add the gate with a server-side apply) run
/// as written, with `bash`, against the real server with CAPI's and
/// CABPT's webhooks, on a MachineDeployment that already has a gate of
/// another controller. What they must leave: both templates, the
/// MachineDeployment on the last one, the mirror annotation, and both gates
/// (the apply owns its own entry of the keyed list and keeps the one that
/// was there). The `wait` commands need a running pool: tests/quick_start.rs
/// runs the whole page on the playground, on a pool without gates.
#[test]
fn the_quick_starts_management_cluster_commands_run_as_written() {
    let page = std::fs::read_to_string(root().join("docs/get-started/quick-start.md")).unwrap();
    let commands: Vec<String> = fenced(&page, "sh")
        .iter()
        .flat_map(|(_, b)| shell_commands(b))
        .filter(|c| c.starts_with("kubectl --kubeconfig mgmt.kubeconfig -n $NS "))
        .collect();
    let (run, waits): (Vec<&String>, Vec<&String>) =
        commands.iter().partition(|c| !c.contains(" wait "));
    assert!(
        run.len() >= 5 && !waits.is_empty(),
        "the quick start's management commands changed shape: {commands:#?}"
    );

    let cluster = judge();
    let ns = cluster.unique("tenant");
    let md = format!("{ns}-workers");
    cluster.kubectl_ok(&["create", "namespace", &ns], None);
    // The pool as the quick start finds it: its MachineDeployment (on a
    // template of its own, with another controller's gate) and that
    // template. No Cluster object: CAPI's webhook refuses one without a
    // control-plane or infrastructure reference, and none exists here.
    let base_template = examples()
        .0
        .into_iter()
        .find(|e| e.object["kind"] == "TalosConfigTemplate")
        .unwrap()
        .object;
    let template = |name: &str| {
        let mut t = base_template.clone();
        t["metadata"] = serde_json::json!({"name": name, "namespace": ns});
        t
    };
    let pool = [
        template(&format!("{md}-old")),
        serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
         "metadata": {"name": md, "namespace": ns},
         "spec": {"clusterName": ns, "replicas": 0, "template": {"spec": {
             "clusterName": ns,
             "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                                         "kind": "TalosConfigTemplate", "name": format!("{md}-old")}},
             "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                   "kind": "TestMachineTemplate", "name": "unused"},
             "readinessGates": [{"conditionType": "example.com/OtherGate"}]}}}}),
    ];
    for object in &pool {
        cluster.kubectl_ok(
            &["apply", "--server-side", "-f", "-"],
            Some(&object.to_string()),
        );
    }

    let work = tempfile::tempdir().unwrap();
    std::fs::copy(
        cluster.admin_kubeconfig(),
        work.path().join("mgmt.kubeconfig"),
    )
    .unwrap();
    for (file, name) in [("tct-agent.yaml", "agent"), ("tct-userns.yaml", "userns")] {
        std::fs::write(
            work.path().join(file),
            template(&format!("{md}-{name}")).to_string(),
        )
        .unwrap();
    }
    let path = format!(
        "{}:{}",
        cluster.kubectl_bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for command in &run {
        let out = std::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", command])
            .current_dir(work.path())
            .env("PATH", &path)
            .env("NS", &ns)
            .env("MD", &md)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "quick start command failed: {command}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("not run here (they wait for a rolled pool): {waits:#?}");

    let got: Value = serde_json::from_str(&cluster.kubectl_ok(
        &["-n", &ns, "get", "machinedeployment", &md, "-o", "json"],
        None,
    ))
    .unwrap();
    let spec = &got["spec"]["template"]["spec"];
    assert_eq!(
        spec["bootstrap"]["configRef"]["name"],
        format!("{md}-userns"),
        "{spec}"
    );
    assert_eq!(
        got["metadata"]["annotations"]["sandbox-readiness.io/mirror"], "true",
        "{got}"
    );
    let gates: Vec<&str> = spec["readinessGates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["conditionType"].as_str())
        .collect();
    assert_eq!(
        gates,
        ["example.com/OtherGate", "sandbox-readiness.io/SandboxReady"],
        "the server-side apply must keep the gate that was there"
    );
    // CAPI's defaulting webhook made the selector the rollout matches by.
    assert_eq!(
        got["spec"]["selector"]["matchLabels"]["cluster.x-k8s.io/deployment-name"],
        md.as_str(),
        "{got}"
    );
    for name in ["agent", "userns"] {
        cluster.kubectl_ok(
            &[
                "-n",
                &ns,
                "get",
                "talosconfigtemplate",
                &format!("{md}-{name}"),
            ],
            None,
        );
    }
}
