//! `serve --kubeconfig`: real agents on the real kernel (inside `unshare -U
//! -r`, `user.max_user_namespaces` flipped under them) keep their Node's
//! condition, labels and desired-state annotation on the test API server
//! (test-api/, a stand-in kube-apiserver with the Node authorizer and
//! NodeRestriction), and real kubectl v1.32 reads them: `kubectl wait
//! --for=condition=…` returns after the flip and times out before, `kubectl
//! get nodes -L` lists the labels. The kubelet's `Ready` survives every
//! write; a restart keeps `lastTransitionTime`; a node credential for
//! another Node gets NodeRestriction's 403 and the agent says so; a rotated
//! certificate whose old serial is revoked is picked up without a restart;
//! scripted 503/429 answers and a server that goes down are recovered from;
//! a runsc handler whose shim is removed and restored against the test
//! containerd turns the condition False and the handler's label not-ready,
//! then back (its canary run through the restored shim).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{wait_until, Agent, AgentSpec, BIN};
use serde_json::{json, Value};
use test_api::{ClientCert, NodeAuthzMode, Scripted, TestApiServer, User};

const TYPE: &str = "sandbox-readiness.io/SandboxReady";
const LIMIT_OK: &str = "user.max_user_namespaces=11255";
const ADMIN_TOKEN: &str = "admin-token";

/// The test API server on a runtime of its own (the test thread blocks in
/// waits and child processes), and a private directory for kubeconfigs.
struct Cluster {
    rt: tokio::runtime::Runtime,
    srv: TestApiServer,
    dir: tempfile::TempDir,
    admin: PathBuf,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string()
}

impl Cluster {
    fn new() -> Cluster {
        Cluster::with_node_authz(NodeAuthzMode::SelectorRestricted)
    }

    fn with_node_authz(mode: NodeAuthzMode) -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let srv = rt
            .block_on(
                TestApiServer::builder()
                    .token(ADMIN_TOKEN, User::new("admin", &["system:masters"]))
                    .node_authz(mode)
                    .start(),
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let admin = dir.path().join("admin.kubeconfig");
        std::fs::write(&admin, srv.kubeconfig_token(ADMIN_TOKEN)).unwrap();
        Cluster {
            rt,
            srv,
            dir,
            admin,
        }
    }

    /// A Node as kubelet registers it: `Ready` and this boot's bootID.
    fn register(&self, name: &str, boot: &str) {
        self.srv.create(common::kubelet_node(name, boot)).unwrap();
    }

    fn node(&self, name: &str) -> Value {
        self.srv.get("v1", "Node", "", name).unwrap_or(Value::Null)
    }

