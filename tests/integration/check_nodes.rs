//! `check --from-node-conditions`: the real binary reads the pinned kubectl
//! v1.36.3's `get nodes -o json` from the REAL kube-apiserver
//! (tests/support/cluster.rs, the cluster the binary's tests share) and
//! judges each Node by its sandbox condition, the condition's heartbeat and
//! its `sandbox-readiness.io/desired` annotation, while the test changes
//! the Nodes through the API: False → True, a stale heartbeat, an
//! annotation that does not cover `--desired-from`. No agent and no root:
//! the admin writes the Nodes as the agent leaves them (the condition on
//! the status subresource, the annotation on the Node). Each test's Nodes
//! carry a pool label of their own and `--nodes-cmd` selects by it, as a
//! pool is selected in a cluster shared with other pools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::support;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use common::BIN;
use serde_json::{json, Value};
use support::cluster::RealCluster;

const TYPE: &str = "sandbox-readiness.io/SandboxReady";
const COVERS: &str =
    r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255"},"require":["userns"]}"#;
/// The pool's machine config: the limit the annotations must cover.
const POOL: &str = "version: v1alpha1\nmachine:\n  type: worker\n  sysctls:\n    user.max_user_namespaces: \"11255\"\n";
/// The label that makes a test's Nodes its pool.
const POOL_LABEL: &str = "sandbox-readiness.test/pool";

/// One test's pool of Nodes on the shared real cluster.
struct Cluster {
    c: &'static RealCluster,
    pool: String,
    dir: tempfile::TempDir,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn ago(secs: u64) -> String {
    rfc3339(SystemTime::now() - Duration::from_secs(secs))
}

impl Cluster {
    fn new() -> Cluster {
        let c = RealCluster::shared();
        Cluster {
            c,
            pool: c.unique("pool"),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The Node `short` of this pool is named this.
    fn name(&self, short: &str) -> String {
        format!("{}-{short}", self.pool)
    }

    /// A Node as kubelet registers it, then as the agent writes it: the
    /// sandbox condition (`status`, heartbeat `heartbeat`) beside kubelet's
    /// `Ready`, and the desired-state annotation. The first call creates
    /// the Node with its status (a Node's create keeps status, as kubelet's
    /// registration relies on); later calls write the status subresource
    /// and the annotation, as the agent does: an update of the Node itself
    /// keeps the old status on the real server.
    fn node(&self, short: &str, status: &str, heartbeat: &str, desired: Option<&str>) {
        let name = self.name(short);
        let (reason, message) = match status {
            "True" => ("Converged", ""),
            "False" => (
                "SysctlMismatch",
                "user.max_user_namespaces is 0, expected 11255",
            ),
            _ => ("CanaryNotRun", "the canary has not run yet"),
        };
        let conditions = json!([
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "kubelet is posting ready status",
             "lastHeartbeatTime": ago(5), "lastTransitionTime": ago(3600)},
            {"type": TYPE, "status": status, "reason": reason, "message": message,
             "lastHeartbeatTime": heartbeat, "lastTransitionTime": ago(3600)}
        ]);
        if self.c.get_node(&name).is_null() {
            let mut annotations = json!({});
            if let Some(d) = desired {
                annotations["sandbox-readiness.io/desired"] = json!(d);
            }
            let node = json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, POOL_LABEL: self.pool},
                             "annotations": annotations},
                "spec": {},
                "status": {
                    "conditions": conditions,
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "nodeInfo": {"kubeletVersion": "v1.36.3", "bootID": "b"}
                }
            });
            self.c
                .write("POST", "/api/v1/nodes", "application/json", &node);
            return;
        }
        // The annotation first, as a merge patch (null removes it), then
        // the condition: a reader between the two sees the old one. Over
        // HTTPS, not kubectl: a kubectl process per write takes a second on
        // a loaded machine, and the waits below are a few seconds.
        const MERGE: &str = "application/merge-patch+json";
        let meta = json!({"metadata": {"annotations": {"sandbox-readiness.io/desired": desired}}});
        self.c
            .write("PATCH", &format!("/api/v1/nodes/{name}"), MERGE, &meta);
        let st = json!({"status": {"conditions": conditions}});
        self.c
            .write("PATCH", &format!("/api/v1/nodes/{name}/status"), MERGE, &st);
    }

    /// The pinned kubectl, as the admin, this pool's Nodes.
    fn nodes_cmd(&self) -> String {
        format!(
            "{} --kubeconfig {} --cache-dir {} get nodes -l {POOL_LABEL}={} -o json",
            self.c.kubectl_bin().display(),
            self.c.admin_kubeconfig().display(),
            self.dir.path().join("kubectl-cache").display(),
            self.pool
        )
    }

    fn check(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_remove("KUBERNETES_SERVICE_HOST")
            .args([
                "check",
                "--from-node-conditions",
                "--nodes-cmd",
                &self.nodes_cmd(),
            ])
            .args(extra);
        c
    }

    fn pool_file(&self) -> PathBuf {
        let p = self.dir.path().join("pool.yaml");
        std::fs::write(&p, POOL).unwrap();
        p
    }
}

