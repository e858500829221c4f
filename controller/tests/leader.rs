//! Leader election against the test API server (which serves Leases):
//! two controller processes, one writer at a time; failover after SIGKILL
//! of the leader within 20 s (measured); the Lease released on SIGTERM
//! and the process gone within 5 s; a leader that loses its Lease stops
//! writing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use test_api::{TestApiServer, User};

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness-controller");
const GATE: &str = "sandbox-readiness.io/SandboxReady";
const LEASE: &str = "sandbox-readiness-controller";

async fn server() -> TestApiServer {
    TestApiServer::builder()
        .token("admin-token", User::new("admin", &["system:masters"]))
        .token("ctl-a-token", User::new("ctl-a", &["system:masters"]))
        .token("ctl-b-token", User::new("ctl-b", &["system:masters"]))
        .start()
        .await
        .unwrap()
}

fn machine(name: &str) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": "default", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {
            "clusterName": "c1",
            "bootstrap": {"dataSecretName": "b"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "X", "name": "x"},
            "readinessGates": [{"conditionType": GATE}]
        }
    })
}

/// One controller process, killed on drop.
struct Ctl {
    child: Child,
    log: PathBuf,
}

impl Ctl {
    fn start(srv: &TestApiServer, dir: &Path, who: &str) -> Ctl {
        let kc = dir.join(format!("{who}.kubeconfig"));
        std::fs::write(&kc, srv.kubeconfig_token(&format!("{who}-token"))).unwrap();
        let log = dir.join(format!("{who}.log"));
        let child = Command::new(BIN)
            .arg("--kubeconfig")
            .arg(&kc)
            .args([
                "--leader-elect=true",
                "--leader-elect-resource-namespace",
                "default",
            ])
            .env("POD_NAME", who)
            .env("SANDBOX_READINESS_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Ctl { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }
}

impl Drop for Ctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn holder(srv: &TestApiServer) -> Option<String> {
    srv.get("coordination.k8s.io/v1", "Lease", "default", LEASE)
        .and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .filter(|h| !h.is_empty())
}

async fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn condition(srv: &TestApiServer, name: &str) -> Option<Value> {
    srv.get("cluster.x-k8s.io/v1beta2", "Machine", "default", name)?
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == GATE)
        .cloned()
}

/// (user, machine) of every Machine status write so far.
fn status_writes(srv: &TestApiServer) -> Vec<(String, String)> {
    srv.requests()
        .iter()
        .filter_map(|r| {
            let name = common::machine_status_write(r)?;
            Some((r.user.clone().unwrap_or_default(), name.to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_and_failover_after_sigkill() {
    let srv = server().await;
    let dir = tempfile::tempdir().unwrap();
    srv.create(machine("m1")).unwrap();
    let a = Ctl::start(&srv, dir.path(), "ctl-a");
    wait_for("ctl-a leads", Duration::from_secs(10), || {
        (holder(&srv).as_deref() == Some("ctl-a")).then_some(())
    })
    .await;
    let b = Ctl::start(&srv, dir.path(), "ctl-b");
    wait_for("m1 written", Duration::from_secs(10), || {
        condition(&srv, "m1")
    })
    .await;
    // Both are running and synced; give the standby rounds to misbehave in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    srv.create(machine("m2")).unwrap();
    wait_for("m2 written", Duration::from_secs(10), || {
        condition(&srv, "m2")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let w = status_writes(&srv);
    assert_eq!(
        w,
        vec![
            ("ctl-a".to_string(), "m1".to_string()),
            ("ctl-a".to_string(), "m2".to_string())
        ],
        "only the leader writes, once per change\n--- ctl-a\n{}\n--- ctl-b\n{}",
        a.log(),
        b.log()
    );
    assert_eq!(holder(&srv).as_deref(), Some("ctl-a"));

    // SIGKILL: no release; the standby waits out the lease.
    a.signal("-KILL");
    let killed = Instant::now();
    wait_for("ctl-b takes over", Duration::from_secs(20), || {
        (holder(&srv).as_deref() == Some("ctl-b")).then_some(())
    })
    .await;
    let failover = killed.elapsed();
    eprintln!("failover after SIGKILL: {:.1} s", failover.as_secs_f64());
    assert!(
        failover <= Duration::from_secs(20),
        "failover took {failover:?}"
    );
    srv.create(machine("m3")).unwrap();
    wait_for(
        "m3 written by the new leader",
        Duration::from_secs(5),
        || condition(&srv, "m3"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w = status_writes(&srv);
    assert_eq!(
        w.len(),
        3,
        "one write per Machine, none repeated through the failover: {w:?}\n--- ctl-b\n{}",
        b.log()
    );
    assert_eq!(w[2], ("ctl-b".to_string(), "m3".to_string()));
    // The conditions written before the failover were not touched again.
    assert_eq!(
        condition(&srv, "m1").unwrap()["reason"],
        "NodeNotYetAssigned"
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_lease_and_exits_within_5s() {
    let srv = server().await;
    let dir = tempfile::tempdir().unwrap();
    let mut a = Ctl::start(&srv, dir.path(), "ctl-a");
    wait_for("ctl-a leads", Duration::from_secs(10), || {
        (holder(&srv).as_deref() == Some("ctl-a")).then_some(())
    })
    .await;
    let b = Ctl::start(&srv, dir.path(), "ctl-b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        holder(&srv).as_deref(),
        Some("ctl-a"),
        "the standby does not take a held lease"
    );
    a.signal("-TERM");
    let sent = Instant::now();
    let status = wait_for("ctl-a exits", Duration::from_secs(5), || {
        a.child.try_wait().unwrap()
    })
    .await;
    let exited = sent.elapsed();
    assert!(status.success(), "{status:?}\n{}", a.log());
    assert!(a.log().contains("lease released"), "{}", a.log());
    // Released (empty holder) or already taken by the standby.
    assert_ne!(holder(&srv).as_deref(), Some("ctl-a"));
    wait_for(
        "ctl-b takes the released lease",
        Duration::from_secs(5),
        || (holder(&srv).as_deref() == Some("ctl-b")).then_some(()),
    )
    .await;
    let takeover = sent.elapsed();
    eprintln!(
        "SIGTERM: exited after {:.2} s; standby leading {:.2} s after the signal",
        exited.as_secs_f64(),
        takeover.as_secs_f64()
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_stops_writing() {
    let srv = server().await;
    let dir = tempfile::tempdir().unwrap();
    let a = Ctl::start(&srv, dir.path(), "ctl-a");
    wait_for("ctl-a leads", Duration::from_secs(10), || {
        (holder(&srv).as_deref() == Some("ctl-a")).then_some(())
    })
    .await;
    // Someone else takes the Lease (as a replica that won a partition).
    let mut l = srv
        .get("coordination.k8s.io/v1", "Lease", "default", LEASE)
        .unwrap();
    let now = "2030-01-01T00:00:00.000000Z";
    l["spec"]["holderIdentity"] = json!("intruder");
    l["spec"]["renewTime"] = json!(now);
    l["spec"]["acquireTime"] = json!(now);
    srv.put(l).unwrap();
    // One retry period (2 s, jitter 1.2) is when it looks again.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert!(a.log().contains("lost the lease"), "{}", a.log());
    srv.create(machine("m1")).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        status_writes(&srv),
        vec![],
        "no write after the lease was lost\n{}",
        a.log()
    );
    assert_eq!(holder(&srv).as_deref(), Some("intruder"));
    // The intruder never renews: after its 15 s the leader takes the
    // Lease back and writes what it held back.
    wait_for(
        "ctl-a leads again and writes m1",
        Duration::from_secs(20),
        || condition(&srv, "m1"),
    )
    .await;
    assert_eq!(holder(&srv).as_deref(), Some("ctl-a"));
    assert_eq!(status_writes(&srv).len(), 1);
}
