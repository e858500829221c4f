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
    process::Command,
    time::{Duration, Instant},
};

use common::BIN;
use sandbox_readiness::proto::v1::ProbeOutcome;
use serde_json::Value;
use support::{cluster::RealCluster, kubelet::KubeletNode as Node};

const NS: &str = "sr-matrix";

/// `probe` against node `n`'s runtime.
trait Probe {
    fn probe(&self, req: &[&str]) -> (bool, Vec<Value>, Value);
}

impl Probe for Node {
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

/// The test's namespace, once pods can use it: a projected token needs its
/// ServiceAccount and the cluster's root CA ConfigMap (kube-controller-manager
/// makes both).
fn pods_namespace(c: &RealCluster) {
    c.kubectl_ok(&["create", "namespace", NS], None);
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
    pods_namespace(&c);
    c.kubectl_ok(
        &["apply", "-f", "-"],
        Some("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n"),
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

/// The agent's report over gRPC: (canary runs so far, the default
/// handler's last canary outcome).
fn canary_runs(agent: &common::Agent) -> (u64, Option<ProbeOutcome>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (c, runs) = rt.block_on(common::served_canary(&agent.url(), "default"));
    (runs, c.and_then(|c| c.result).map(|r| r.outcome()))
}

/// The agent beside a real kubelet that posts its status every 2 s, for
/// `COEXIST` (120 s here; the bench runs it for 5 minutes): the agent's
/// condition, labels and annotation are on the Node in every sample and
/// survive every kubelet status PATCH, kubelet's Ready survives every agent
/// write (both counted from the audit log), the agent's canary on kubelet's
/// containerd passes every run (kubelet's sandbox GC never takes it) and
/// leaves nothing kubelet reports, and a running pod is not disturbed.
#[test]
fn the_agent_lives_beside_the_real_kubelet() {
    // 120 s in the test command; the bench (benches/README.md) sets
    // SR_COEXIST_SECS=300 for the 5-minute run.
    let coexist_secs: u64 = std::env::var("SR_COEXIST_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|s| *s >= 30)
        .unwrap_or(120);
    #[allow(non_snake_case)]
    let COEXIST = Duration::from_secs(coexist_secs);
    let c = RealCluster::private();
    pods_namespace(&c);
    let name = "co0";
    let node = Node::up(&c, name, &["--status-every", "2s"]);
    c.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&pod_yaml("running", name, false, None)),
    );
    assert_eq!(outcome(&c, "running"), Outcome::Running);
    let container = |c: &RealCluster| {
        let p = c
            .get(&format!("/api/v1/namespaces/{NS}/pods/running"))
            .unwrap();
        let s = &p["status"]["containerStatuses"][0];
        (
            s["containerID"].as_str().unwrap_or("").to_string(),
            s["restartCount"].as_u64().unwrap_or(99),
            p["status"]["phase"].as_str().unwrap_or("").to_string(),
        )
    };
    let before = container(&c);
    let r = &node.root;
    let kubeconfig = r.join("etc/kubernetes/kubeconfig-kubelet");
    let endpoint = format!(
        "unix://{}",
        r.join("run/containerd/containerd.sock").display()
    );
    let conf_d = r.join("etc/cri/conf.d");
    let agent = common::Agent::start(
        None,
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--cri-endpoint",
            &endpoint,
            "--cri-conf-dir",
            conf_d.to_str().unwrap(),
            "--require-pod-userns",
            "default",
            "--require-canary",
            "default",
            "--allow-canary",
            "default",
            "--canary-interval",
            "10s",
            "--handler-labels",
            "--poll-interval",
            "1s",
            "--node-resync",
            "2s",
            // A condition write every 3 s beside kubelet's status every 2 s.
            "--node-heartbeat",
            "3s",
        ],
    );
    let ty = "sandbox-readiness.io/SandboxReady";
    let ours = |n: &Value| {
        let cond = n["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|x| x["type"] == ty).cloned());
        let ready = n["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|x| x["type"] == "Ready").cloned());
        (
            cond.map(|x| x["status"].as_str().unwrap_or("").to_string()),
            n["metadata"]["labels"].as_object().and_then(|l| {
                l.iter()
                    .find(|(k, _)| k.starts_with("sandbox-readiness.io/"))
                    .map(|(_, v)| v.as_str().unwrap_or("").to_string())
            }),
            n["metadata"]["annotations"]["sandbox-readiness.io/desired"].is_string(),
            ready.map(|x| x["status"].as_str().unwrap_or("").to_string()),
        )
    };
    support::cluster::poll(
        Duration::from_secs(60),
        "the agent's True on the Node",
        || {
            let (cond, label, ann, _) = ours(&c.get_node(name));
            cond.as_deref() == Some("True") && label.is_some() && ann
        },
    );
    let mark = c.audit_mark();
    let (runs_before, _) = canary_runs(&agent);
    let kubelet_log_path = r.join("logs/kubelet.log");
    let log_from = std::fs::metadata(&kubelet_log_path).map_or(0, |m| m.len() as usize);
    let warning_uids = |c: &RealCluster| -> Vec<String> {
        c.get("/api/v1/events?fieldSelector=type=Warning")
            .unwrap_or(Value::Null)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| e["metadata"]["uid"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let warnings_before = warning_uids(&c);
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < COEXIST {
        let n = c.get_node(name);
        let (cond, label, ann, ready) = ours(&n);
        assert_eq!(cond.as_deref(), Some("True"), "sample {samples}: {n:#}");
        assert_eq!(label.as_deref(), Some("ready"), "sample {samples}: {n:#}");
        assert!(
            ann,
            "sample {samples}: the desired annotation is gone: {n:#}"
        );
        assert_eq!(ready.as_deref(), Some("True"), "sample {samples}: {n:#}");
        samples += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let (runs, last) = canary_runs(&agent);
    c.audit_barrier();
    let on_node =
        |e: &Value| e["objectRef"]["resource"] == "nodes" && e["objectRef"]["name"] == name;
    let writes = c.audit_writes_since(mark, on_node);
    let by = |prefix: &str| {
        writes
            .iter()
            .filter(|e| {
                e["userAgent"]
                    .as_str()
                    .is_some_and(|u| u.starts_with(prefix))
            })
            .collect::<Vec<_>>()
    };
    let kubelet = by("kubelet");
    let agent_writes = by("sandbox-readiness");
    // Every write of either was accepted, and none of kubelet's patches
    // names our condition type (a strategic merge keyed by type: a type
    // kubelet does not own is never in its diff), nor ours kubelet's.
    for e in &writes {
        assert_eq!(e["responseStatus"]["code"], 200, "{e:#}");
    }
    let names_type = |e: &Value, t: &str| {
        e["requestObject"]["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|x| x["type"] == t))
    };
    assert!(
        kubelet.iter().all(|e| !names_type(e, ty)),
        "kubelet wrote our type"
    );
    assert!(
        agent_writes.iter().all(|e| !names_type(e, "Ready")),
        "the agent wrote Ready"
    );
    // Each writer wrote through the window, at least half as often as its
    // period allows (kubelet every 2 s, the agent's heartbeat every 3 s), or
    // the test did not exercise what it claims.
    let status_writes = |ws: &[&Value], who: &str, every: u64| {
        let n = ws
            .iter()
            .filter(|e| e["objectRef"]["subresource"] == "status")
            .count();
        let expected = (COEXIST.as_secs() / every / 2) as usize;
        assert!(
            n >= expected,
            "{who} wrote its status {n} times in {COEXIST:?} (expected ≥ {expected})"
        );
        n
    };
    let status_patches = status_writes(&kubelet, "kubelet", 2);
    status_writes(&agent_writes, "the agent", 3);
    // The canary ran through the window and passed every time.
    assert!(
        runs >= runs_before + COEXIST.as_secs() / 10 / 2,
        "canary runs {runs_before} → {runs}"
    );
    assert_eq!(last, Some(ProbeOutcome::Passed));
    assert!(
        !agent.log().text().contains("canary did not pass"),
        "{}",
        agent.log().text()
    );
    // Nothing of the canary in what kubelet reports: its log, and the events.
    // (kubelet's log from the window's start: its start-up lines, "PLEG
    // has yet to be successful" among them, came before the agent.)
    let whole = std::fs::read(&kubelet_log_path).unwrap_or_default();
    let kubelet_log = String::from_utf8_lossy(&whole[log_from.min(whole.len())..]).into_owned();
    let canary_lines: Vec<&str> = kubelet_log
        .lines()
        .filter(|l| l.contains("sandbox-readiness-canary"))
        .collect();
    let pleg: Vec<&str> = kubelet_log
        .lines()
        .filter(|l| l.contains("PLEG") && (l.contains("rror") || l.contains("not healthy")))
        .collect();
    let events = c
        .get("/api/v1/events?fieldSelector=type=Warning")
        .unwrap_or(Value::Null);
    let warnings: Vec<String> = events["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| {
            !warnings_before.contains(&e["metadata"]["uid"].as_str().unwrap_or("").to_string())
        })
        .map(|e| format!("{}: {}", e["reason"], e["message"]))
        .collect();
    // The running pod: the same container, never restarted.
    let after = container(&c);
    eprintln!(
        "beside kubelet for {COEXIST:?}: {samples} samples, {status_patches} kubelet status PATCHes, {} agent writes, canary runs {runs_before} → {runs}; kubelet's log on the canary: {} lines; PLEG errors: {}; Warning events: {warnings:?}",
        agent_writes.len(),
        canary_lines.len(),
        pleg.len()
    );
    assert!(canary_lines.is_empty(), "{canary_lines:#?}");
    assert!(pleg.is_empty(), "{pleg:#?}");
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert_eq!(after, before, "the running pod was disturbed");

    // containerd killed under the agent: its verdict says so and no stale
    // True stays on the Node (the agent polls every 1 s; its CRI calls time
    // out in 2 s). Tied to the kill: the first condition that is not True.
    let pid: i32 = std::fs::read_to_string(r.join("pids/containerd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let killed = Instant::now();
    // SAFETY: a plain kill(2) of the node's containerd, a child of the test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    support::cluster::poll(Duration::from_secs(60), "the condition off True", || {
        ours(&c.get_node(name)).0.as_deref() != Some("True")
    });
    let n = c.get_node(name);
    let cond = n["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|x| x["type"] == ty).cloned())
        .unwrap();
    eprintln!(
        "containerd killed → the Node's condition {}/{} after {:?}: {}",
        cond["status"],
        cond["reason"],
        killed.elapsed(),
        cond["message"]
    );
    drop(agent);
    drop(node);
}
