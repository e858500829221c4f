//! The agent's verdicts held against the real kubelet: for each node state,
//! a real node (scripts/kubelet-node.sh: kubelet v1.36.3 on Talos 1.13.9's
//! containerd 2.2.7 and runc 1.4.3, or the older lines operators still meet,
//! with the gVisor extension's files present, absent or broken) on a real
//! control plane, the agent's `probe` against that node's runtime, and what
//! kubelet does with three pods:
//!
//!   a  `hostUsers: false` on the default (runc) handler, with the projected
//!      service-account token and a memory emptyDir (idmapped mounts on tmpfs)
//!   b  `runtimeClassName: gvisor` (handler runsc)
//!   c  both
//!
//! The rule: zero disagreements. Where the agent says a pod's requirements
//! hold, the pod runs; where it says they do not, the pod fails and one of
//! the agent's findings names the cause kubelet's `FailedCreatePodSandBox`
//! event names. The second judge: the Node's own
//! `status.runtimeHandlers[].features.userNamespaces` against what the agent
//! read from the CRI. The table this prints is in
//! docs/developer/kubelet-matrix.md.
//!
//! Not here: the host's `user.max_user_namespaces` at 0 (Talos's KSPP
//! default). This machine refuses a write to the host's limit even as root
//! (EPERM from /proc/sys/user/max_user_namespaces: the limit of the initial
//! user namespace is the VM's own), and kubelet, containerd and runc run in
//! the initial user namespace. The agent's side of that state (the sysctl
//! finding, user namespace creation failing, runsc's ENOSPC) is tested in a
//! child user namespace whose limit is writable (userns_kernel.rs,
//! gvisor_runsc.rs); what kubelet then says is in
//! docs/developer/kubelet-matrix.md as taken from upstream, not from a run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::BIN;
use serde_json::Value;
use support::cluster::RealCluster;

const NS: &str = "sr-matrix";

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// A node of `scripts/kubelet-node.sh`, taken down when dropped.
struct Node {
    dir: PathBuf,
    name: String,
    root: PathBuf,
}

