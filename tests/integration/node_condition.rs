//! `serve --kubeconfig`: real agents on the real kernel (inside `unshare -U
//! -r`, `user.max_user_namespaces` flipped under them) keep their Node's
//! condition, labels and desired-state annotation on the REAL
//! kube-apiserver (tests/support/cluster.rs: v1.36.3 with Node,RBAC
//! authorization and NodeRestriction, Nodes registered with kubelet's own
//! credentials), and the pinned kubectl v1.36.3 reads them: `kubectl wait
//! --for=condition=…` returns after the flip and times out before, `kubectl
//! get nodes -L` lists the labels. The kubelet's `Ready` survives every
//! write; a restart keeps `lastTransitionTime` (every write after it, as the
//! audit log holds them, said True); a node credential for another Node is
//! refused by the real Node authorizer on the read, and — where RBAC lets
//! it read — by the real NodeRestriction on the write, and the agent says
//! so; a rotated kubelet certificate is used for the next write without a
//! restart (the audit log names the credential); an API server that is
//! stopped and started again is written again; a runsc handler whose shim
//! is removed and restored against the test containerd turns the condition
//! False and the handler's label not-ready, then back.
//!
//! What the real server cannot do on demand goes through the fault proxy
//! (test-api/) in front of it, in the section at the end: scripted
//! 503/429/500 answers, a server that accepts and never answers, and
//! revoking a certificate by its serial (kube-apiserver has no CRL).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{self, http_get};
use crate::support;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{Agent, AgentSpec, BIN};
use serde_json::{json, Value};
use support::cluster::{credential_id, poll, AuditEvent, AuditMark, KubectlWatch, RealCluster};

const TYPE: &str = "sandbox-readiness.io/SandboxReady";
const LIMIT_OK: &str = "user.max_user_namespaces=11255";
/// The agent's User-Agent (src/kube/client.rs): its writes in the audit log.
const AGENT_UA: &str = "sandbox-readiness/";

fn node(c: &RealCluster, name: &str) -> Value {
    c.get_node(name)
}

fn condition(c: &RealCluster, name: &str, type_: &str) -> Option<Value> {
    node(c, name)["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == type_)
        .cloned()
}

fn status_of(c: &RealCluster, name: &str) -> Option<String> {
    condition(c, name, TYPE).and_then(|x| x["status"].as_str().map(str::to_string))
}

fn label(c: &RealCluster, name: &str, key: &str) -> Option<String> {
    node(c, name)["metadata"]["labels"][key]
        .as_str()
        .map(str::to_string)
}

/// The agent's writes on Node `name` (either resource) after `mark`, as
/// the audit log has them.
fn agent_writes(c: &RealCluster, mark: AuditMark, name: &str) -> Vec<AuditEvent> {
    c.audit_writes_since(mark, |e| {
        e["objectRef"]["resource"] == "nodes"
            && e["objectRef"]["name"] == name
            && e["userAgent"]
                .as_str()
                .is_some_and(|u| u.starts_with(AGENT_UA))
    })
}

/// [`agent_writes`] once `done` holds for them (the audit log may lag a
/// read that already shows the write).
fn agent_writes_until(
    c: &RealCluster,
    mark: AuditMark,
    name: &str,
    done: impl Fn(&[AuditEvent]) -> bool,
) -> Vec<AuditEvent> {
    c.audit_wait(
        Duration::from_secs(10),
        mark,
        |e| {
            e["objectRef"]["resource"] == "nodes"
                && e["objectRef"]["name"] == name
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|u| u.starts_with(AGENT_UA))
        },
        done,
    )
}

/// The sandbox statuses the status writes among `writes` sent.
fn statuses_sent(writes: &[AuditEvent]) -> Vec<&str> {
    writes
        .iter()
        .filter(|e| is_status_write(e))
        .filter_map(sent_status)
        .collect()
}

fn is_status_write(e: &AuditEvent) -> bool {
    e["objectRef"]["subresource"] == "status"
}

fn http_code(e: &AuditEvent) -> i64 {
    e["responseStatus"]["code"].as_i64().unwrap_or(-1)
}

/// The sandbox condition's status a status write sent (its patch body).
fn sent_status(e: &AuditEvent) -> Option<&str> {
    e["requestObject"]["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == TYPE)?["status"]
        .as_str()
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

/// `kubectl wait --for=condition=TYPE node/NAME --timeout=30s` (the pinned
/// kubectl), returned once its watch is open.
fn kubectl_waiter(c: &RealCluster, node: &str) -> KubectlWatch {
    c.kubectl_watching(
        &[
            "wait",
            &format!("--for=condition={TYPE}"),
            &format!("node/{node}"),
            "--timeout=30s",
        ],
        Duration::from_secs(20),
    )
}

/// Waits for a [`kubectl_waiter`] to return and checks it saw the condition
/// met; prints how long it took from `since` (a figure, not a bound: the
/// tier runs beside others on two cores; the bench times it).
fn kubectl_wait_met(waiter: KubectlWatch, node: &str, since: Instant, what: &str) {
    let (ok, out, err) = waiter.finish();
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("node/{node} condition met")),
        "{out}\n{err}"
    );
    eprintln!("{what} → kubectl wait returned: {:?}", since.elapsed());
}

