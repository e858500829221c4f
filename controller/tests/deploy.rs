//! deploy/: `kubectl kustomize deploy/` renders; every rendered object
//! matches the upstream Kubernetes OpenAPI types (k8s-openapi 0.29, v1_37, the
//! code generated from the Kubernetes release's published
//! `api/openapi-spec/swagger.json`): required fields present, types right,
//! and no field the schema does not know (the object read into its typed
//! struct and written back must be the same JSON); the Deployment holds what
//! the README promises; and the controller runs under exactly the RBAC
//! deploy/ grants (the test API server loads the rendered ClusterRole,
//! Role and bindings): a missing permission fails this test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{path::Path, process::Command, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{Namespace, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
    },
    serde::{de::DeserializeOwned, Serialize},
};
use serde_json::{json, Value};
use test_api::{TestApiServer, User};

use common::*;

const SA_TOKEN: &str = "controller-sa-token";
const DEPLOY_NS: &str = "sandbox-readiness-system";
const SA_USER: &str = "system:serviceaccount:sandbox-readiness-system:sandbox-readiness-controller";

fn rendered() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("\n---\n")
        .map(|d| serde_yaml_ng::from_str::<Value>(d).unwrap())
        .collect()
}

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
    assert!(args.contains(&"--http-listen=0.0.0.0:8080"), "{args:?}");
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

fn rbac_yaml() -> String {
    rendered()
        .into_iter()
        .filter(|d| d["kind"].as_str().unwrap().contains("Role"))
        .map(|d| serde_yaml_ng::to_string(&d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_runs_under_the_rbac_deploy_grants() {
    let mgmt = TestApiServer::builder()
        .token(ADMIN, User::new("admin", &["system:masters"]))
        .token(
            SA_TOKEN,
            User::new(
                SA_USER,
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:sandbox-readiness-system",
                ],
            ),
        )
        .rbac_yaml(&rbac_yaml())
        .start()
        .await
        .unwrap();
    let wl = server(&["v1beta2"]).await;
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("sa.kubeconfig");
    std::fs::write(&sa_kubeconfig, mgmt.kubeconfig_token(SA_TOKEN)).unwrap();
    for ns in [NS, DEPLOY_NS] {
        mgmt.create(json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}}))
            .unwrap();
    }
    mgmt.create(cluster(CLUSTER)).unwrap();
    mgmt.create(kubeconfig_secret(CLUSTER, &wl.kubeconfig_token(ADMIN)))
        .unwrap();
    let env = Env {
        mgmt,
        wl,
        dir,
        mgmt_kubeconfig: sa_kubeconfig.clone(),
    };
    let sysctl = ("user.max_user_namespaces", "11255");
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[sysctl], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[sysctl]);

    // The server enforces: what deploy/ does not grant is refused.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&sa_kubeconfig)
        .args(["get", "secrets", "-A"])
        .output()
        .unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{out:?}"
    );

    env.mgmt.clear_requests();
    let ctl = env.controller(&[
        "--leader-elect=true",
        "--leader-elect-resource-namespace",
        DEPLOY_NS,
    ]);
    env.wait_status("m1", "True", Duration::from_secs(20)).await;
    env.agent_writes("w1", "False", "SysctlMismatch", &[sysctl]);
    env.wait_status("m1", "False", Duration::from_secs(10))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lease = env
        .mgmt
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            DEPLOY_NS,
            "sandbox-readiness-controller",
        )
        .unwrap();
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "{lease}"
    );
    assert!(
        !env.events("m1").is_empty(),
        "no Event recorded\n{}",
        ctl.log()
    );
    let denied: Vec<String> = env
        .mgmt
        .requests()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(SA_USER) && r.status == 403)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    let by_controller = env
        .mgmt
        .requests()
        .iter()
        .filter(|r| r.user.as_deref() == Some(SA_USER))
        .count();
    assert!(
        by_controller > 5,
        "the controller did not run as the ServiceAccount"
    );
    assert!(
        denied.is_empty(),
        "the controller needed what deploy/ does not grant: {denied:?}\n{}",
        ctl.log()
    );
}
