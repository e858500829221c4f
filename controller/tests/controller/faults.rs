//! Faults: the workload API server down for less and for more than
//! `--stale-after`; the management API server restarting mid-watch (store
//! kept) with a 410 on re-watch; the controller killed and restarted (no
//! condition flaps, no write for an unchanged condition).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;

const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");

async fn ready_machine(env: &Env) {
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
}

/// Samples the Machine's status for `d`; every distinct value seen.
async fn statuses_during(env: &Env, m: &str, d: Duration) -> Vec<String> {
    let start = Instant::now();
    let mut seen: Vec<String> = Vec::new();
    while start.elapsed() < d {
        let s = env.status(m).unwrap_or_default();
        if seen.last() != Some(&s) {
            seen.push(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

/// Writes a True condition with a new reason and waits until the Machine
/// shows it: the controller has seen this heartbeat.
async fn heartbeat_seen(env: &Env, reason: &str) -> Instant {
    env.agent_writes("w1", "True", reason, &[SYSCTL]);
    let start = Instant::now();
    while env.condition("m1").unwrap().1 != reason {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the workload watch did not deliver {reason}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start
}

fn patches(env: &Env, machine: &str) -> usize {
    env.mgmt
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/machines/{machine}/status")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_outage_keeps_the_last_status_up_to_stale_after() {
    let env = Env::start().await;
    ready_machine(&env).await;
    let ctl = env.controller(&["--stale-after", "6s"]);
    env.wait_status("m1", "True", Duration::from_secs(20)).await;

    // Shorter than --stale-after: nothing changes on the Machine.
    heartbeat_seen(&env, "ConvergedFresh").await;
    env.wl.faults().down().await;
    let seen = statuses_during(&env, "m1", Duration::from_secs(3)).await;
    assert_eq!(seen, ["True"], "{seen:?}");
    env.wl.faults().up().await.unwrap();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let seen = statuses_during(&env, "m1", Duration::from_secs(1)).await;
    assert_eq!(seen, ["True"], "{seen:?}");

    // Longer: Unknown / ConditionStale once the last heartbeat is older
    // than --stale-after, True again when the cluster and the agent are back.
    // First the watch is seen live again (a new reason reaches the Machine),
    // so the heartbeat the outage starts from is the one just written.
    let written = heartbeat_seen(&env, "ConvergedAgain").await;
    env.wl.faults().down().await;
    env.wait_status("m1", "Unknown", Duration::from_secs(10))
        .await;
    // Measured from the heartbeat (stamped in whole seconds, so up to 1 s
    // older than `written`).
    let held = written.elapsed();
    assert!(
        held >= Duration::from_secs(5),
        "Unknown {held:?} after the last heartbeat"
    );
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "ConditionStale", "{c:?}");
    env.wl.faults().up().await.unwrap();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let back = env.wait_status("m1", "True", Duration::from_secs(15)).await;
    eprintln!("outage: True kept {held:?} (stale-after 6 s), True again {back:?} after the cluster came back");
    assert!(!ctl.log().contains(ADMIN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_server_restarting_mid_watch_with_a_410() {
    let env = Env::start().await;
    ready_machine(&env).await;
    let _ctl = env.controller(&[]);
    env.wait_status("m1", "True", Duration::from_secs(20)).await;
    // Restart (connections dropped, store kept), changes while it is
    // down, then compaction: the watch resumes from a resourceVersion that
    // has expired (410) and the controller lists again.
    env.mgmt.faults().down().await;
    env.node("w2");
    env.mgmt.create(boot_secret("m2-boot", &[SYSCTL])).unwrap();
    env.mgmt.create(machine("md-a", "m2", true)).unwrap();
    env.set_node_ref("m2", "w2");
    env.agent_writes("w2", "True", "Converged", &[SYSCTL]);
    env.mgmt.compact();
    env.mgmt.faults().up().await.unwrap();
    env.wait_status("m2", "True", Duration::from_secs(15)).await;
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    env.wait_status("m1", "False", Duration::from_secs(5)).await;
    // A restart through the server's own restart() too.
    env.mgmt.restart().await.unwrap();
    env.mgmt.compact();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    env.wait_status("m1", "True", Duration::from_secs(15)).await;
    // The 410 comes inside the watch stream (as kube-apiserver sends it);
    // what shows it was taken is the watcher listing again.
    let lists = env
        .mgmt
        .requests()
        .iter()
        .filter(|r| {
            r.method == "GET"
                && r.path == "/apis/cluster.x-k8s.io/v1beta2/machines"
                && !r.query.contains("watch=true")
        })
        .count();
    eprintln!("Machine lists by the controller: {lists}");
    assert!(
        lists >= 2,
        "the expired watches were not followed by a new list ({lists} lists)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_controller_does_not_flap() {
    let env = Env::start().await;
    ready_machine(&env).await;
    let mut ctl = env.controller(&["--stale-after", "6s"]);
    env.wait_status("m1", "True", Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ltt = env.condition("m1").unwrap().3;
    ctl.kill();

    // Restarted: the same condition stands, nothing is written.
    let before = patches(&env, "m1");
    let ctl2 = env.controller(&["--stale-after", "6s"]);
    let seen = statuses_during(&env, "m1", Duration::from_secs(3)).await;
    assert_eq!(seen, ["True"], "{seen:?}");
    assert_eq!(
        patches(&env, "m1"),
        before,
        "an unchanged condition was written:\n{}",
        ctl2.log()
    );
    drop(ctl2);

    // Restarted while the workload cluster is down: kept, not Unknown,
    // until --stale-after.
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    env.wl.faults().down().await;
    let _ctl3 = env.controller(&["--stale-after", "6s"]);
    let seen = statuses_during(&env, "m1", Duration::from_secs(3)).await;
    assert_eq!(seen, ["True"], "{seen:?}");
    env.wl.faults().up().await.unwrap();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let seen = statuses_during(&env, "m1", Duration::from_secs(2)).await;
    assert_eq!(seen, ["True"], "{seen:?}");
    assert_eq!(
        env.condition("m1").unwrap().3,
        ltt,
        "lastTransitionTime moved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_workload_credential_is_read_again_on_a_401() {
    let env = Env::start().await;
    let old = env.wl.client_cert("capi-admin", &["system:masters"]);
    let mut s = env.mgmt.get("v1", "Secret", NS, "c1-kubeconfig").unwrap();
    s["data"]["value"] = serde_json::json!(b64(&env.wl.kubeconfig_inline(&old)));
    env.mgmt.put(s).unwrap();
    ready_machine(&env).await;
    // A Secret resync far away: only the 401 can make it read again.
    let ctl = env.controller(&["--secret-resync", "10m"]);
    env.wait_status("m1", "True", Duration::from_secs(20)).await;
    // The control plane rotates the credential and restarts.
    let new = env.wl.client_cert("capi-admin", &["system:masters"]);
    let mut s = env.mgmt.get("v1", "Secret", NS, "c1-kubeconfig").unwrap();
    s["data"]["value"] = serde_json::json!(b64(&env.wl.kubeconfig_inline(&new)));
    env.mgmt.put(s).unwrap();
    env.wl.revoke(old.serial);
    env.wl.restart().await.unwrap();
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let took = env
        .wait_status("m1", "False", Duration::from_secs(15))
        .await;
    eprintln!("rotated credential picked up; the Node's change reached the Machine in {took:?}");
    let refused = env.wl.requests().iter().filter(|r| r.status == 401).count();
    assert!(refused >= 1, "the old credential was never refused");
    let log = ctl.log();
    assert!(
        !log.contains("BEGIN") && !log.contains("PRIVATE KEY"),
        "{log}"
    );
}