/// `kubectl wait … --timeout=2s` before the condition holds: exit 1, timed
/// out.
fn kubectl_wait_times_out(c: &RealCluster, node: &str) {
    let (code, _, err) = c.kubectl(&[
        "wait",
        &format!("--for=condition={TYPE}"),
        &format!("node/{node}"),
        "--timeout=2s",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("timed out"), "{err}");
}

/// The row of `node` in `kubectl get nodes` output (the shared cluster
/// lists every test's Nodes).
fn row<'a>(out: &'a str, node: &str) -> Option<&'a str> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(node))
}

#[test]
fn the_condition_follows_the_limit_and_kubectl_waits_for_it() {
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("cond");
    let ready_before = condition(c, &n, "Ready").unwrap();
    let exec = Instant::now();
    let agent = writer_agent(0, &kc, &["--sysctl", LIMIT_OK, "--require-userns"]);

    poll(Duration::from_secs(20), "condition False", || {
        status_of(c, &n).as_deref() == Some("False")
    });
    eprintln!(
        "serve exec → first condition on the Node: {:?}",
        exec.elapsed()
    );
    let cond = condition(c, &n, TYPE).unwrap();
    assert_eq!(cond["reason"], "SysctlMismatch", "{cond}");
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains("user.max_user_namespaces is 0, expected 11255"),
        "{cond}"
    );
    assert_eq!(condition(c, &n, "Ready").unwrap(), ready_before);
    // The desired-state annotation, in the library's form (written right
    // after the condition).
    poll(
        Duration::from_secs(5),
        "the desired-state annotation",
        || node(c, &n)["metadata"]["annotations"]["sandbox-readiness.io/desired"].is_string(),
    );
    let ann = node(c, &n)["metadata"]["annotations"]["sandbox-readiness.io/desired"]
        .as_str()
        .unwrap()
        .to_string();
    let parsed = sandbox_readiness::desired::from_annotation(&ann).unwrap();
    assert!(parsed.require_userns, "{ann}");
    assert_eq!(parsed.sysctls.len(), 1, "{ann}");

    // Before the flip kubectl's wait times out (exit 1).
    kubectl_wait_times_out(c, &n);

    // The flip: kubectl wait returns within 3 s of it.
    let waiter = kubectl_waiter(c, &n);
    let flipped = Instant::now();
    agent.set_limit(11255);
    kubectl_wait_met(waiter, &n, flipped, "flip");
    let t = condition(c, &n, TYPE).unwrap();
    assert_eq!(t["reason"], "Converged", "{t}");
    assert_eq!(condition(c, &n, "Ready").unwrap(), ready_before);

    // And back.
    agent.set_limit(0);
    poll(Duration::from_secs(5), "condition False again", || {
        status_of(c, &n).as_deref() == Some("False")
    });
    assert_eq!(condition(c, &n, "Ready").unwrap(), ready_before);
    let f = condition(c, &n, TYPE).unwrap();
    assert_ne!(f["lastTransitionTime"], t["lastTransitionTime"], "{f}");

    // What the server recorded: every write the agent made was its own
    // Node's, with kubelet's credential, and accepted; one status write per
    // change (False, True, False) and the metadata patch.
    // The writer may send Unknown first, when its first attempt races the
    // first verdict; after that, one status write per change.
    let sent = |w: &[AuditEvent]| -> Vec<String> {
        statuses_sent(w)
            .into_iter()
            .skip_while(|s| *s == "Unknown")
            .map(str::to_string)
            .collect()
    };
    let writes = agent_writes_until(c, AuditMark::BEGINNING, &n, |w| sent(w).len() >= 3);
    assert!(
        writes
            .iter()
            .all(|e| http_code(e) == 200 && e["user"]["username"] == format!("system:node:{n}")),
        "{writes:#?}"
    );
    assert_eq!(sent(&writes), ["False", "True", "False"], "{writes:#?}");
    assert!(
        writes
            .iter()
            .any(|e| !is_status_write(e) && e["verb"] == "patch"),
        "no metadata patch: {writes:#?}"
    );
}

#[test]
fn a_restart_keeps_the_transition_time_and_does_not_flap() {
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("restart");
    let desired = ["--sysctl", LIMIT_OK, "--require-userns"];
    let mut agent = writer_agent(11255, &kc, &desired);
    poll(Duration::from_secs(20), "condition True", || {
        status_of(c, &n).as_deref() == Some("True")
    });
    let first = condition(c, &n, TYPE).unwrap();
    agent.kill();
    // Heartbeats are stamped to the second: the restarted one is later.
    std::thread::sleep(Duration::from_millis(1100));
    let mark = c.audit_mark();
    let _agent = writer_agent(11255, &kc, &desired);
    poll(
        Duration::from_secs(20),
        "a heartbeat after the restart",
        || {
            condition(c, &n, TYPE)
                .is_some_and(|x| x["lastHeartbeatTime"] != first["lastHeartbeatTime"])
        },
    );
    let after = condition(c, &n, TYPE).unwrap();
    assert_eq!(after["status"], "True");
    assert_eq!(after["lastTransitionTime"], first["lastTransitionTime"]);
    // Never Unknown in between: every status write after the restart, as
    // the server recorded it, said True and was accepted.
    let writes: Vec<_> = agent_writes_until(c, mark, &n, |w| !statuses_sent(w).is_empty())
        .into_iter()
        .filter(is_status_write)
        .collect();
    assert!(
        writes
            .iter()
            .all(|e| http_code(e) == 200 && sent_status(e) == Some("True")),
        "{writes:#?}"
    );
    assert_eq!(status_of(c, &n).as_deref(), Some("True"));
}

