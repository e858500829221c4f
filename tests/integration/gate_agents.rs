//! The readiness-gate controller fed by real agents: agents on the real
//! kernel (inside `unshare -U -r`, `user.max_user_namespaces` set under
//! them) write their Nodes' conditions and desired-state annotations into a
//! workload test API server with kubelet-style credentials;
//! `sandbox-readiness-controller` (the controller crate's binary, built by
//! the test command's controller tier into the same target directory)
//! mirrors them onto gated Machines in a management test API server, read
//! through the `<cluster>-kubeconfig` Secret, and checks each node's
//! annotation against its Machine's bootstrap-data machine config.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{wait_until, Agent, AgentSpec, BIN};
use serde_json::{json, Value};
use test_api::{TestApiServer, User};

const TY: &str = "sandbox-readiness.io/SandboxReady";
const NS: &str = "tenant-a";
const ADMIN: &str = "admin-token";
const AV: &str = "cluster.x-k8s.io/v1beta2";

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

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string()
}

fn status(
    srv: &TestApiServer,
    kind_av: (&str, &str),
    ns: &str,
    name: &str,
) -> Option<(String, String, String)> {
    let o = srv.get(kind_av.0, kind_av.1, ns, name)?;
    let c = o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == TY)?
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn machine(name: &str, node: &str) -> Value {
    json!({"apiVersion":AV,"kind":"Machine","metadata":{"name":name,"namespace":NS,
        "labels":{"cluster.x-k8s.io/cluster-name":"c1","cluster.x-k8s.io/deployment-name":"md-a"}},
        "spec":{"clusterName":"c1","bootstrap":{"dataSecretName":format!("{name}-boot")},
        "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TestMachine","name":name},
        "readinessGates":[{"conditionType":TY}]},
        "status":{"nodeRef":{"name":node}}})
}

fn boot_secret(name: &str) -> Value {
    let cfg = "version: v1alpha1\nmachine:\n  type: worker\n  token: SECRET-TOKEN-abcdef\n  sysctls:\n    user.max_user_namespaces: \"11255\"\ncluster:\n  controlPlane:\n    endpoint: https://127.0.0.1:6443\n";
    json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{name}-boot"),"namespace":NS},
        "data":{"value":b64(cfg),"format":b64("cloud-config")}})
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
    let Some(ctl_bin) = controller_bin() else {
        common::skip("the controller binary is not built (cargo build -p sandbox-readiness-controller; the test command's controller tier does)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let start = |versions: &'static [&'static str]| {
        rt.block_on(
            TestApiServer::builder()
                .token(ADMIN, User::new("admin", &["system:masters"]))
                .capi_served_versions(versions)
                .start(),
        )
        .unwrap()
    };
    let mgmt = start(&["v1beta2"]);
    let wl = start(&["v1beta2"]);
    let dir = tempfile::tempdir().unwrap();

    // Three workers: converged (ok), at 0 (new), converged but checking no
    // user.max_user_namespaces (nocheck: its agent was told no sysctl).
    let boot = boot_id();
    let mut agents = Vec::new();
    for (node, limit, extra) in [
        (
            "w-ok",
            11255,
            vec![
                "--sysctl",
                "user.max_user_namespaces=11255",
                "--require-userns",
            ],
        ),
        (
            "w-new",
            0,
            vec![
                "--sysctl",
                "user.max_user_namespaces=11255",
                "--require-userns",
            ],
        ),
        ("w-nocheck", 11255, vec!["--require-userns"]),
    ] {
        wl.create(common::kubelet_node(node, &boot)).unwrap();
        let cert = wl.client_cert(&format!("system:node:{node}"), &["system:nodes"]);
        let kc = wl
            .kubeconfig_kubelet_style(&dir.path().join(node), &cert)
            .unwrap();
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
        agents.push((node, Agent::spawn(AgentSpec::new(Some(limit), &args))));
    }

    mgmt.create(json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":NS}}))
        .unwrap();
    mgmt.create(
        json!({"apiVersion":AV,"kind":"Cluster","metadata":{"name":"c1","namespace":NS},"spec":{}}),
    )
    .unwrap();
    mgmt.create(
        json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"c1-kubeconfig","namespace":NS},
        "data":{"value":b64(&wl.kubeconfig_token(ADMIN))}}),
    )
    .unwrap();
    for (m, n) in [
        ("m-ok", "w-ok"),
        ("m-new", "w-new"),
        ("m-nocheck", "w-nocheck"),
    ] {
        mgmt.create(boot_secret(m)).unwrap();
        mgmt.create(machine(m, n)).unwrap();
    }
    let mgmt_kc = dir.path().join("mgmt.kubeconfig");
    std::fs::write(&mgmt_kc, mgmt.kubeconfig_token(ADMIN)).unwrap();
    let _ctl = Killed(
        Command::new(&ctl_bin)
            .arg("--kubeconfig")
            .arg(&mgmt_kc)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );

    let m = |name: &str| status(&mgmt, (AV, "Machine"), NS, name);
    let n = |name: &str| status(&wl, ("v1", "Node"), "", name);
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
    assert_eq!(
        n("w-nocheck").unwrap().0,
        "True",
        "the node itself says True"
    );

    // The limit raised under w-new: its Node, then its Machine.
    let agent = &agents.iter().find(|(n, _)| *n == "w-new").unwrap().1;
    let raised = Instant::now();
    agent.set_limit(11255);
    let mut node_true = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(
            Instant::now() < deadline,
            "m-new not True: node {:?} machine {:?}",
            n("w-new"),
            m("m-new")
        );
        if node_true.is_none() && n("w-new").is_some_and(|c| c.0 == "True") {
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
    assert!(
        after_node < Duration::from_secs(2),
        "Machine True {after_node:?} after its Node"
    );
    assert_eq!(m("m-ok").unwrap().0, "True");
}
