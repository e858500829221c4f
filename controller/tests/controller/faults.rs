//! Faults, as real outages (`control-plane.sh stop`/`start` of a cluster
//! of the test's own): the workload API server down for less and for more
//! than `--stale-after`; the management API server stopped and started
//! mid-watch (etcd's data kept: the watches resume from a restarted watch
//! cache); the controller killed and restarted (no condition flaps, no
//! write for an unchanged condition); the workload credential rotated and
//! the old one refused (401) after a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::*;
use serde_json::json;

const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");
/// Long enough that a stop and a start of kube-apiserver on a loaded
/// machine fit inside it (the in-process stand-in's outages took
/// milliseconds; a real restart takes seconds).
const STALE_AFTER: Duration = Duration::from_secs(30);

fn ready_machine(env: &Env) {
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
}

/// Samples the Machine's status for `d`; every distinct value seen.
fn statuses_during(env: &Env, m: &str, d: Duration) -> Vec<String> {
    let start = Instant::now();
    let mut seen: Vec<String> = Vec::new();
    while start.elapsed() < d {
        let s = env.status(m).unwrap_or_default();
        if seen.last() != Some(&s) {
            seen.push(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    seen
}

/// Samples the Machine's status while `during` runs (the management
/// cluster stays up: the sampler reads it).
fn statuses_while(env: &Env, m: &str, during: impl FnOnce()) -> Vec<String> {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    std::thread::scope(|s| {
        let (stop2, seen2) = (stop.clone(), seen.clone());
        s.spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let st = env.status(m).unwrap_or_default();
                let mut g = seen2.lock().unwrap();
                if g.last() != Some(&st) {
                    g.push(st);
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        during();
        stop.store(true, Ordering::Relaxed);
    });
    let v = seen.lock().unwrap().clone();
    v
}

/// Writes a True condition with a new reason and waits until the Machine
/// shows it: the controller has seen this heartbeat.
fn heartbeat_seen(env: &Env, reason: &str) -> Instant {
    env.agent_writes("w1", "True", reason, &[SYSCTL]);
    let start = Instant::now();
    while env.condition("m1").unwrap().1 != reason {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the workload watch did not deliver {reason}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start
}

#[test]
fn a_workload_outage_keeps_the_last_status_up_to_stale_after() {
    let env = Env::with_private_workload();
    ready_machine(&env);
    let stale = format!("{}s", STALE_AFTER.as_secs());
    let ctl = env.controller(&["--stale-after", &stale]);
    env.wait_status("m1", "True", Duration::from_secs(30));

    // Shorter than --stale-after: nothing changes on the Machine.
    let fresh = heartbeat_seen(&env, "ConvergedFresh");
    let seen = statuses_while(&env, "m1", || {
        env.wl.stop();
        std::thread::sleep(Duration::from_secs(3));
        env.wl.start();
    });
    let outage = fresh.elapsed();
    assert!(
        outage + Duration::from_secs(2) < STALE_AFTER,
        "the short outage took {outage:?}: no shorter than --stale-after on this machine"
    );
    assert_eq!(seen, ["True"], "{seen:?}");
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let seen = statuses_during(&env, "m1", Duration::from_secs(1));
    assert_eq!(seen, ["True"], "{seen:?}");

    // Longer: Unknown / ConditionStale once the last heartbeat is older
    // than --stale-after, True again when the cluster and the agent are back.
    // First the watch is seen live again (a new reason reaches the Machine),
    // so the heartbeat the outage starts from is the one just written.
    let written = heartbeat_seen(&env, "ConvergedAgain");
    env.wl.stop();
    env.wait_status("m1", "Unknown", STALE_AFTER + Duration::from_secs(15));
    // Measured from the heartbeat (stamped in whole seconds, so up to 1 s
    // older than `written`).
    let held = written.elapsed();
    // 2 s: the heartbeat is stamped in whole seconds, and this clock is
    // not the one the controller compares with.
    assert!(
        held + Duration::from_secs(2) >= STALE_AFTER,
        "Unknown {held:?} after the last heartbeat"
    );
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "ConditionStale", "{c:?}");
    let restarted = Instant::now();
    env.wl.start();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let back = env.wait_status("m1", "True", Duration::from_secs(30));
    eprintln!(
        "outage: True kept {held:?} (stale-after {STALE_AFTER:?}), True again {back:?} after the agent's write ({:?} after the start began)",
        restarted.elapsed()
    );
    assert!(!ctl.log().contains("client-key-data"));
}

/// The management API server stopped while the controller watches it and
/// started again on the same etcd data: the Node's change made during the
/// outage is written once it is back, and Machines created after the
/// restart are seen (the watches resumed, relisting where the restarted
/// watch cache no longer holds the resourceVersion they had).
#[test]
fn the_management_server_restarting_mid_watch() {
    let env = Env::with_private_management();
    ready_machine(&env);
    let ctl = env.controller(&[]);
    env.wait_status("m1", "True", Duration::from_secs(30));
    const RESUMED: &str = "the management cluster's Machine watch resumed";
    let resumed = || ctl.log().matches(RESUMED).count();
    let before = resumed();
    env.mgmt.stop();
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    env.node("w2");
    // Down long enough for the Machine watch's re-watch to be refused (it
    // re-watches at once when its stream ends), so it logs its resumption.
    std::thread::sleep(Duration::from_secs(2));
    env.mgmt.start();
    env.wait_status("m1", "False", Duration::from_secs(60));
    // m1's flip came through the workload watch and the cached Machine; a
    // Machine created now is seen only once the Machine watch is back (a
    // reconnect within 10 s of the server's return): waited for by its
    // own log line, not by time.
    let deadline = Instant::now() + Duration::from_secs(60);
    while resumed() == before {
        assert!(
            Instant::now() < deadline,
            "the Machine watch did not resume after the restart:\n{}",
            ctl.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    env.machine("md-a", "m2", true, &[SYSCTL], Some("w2"));
    env.agent_writes("w2", "True", "Converged", &[SYSCTL]);
    env.wait_status("m2", "True", Duration::from_secs(30));
    // A second restart.
    env.mgmt.stop();
    env.mgmt.start();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    env.wait_status("m1", "True", Duration::from_secs(60));
    drop(ctl);
}

#[test]
fn a_killed_and_restarted_controller_does_not_flap() {
    let env = Env::with_private_workload();
    ready_machine(&env);
    let stale = format!("{}s", STALE_AFTER.as_secs());
    let mut ctl = env.controller(&["--stale-after", &stale]);
    env.wait_status("m1", "True", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    let ltt = env.condition("m1").unwrap().3;
    ctl.kill();

    // Restarted: the same condition stands, nothing is written. The mark is
    // after the kill (a write of the killed one logged late is before it),
    // and the check waits for the restarted one to have judged m1 (its
    // "unchanged" decision), not for a time in which it may not have started.
    let mark = env.mgmt.audit_mark();
    let ctl2 = env.controller_as(
        &env.mgmt_kubeconfig,
        &["--stale-after", &stale],
        &[("SANDBOX_READINESS_LOG", "debug")],
    );
    let judged = format!("machine={}/m1", env.ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ctl2
        .log()
        .lines()
        .any(|l| l.contains("condition unchanged") && l.contains(&judged))
    {
        assert!(
            Instant::now() < deadline,
            "the restarted controller never judged m1:\n{}",
            ctl2.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = statuses_during(&env, "m1", Duration::from_secs(1));
    assert_eq!(seen, ["True"], "{seen:?}");
    env.mgmt.audit_barrier();
    let written: Vec<_> = env.mgmt.audit_writes_since(mark, |e| {
        by_controller(e) && machine_status_write(e, &env.ns, "m1")
    });
    assert!(
        written.is_empty(),
        "an unchanged condition was written: {written:#?}\n{}",
        ctl2.log()
    );
    drop(ctl2);

    // Restarted while the workload cluster is down: kept, not Unknown,
    // until --stale-after.
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let written = Instant::now();
    env.wl.stop();
    let _ctl3 = env.controller(&["--stale-after", &stale]);
    let seen = statuses_while(&env, "m1", || {
        std::thread::sleep(Duration::from_secs(3));
        env.wl.start();
    });
    assert!(
        written.elapsed() + Duration::from_secs(2) < STALE_AFTER,
        "the outage took {:?}: no shorter than --stale-after on this machine",
        written.elapsed()
    );
    assert_eq!(seen, ["True"], "{seen:?}");
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let seen = statuses_during(&env, "m1", Duration::from_secs(2));
    assert_eq!(seen, ["True"], "{seen:?}");
    assert_eq!(
        env.condition("m1").unwrap().3,
        ltt,
        "lastTransitionTime moved"
    );
}

/// A workload credential a control plane can revoke for real: a
/// ServiceAccount's token Secret (kube-controller-manager's token
/// controller fills it; deleting the Secret invalidates the token).
fn legacy_token(wl: &RealCluster, name: &str) -> String {
    let yaml = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: kube-system}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {name}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
         subjects: [{{kind: ServiceAccount, name: {name}, namespace: kube-system}}]\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-token, namespace: kube-system, \
         annotations: {{kubernetes.io/service-account.name: {name}}}}}\ntype: kubernetes.io/service-account-token\n"
    );
    wl.kubectl_ok(&["apply", "-f", "-"], Some(&yaml));
    let path = format!("/api/v1/namespaces/kube-system/secrets/{name}-token");
    let start = Instant::now();
    loop {
        if let Some(t) = wl
            .get(&path)
            .and_then(|s| s["data"]["token"].as_str().map(String::from))
        {
            use base64::Engine;
            let raw = base64::engine::general_purpose::STANDARD.decode(t).unwrap();
            return String::from_utf8(raw).unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the token controller did not fill {name}-token"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_rotated_workload_credential_is_read_again_on_a_401() {
    let env = Env::with_private_workload();
    ready_machine(&env);
    let secret = format!("/api/v1/namespaces/{}/secrets/c1-kubeconfig", env.ns);
    let use_token = |token: &str, file: &str| {
        let kc = env.wl.token_kubeconfig(token, &env.dir.path().join(file));
        let text = std::fs::read_to_string(kc).unwrap();
        env.mgmt.write(
            "PUT",
            &secret,
            "application/json",
            &kubeconfig_secret(&env.ns, CLUSTER, &text),
        );
    };
    let old = legacy_token(&env.wl, "capi-admin-old");
    use_token(&old, "old.kubeconfig");
    // A Secret resync far away: only the 401 can make it read again.
    let ctl = env.controller(&["--secret-resync", "10m"]);
    env.wait_status("m1", "True", Duration::from_secs(30));
    // The control plane rotates the credential, revokes the old one and
    // restarts (every open connection dropped).
    let new = legacy_token(&env.wl, "capi-admin-new");
    use_token(&new, "new.kubeconfig");
    env.wl.write(
        "DELETE",
        "/api/v1/namespaces/kube-system/secrets/capi-admin-old-token",
        "application/json",
        &json!({}),
    );
    env.wl.stop();
    env.wl.start();
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let took = env.wait_status("m1", "False", Duration::from_secs(30));
    eprintln!("rotated credential picked up; the Node's change reached the Machine in {took:?}");
    // The old token is revoked: only a Secret read again could have
    // carried the change, and with --secret-resync 10m only a 401 (or a TLS
    // failure, and the server's certificate did not change) asks for one.
    // The 401 itself is not in the log: it came while the cluster was
    // already unreachable (connection refused during the restart), and only
    // the first error of an outage is logged.
    let log = ctl.log();
    let mine = format!("connecting to the workload cluster cluster={}/c1", env.ns);
    let connects = log.lines().filter(|l| l.contains(&mine)).count();
    assert_eq!(
        connects, 2,
        "the Secret was not read again on the 401:\n{log}"
    );
    assert!(
        !log.contains(&old) && !log.contains(&new),
        "a token in the log"
    );
}