#[test]
fn handler_labels_follow_and_kubectl_lists_them() {
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("labels");
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
    let runsc = || label(c, &n, "sandbox-readiness.io/runsc");
    poll(Duration::from_secs(20), "label not-ready", || {
        runsc().as_deref() == Some("not-ready")
    });
    let (code, out, err) = c.kubectl(&["get", "nodes", "-L", "sandbox-readiness.io/runsc"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().ends_with("RUNSC"), "{out}");
    assert!(
        row(&out, &n).is_some_and(|l| l.ends_with("not-ready")),
        "{out}"
    );
    let owned = node(c, &n)["metadata"]["annotations"]["sandbox-readiness.io/owned-labels"].clone();
    assert_eq!(owned, json!("[\"sandbox-readiness.io/runsc\"]"));

    agent.set_limit(11255);
    poll(Duration::from_secs(5), "label unknown", || {
        runsc().as_deref() == Some("unknown")
    });
    // Only CRI_UNREACHABLE is left: the condition is Unknown, not False.
    assert_eq!(status_of(c, &n).as_deref(), Some("Unknown"));
    let cond = condition(c, &n, TYPE).unwrap();
    assert_eq!(cond["reason"], "CriUnreachable", "{cond}");
    // kubelet's own labels are never touched: all five as registered.
    let labels = &node(c, &n)["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], n.as_str());
    for k in [
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ] {
        assert!(labels[k].is_string(), "{k}: {labels}");
    }
    // The label writes are merge patches of the Node itself, by kubelet's
    // credential, accepted by NodeRestriction (a node may set labels
    // outside kubernetes.io / k8s.io on itself).
    let meta: Vec<_> = agent_writes_until(c, AuditMark::BEGINNING, &n, |w| {
        w.iter().filter(|e| !is_status_write(e)).count() >= 2
    })
    .into_iter()
    .filter(|e| !is_status_write(e))
    .collect();
    assert!(meta.iter().all(|e| http_code(e) == 200), "{meta:#?}");
}

/// An agent with Node `a`'s credential and `--node-name b`: `(the 403 line
/// it logged, the agent)`.
fn wrong_node(c: &RealCluster, a: &str, kc: &Path, b: &str, needle: &str) -> (String, Agent) {
    let agent = writer_agent(
        11255,
        kc,
        &[
            "--sysctl",
            LIMIT_OK,
            "--node-name",
            b,
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let line = agent.log().wait_line(needle, Duration::from_secs(20));
    assert!(line.contains("forbidden") && line.contains(b), "{line}");
    assert_eq!(status_of(c, b), None);
    assert_eq!(status_of(c, a), None);
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
fn another_nodes_credential_is_refused_by_the_node_authorizer_and_node_restriction() {
    let c = RealCluster::shared();
    // 1.36's Node authorizer (selector authorization, on since 1.32) lets a
    // node read only its own Node: the read is refused.
    let (a, kc) = c.new_node("wrong-a");
    let (b, _) = c.new_node("wrong-b");
    let (line, agent) = wrong_node(c, &a, &kc, &b, "only its own Node object");
    assert!(line.contains("GET"), "{line}");
    drop(agent);

    // Where RBAC lets the node read every Node (a ClusterRole someone bound
    // to it, as before 1.32), the read passes and the write is refused by
    // the real NodeRestriction admission plugin.
    let (a, kc) = c.new_node("wrong-a");
    let (b, _) = c.new_node("wrong-b");
    let role = c.unique("read-nodes");
    c.kubectl_ok(
        &[
            "create",
            "clusterrole",
            &role,
            "--verb=get,list,watch",
            "--resource=nodes",
        ],
        None,
    );
    c.kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &role,
            &format!("--clusterrole={role}"),
            &format!("--user=system:node:{a}"),
        ],
        None,
    );
    // RBAC's caches have the binding once the node can read b.
    poll(Duration::from_secs(10), "RBAC lets the node read b", || {
        let (code, _, _) = c.kubectl(&["--kubeconfig", kc.to_str().unwrap(), "get", "node", &b]);
        code == 0
    });
    let mark = c.audit_mark();
    let (line, agent) = wrong_node(c, &a, &kc, &b, "not allowed to modify node");
    assert!(line.contains("PATCH"), "{line}");
    // The server saw the agent's writes on b, with a's credential, and
    // refused every one (the retries: more than one).
    let writes = agent_writes_until(c, mark, &b, |w| w.len() >= 2);
    // Logged once per state change, not once per retry: the retries the
    // server refused are in the audit log, and still one line.
    let log = agent.log().text();
    assert_eq!(
        log.matches("not allowed to modify node").count(),
        1,
        "{log}"
    );
    assert!(
        writes.iter().all(|e| http_code(e) == 403
            && e["user"]["username"] == format!("system:node:{a}")
            && e["responseStatus"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("is not allowed to modify node"))),
        "{writes:#?}"
    );
}

#[test]
fn a_rotated_certificate_is_used_for_the_next_write_without_a_restart() {
    let c = RealCluster::shared();
    let n = c.unique("rotate");
    c.node(&n);
    let dir = tempfile::tempdir().unwrap();
    let (kc, old) = c.kubelet_credential(&n, dir.path());
    let agent = writer_agent(0, &kc, &["--sysctl", LIMIT_OK]);
    poll(Duration::from_secs(20), "condition False", || {
        status_of(c, &n).as_deref() == Some("False")
    });
    // The first status write and the metadata patch after it, both in the
    // audit log: nothing of the first certificate's is still in flight.
    let before = agent_writes_until(c, AuditMark::BEGINNING, &n, |w| {
        w.iter().any(is_status_write) && w.iter().any(|e| !is_status_write(e))
    });
    assert!(
        before
            .iter()
            .all(|e| credential_id(e) == Some(&format!("X509SHA256={old}"))),
        "the first writes were not made with the first certificate {old}: {before:#?}"
    );
    // kubelet rotates: a new certificate and key, the symlink re-pointed.
    // The old one stays valid (the real server has no revocation list): the
    // audit log shows which one the agent presented.
    let (_, new) = c.kubelet_credential(&n, dir.path());
    assert_ne!(new, old);
    let mark = c.audit_mark();
    agent.set_limit(11255);
    poll(Duration::from_secs(10), "condition True", || {
        status_of(c, &n).as_deref() == Some("True")
    });
    let after = agent_writes_until(c, mark, &n, |w| statuses_sent(w).contains(&"True"));
    assert!(
        after
            .iter()
            .all(|e| http_code(e) == 200 && credential_id(e) == Some(&format!("X509SHA256={new}"))),
        "old {old}, new {new}: {after:#?}"
    );
}

#[test]
fn a_stopped_api_server_is_written_again_once_it_is_back() {
    // An outage of its own: the shared server keeps serving the others.
    let c = RealCluster::private();
    let (n, kc) = c.new_node("outage");
    let agent = writer_agent(
        11255,
        &kc,
        &["--sysctl", LIMIT_OK, "--metrics-listen", "127.0.0.1:0"],
    );
    poll(Duration::from_secs(20), "condition True", || {
        status_of(&c, &n).as_deref() == Some("True")
    });
    let down = Instant::now();
    c.stop();
    agent.set_limit(0);
    agent
        .log()
        .wait_line("cannot connect", Duration::from_secs(10));
    c.start();
    eprintln!("API server down for {:?}", down.elapsed());
    // The writer's backoff doubles from 1 s: after a few seconds' outage
    // the next attempt is at most ~16 s away.
    poll(
        Duration::from_secs(40),
        "condition False after the outage",
        || status_of(&c, &n).as_deref() == Some("False"),
    );
    eprintln!("written again {:?} after the stop", down.elapsed());
    let log = agent.log().text();
    assert!(log.contains("writing to the Node again"), "{log}");
    let metrics = http_get(agent.metrics_addr(), "/metrics");
    assert!(
        metrics.contains("sandbox_readiness_node_write_failures_total{reason=\"connect\"}"),
        "{metrics}"
    );
    // The server, which kept its data, has the False the agent wrote after
    // it came back, and the True from before.
    let writes = agent_writes_until(&c, AuditMark::BEGINNING, &n, |w| {
        statuses_sent(w).last() == Some(&"False")
    });
    let said = statuses_sent(&writes);
    assert_eq!(said.first(), Some(&"True"), "{said:?}");
}

#[test]
fn a_re_registered_node_is_written_again_and_a_wrong_boot_id_is_not() {
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("rereg");
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
    poll(
        Duration::from_secs(20),
        "condition and label written",
        || status_of(c, &n).is_some() && label(c, &n, "sandbox-readiness.io/runc").is_some(),
    );
    let uid = node(c, &n)["metadata"]["uid"].clone();
    c.kubectl_ok(&["delete", "node", &n, "--wait=true"], None);
    c.node(&n);
    assert_ne!(node(c, &n)["metadata"]["uid"], uid);
    poll(
        Duration::from_secs(20),
        "condition and labels written again",
        || status_of(c, &n).is_some() && label(c, &n, "sandbox-readiness.io/runc").is_some(),
    );
    assert!(agent.log().text().contains("re-registered"));

    // A Node of another boot: nothing is written.
    let (other, kc2) = c.new_node("boot");
    c.kubectl_ok(
        &[
            "patch",
            "node",
            &other,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"nodeInfo":{"bootID":"00000000-0000-0000-0000-000000000000"}}}"#,
        ],
        None,
    );
    let agent2 = writer_agent(11255, &kc2, &["--sysctl", LIMIT_OK]);
    agent2
        .log()
        .wait_line("writing nothing", Duration::from_secs(20));
    c.audit_barrier();
    assert_eq!(status_of(c, &other), None);
    assert!(agent_writes(c, AuditMark::BEGINNING, &other).is_empty());
}

#[test]
fn a_removed_runsc_shim_is_false_and_not_ready_until_it_is_restored() {
    use support::containerd::{import_pause, runc_shim_as_runsc, Containerd, Options, PAUSE_IMAGE};
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
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("shim");
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
    let runsc = || label(c, &n, "sandbox-readiness.io/runsc");
    // With the shim: the canary passes through it, the node converges.
    poll(
        Duration::from_secs(30),
        "condition True, runsc ready",
        || status_of(c, &n).as_deref() == Some("True") && runsc().as_deref() == Some("ready"),
    );

    // The shim removed: False, naming it; the handler not-ready.
    std::fs::rename(&shim, &stashed).unwrap();
    poll(
        Duration::from_secs(5),
        "condition False, runsc not-ready",
        || status_of(c, &n).as_deref() == Some("False") && runsc().as_deref() == Some("not-ready"),
    );
    let cond = condition(c, &n, TYPE).unwrap();
    assert_eq!(cond["reason"], "RuntimeShimMissing", "{cond}");
    let msg = cond["message"].as_str().unwrap();
    assert!(msg.contains("containerd-shim-runsc-v1"), "{cond}");
    assert!(msg.contains("handler runsc"), "{cond}");
    let (code, out, err) = c.kubectl(&["get", "nodes", "-L", "sandbox-readiness.io/runsc"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        row(&out, &n).is_some_and(|l| l.ends_with("not-ready")),
        "{out}"
    );
    kubectl_wait_times_out(c, &n);

    // Restored: kubectl's wait returns, the label is ready again.
    let waiter = kubectl_waiter(c, &n);
    let restored = Instant::now();
    std::fs::rename(&stashed, &shim).unwrap();
    kubectl_wait_met(waiter, &n, restored, "shim restored");
    assert_eq!(condition(c, &n, TYPE).unwrap()["reason"], "Converged");
    poll(Duration::from_secs(5), "runsc ready again", || {
        runsc().as_deref() == Some("ready")
    });
}

/// A CRI endpoint that accepts every connection and answers nothing until
/// [`HeldCri::release`]: a canary against it waits (up to its
/// `--canary-timeout`), so the agent's first complete verdict is held for
/// as long as the test needs, and comes at once when the connections are
/// closed (the canary then did not run: `CANARY_NOT_RUN`).
struct HeldCri {
    path: std::path::PathBuf,
    /// The connections held; `None` once released (a connection accepted
    /// then is closed at once: the check and the hold are under one lock,
    /// so none is held past the release).
    held: std::sync::Arc<std::sync::Mutex<Option<Vec<std::os::unix::net::UnixStream>>>>,
    _dir: tempfile::TempDir,
}

impl HeldCri {
    fn start() -> HeldCri {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("containerd.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let held = std::sync::Arc::new(std::sync::Mutex::new(Some(Vec::new())));
        let h = held.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                match h.lock().unwrap().as_mut() {
                    Some(conns) => conns.extend(conn.ok()),
                    // Released: the listener goes, later connections are
                    // refused.
                    None => break,
                }
            }
        });
        HeldCri {
            path,
            held,
            _dir: dir,
        }
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// How many connections it holds.
    fn connections(&self) -> usize {
        self.held.lock().unwrap().as_ref().map_or(0, Vec::len)
    }

    /// Closes every held connection and stops accepting: whatever waits on
    /// the CRI fails now, and later connections are refused.
    fn release(&self) {
        let conns = self.held.lock().unwrap().take().unwrap_or_default();
        for s in conns {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Wake the blocking accept, which then sees the release.
        let _ = std::os::unix::net::UnixStream::connect(&self.path);
    }
}

impl Drop for HeldCri {
    fn drop(&mut self) {
        self.release();
    }
}

const VERDICT_BOOT: &str = "sandbox-readiness.io/verdict-boot";
const RUNC: &str = "sandbox-readiness.io/runc";

/// Node `n` as the agent left it on an earlier run: condition True, the
/// runc label ready and owned, the verdict dated to boot `verdict_boot`
/// (`None`: undated, as an agent from before the annotation left it).
/// Returns the Node's own bootID (this machine's, as kubelet posted it).
fn seed_verdict(c: &RealCluster, n: &str, verdict_boot: Option<&str>) -> String {
    let this_boot = node(c, n)["status"]["nodeInfo"]["bootID"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!this_boot.is_empty());
    let cond = json!({"status":{"conditions":[{
        "type": TYPE,
        "status": "True",
        "reason": "Converged",
        "message": "the node meets the agent's desired state",
        "lastHeartbeatTime": "2026-12-01T10:00:00Z",
        "lastTransitionTime": "2026-12-01T09:00:00Z",
    }]}});
    c.kubectl_ok(
        &[
            "patch",
            "node",
            n,
            "--subresource=status",
            "--type=strategic",
            "-p",
            &cond.to_string(),
        ],
        None,
    );
    let mut annotations = json!({"sandbox-readiness.io/owned-labels": format!("[\"{RUNC}\"]")});
    if let Some(b) = verdict_boot {
        annotations[VERDICT_BOOT] = json!(b);
    }
    let meta = json!({"metadata":{"labels":{RUNC:"ready"},"annotations":annotations}});
    c.kubectl_ok(
        &["patch", "node", n, "--type=merge", "-p", &meta.to_string()],
        None,
    );
    assert_eq!(status_of(c, n).as_deref(), Some("True"));
    assert_eq!(label(c, n, RUNC).as_deref(), Some("ready"));
    this_boot
}

/// A writer whose first complete verdict waits on `cri`: the runc canary
/// is required, at limit 0 (so the verdict, once there, is False and runc
/// not-ready).
fn held_writer(kc: &Path, cri: &HeldCri) -> Agent {
    writer_agent(
        0,
        kc,
        &[
            "--sysctl",
            LIMIT_OK,
            "--require-canary",
            "runc",
            "--allow-canary",
            "runc",
            "--handler-labels",
            "--cri-endpoint",
            &cri.endpoint(),
            "--canary-timeout",
            "120s",
        ],
    )
}

fn sent_reason(e: &AuditEvent) -> Option<&str> {
    e["requestObject"]["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == TYPE)?["reason"]
        .as_str()
}

fn sent_annotation<'a>(e: &'a AuditEvent, key: &str) -> Option<&'a str> {
    e["requestObject"]["metadata"]["annotations"][key].as_str()
}

fn sent_label<'a>(e: &'a AuditEvent, key: &str) -> Option<&'a str> {
    e["requestObject"]["metadata"]["labels"][key].as_str()
}