    fn condition(&self, name: &str, type_: &str) -> Option<Value> {
        self.node(name)["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
    }

    fn status_of(&self, name: &str) -> Option<String> {
        self.condition(name, TYPE)
            .and_then(|c| c["status"].as_str().map(str::to_string))
    }

    /// Kubelet's credential for `node`, laid out as on Talos.
    fn kubelet_kubeconfig(&self, node: &str, sub: &str) -> (PathBuf, ClientCert) {
        let c = self
            .srv
            .client_cert(&format!("system:node:{node}"), &["system:nodes"]);
        let path = self
            .srv
            .kubeconfig_kubelet_style(&self.dir.path().join(sub), &c)
            .unwrap();
        (path, c)
    }

    fn kubectl(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &self.admin)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg("--cache-dir")
            .arg(self.dir.path().join("kubectl-cache"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn writer_agent(limit: u32, kubeconfig: &Path, extra: &[&str]) -> Agent {
    let mut args = vec![
        "--poll-interval",
        "300ms",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-resync",
        "1s",
    ];
    args.extend_from_slice(extra);
    Agent::spawn(AgentSpec::new(Some(limit), &args))
}

fn kubectl_available() -> bool {
    if common::on_path("kubectl").is_none() {
        common::skip("kubectl is not installed");
        return false;
    }
    true
}

#[test]
fn the_condition_follows_the_limit_and_kubectl_waits_for_it() {
    if !kubectl_available() {
        return;
    }
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let ready_before = c.condition("worker-1", "Ready").unwrap();
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    let exec = Instant::now();
    let agent = writer_agent(0, &kc, &["--sysctl", LIMIT_OK, "--require-userns"]);

    wait_until(Duration::from_secs(20), "condition False", || {
        c.status_of("worker-1").as_deref() == Some("False")
    });
    eprintln!(
        "serve exec → first condition on the Node: {:?}",
        exec.elapsed()
    );
    let cond = c.condition("worker-1", TYPE).unwrap();
    assert_eq!(cond["reason"], "SysctlMismatch", "{cond}");
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains("user.max_user_namespaces is 0, expected 11255"),
        "{cond}"
    );
    assert_eq!(c.condition("worker-1", "Ready").unwrap(), ready_before);
    // The desired-state annotation, in the library's form (written right
    // after the condition).
    wait_until(
        Duration::from_secs(5),
        "the desired-state annotation",
        || {
            c.node("worker-1")["metadata"]["annotations"]["sandbox-readiness.io/desired"]
                .is_string()
        },
    );
    let ann = c.node("worker-1")["metadata"]["annotations"]["sandbox-readiness.io/desired"]
        .as_str()
        .unwrap()
        .to_string();
    let parsed = sandbox_readiness::desired::from_annotation(&ann).unwrap();
    assert!(parsed.require_userns, "{ann}");
    assert_eq!(parsed.sysctls.len(), 1, "{ann}");

    // Before the flip kubectl's wait times out (exit 1).
    let (code, _, err) = c.kubectl(&[
        "wait",
        &format!("--for=condition={TYPE}"),
        "node/worker-1",
        "--timeout=2s",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("timed out"), "{err}");

    // The flip: kubectl wait returns within 3 s of it.
    let waiter = Command::new("kubectl")
        .env("KUBECONFIG", &c.admin)
        .arg("--cache-dir")
        .arg(c.dir.path().join("kubectl-cache"))
        .args([
            "wait",
            &format!("--for=condition={TYPE}"),
            "node/worker-1",
            "--timeout=30s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // kubectl has started its watch before the limit moves.
    std::thread::sleep(Duration::from_millis(700));
    let flipped = Instant::now();
    agent.set_limit(11255);
    let out = waiter.wait_with_output().unwrap();
    let took = flipped.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("node/worker-1 condition met"),
        "{out:?}"
    );
    assert!(took <= Duration::from_secs(3), "kubectl wait took {took:?}");
    eprintln!("flip → kubectl wait returned: {took:?}");
    let t = c.condition("worker-1", TYPE).unwrap();
    assert_eq!(t["reason"], "Converged", "{t}");
    assert_eq!(c.condition("worker-1", "Ready").unwrap(), ready_before);

    // And back.
    agent.set_limit(0);
    wait_until(Duration::from_secs(5), "condition False again", || {
        c.status_of("worker-1").as_deref() == Some("False")
    });
    assert_eq!(c.condition("worker-1", "Ready").unwrap(), ready_before);
    let f = c.condition("worker-1", TYPE).unwrap();
    assert_ne!(f["lastTransitionTime"], t["lastTransitionTime"], "{f}");
}

#[test]
fn a_restart_keeps_the_transition_time_and_does_not_flap() {
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    let desired = ["--sysctl", LIMIT_OK, "--require-userns"];
    let mut agent = writer_agent(11255, &kc, &desired);
    wait_until(Duration::from_secs(20), "condition True", || {
        c.status_of("worker-1").as_deref() == Some("True")
    });
    let first = c.condition("worker-1", TYPE).unwrap();
    agent.kill();
    // Heartbeats are stamped to the second: the restarted one is later.
    std::thread::sleep(Duration::from_millis(1100));
    c.srv.clear_requests();
    let _agent = writer_agent(11255, &kc, &desired);
    wait_until(
        Duration::from_secs(20),
        "a heartbeat after the restart",
        || {
            c.condition("worker-1", TYPE)
                .is_some_and(|n| n["lastHeartbeatTime"] != first["lastHeartbeatTime"])
        },
    );
    let after = c.condition("worker-1", TYPE).unwrap();
    assert_eq!(after["status"], "True");
    assert_eq!(after["lastTransitionTime"], first["lastTransitionTime"]);
    // Never Unknown in between: every status write said True.
    let writes: Vec<_> = c
        .srv
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
        .collect();
    assert!(!writes.is_empty());
    assert!(writes.iter().all(|r| r.status == 200), "{writes:?}");
    assert_eq!(c.status_of("worker-1").as_deref(), Some("True"));
}

#[test]
fn handler_labels_follow_and_kubectl_lists_them() {
    if !kubectl_available() {
        return;
    }
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    // No CRI here: runsc's own finding is CRI_UNREACHABLE (unknown); the
    // sysctl is node-wide, so at 0 the label is not-ready.
    let agent = writer_agent(
        0,
        &kc,
        &[
            "--sysctl",
            LIMIT_OK,
            "--require-runtime-handler",
            "runsc",
            "--handler-labels",
            "--cri-endpoint",
            "unix:///nonexistent/containerd.sock",
        ],
    );
    let label = |c: &Cluster| {
        c.node("worker-1")["metadata"]["labels"]["sandbox-readiness.io/runsc"]
            .as_str()
            .map(str::to_string)
    };
    wait_until(Duration::from_secs(20), "label not-ready", || {
        label(&c).as_deref() == Some("not-ready")
    });
    let (code, out, err) = c.kubectl(&["get", "nodes", "-L", "sandbox-readiness.io/runsc"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with("RUNSC"), "{out}");
    assert!(
        lines[1].starts_with("worker-1 ") && lines[1].ends_with("not-ready"),
        "{out}"
    );
    let owned =
        c.node("worker-1")["metadata"]["annotations"]["sandbox-readiness.io/owned-labels"].clone();
    assert_eq!(owned, json!("[\"sandbox-readiness.io/runsc\"]"));

    agent.set_limit(11255);
    wait_until(Duration::from_secs(5), "label unknown", || {
        label(&c).as_deref() == Some("unknown")
    });
    // Only CRI_UNREACHABLE is left: the condition is Unknown, not False.
    assert_eq!(c.status_of("worker-1").as_deref(), Some("Unknown"));
    let cond = c.condition("worker-1", TYPE).unwrap();
    assert_eq!(cond["reason"], "CriUnreachable", "{cond}");
    // kubelet's own label is never touched.
    assert_eq!(
        c.node("worker-1")["metadata"]["labels"]["kubernetes.io/hostname"],
        "worker-1"
    );
}

/// An agent whose `--node-name` is not its credential's Node: `(the 403
/// line it logged, the agent)`.
fn wrong_node(c: &Cluster, needle: &str) -> (String, Agent) {
    c.register("worker-1", &boot_id());
    c.register("worker-2", &boot_id());
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    let agent = writer_agent(
        11255,
        &kc,
        &[
            "--sysctl",
            LIMIT_OK,
            "--node-name",
            "worker-2",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let line = agent.log().wait_line(needle, Duration::from_secs(20));
    assert!(
        line.contains("forbidden") && line.contains("worker-2"),
        "{line}"
    );
    assert_eq!(c.status_of("worker-2"), None);
    assert_eq!(c.status_of("worker-1"), None);
    let metrics = http_get(agent.metrics_addr(), "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l
                .starts_with("sandbox_readiness_node_write_failures_total{reason=\"forbidden\"} ")),
        "{metrics}"
    );
    (line, agent)
}

#[test]
fn another_nodes_credential_gets_node_restrictions_403_and_the_agent_says_so() {
    // Before 1.32's selector authorization a node may read every Node, so
    // the write is what NodeRestriction refuses.
    let c = Cluster::with_node_authz(NodeAuthzMode::Legacy);
    let (line, agent) = wrong_node(&c, "not allowed to modify node");
    assert!(line.contains("PATCH"), "{line}");
    // Logged once per state change, not once per retry.
    std::thread::sleep(Duration::from_secs(4));
    let log = agent.log().text();
    assert_eq!(
        log.matches("not allowed to modify node").count(),
        1,
        "{log}"
    );

    // With selector authorization (1.32's default) the Node authorizer
    // refuses the read already.
    let c = Cluster::new();
    let (line, _agent) = wrong_node(&c, "only its own Node object");
    assert!(line.contains("GET"), "{line}");
}

#[test]
fn a_rotated_certificate_is_picked_up_without_a_restart() {
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let (kc, old) = c.kubelet_kubeconfig("worker-1", "kubelet");
    let agent = writer_agent(0, &kc, &["--sysctl", LIMIT_OK]);
    wait_until(Duration::from_secs(20), "condition False", || {
        c.status_of("worker-1").as_deref() == Some("False")
    });
    // kubelet rotates: a new PEM, the symlink re-pointed; the old serial
    // is rejected from now on.
    let (_, new) = c.kubelet_kubeconfig("worker-1", "kubelet");
    c.srv.revoke(old.serial);
    c.srv.clear_requests();
    agent.set_limit(11255);
    wait_until(
        Duration::from_secs(10),
        "condition True with the new certificate",
        || c.status_of("worker-1").as_deref() == Some("True"),
    );
    assert_ne!(new.serial, old.serial);
    let reqs = c.srv.requests();
    assert!(
        reqs.iter().any(|r| r.method == "PATCH"
            && r.status == 200
            && r.user.as_deref() == Some("system:node:worker-1")),
        "{reqs:?}"
    );
}

#[test]
fn faults_are_retried_then_written() {
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    let agent = writer_agent(
        0,
        &kc,
        &["--sysctl", LIMIT_OK, "--metrics-listen", "127.0.0.1:0"],
    );
    wait_until(Duration::from_secs(20), "condition False", || {
        c.status_of("worker-1").as_deref() == Some("False")
    });
    c.srv.faults().script(
        "PATCH",
        "/api/v1/nodes/worker-1/status",
        vec![
            Scripted::status(503),
            Scripted::too_many_requests(1),
            Scripted::status(500),
        ],
    );
    let flipped = Instant::now();
    agent.set_limit(11255);
    wait_until(
        Duration::from_secs(20),
        "condition True after 503, 429, 500",
        || c.status_of("worker-1").as_deref() == Some("True"),
    );
    eprintln!("written after three faults in {:?}", flipped.elapsed());
    let metrics = http_get(agent.metrics_addr(), "/metrics");
    for reason in ["server_error", "throttled"] {
        assert!(
            metrics.contains(&format!(
                "sandbox_readiness_node_write_failures_total{{reason=\"{reason}\"}}"
            )),
            "{reason}\n{metrics}"
        );
    }
    // The server goes away, then comes back.
    c.rt.block_on(c.srv.faults().down());
    agent.set_limit(0);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.status_of("worker-1").as_deref(), Some("True"));
    c.rt.block_on(c.srv.faults().up()).unwrap();
    wait_until(
        Duration::from_secs(20),
        "condition False after the outage",
        || c.status_of("worker-1").as_deref() == Some("False"),
    );
    let log = agent.log().text();
    assert!(log.contains("writing to the Node again"), "{log}");
}

#[test]
fn a_re_registered_node_is_written_again_and_a_wrong_boot_id_is_not() {
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    let agent = writer_agent(
        11255,
        &kc,
        &[
            "--sysctl",
            LIMIT_OK,
            "--require-runtime-handler",
            "runc",
            "--handler-labels",
            "--cri-endpoint",
            "unix:///nonexistent.sock",
        ],
    );
    wait_until(Duration::from_secs(20), "condition written", || {
        c.status_of("worker-1").is_some()
    });
    c.srv.delete("v1", "Node", "", "worker-1").unwrap();
    c.register("worker-1", &boot_id());
    wait_until(
        Duration::from_secs(10),
        "condition and labels written again",
        || {
            c.status_of("worker-1").is_some()
                && c.node("worker-1")["metadata"]["labels"]["sandbox-readiness.io/runc"].is_string()
        },
    );
    assert!(agent.log().text().contains("re-registered"));

    // A Node of another boot: nothing is written.
    let c2 = Cluster::new();
    c2.register("worker-1", "00000000-0000-0000-0000-000000000000");
    let (kc2, _) = c2.kubelet_kubeconfig("worker-1", "kubelet");
    let other = writer_agent(11255, &kc2, &["--sysctl", LIMIT_OK]);
    other
        .log()
        .wait_line("writing nothing", Duration::from_secs(20));
    assert_eq!(c2.status_of("worker-1"), None);
}

#[test]
fn start_up_refusals_exit_2_with_one_line() {
    let c = Cluster::new();
    let token = c.dir.path().join("token.kubeconfig");
    std::fs::write(&token, c.srv.kubeconfig_token(ADMIN_TOKEN)).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--kubeconfig", token.to_str().unwrap()],
            "needs a desired state",
        ),
        (
            vec!["--kubeconfig", token.to_str().unwrap(), "--require-userns"],
            "give --node-name",
        ),
        (
            vec![
                "--kubeconfig",
                token.to_str().unwrap(),
                "--require-userns",
                "--node-name",
                "worker-1",
                "--condition-type",
                "not a type",
            ],
            "condition type",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!err.contains(ADMIN_TOKEN), "{err}");
    }
}

/// GET over plain HTTP/1.1 (the metrics port).
fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(raw)
}

#[test]
fn a_hung_api_server_delays_neither_answers_nor_sigterm() {
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    c.srv.faults().hung();
    let mut agent = writer_agent(11255, &kc, &["--sysctl", LIMIT_OK]);
    // The writer waits on the API server; the agent answers at once.
    let asked = Instant::now();
    let run = common::check(
        &common::args(&["-n", &agent.addr.to_string(), "--sysctl", LIMIT_OK]),
        Duration::from_secs(10),
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(c.status_of("worker-1"), None);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(agent.pid()).unwrap());
    let sent = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_until(Duration::from_secs(5), "the agent exits on SIGTERM", || {
        agent.child.try_wait().unwrap().is_some()
    });
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert!(agent.child.try_wait().unwrap().unwrap().success());
}

/// `kubectl wait --for=condition=TYPE node/NAME --timeout=30s`, started.
fn kubectl_waiter(c: &Cluster, node: &str) -> std::process::Child {
    Command::new("kubectl")
        .env("KUBECONFIG", &c.admin)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .arg("--cache-dir")
        .arg(c.dir.path().join("kubectl-cache"))
        .args([
            "wait",
            &format!("--for=condition={TYPE}"),
            &format!("node/{node}"),
            "--timeout=30s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_removed_runsc_shim_is_false_and_not_ready_until_it_is_restored() {
    use support::containerd::{import_pause, runc_shim_as_runsc, Containerd, Options, PAUSE_IMAGE};
    if !kubectl_available() {
        return;
    }
    // containerd 2.1 with Talos's gVisor handler, its shim in a directory
    // of the test's on containerd's PATH, where the agent observes it too.
    let shims = tempfile::tempdir().unwrap();
    let shim = runc_shim_as_runsc(shims.path());
    let stash = tempfile::tempdir().unwrap();
    let stashed = stash.path().join("containerd-shim-runsc-v1");
    let ctd = Containerd::start(
        Options::containerd2_with_runsc()
            .pod_sandboxes(PAUSE_IMAGE)
            .runsc_shim_in(shims.path().to_path_buf()),
    );
    import_pause(&ctd);
    let c = Cluster::new();
    c.register("worker-1", &boot_id());
    let (kc, _) = c.kubelet_kubeconfig("worker-1", "kubelet");
    // The shim is seen at each full observation (--probe-interval, 30 s by
    // default): every second here.
    let _agent = Agent::spawn(AgentSpec::new(
        None,
        &[
            "--poll-interval",
            "300ms",
            "--probe-interval",
            "1s",
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--node-resync",
            "1s",
            "--host-root",
            ctd.dir().to_str().unwrap(),
            "--cri-endpoint",
            &ctd.endpoint(),
            "--runsc-path",
            "/usr/bin/runsc",
            "--shim-path",
            shim.to_str().unwrap(),
            "--require-runtime-handler",
            "runsc",
            "--require-canary",
            "runsc",
            "--allow-canary",
            "runsc",
            "--handler-labels",
        ],
    ));
    let label = |c: &Cluster| {
        c.node("worker-1")["metadata"]["labels"]["sandbox-readiness.io/runsc"]
            .as_str()
            .map(str::to_string)
    };
    // With the shim: the canary passes through it, the node converges.
    wait_until(
        Duration::from_secs(30),
        "condition True, runsc ready",
        || {
            c.status_of("worker-1").as_deref() == Some("True")
                && label(&c).as_deref() == Some("ready")
        },
    );

    // The shim removed: False, naming it; the handler not-ready.
    std::fs::rename(&shim, &stashed).unwrap();
    wait_until(
        Duration::from_secs(5),
        "condition False, runsc not-ready",
        || {
            c.status_of("worker-1").as_deref() == Some("False")
                && label(&c).as_deref() == Some("not-ready")
        },
    );
    let cond = c.condition("worker-1", TYPE).unwrap();
    assert_eq!(cond["reason"], "RuntimeShimMissing", "{cond}");
    let msg = cond["message"].as_str().unwrap();
    assert!(msg.contains("containerd-shim-runsc-v1"), "{cond}");
    assert!(msg.contains("handler runsc"), "{cond}");
    let (code, out, err) = c.kubectl(&["get", "nodes", "-L", "sandbox-readiness.io/runsc"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("worker-1 ") && l.ends_with("not-ready")),
        "{out}"
    );
    let (code, _, err) = c.kubectl(&[
        "wait",
        &format!("--for=condition={TYPE}"),
        "node/worker-1",
        "--timeout=2s",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("timed out"), "{err}");

    // Restored: kubectl's wait returns, the label is ready again.
    let waiter = kubectl_waiter(&c, "worker-1");
    std::thread::sleep(Duration::from_millis(700));
    let restored = Instant::now();
    std::fs::rename(&stashed, &shim).unwrap();
    let out = waiter.wait_with_output().unwrap();
    let took = restored.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("node/worker-1 condition met"),
        "{out:?}"
    );
    assert!(took <= Duration::from_secs(3), "kubectl wait took {took:?}");
    eprintln!("shim restored → kubectl wait returned: {took:?}");
    assert_eq!(
        c.condition("worker-1", TYPE).unwrap()["reason"],
        "Converged"
    );
    wait_until(Duration::from_secs(5), "runsc ready again", || {
        label(&c).as_deref() == Some("ready")
    });
}
