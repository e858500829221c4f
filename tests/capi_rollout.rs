//! A real Cluster API rollout waits for the truth: the real CAPI v1.13.6
//! and CABPT v0.6.11 managers (`scripts/control-plane.sh capi`) on a real
//! management kube-apiserver roll a MachineDeployment gated on
//! `sandbox-readiness.io/SandboxReady`; each Machine's node is a real agent
//! in a child user namespace whose `user.max_user_namespaces` comes from the
//! CABPT-rendered bootstrap data (tests/support/capi_providers.rs), writing
//! its Node in a real workload kube-apiserver with its own kubelet
//! credentials; the real `sandbox-readiness-controller` mirrors each
//! Node's condition onto its Machine. Nothing here plays CAPI's rules: the
//! MachineSets, the rolling update, the readiness gate and the deletions
//! are CAPI's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/capi_providers.rs"]
mod capi_providers;
mod common;
mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use capi_providers::Providers;
use serde_json::{json, Value};
use support::cluster::RealCluster;

const GATE: &str = "sandbox-readiness.io/SandboxReady";
const CAPI: &str = "/apis/cluster.x-k8s.io/v1beta2";

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The controller binary next to the agent's (the workspace build puts
/// both in one target directory).
fn controller_bin() -> PathBuf {
    let p = PathBuf::from(common::BIN).with_file_name("sandbox-readiness-controller");
    assert!(
        p.is_file(),
        "{} is not built (cargo test --workspace --no-run builds it)",
        p.display()
    );
    p
}

/// A TalosConfigTemplate as an operator writes one (docs/deployment/
/// talosconfigtemplate.md): a generated worker config, the agent's
/// ExtensionServiceConfig and, for the userns pool, the sysctl the agent is
/// told to check.
fn talos_config_template(ns: &str, name: &str, userns: bool) -> Value {
    let mut env = vec![
        "SANDBOX_READINESS_LISTEN=127.0.0.1:10150".to_string(),
        "SANDBOX_READINESS_KUBECONFIG=/etc/kubernetes/kubeconfig-kubelet".to_string(),
    ];
    let mut machine = String::from("machine:\n  nodeLabels:\n    example.com/pool: gvisor\n");
    if !userns {
        // Told only what the pool already has (the quick start's step 4):
        // Talos's default, which this config does not change.
        env.push("SANDBOX_READINESS_SYSCTL=user.max_user_namespaces=0".into());
    } else {
        machine.push_str("  sysctls:\n    user.max_user_namespaces: \"11255\"\n");
        env.push("SANDBOX_READINESS_SYSCTL=user.max_user_namespaces=11255".into());
        env.push("SANDBOX_READINESS_REQUIRE_USERNS=true".into());
    }
    let esc = format!(
        "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: sandbox-readiness\nenvironment:\n{}",
        env.iter()
            .map(|e| format!("  - {e}\n"))
            .collect::<String>()
    );
    json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfigTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"spec": {"generateType": "worker", "talosVersion": "v1.11",
            "strategicPatches": [machine, esc]}}}})
}

/// One sample of the pool: Machine name → (Ready, deleting, node name).
type Sample = BTreeMap<String, (bool, bool, Option<String>)>;