/// The agent's writes after `mark` up to and including the first metadata
/// patch that sent `label` for runc, the ones before it checked accepted.
/// Later writes (a finding's message that changed) are left out.
fn writes_until_label(c: &RealCluster, mark: AuditMark, n: &str, value: &str) -> Vec<AuditEvent> {
    let labelled = |e: &AuditEvent| !is_status_write(e) && sent_label(e, RUNC) == Some(value);
    let mut writes = agent_writes_until(c, mark, n, |w| w.iter().any(labelled));
    let end = writes.iter().position(labelled).unwrap();
    writes.truncate(end + 1);
    assert!(writes.iter().all(|e| http_code(e) == 200), "{writes:#?}");
    writes
}

#[test]
fn after_a_reboot_the_condition_is_unknown_until_this_boots_verdict() {
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("reboot");
    let old = "11111111-2222-3333-4444-555555555555";
    let this_boot = seed_verdict(c, &n, Some(old));
    let cri = HeldCri::start();
    let mark = c.audit_mark();
    let _agent = held_writer(&kc, &cri);

    // Before any verdict (the canary is held): Unknown, then the label
    // unknown, in that order; the verdict-boot annotation untouched.
    poll(Duration::from_secs(20), "the label unknown", || {
        label(c, &n, RUNC).as_deref() == Some("unknown")
    });
    let writes = writes_until_label(c, mark, &n, "unknown");
    assert_eq!(writes.len(), 2, "{writes:#?}");
    assert!(is_status_write(&writes[0]), "{writes:#?}");
    assert_eq!(sent_status(&writes[0]), Some("Unknown"), "{writes:#?}");
    assert_eq!(
        sent_reason(&writes[0]),
        Some("NotCheckedThisBoot"),
        "{writes:#?}"
    );
    assert!(
        writes[1]["requestObject"]["metadata"]["annotations"][VERDICT_BOOT].is_null(),
        "{writes:#?}"
    );
    let cond = condition(c, &n, TYPE).unwrap();
    assert_eq!(cond["status"], "Unknown", "{cond}");
    let msg = cond["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("made on boot {old}"))
            && msg.contains(&format!("booted as {this_boot}")),
        "{cond}"
    );
    assert_eq!(node(c, &n)["metadata"]["annotations"][VERDICT_BOOT], old);
    // Still held: the canary is connected and waiting.
    assert!(cri.connections() > 0);

    // The verdict: its condition first, then the labels and the
    // annotation naming this boot, in one patch.
    cri.release();
    poll(Duration::from_secs(20), "the label not-ready", || {
        label(c, &n, RUNC).as_deref() == Some("not-ready")
    });
    let writes = writes_until_label(c, mark, &n, "not-ready");
    assert_eq!(statuses_sent(&writes), ["Unknown", "False"], "{writes:#?}");
    assert_eq!(writes.len(), 4, "{writes:#?}");
    assert_eq!(
        sent_reason(&writes[2]),
        Some("SysctlMismatch"),
        "{writes:#?}"
    );
    assert_eq!(
        sent_annotation(&writes[3], VERDICT_BOOT),
        Some(this_boot.as_str()),
        "{writes:#?}"
    );
    let after = node(c, &n);
    assert_eq!(after["metadata"]["annotations"][VERDICT_BOOT], this_boot);
    assert_eq!(condition(c, &n, TYPE).unwrap()["reason"], "SysctlMismatch");
}

