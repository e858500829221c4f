//! The readiness-gate controller fed by real agents: agents on the real
//! kernel (inside `unshare -U -r`, `user.max_user_namespaces` set under
//! them) write their Nodes' conditions and desired-state annotations into a
//! real workload kube-apiserver (the binary's shared cluster) with
//! kubelet-style credentials; `sandbox-readiness-controller` (the
//! controller crate's binary, built by the test command's controller tier
//! into the same target directory) mirrors them onto gated Machines in a
//! real management kube-apiserver with the real Cluster API's CRDs and
//! webhooks (`control-plane.sh capi`), reading the workload through the
//! `<cluster>-kubeconfig` Secret, and checks each node's annotation against
//! the sysctls of the TalosConfigTemplate its Machine's TalosConfig was
//! cloned from. The Machines are made by hand (no infrastructure provider
//! runs): the Cluster is paused while they are made (CAPI's webhooks admit
//! them, its controllers leave them be), then CAPI's managers are stopped
//! with their admission webhooks and the Cluster unpaused, since the
//! controller, as CAPI's own, leaves a paused Cluster's Machines alone;
//! their `status.nodeRef` is written through the status subresource, as
//! CAPI's Machine controller would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{wait_until, Agent, AgentSpec, BIN};
use serde_json::{json, Value};

use crate::support::cluster::RealCluster;

const TY: &str = "sandbox-readiness.io/SandboxReady";
const AV: &str = "cluster.x-k8s.io/v1beta2";
const MERGE: &str = "application/merge-patch+json";

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The controller binary next to the agent's (same profile, same target
/// directory), or None.
fn controller_bin() -> Option<PathBuf> {
    let p = PathBuf::from(BIN).with_file_name("sandbox-readiness-controller");
    p.is_file().then_some(p)
}

/// The sandbox condition of the object at `path`: (status, reason, message).
fn status(c: &RealCluster, path: &str) -> Option<(String, String, String)> {
    let o = c.try_get(path).ok()??;
    let c = o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == TY)?
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn machine(ns: &str, name: &str) -> Value {
    json!({"apiVersion":AV,"kind":"Machine","metadata":{"name":name,"namespace":ns,
        "labels":{"cluster.x-k8s.io/cluster-name":"c1","cluster.x-k8s.io/deployment-name":"md-a"}},
        "spec":{"clusterName":"c1","bootstrap":{"dataSecretName":format!("{name}-boot"),
            "configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"TalosConfig","name":name}},
        "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TestMachine","name":name},
        "readinessGates":[{"conditionType":TY}]}})
}

/// The pool's machine config: it sets the sysctl every node must check.
const MACHINE_CONFIG: &str = "version: v1alpha1\nmachine:\n  type: worker\n  token: SECRET-TOKEN-abcdef\n  sysctls:\n    user.max_user_namespaces: \"11255\"\ncluster:\n  controlPlane:\n    endpoint: https://127.0.0.1:6443\n";
const BOOTSTRAP_AV: &str = "bootstrap.cluster.x-k8s.io/v1alpha3";

fn boot_secret(ns: &str, name: &str) -> Value {
    json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{name}-boot"),"namespace":ns},
        "data":{"value":b64(MACHINE_CONFIG),"format":b64("cloud-config")}})
}

/// The pool's TalosConfigTemplate, where the controller reads its sysctls.
fn template(ns: &str) -> Value {
    json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfigTemplate","metadata":{"name":"md-a","namespace":ns},
        "spec":{"template":{"spec":{"generateType":"none","talosVersion":"v1.11","data":MACHINE_CONFIG}}}})
}

/// Machine `name`'s TalosConfig, as CAPI's MachineSet controller clones it.
fn talos_config(ns: &str, name: &str) -> Value {
    json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfig","metadata":{"name":name,"namespace":ns,
        "annotations":{"cluster.x-k8s.io/cloned-from-name":"md-a",
            "cluster.x-k8s.io/cloned-from-groupkind":"TalosConfigTemplate.bootstrap.cluster.x-k8s.io"}},
        "spec":{"generateType":"none","talosVersion":"v1.11","data":MACHINE_CONFIG}})
}