fn run(mut c: Command) -> (i32, String, String) {
    let out: Output = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running `check`: its stderr (the progress lines) is read as it comes,
/// so a test can act once check has printed what it first saw.
struct Running {
    child: Child,
    err: Arc<Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Running {
    /// Returns once stderr has a line containing `needle`.
    fn wait_err(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.err.lock().unwrap().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "{needle:?} not printed:\n{}",
                self.err.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn spawn(mut c: Command) -> Running {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let sink = Arc::clone(&err);
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let mut e = sink.lock().unwrap();
            e.push_str(&line);
            e.push('\n');
        }
    });
    Running { child, err, reader }
}

fn finish(r: Running) -> (i32, String, String) {
    let out = r.child.wait_with_output().unwrap();
    r.reader.join().unwrap();
    let err = r.err.lock().unwrap().clone();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

/// The table row of `node` (its first column).
fn row<'a>(out: &'a str, node: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(node))
        .unwrap_or_else(|| panic!("no row for {node} in:\n{out}"))
}

fn cells(row: &str) -> Vec<&str> {
    row.split_whitespace().collect()
}

#[test]
fn a_pool_is_followed_through_its_node_conditions_to_exit_0() {
    let c = Cluster::new();
    let (w1, w2, w3) = (c.name("w1"), c.name("w2"), c.name("w3"));
    c.node("w1", "False", &ago(10), Some(COVERS));
    c.node("w2", "True", &ago(10), Some(COVERS));
    // The agent on w3 stopped 20 minutes ago: its True is stale.
    c.node("w3", "True", &ago(20 * 60), Some(COVERS));

    let (code, out, err) = run(c.check(&[]));
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        cells(row(&out, &w1))[..3],
        [w1.as_str(), "no", "False"],
        "{out}"
    );
    assert!(
        row(&out, &w1).contains("SysctlMismatch: user.max_user_namespaces is 0"),
        "{out}"
    );
    assert_eq!(
        cells(row(&out, &w2))[..3],
        [w2.as_str(), "yes", "True"],
        "{out}"
    );
    assert_eq!(
        cells(row(&out, &w3))[..3],
        [w3.as_str(), "unknown", "True"],
        "{out}"
    );
    assert!(
        row(&out, &w3).contains("heartbeat is 20m") && row(&out, &w3).contains("stale after 15m"),
        "{out}"
    );
    assert!(
        out.contains("1/3 converged (via Node condition sandbox-readiness.io/SandboxReady)"),
        "{out}"
    );
    // A shorter --max-heartbeat-age makes w2's 10 s old heartbeat stale too.
    let (code, out, _) = run(c.check(&["--max-heartbeat-age", "5s", "-o", "json"]));
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["source"], "nodeCondition");
    assert_eq!(doc["nodesConverged"], 0, "{doc}");
    assert_eq!(doc["nodes"][1]["name"], w2.as_str());
    assert_eq!(doc["nodes"][1]["status"], "Unknown");
    assert_eq!(doc["nodes"][1]["condition"]["status"], "True");

    // Under --wait the list is read again every --poll: the flips on the
    // API server are followed, and check exits 0 once all are ready.
    let started = Instant::now();
    let child = spawn(c.check(&["--wait", "60s", "--poll", "300ms"]));
    // What check saw first, printed before anything moves.
    child.wait_err(&format!("{w1} converged no"));
    child.wait_err(&format!("{w3} converged unknown"));
    let flipped = started.elapsed();
    c.node("w1", "True", &ago(0), Some(COVERS));
    // A heartbeat from the restarted agent on w3.
    c.node("w3", "True", &ago(0), Some(COVERS));
    let (code, out, err) = finish(child);
    let took = started.elapsed();
    assert_eq!(code, 0, "{out}{err}");
    for n in [&w1, &w2, &w3] {
        assert_eq!(
            cells(row(&out, n))[..3],
            [n.as_str(), "yes", "True"],
            "{out}"
        );
    }
    assert!(out.contains("3/3 converged"), "{out}");
    // The progress on stderr: w1 went from no to yes, w3 from unknown.
    let at = |needle: &str| {
        err.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in:\n{err}"))
    };
    assert!(
        at(&format!("{w1} converged no: SysctlMismatch")) < at(&format!("{w1} converged yes")),
        "{err}"
    );
    assert!(
        at(&format!("{w3} converged unknown")) < at(&format!("{w3} converged yes")),
        "{err}"
    );
    eprintln!(
        "check --from-node-conditions --wait returned {took:?} after start (flips at {flipped:?})"
    );
}