#[test]
fn a_restart_within_the_boot_writes_no_unknown() {
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("sameboot");
    let this_boot = node(c, &n)["status"]["nodeInfo"]["bootID"]
        .as_str()
        .unwrap()
        .to_string();
    seed_verdict(c, &n, Some(&this_boot));
    let cri = HeldCri::start();
    let mark = c.audit_mark();
    let agent = held_writer(&kc, &cri);
    // The writer read the Node and decided, while the verdict is held.
    agent.log().wait_line(
        "left as it is until the first complete verdict: it was made on this boot",
        Duration::from_secs(20),
    );
    assert_eq!(status_of(c, &n).as_deref(), Some("True"));
    assert_eq!(label(c, &n, RUNC).as_deref(), Some("ready"));
    cri.release();
    poll(Duration::from_secs(20), "the label not-ready", || {
        label(c, &n, RUNC).as_deref() == Some("not-ready")
    });
    // The first things the agent wrote after its restart are the verdict's
    // condition, then its labels; the annotation already names this boot,
    // so it is not sent again.
    let writes = writes_until_label(c, mark, &n, "not-ready");
    assert_eq!(writes.len(), 2, "{writes:#?}");
    assert_eq!(statuses_sent(&writes), ["False"], "{writes:#?}");
    assert!(is_status_write(&writes[0]), "{writes:#?}");
    assert_eq!(
        sent_reason(&writes[0]),
        Some("SysctlMismatch"),
        "{writes:#?}"
    );
    assert_eq!(
        sent_annotation(&writes[1], VERDICT_BOOT),
        None,
        "{writes:#?}"
    );
    assert_eq!(
        node(c, &n)["metadata"]["annotations"][VERDICT_BOOT],
        this_boot
    );
}