fn sample(mgmt: &RealCluster, ns: &str) -> Sample {
    let list = mgmt
        .get(&format!("{CAPI}/namespaces/{ns}/machines"))
        .unwrap_or(Value::Null);
    let mut out = Sample::new();
    for m in list["items"].as_array().cloned().unwrap_or_default() {
        let ready = m["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .is_some_and(|c| c["status"] == "True");
        out.insert(
            m["metadata"]["name"].as_str().unwrap().to_string(),
            (
                ready,
                m["metadata"]["deletionTimestamp"].is_string(),
                m["status"]["nodeRef"]["name"].as_str().map(str::to_string),
            ),
        );
    }
    out
}

fn node_condition(workload: &RealCluster, node: &str) -> Option<String> {
    let n = workload.get(&format!("/api/v1/nodes/{node}"))?;
    n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == GATE)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// What a failed wait shows: each Machine's and TalosConfig's conditions,
/// the tails of the managers' and the controller's logs.
fn diagnose(mgmt: &RealCluster, ns: &str, controller_log: &std::path::Path) -> String {
    let mut out = String::new();
    for what in [
        "machines.cluster.x-k8s.io",
        "talosconfigs.bootstrap.cluster.x-k8s.io",
        "testmachines",
        "clusters.cluster.x-k8s.io",
    ] {
        let (_, text, _) = mgmt.kubectl(&["-n", ns, "get", what, "-o", "yaml"]);
        out.push_str(&format!("--- {what}\n{text}\n"));
    }
    let tail = |p: &std::path::Path| {
        let t = std::fs::read_to_string(p).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    };
    for m in ["capi-manager", "cabpt-manager"] {
        out.push_str(&format!(
            "--- {m}\n{}\n",
            tail(&mgmt.dir().join("logs").join(format!("{m}.log")))
        ));
    }
    out.push_str(&format!("--- controller\n{}\n", tail(controller_log)));
    out
}

#[test]
fn a_rollout_to_the_userns_sysctl_waits_for_each_new_nodes_verdict() {
    let ctl = controller_bin();
    let mgmt = Arc::new(RealCluster::private());
    mgmt.start_capi();
    let workload = Arc::new(RealCluster::private());
    let ns = "pool-a";
    mgmt.kubectl_ok(&["create", "namespace", ns], None);
    let providers = Providers::start(mgmt.clone(), workload.clone(), ns);

    let port: u16 = workload
        .server_url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let objects = [
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TestCluster",
            "metadata": {"name": "c1", "namespace": ns},
            "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": port}}}),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha1", "kind": "TestControlPlane",
            "metadata": {"name": "c1-cp", "namespace": ns}, "spec": {}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": ns},
            "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "TestControlPlane", "name": "c1-cp"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TestCluster", "name": "c1"}}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TestMachineTemplate",
            "metadata": {"name": "workers", "namespace": ns}, "spec": {"template": {"spec": {}}}}),
        talos_config_template(ns, "workers-plain", false),
        talos_config_template(ns, "workers-userns", true),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "workers", "namespace": ns},
            "spec": {"clusterName": "c1", "replicas": 2,
                "rollout": {"strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
                "template": {"spec": {"clusterName": "c1",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                        "kind": "TalosConfigTemplate", "name": "workers-plain"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "TestMachineTemplate", "name": "workers"},
                    "minReadySeconds": 1,
                    "readinessGates": [{"conditionType": GATE}]}}}}),
    ];
    for o in &objects {
        mgmt.kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(&o.to_string()));
    }
    let dir = tempfile::tempdir().unwrap();
    let _controller = Killed(
        Command::new(&ctl)
            .arg("--kubeconfig")
            .arg(mgmt.admin_kubeconfig())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("controller.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    // The pool comes up on the plain template.
    let started = Instant::now();
    let old: BTreeSet<String> = loop {
        let s = sample(&mgmt, ns);
        let ready: BTreeSet<String> = s
            .iter()
            .filter(|(_, (r, d, _))| *r && !*d)
            .map(|(n, _)| n.clone())
            .collect();
        if ready.len() == 2 {
            break ready;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the pool never had 2 Ready Machines: {s:?}\nproviders: {:?}\n{}",
            providers.record(),
            diagnose(&mgmt, ns, &dir.path().join("controller.log"))
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("pool up in {:?}: {old:?}", started.elapsed());

    // The rollout: the template that raises the sysctl and tells the agent.
    mgmt.write(
        "PATCH",
        &format!("{CAPI}/namespaces/{ns}/machinedeployments/workers"),
        "application/merge-patch+json",
        &json!({"spec": {"template": {"spec": {"bootstrap": {"configRef": {"name": "workers-userns"}}}}}}),
    );
    let rolled = Instant::now();
    let mut ready_at: BTreeMap<String, Duration> = BTreeMap::new();
    let mut verdict_before_ready = BTreeMap::new();
    loop {
        let s = sample(&mgmt, ns);
        // maxUnavailable 0: never fewer than 2 Ready Machines not being deleted.
        let serving = s.values().filter(|(r, d, _)| *r && !*d).count();
        assert!(
            serving >= 2,
            "the rollout left {serving} Ready Machines: {s:?}"
        );
        for (name, (ready, _, node)) in &s {
            if old.contains(name) || !*ready || ready_at.contains_key(name) {
                continue;
            }
            ready_at.insert(name.clone(), rolled.elapsed());
            // When CAPI first shows it Ready, its Node already says True.
            let node = node.clone().expect("a Ready Machine has a nodeRef");
            verdict_before_ready.insert(name.clone(), node_condition(&workload, &node));
        }
        let old_left = s.keys().filter(|n| old.contains(*n)).count();
        if old_left == 0 && ready_at.len() >= 2 {
            break;
        }
        assert!(
            rolled.elapsed() < Duration::from_secs(300),
            "the rollout did not finish: {s:?}\nproviders: {:?}\n{}",
            providers.record(),
            diagnose(&mgmt, ns, &dir.path().join("controller.log"))
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "rolled in {:?}: new Machines Ready at {ready_at:?}",
        rolled.elapsed()
    );
    for (m, v) in &verdict_before_ready {
        assert_eq!(
            v.as_deref(),
            Some("True"),
            "{m} was Ready before its Node's {GATE} was True"
        );
    }
    let record = providers.record();
    for m in ready_at.keys() {
        let infra = mgmt
            .get(&format!("{CAPI}/namespaces/{ns}/machines/{m}"))
            .map(|m| {
                m["spec"]["infrastructureRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .unwrap_or_default();
        if let Some(limit) = record.nodes.get(&infra) {
            assert_eq!(*limit, 11255, "{m}'s node booted without the raised limit");
        }
    }
    assert!(
        record.stopped.len() >= 2,
        "the old nodes were not stopped by their finalizer: {record:?}"
    );
}