/// Stops CAPI's and CABPT's managers and removes their admission webhooks
/// (the objects are made), then unpauses Cluster `ns/c1`.
fn unpause(mgmt: &RealCluster, ns: &str) {
    mgmt.stop_capi_managers();
    mgmt.write(
        "PATCH",
        &format!("/apis/{AV}/namespaces/{ns}/clusters/c1"),
        MERGE,
        &json!({"spec":{"paused":false}}),
    );
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn real_agents_hold_and_release_the_gate() {
    // The test command's controller tier builds it before this tier runs:
    // missing, it is a failure, not a skip.
    let ctl_bin = controller_bin().expect(
        "the controller binary is not built (cargo build -p sandbox-readiness-controller; the test command's controller tier does)",
    );
    let wl = RealCluster::shared();
    let mgmt = RealCluster::private();
    mgmt.start_capi();
    let dir = tempfile::tempdir().unwrap();
    let ns = mgmt.unique("gate");

    // Three workers: converged (ok), at 0 (new), converged but checking no
    // user.max_user_namespaces (nocheck: its agent was told no sysctl).
    let mut agents = Vec::new();
    let mut nodes = std::collections::BTreeMap::new();
    for (role, limit, extra) in [
        (
            "ok",
            11255,
            vec![
                "--sysctl",
                "user.max_user_namespaces=11255",
                "--require-userns",
            ],
        ),
        (
            "new",
            0,
            vec![
                "--sysctl",
                "user.max_user_namespaces=11255",
                "--require-userns",
            ],
        ),
        ("nocheck", 11255, vec!["--require-userns"]),
    ] {
        let (node, _) = wl.new_node(&format!("gate-{role}"));
        let (kc, _) = wl.kubelet_credential(&node, &dir.path().join(&node));
        let mut args = vec![
            "--poll-interval",
            "300ms",
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--node-resync",
            "1s",
        ];
        args.extend(extra);
        let args: Vec<String> = args.iter().map(ToString::to_string).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        agents.push((role, Agent::spawn(AgentSpec::new(Some(limit), &args))));
        nodes.insert(role, node);
    }

    let post = |path: &str, body: Value| {
        mgmt.write("POST", path, "application/json", &body);
    };
    post(
        "/api/v1/namespaces",
        json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}}),
    );
    post(
        &format!("/apis/{AV}/namespaces/{ns}/clusters"),
        // Paused: CAPI's own controllers leave the hand-made Machines alone
        // (the rollout tests have them at work). CAPI's webhook wants one of
        // controlPlaneRef, infrastructureRef or topology (the CRD alone
        // refuses an empty spec: `minProperties: 1`).
        json!({"apiVersion":AV,"kind":"Cluster","metadata":{"name":"c1","namespace":ns},
            "spec":{"paused":true,"infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TestCluster","name":"c1"}}}),
    );
    let wl_kubeconfig = std::fs::read_to_string(wl.admin_kubeconfig()).unwrap();
    post(
        &format!("/api/v1/namespaces/{ns}/secrets"),
        json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"c1-kubeconfig","namespace":ns,
            "labels":{"cluster.x-k8s.io/cluster-name":"c1"}},
        "data":{"value":b64(&wl_kubeconfig)}}),
    );
    post(
        &format!("/apis/{BOOTSTRAP_AV}/namespaces/{ns}/talosconfigtemplates"),
        template(&ns),
    );
    for role in ["ok", "new", "nocheck"] {
        let m = format!("m-{role}");
        post(
            &format!("/api/v1/namespaces/{ns}/secrets"),
            boot_secret(&ns, &m),
        );
        post(
            &format!("/apis/{BOOTSTRAP_AV}/namespaces/{ns}/talosconfigs"),
            talos_config(&ns, &m),
        );
        post(
            &format!("/apis/{AV}/namespaces/{ns}/machines"),
            machine(&ns, &m),
        );
        mgmt.write(
            "PATCH",
            &format!("/apis/{AV}/namespaces/{ns}/machines/{m}/status"),
            MERGE,
            &json!({"status":{"nodeRef":{"name":nodes[role]}}}),
        );
    }
    unpause(&mgmt, &ns);
    let _ctl = Killed(
        Command::new(&ctl_bin)
            .arg("--kubeconfig")
            .arg(mgmt.admin_kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );

    let m = |name: &str| {
        status(
            &mgmt,
            &format!("/apis/{AV}/namespaces/{ns}/machines/{name}"),
        )
    };
    let n = |role: &str| status(wl, &format!("/api/v1/nodes/{}", nodes[role]));
    wait_until(Duration::from_secs(30), "m-ok True", || {
        m("m-ok").is_some_and(|c| c.0 == "True")
    });
    wait_until(Duration::from_secs(10), "m-new False", || {
        m("m-new").is_some_and(|c| c.0 == "False")
    });
    let c = m("m-new").unwrap();
    assert_eq!(c.1, "SysctlMismatch", "{c:?}");
    wait_until(
        Duration::from_secs(10),
        "m-nocheck DesiredStateNotChecked",
        || {
            m("m-nocheck").is_some_and(|c| {
                c.1 == "DesiredStateNotChecked" && c.2.contains("user.max_user_namespaces")
            })
        },
    );
    let c = m("m-nocheck").unwrap();
    assert_eq!(c.0, "False");
    assert!(
        c.2.contains("user.max_user_namespaces") && c.2.contains("11255"),
        "{c:?}"
    );
    assert_eq!(n("nocheck").unwrap().0, "True", "the node itself says True");

    // The limit raised under w-new: its Node, then its Machine.
    let agent = &agents.iter().find(|(r, _)| *r == "new").unwrap().1;
    let raised = Instant::now();
    agent.set_limit(11255);
    let mut node_true = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(
            Instant::now() < deadline,
            "m-new not True: node {:?} machine {:?}",
            n("new"),
            m("m-new")
        );
        if node_true.is_none() && n("new").is_some_and(|c| c.0 == "True") {
            node_true = Some(Instant::now());
        }
        if m("m-new").is_some_and(|c| c.0 == "True") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let machine_true = Instant::now();
    let node_true = node_true.unwrap_or(machine_true);
    let after_node = machine_true.duration_since(node_true);
    eprintln!(
        "limit raised → Node True {:?} → Machine True {:?} later (total {:?})",
        node_true.duration_since(raised),
        after_node,
        machine_true.duration_since(raised)
    );
    // The figure is printed, not bounded (the tier runs beside others on
    // two cores; the controller bench measures flip → Machine latency): the
    // order is what is checked, the Machine never ahead of its Node.
    assert!(
        n("new").is_some_and(|c| c.0 == "True"),
        "Machine True while its Node is not"
    );
    assert_eq!(m("m-ok").unwrap().0, "True");
}