/// A Node whose condition does not say which boot it was made on (an agent
/// from before the verdict-boot annotation): treated as another boot's.
#[test]
fn an_undated_condition_is_unknown_until_the_verdict() {
    let c = RealCluster::shared();
    let (n, kc) = c.new_node("undated");
    let this_boot = seed_verdict(c, &n, None);
    let cri = HeldCri::start();
    let mark = c.audit_mark();
    let _agent = held_writer(&kc, &cri);
    poll(Duration::from_secs(20), "the label unknown", || {
        label(c, &n, RUNC).as_deref() == Some("unknown")
    });
    let writes = writes_until_label(c, mark, &n, "unknown");
    assert_eq!(writes.len(), 2, "{writes:#?}");
    assert_eq!(
        sent_reason(&writes[0]),
        Some("NotCheckedThisBoot"),
        "{writes:#?}"
    );
    let cond = condition(c, &n, TYPE).unwrap();
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains("does not say which boot"),
        "{cond}"
    );
    cri.release();
    let writes = writes_until_label(c, mark, &n, "not-ready");
    assert_eq!(
        sent_annotation(writes.last().unwrap(), VERDICT_BOOT),
        Some(this_boot.as_str()),
        "{writes:#?}"
    );
}

/// No API server at all: the refusals come before any request.
#[test]
fn start_up_refusals_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    common::ca::Ca::new(dir.path());
    let token = dir.path().join("token.kubeconfig");
    let secret = "a-secret-bearer-token";
    std::fs::write(
        &token,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {secret}\ncontexts:\n- name: u@c\n  context: {{cluster: c, user: u}}\ncurrent-context: u@c\n",
            common::refused_port(),
            dir.path().join("ca.pem").display()
        ),
    )
    .unwrap();
    let token = token.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--kubeconfig", token], "needs a desired state"),
        (
            vec!["--kubeconfig", token, "--require-userns"],
            "give --node-name",
        ),
        (
            vec![
                "--kubeconfig",
                token,
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
        assert!(!err.contains(secret), "{err}");
    }
}