#[test]
fn the_pools_desired_state_must_be_covered_and_wait_times_out_when_it_never_is() {
    let c = Cluster::new();
    let (w1, w2, w3) = (c.name("w1"), c.name("w2"), c.name("w3"));
    let pool = c.pool_file();
    let pool = pool.to_str().unwrap();
    c.node("w1", "True", &ago(5), Some(COVERS));
    // w2's agent checks only its own defaults: nothing about the limit.
    c.node("w2", "True", &ago(5), Some(r#"{"v":1}"#));
    // w3 never wrote its annotation (an agent older than the annotation).
    c.node("w3", "True", &ago(60), None);

    let (code, out, err) = run(c.check(&["--desired-from", pool]));
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(cells(row(&out, &w1))[..2], [w1.as_str(), "yes"], "{out}");
    let r2 = row(&out, &w2);
    assert_eq!(cells(r2)[..2], [w2.as_str(), "no"], "{out}");
    assert!(
        r2.contains("checks less than its pool asks") && r2.contains("user.max_user_namespaces"),
        "{out}"
    );
    let r3 = row(&out, &w3);
    assert_eq!(cells(r3)[..2], [w3.as_str(), "no"], "{out}");
    assert!(
        r3.contains("no sandbox-readiness.io/desired annotation"),
        "{out}"
    );
    assert!(
        out.contains("DESIRED (from the pool's configuration)"),
        "{out}"
    );
    // Without the pool, their own word is enough.
    let (code, out, _) = run(c.check(&[]));
    assert_eq!(code, 0, "{out}");

    // w2 never covers the pool: --wait times out, exit 1, w2 named.
    let started = Instant::now();
    let child = spawn(c.check(&["--desired-from", pool, "--wait", "6s", "--poll", "300ms"]));
    // check has read w3 once (no), then w3 is mended and check sees it.
    child.wait_err(&format!("{w3} converged no"));
    c.node("w3", "True", &ago(0), Some(COVERS));
    child.wait_err(&format!("{w3} converged yes"));
    let (code, out, err) = finish(child);
    assert_eq!(code, 1, "{out}{err}");
    assert!(started.elapsed() >= Duration::from_secs(6));
    assert!(err.contains("not converged within 6s"), "{err}");
    assert_eq!(cells(row(&out, &w3))[..2], [w3.as_str(), "yes"], "{out}");
    assert_eq!(cells(row(&out, &w2))[..2], [w2.as_str(), "no"], "{out}");
    assert!(out.contains("2/3 converged"), "{out}");

    // Once w2's agent checks the limit too, the same wait exits 0.
    c.node("w2", "True", &ago(0), Some(COVERS));
    let (code, out, err) =
        run(c.check(&["--desired-from", pool, "--wait", "10s", "--poll", "300ms"]));
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn expected_count_is_waited_for() {
    let c = Cluster::new();
    c.node("w1", "True", &ago(5), None);
    let child = spawn(c.check(&["--expect-nodes", "2", "--wait", "30s", "--poll", "300ms"]));
    std::thread::sleep(Duration::from_millis(1500));
    c.node("w2", "True", &ago(0), None);
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2/2 converged"), "{out}");
    let (code, out, _) = run(c.check(&["--expect-nodes", "3"]));
    assert_eq!(code, 1);
    assert!(out.contains("expected 3 nodes, 2 found"), "{out}");
}

fn bad_usage(args: &[&str], dir: &Path, want: &str) {
    let (code, out, err) = run({
        let mut c = Command::new(BIN);
        c.current_dir(dir).arg("check").args(args);
        c
    });
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: {err}");
    assert!(out.is_empty(), "{out}");
}

#[test]
fn bad_input_is_one_line_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |name: &str, v: Value| {
        std::fs::write(d.join(name), v.to_string()).unwrap();
        name.to_string()
    };
    let machines = write("m.json", json!({"kind": "MachineList", "items": []}));
    let nameless = write(
        "n.json",
        json!({"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "a"}}, {"kind": "Node", "metadata": {}}]}),
    );
    let ok = write("ok.json", json!({"kind": "NodeList", "items": []}));
    std::fs::write(d.join("text"), "w1\nw2\n").unwrap();
    let f = "--from-node-conditions";
    bad_usage(
        &[f, "--kube-nodes", &machines],
        d,
        "a MachineList carries no Node conditions",
    );
    bad_usage(
        &[f, "--kube-nodes", &nameless],
        d,
        "--kube-nodes n.json: item 2: no metadata.name",
    );
    bad_usage(
        &[f, "--kube-nodes", "text"],
        d,
        "--kube-nodes text: not JSON",
    );
    bad_usage(
        &[f, "--nodes-cmd", "echo w1"],
        d,
        "--nodes-cmd output: not JSON",
    );
    bad_usage(&[f], d, "needs --kube-nodes");
    bad_usage(
        &[f, "--kube-nodes", &ok, "--tls-ca", "ca.pem"],
        d,
        "--tls-ca does not apply to --from-node-conditions",
    );
    bad_usage(
        &[f, "--kube-nodes", &ok, "--port", "1"],
        d,
        "--port does not apply",
    );
    bad_usage(
        &[f, "--kube-nodes", &ok, "-n", "a"],
        d,
        "--nodes does not apply",
    );
    bad_usage(
        &[f, "--kube-nodes", &ok, "--condition-type", "a/b/c"],
        d,
        "--condition-type",
    );
    // An empty NodeList is not a converged pool.
    let (code, out, _) = run({
        let mut c = Command::new(BIN);
        c.current_dir(d).args(["check", f, "--kube-nodes", &ok]);
        c
    });
    assert_eq!(code, 1);
    assert!(
        out.contains("0/0 converged") && out.contains("no nodes"),
        "{out}"
    );
}

#[test]
fn stdin_is_read_once_under_wait() {
    let node = |hb: &str| {
        json!({"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "w1"}, "status": {"conditions": [
            {"type": TYPE, "status": "True", "reason": "Converged", "lastHeartbeatTime": hb}
        ]}}]})
        .to_string()
    };
    let run_stdin = |doc: String| {
        let mut cmd = Command::new(BIN);
        cmd.args(["check", "--from-node-conditions", "--kube-nodes", "-"])
            .args(["--wait", "2s", "--poll", "200ms"])
            .stdin(Stdio::piped());
        let mut running = spawn(cmd);
        use std::io::Write;
        running
            .child
            .stdin
            .take()
            .unwrap()
            .write_all(doc.as_bytes())
            .unwrap();
        finish(running)
    };
    let (code, out, err) = run_stdin(node(&ago(1)));
    assert_eq!(code, 0, "{out}{err}");
    // Stale, and stays so: the wait times out on the one document read,
    // without complaining about an empty stdin on every round.
    let (code, out, err) = run_stdin(node(&ago(3600)));
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("not converged within 2s"), "{err}");
    assert!(!err.contains("not JSON"), "{err}");
    assert_eq!(cells(row(&out, "w1"))[..2], ["w1", "unknown"], "{out}");
}