impl Node {
    fn up(c: &RealCluster, name: &str, opts: &[&str]) -> Node {
        let out = Command::new(script("kubelet-node.sh"))
            .arg("up")
            .arg(c.dir())
            .arg(name)
            .args(opts)
            .output()
            .unwrap();
        let node = Node {
            dir: c.dir().to_path_buf(),
            name: name.to_string(),
            root: c.dir().join("nodes").join(name),
        };
        assert!(
            out.status.success(),
            "kubelet-node.sh up {name} {opts:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        node
    }

    /// `probe` against this node's runtime, with the requirements `req`:
    /// (converged, the verdict's findings, the report).
    fn probe(&self, req: &[&str]) -> (bool, Vec<Value>, Value) {
        let r = &self.root;
        let out = Command::new(BIN)
            .arg("probe")
            .arg("--cri-endpoint")
            .arg(format!(
                "unix://{}",
                r.join("run/containerd/containerd.sock").display()
            ))
            .arg("--cri-conf-dir")
            .arg(r.join("etc/cri/conf.d"))
            .arg("--runsc-path")
            .arg(r.join("usr/local/bin/runsc"))
            .arg("--shim-path")
            .arg(r.join("usr/local/bin/containerd-shim-runsc-v1"))
            .args(req)
            .args(["-o", "json"])
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "probe {req:?}: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let v = &doc["verdict"];
        (
            v["converged"] == true,
            v["findings"].as_array().cloned().unwrap_or_default(),
            doc["report"].clone(),
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new(script("kubelet-node.sh"))
            .arg("down")
            .arg(&self.dir)
            .arg(&self.name)
            .output();
    }
}

/// Pod `name` on `node` (spec.nodeName: no scheduler), as the a/b/c.
fn pod_yaml(name: &str, node: &str, host_users: bool, class: Option<&str>) -> String {
    let class = class
        .map(|c| format!("  runtimeClassName: {c}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  nodeName: {node}\n  hostUsers: {host_users}\n{class}\
         \x20 terminationGracePeriodSeconds: 0\n  tolerations: [{{operator: Exists}}]\n  containers:\n  - name: c\n    image: sr-kn.local/busybox:1\n    imagePullPolicy: Never\n\
         \x20   command: [/bin/busybox, sh, -c, 'head -n1 /proc/self/uid_map; ls /var/run/secrets/kubernetes.io/serviceaccount/token && sleep 3600']\n\
         \x20   volumeMounts: [{{name: mem, mountPath: /mem}}]\n  volumes:\n  - name: mem\n    emptyDir: {{medium: Memory, sizeLimit: 16Mi}}\n"
    )
}

/// What kubelet did with a pod: Running, or its FailedCreatePodSandBox
/// event (tied to the pod by its uid).
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Running,
    Failed(String),
}

fn outcome(c: &RealCluster, pod: &str) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let p = c
            .get(&format!("/api/v1/namespaces/{NS}/pods/{pod}"))
            .unwrap_or(Value::Null);
        if p["status"]["phase"] == "Running" {
            return Outcome::Running;
        }
        let uid = p["metadata"]["uid"].as_str().unwrap_or("-").to_string();
        let events = c
            .get(&format!(
                "/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.uid={uid},reason=FailedCreatePodSandBox"
            ))
            .unwrap_or(Value::Null);
        if let Some(m) = events["items"]
            .as_array()
            .and_then(|i| i.first())
            .and_then(|e| e["message"].as_str())
        {
            return Outcome::Failed(m.to_string());
        }
        assert!(
            Instant::now() < deadline,
            "pod {pod}: neither Running nor FailedCreatePodSandBox: {p:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Ids and numbers out (a word of hex digits with a digit in it: sandbox
/// ids, pids), so a canary's error and kubelet's event about the same
/// failure compare equal.
fn normalise(s: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if !word.is_empty() {
            let id = word.chars().all(|c| c.is_ascii_hexdigit())
                && word.chars().any(|c| c.is_ascii_digit());
            out.push_str(if id { "#" } else { word });
            word.clear();
        }
    };
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Whether `finding` names the cause kubelet's `event` names.
fn names_cause(finding: &Value, event: &str) -> bool {
    let code = finding["code"].as_str().unwrap_or("");
    let msg = finding["message"].as_str().unwrap_or("");
    match code {
        "POD_USERNS_UNSUPPORTED" | "USERNS_CREATE_FAILED" | "SYSCTL_MISMATCH" => {
            event.contains("does not support user namespaces")
                || event.contains("user namespace")
                || event.contains("no space left on device")
        }
        "RUNTIME_HANDLER_MISSING" => {
            event.contains("is configured") || event.contains("is not known")
        }
        "RUNTIME_SHIM_MISSING" => event.contains("binary not installed"),
        "CANARY_FAILED" | "GVISOR_NOT_READY" => {
            // The runtime's own words after the sandbox id, in both.
            let tail = |s: &str| {
                s.split_once("failed to create containerd task")
                    .map(|(_, t)| normalise(t))
            };
            match (tail(event), tail(msg)) {
                (Some(e), Some(m)) => m.contains(e.trim_end_matches(": unknown")),
                _ => false,
            }
        }
        _ => false,
    }
}

struct Row {
    state: String,
    pod: &'static str,
    agent: String,
    kubelet: String,
    agrees: bool,
}

#[test]
fn every_verdict_matches_what_the_real_kubelet_does() {
    let c = RealCluster::private();
    c.kubectl_ok(&["create", "namespace", NS], None);
    c.kubectl_ok(
        &["apply", "-f", "-"],
        Some("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n"),
    );
    // The projected token needs the namespace's ServiceAccount and the
    // cluster's root CA ConfigMap (kube-controller-manager makes both).
    support::cluster::poll(
        Duration::from_secs(30),
        "the namespace's ServiceAccount and kube-root-ca.crt",
        || {
            c.get(&format!("/api/v1/namespaces/{NS}/serviceaccounts/default"))
                .is_some()
                && c.get(&format!(
                    "/api/v1/namespaces/{NS}/configmaps/kube-root-ca.crt"
                ))
                .is_some()
        },
    );
    // (state, kubelet-node.sh options)
    let states: [(&str, &[&str]); 8] = [
        ("talos-1.13", &[]),
        ("runc-1.1", &["--runc", "1.1"]),
        ("runc-1.3", &["--runc", "1.3"]),
        ("containerd-1.6", &["--containerd", "1.6"]),
        ("containerd-2.1", &["--containerd", "2.1"]),
        ("runsc-absent", &["--runsc", "absent"]),
        ("runsc-no-shim", &["--runsc", "no-shim"]),
        ("runsc-broken", &["--runsc", "broken"]),
    ];
    let pods: [(&str, bool, Option<&str>, &[&str]); 3] = [
        (
            "a",
            false,
            None,
            &[
                "--require-pod-userns",
                "default",
                "--require-canary",
                "default",
            ],
        ),
        (
            "b",
            true,
            Some("gvisor"),
            &[
                "--require-runtime-handler",
                "runsc",
                "--require-gvisor",
                "--require-canary",
                "runsc",
            ],
        ),
        (
            "c",
            false,
            Some("gvisor"),
            &[
                "--require-runtime-handler",
                "runsc",
                "--require-gvisor",
                "--require-canary",
                "runsc",
                "--require-pod-userns",
                "runsc",
            ],
        ),
    ];
    let mut rows: Vec<Row> = Vec::new();
    let mut judges: Vec<String> = Vec::new();
    for (i, (state, opts)) in states.iter().enumerate() {
        let name = format!("mx{i}");
        let node = Node::up(&c, &name, opts);
        // The second judge: kubelet's own view of the handlers.
        let n = c.get_node(&name);
        let kubelet_userns: Vec<(String, bool)> = n["status"]["runtimeHandlers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|h| {
                (
                    h["name"].as_str().unwrap_or("").to_string(),
                    h["features"]["userNamespaces"] == true,
                )
            })
            .collect();
        for (pod, host_users, class, req) in pods {
            let (ready, findings, report) = node.probe(req);
            if pod == "a" {
                let agent_userns: Vec<(String, bool)> = report["gvisor"]["cri"]["handlers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|h| {
                        (
                            h["name"].as_str().unwrap_or("").to_string(),
                            h["userNamespaces"] == true,
                        )
                    })
                    .collect();
                // A handler kubelet does not list (containerd 1.6's CRI has
                // no handler list) is one it treats as without user
                // namespaces (HandlerSupportsUserNamespaces: false).
                let says =
                    |list: &[(String, bool)], h: &str| list.iter().any(|(n, u)| n == h && *u);
                let agree = kubelet_userns
                    .iter()
                    .chain(agent_userns.iter())
                    .all(|(h, _)| says(&kubelet_userns, h) == says(&agent_userns, h));
                judges.push(format!(
                    "{state}: kubelet {kubelet_userns:?}, agent {agent_userns:?}{}",
                    if agree { "" } else { "  <-- DISAGREE" }
                ));
                assert!(
                    agree,
                    "{state}: the Node's runtimeHandlers say {kubelet_userns:?}, the agent read {agent_userns:?}"
                );
            }
            let pname = format!("{pod}-{name}");
            c.kubectl_ok(
                &["apply", "-f", "-"],
                Some(&pod_yaml(&pname, &name, host_users, class)),
            );
            let got = outcome(&c, &pname);
            let blocking: Vec<&Value> =
                findings.iter().filter(|f| f["blocking"] != false).collect();
            let (agrees, kubelet) = match (&got, ready) {
                (Outcome::Running, true) => (true, "Running".to_string()),
                (Outcome::Running, false) => (false, "Running".to_string()),
                (Outcome::Failed(e), false) => (
                    blocking.iter().any(|f| names_cause(f, e)),
                    format!("FailedCreatePodSandBox: {e}"),
                ),
                (Outcome::Failed(e), true) => (false, format!("FailedCreatePodSandBox: {e}")),
            };
            let agent = if ready {
                "ready".to_string()
            } else {
                blocking
                    .iter()
                    .map(|f| f["code"].as_str().unwrap_or("?").to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            rows.push(Row {
                state: state.to_string(),
                pod,
                agent,
                kubelet,
                agrees,
            });
            c.kubectl(&[
                "-n",
                NS,
                "delete",
                "pod",
                &pname,
                "--grace-period=0",
                "--force",
                "--wait=false",
            ]);
        }
        drop(node);
    }
    eprintln!("| state | pod | agent | kubelet | agrees |\n|---|---|---|---|---|");
    for r in &rows {
        eprintln!(
            "| {} | {} | {} | {} | {} |",
            r.state,
            r.pod,
            r.agent,
            normalise(&r.kubelet),
            if r.agrees { "yes" } else { "**NO**" }
        );
    }
    for j in &judges {
        eprintln!("runtimeHandlers: {j}");
    }
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| !r.agrees)
        .map(|r| {
            format!(
                "{} pod {}: agent {} / kubelet {}",
                r.state, r.pod, r.agent, r.kubelet
            )
        })
        .collect();
    assert!(bad.is_empty(), "disagreements:\n{}", bad.join("\n"));
}