// ------------------------------------------------------------------------
// What the real kube-apiserver cannot be made to do on demand goes through
// the fault proxy (test-api/, docs/developer/test-api.md) in front of it:
// scripted 503/429/500 answers with Retry-After, a server that accepts
// connections and never answers, and a certificate refused by its serial
// (kube-apiserver checks only the chain and the validity period: it has no
// revocation list). The proxy forwards with the caller's identity in
// front-proxy headers, so the real Node authorizer and NodeRestriction still
// decide, and the audit log still names the credential.

mod through_the_proxy {
    use super::{agent_writes_until, status_of, writer_agent, LIMIT_OK};
    use crate::common::http_get;
    use crate::common::{self, wait_until};
    use crate::support::cluster::{credential_id, RealCluster};

    use std::{
        path::PathBuf,
        time::{Duration, Instant},
    };

    use test_api::proxy::{ClientCert, FaultProxy, RequestRecord, Scripted};

    /// A Node of its own on the shared real cluster, registered as kubelet
    /// does, a fault proxy in front of the cluster, and a private directory
    /// for kubeconfigs.
    struct Setup {
        c: &'static RealCluster,
        node: String,
        proxy: FaultProxy,
        dir: tempfile::TempDir,
    }

    impl Setup {
        fn new(prefix: &str) -> Setup {
            let c = RealCluster::shared();
            let (node, _) = c.new_node(prefix);
            let proxy = FaultProxy::http(c.dir()).unwrap();
            let dir = tempfile::tempdir().unwrap();
            Setup {
                c,
                node,
                proxy,
                dir,
            }
        }

        fn status(&self) -> Option<String> {
            status_of(self.c, &self.node)
        }

        /// Kubelet's credential for the node (the cluster's client CA),
        /// laid out as on Talos, pointing at the proxy.
        fn kubelet_kubeconfig(&self, sub: &str) -> (PathBuf, ClientCert) {
            let c = self
                .proxy
                .client_cert(&format!("system:node:{}", self.node), &["system:nodes"]);
            let path = self
                .proxy
                .kubeconfig_kubelet_style(&self.dir.path().join(sub), &c)
                .unwrap();
            (path, c)
        }
    }

    /// `X509SHA256=<hex>` of a PEM certificate, as the audit log names it.
    fn x509_id(cert_pem: &str) -> String {
        use rustls_pki_types::{pem::PemObject, CertificateDer};
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let sum = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
        let hex: String = sum.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("X509SHA256={hex}")
    }

    #[test]
    fn a_revoked_old_certificate_is_replaced_by_the_rotated_one_without_a_restart() {
        let s = Setup::new("revoked");
        let (kc, old) = s.kubelet_kubeconfig("kubelet");
        let agent = writer_agent(0, &kc, &["--sysctl", LIMIT_OK]);
        wait_until(Duration::from_secs(20), "condition False", || {
            s.status().as_deref() == Some("False")
        });
        // kubelet rotates: a new PEM, the symlink re-pointed; the old serial
        // is refused by the proxy from now on (what the real server cannot do).
        let (_, new) = s.kubelet_kubeconfig("kubelet");
        assert_ne!(new.serial, old.serial);
        s.proxy.revoke(old.serial);
        // The proxy's window starts after the revocation: a request admitted
        // before it and answered later is out of it (by its arrival number).
        // The audit mark is taken once every such request is answered, so
        // none of them reaches the server after it (CI saw the old
        // certificate's annotation PATCH, admitted before the revocation,
        // received by the server after a mark taken at once).
        let window = s.proxy.clear_requests();
        assert!(s.proxy.settled_before(window, Duration::from_secs(10)));
        let mark = s.c.audit_mark();
        agent.set_limit(11255);
        wait_until(
            Duration::from_secs(10),
            "condition True with the new certificate",
            || s.status().as_deref() == Some("True"),
        );
        let (old_id, new_id) = (x509_id(&old.cert_pem), x509_id(&new.cert_pem));
        let who = format!("system:node:{}", s.node);
        let patched_with_new = |reqs: &[RequestRecord]| {
            reqs.iter().any(|r| {
                r.method == "PATCH"
                    && r.status == 200
                    && r.user.as_deref() == Some(who.as_str())
                    && r.credential.as_deref() == Some(new_id.as_str())
            })
        };
        let reqs = s
            .proxy
            .requests_when(Duration::from_secs(5), patched_with_new);
        assert!(patched_with_new(&reqs), "{reqs:?}");
        assert!(
            !reqs.iter().any(|r| r.method == "PATCH"
                && r.status == 200
                && r.credential.as_deref() == Some(old_id.as_str())),
            "{reqs:?}"
        );
        // The real server saw the write as the node's, with the new credential.
        let writes = agent_writes_until(s.c, mark, &s.node, |w| !w.is_empty());
        assert!(
            writes
                .iter()
                .all(|e| credential_id(e) == Some(new_id.as_str())
                    && e["user"]["username"] == who.as_str()),
            "{writes:#?}"
        );
    }

    #[test]
    fn scripted_faults_are_retried_then_written() {
        let s = Setup::new("scripted");
        let (kc, _) = s.kubelet_kubeconfig("kubelet");
        let agent = writer_agent(
            0,
            &kc,
            &["--sysctl", LIMIT_OK, "--metrics-listen", "127.0.0.1:0"],
        );
        wait_until(Duration::from_secs(20), "condition False", || {
            s.status().as_deref() == Some("False")
        });
        let path = format!("/api/v1/nodes/{}/status", s.node);
        // The window first, then the script: a write between the two would
        // take the 503 and be cleared with it.
        s.proxy.clear_requests();
        s.proxy.faults().script(
            "PATCH",
            &path,
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
            || s.status().as_deref() == Some("True"),
        );
        eprintln!("written after three faults in {:?}", flipped.elapsed());
        let answers = |reqs: &[RequestRecord]| -> Vec<u16> {
            reqs.iter()
                .filter(|r| r.method == "PATCH" && r.path == path)
                .map(|r| r.status)
                .collect()
        };
        // In arrival order, from the first scripted answer: the three faults,
        // then the real server's 200. Writes of the old verdict that arrived
        // in the window before the script was set were answered 200 by the
        // server and come first.
        let from_script = |reqs: &[RequestRecord]| -> Vec<u16> {
            answers(reqs)
                .into_iter()
                .skip_while(|a| *a == 200)
                .collect()
        };
        let reqs = s
            .proxy
            .requests_when(Duration::from_secs(5), |r| from_script(r).len() >= 4);
        assert_eq!(
            from_script(&reqs).get(..4),
            Some(&[503, 429, 500, 200][..]),
            "{reqs:?}"
        );
        let metrics = http_get(agent.metrics_addr(), "/metrics");
        for reason in ["server_error", "throttled"] {
            assert!(
                metrics.contains(&format!(
                    "sandbox_readiness_node_write_failures_total{{reason=\"{reason}\"}}"
                )),
                "{reason}\n{metrics}"
            );
        }
        // A server that goes away and comes back: the real one,
        // a_stopped_api_server_is_written_again_once_it_is_back.
    }

    #[test]
    fn a_hung_api_server_delays_neither_answers_nor_sigterm() {
        let s = Setup::new("hung");
        let (kc, _) = s.kubelet_kubeconfig("kubelet");
        s.proxy.faults().hung();
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
        assert_eq!(s.status(), None);
        wait_until(Duration::from_secs(5), "the agent connects", || {
            s.proxy.open_connections() > 0
        });
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
}
