//! The controller on the real management (Cluster API running) and
//! workload clusters: what it writes on a Machine for each state of its
//! Node, the desired-state check, the Machines it selects, the workload
//! kubeconfigs it refuses, writes beside the real Cluster API Machine
//! controller's and a third writer's, kubectl waiting on the condition, and
//! Cluster API < 1.11 refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");

fn no_secret_in(log: &str) {
    for s in [
        "SECRET-TOKEN",
        "SECRET-KEY",
        "U0VDUkVULUtFWQ",
        "client-key-data",
        "PRIVATE KEY",
    ] {
        assert!(!log.contains(s), "the log shows {s}:\n{log}");
    }
}

/// A management cluster of Cluster API < 1.11: a real API server whose
/// `cluster.x-k8s.io` group serves only v1beta1 (the Machine CRD as such a
/// release registers it; no webhooks).
#[test]
fn refuses_cluster_api_before_1_11() {
    let mgmt = RealCluster::private();
    let crd = json!({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
        "metadata":{"name":"machines.cluster.x-k8s.io"},
        "spec":{"group":"cluster.x-k8s.io","scope":"Namespaced",
            "names":{"kind":"Machine","listKind":"MachineList","plural":"machines","singular":"machine"},
            "versions":[{"name":"v1beta1","served":true,"storage":true,"subresources":{"status":{}},
                "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}});
    mgmt.kubectl_ok(&["apply", "-f", "-"], Some(&crd.to_string()));
    mgmt.kubectl_ok(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/machines.cluster.x-k8s.io",
        ],
        None,
    );
    let mut c = Controller::spawn(mgmt.admin_kubeconfig(), &[]);
    let (code, log) = c.wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(2), "{log}");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("before Cluster API 1.11")
            && lines[0].contains("cluster.x-k8s.io/v1beta1"),
        "{log}"
    );
}

#[test]
fn follows_the_node_unknown_false_true() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.machine("md-a", "m1", true, &[SYSCTL], None);
    let mut ctl = env.controller(&[]);
    env.wait_status("m1", "Unknown", Duration::from_secs(30));
    assert_eq!(env.condition("m1").unwrap().1, "NodeNotYetAssigned");
    let m = env.machine_obj("m1").unwrap();
    let c = m["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == env.ty.as_str())
        .unwrap()
        .clone();
    assert_eq!(c["observedGeneration"], m["metadata"]["generation"]);

    env.node("w1");
    env.set_node_ref("m1", "w1");
    // CAPI's nodeRef reaches the controller's watch.
    let start = Instant::now();
    while env.condition("m1").unwrap().1 != "ConditionNotYetReported" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            env.condition("m1")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let c = env.condition("m1").unwrap();
    assert_eq!(c.0, "Unknown", "{c:?}");
    let unknown_since = c.3.clone();

    // The agent at 0: False with its reason.
    // (The times are printed, not bounded: the tier runs beside others on
    // two cores; the controller bench measures flip → Machine latency.)
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let took = env.wait_status("m1", "False", Duration::from_secs(30));
    eprintln!("Node False → Machine False: {took:?}");
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "SysctlMismatch");
    assert!(c.2.contains(&env.node_name("w1")), "{c:?}");
    let false_since = c.3.clone();
    assert!(false_since >= unknown_since);

    // At rest: heartbeats with nothing changed write nothing. The mark is
    // set once the False write is in the audit log; the True written after
    // the heartbeats proves the controller read past them, and it must be
    // the one write after the mark (a heartbeat's write would come first).
    let sends = |e: &cluster::AuditEvent, status: &str| {
        code(e) == 200
            && e["requestObject"]["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == env.ty.as_str() && c["status"] == status)
                })
    };
    poll(
        Duration::from_secs(10),
        "the False write in the audit log",
        || env.status_writes("m1").iter().any(|e| sends(e, "False")),
    );
    let mark = env.mgmt.audit_mark();
    for _ in 0..3 {
        env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
        std::thread::sleep(Duration::from_millis(700));
    }

    // The limit raised.
    std::thread::sleep(Duration::from_millis(1100));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let took = env.wait_status("m1", "True", Duration::from_secs(30));
    eprintln!("Node True → Machine True: {took:?}");
    let after = env.mgmt.audit_wait(
        Duration::from_secs(10),
        mark,
        |e| by_controller(e) && machine_status_write(e, &env.ns, "m1") && code(e) == 200,
        |got| got.iter().any(|e| sends(e, "True")),
    );
    assert_eq!(
        after.len(),
        1,
        "a heartbeat with nothing changed was written: {after:#?}"
    );
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "Converged");
    assert!(c.3 > false_since, "lastTransitionTime did not move: {c:?}");

    // A message-only change keeps lastTransitionTime.
    let ltt = c.3.clone();
    let node = env.wl.get_node(&env.node_name("w1"));
    let mut cond = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == env.ty.as_str())
        .unwrap()
        .clone();
    cond["message"] = json!("a new sentence");
    cond["lastHeartbeatTime"] = json!(now());
    env.write_condition("w1", cond);
    let start = Instant::now();
    while !env.condition("m1").unwrap().2.contains("a new sentence") {
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(env.condition("m1").unwrap().3, ltt);

    std::thread::sleep(Duration::from_millis(500));
    let ev = env.events("m1");
    assert!(
        ev.contains(&("Warning".into(), "SandboxNotReady".into())),
        "{ev:?}"
    );
    assert!(
        ev.contains(&("Normal".into(), "SandboxReady".into())),
        "{ev:?}"
    );
    assert_eq!(
        ev.len(),
        2,
        "one Event per transition (the first Unknown records none): {ev:?}"
    );
    // The real Machine controller wrote its own conditions beside ours, and
    // Ready follows the gate.
    let m = env.machine_obj("m1").unwrap();
    for ty in ["NodeHealthy", "InfrastructureReady", "BootstrapConfigReady"] {
        assert!(condition_of(&m, ty).is_some(), "no {ty} from CAPI: {m:#}");
    }
    no_secret_in(&ctl.log());
    ctl.kill();
}

#[test]
fn a_node_that_does_not_check_its_pools_sysctls_is_desired_state_not_checked() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.node("w2");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.machine("md-a", "m2", true, &[SYSCTL], Some("w2"));
    // w1's agent checks no user.max_user_namespaces; w2's another value.
    env.agent_writes("w1", "True", "Converged", &[]);
    env.agent_writes(
        "w2",
        "True",
        "Converged",
        &[("user.max_user_namespaces", "1")],
    );
    let ctl = env.controller(&[]);
    env.wait_status("m1", "False", Duration::from_secs(30));
    env.wait_status("m2", "False", Duration::from_secs(5));
    for m in ["m1", "m2"] {
        let c = env.condition(m).unwrap();
        assert_eq!(c.1, "DesiredStateNotChecked", "{c:?}");
        assert!(
            c.2.contains("user.max_user_namespaces") && c.2.contains("11255"),
            "{c:?}"
        );
    }
    // The agent told the pool's value: True.
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    env.wait_status("m1", "True", Duration::from_secs(3));
    // A Node with no annotation at all (an agent that writes none; its
    // condition older than the moment between the agent's two writes).
    env.agent_writes_at(
        "w2",
        "True",
        "Converged",
        &[("user.max_user_namespaces", "1")],
        &ago(Duration::from_secs(20)),
    );
    env.annotate_desired("w2", None);
    let start = Instant::now();
    while !env.condition("m2").unwrap().2.contains("annotation") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            env.condition("m2")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The controller could not check it: Unknown, never False.
    let c = env.condition("m2").unwrap();
    assert_eq!(
        (c.0.as_str(), c.1.as_str()),
        ("Unknown", "DesiredStateNotChecked"),
        "{c:?}"
    );
    no_secret_in(&ctl.log());
}

#[test]
fn selects_gated_machines_and_those_of_mirrored_deployments() {
    // A management cluster of its own: every controller mirrors the
    // Machines of a mirrored MachineDeployment, whatever its type; on the
    // shared one the other tests' controllers would write these.
    let env = Env::with_private_management();
    env.deployment("md-mirror", true, false, 0);
    env.deployment("md-plain", false, false, 0);
    env.node("w1");
    env.node("w2");
    env.node("w3");
    env.machine("md-mirror", "mirrored", false, &[SYSCTL], Some("w1"));
    env.machine("md-plain", "plain", false, &[SYSCTL], Some("w2"));
    env.machine("md-plain", "gated", true, &[SYSCTL], Some("w3"));
    for n in ["w1", "w2", "w3"] {
        env.agent_writes(n, "True", "Converged", &[SYSCTL]);
    }
    let _ctl = env.controller(&[]);
    env.wait_status("mirrored", "True", Duration::from_secs(30));
    env.wait_status("gated", "True", Duration::from_secs(30));
    assert_eq!(env.condition("plain"), None);
    // Annotating a deployment later selects its Machines.
    let annotated = env.mgmt.audit_mark();
    env.mgmt.write(
        "PATCH",
        &format!("{CAPI}/namespaces/{}/machinedeployments/md-plain", env.ns),
        MERGE,
        &json!({"metadata":{"annotations":{"sandbox-readiness.io/mirror":"true"}}}),
    );
    env.wait_status("plain", "True", Duration::from_secs(30));
    // Until then `plain` was left alone: every write the controller made to
    // it was received after the annotation (a sleep would only show that
    // nothing was written *yet*).
    poll(
        Duration::from_secs(10),
        "plain's write in the audit log",
        || !env.status_writes("plain").is_empty(),
    );
    let early: Vec<_> = env
        .status_writes("plain")
        .into_iter()
        .filter(|e| !annotated.precedes(e))
        .collect();
    assert!(
        early.is_empty(),
        "plain written before it was selected: {early:#?}"
    );
    // Deselected again: the annotation removed (plain has no gate), its
    // condition goes; the other pools' Machines keep theirs.
    let removed = env.mgmt.audit_mark();
    env.mgmt.write(
        "PATCH",
        &format!("{CAPI}/namespaces/{}/machinedeployments/md-plain", env.ns),
        MERGE,
        &json!({"metadata":{"annotations":{"sandbox-readiness.io/mirror":null}}}),
    );
    poll(Duration::from_secs(30), "plain's condition removed", || {
        env.condition("plain").is_none()
    });
    poll(
        Duration::from_secs(10),
        "the removal in the audit log",
        || {
            env.status_writes("plain")
                .iter()
                .any(|e| removed.precedes(e))
        },
    );
    assert_eq!(env.status("mirrored").as_deref(), Some("True"));
    assert_eq!(env.status("gated").as_deref(), Some("True"));
}

#[test]
fn a_kubeconfig_secret_that_runs_a_command_is_refused_with_one_line() {
    let env = Env::start();
    // The Machine gets its nodeRef through CAPI's cluster cache, which
    // reads the same Secret: it is connected before the Secret turns into
    // one that runs a command (client-go's loader, which CAPI uses, would
    // run it).
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let marker = env.dir.path().join("exec-ran");
    let wl_kc = std::fs::read_to_string(env.wl.admin_kubeconfig()).unwrap();
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&wl_kc).unwrap();
    let mut doc: Value = serde_json::to_value(doc).unwrap();
    let user = &mut doc["users"][0]["user"];
    assert!(
        user["client-key-data"].is_string(),
        "the admin kubeconfig changed shape:\n{wl_kc}"
    );
    *user = json!({"exec":{"apiVersion":"client.authentication.k8s.io/v1","command":"/bin/touch",
        "args":[marker.to_str().unwrap()],"interactiveMode":"Never"}});
    let exec = serde_yaml_ng::to_string(&doc).unwrap();
    let path = format!("/api/v1/namespaces/{}/secrets/c1-kubeconfig", env.ns);
    env.mgmt.write(
        "PUT",
        &path,
        "application/json",
        &kubeconfig_secret(&env.ns, CLUSTER, &exec),
    );
    let ctl = env.controller(&["--secret-resync", "1s"]);
    env.wait_status("m1", "Unknown", Duration::from_secs(30));
    let c = env.condition("m1").unwrap();
    // A refusal has a reason of its own (not "not yet reported"): the
    // tenant's Secret is wrong, and waiting will not fix it.
    assert_eq!(c.1, "WorkloadKubeconfigRefused", "{c:?}");
    assert!(c.2.contains("exec"), "{c:?}");
    assert!(!marker.exists(), "the kubeconfig's command ran");
    std::thread::sleep(Duration::from_secs(3));
    let log = ctl.log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("only inline credentials"))
        .collect();
    assert_eq!(
        refusals.len(),
        1,
        "refused once, not on every re-read:\n{log}"
    );
    // The Secret rotated to an inline credential is picked up.
    env.mgmt.write(
        "PUT",
        &path,
        "application/json",
        &kubeconfig_secret(&env.ns, CLUSTER, &wl_kc),
    );
    env.wait_status("m1", "True", Duration::from_secs(5));
    assert!(!marker.exists(), "the kubeconfig's command ran");
    no_secret_in(&ctl.log());
}

/// The controller's write is a merge patch guarded by the resourceVersion
/// it read: when another writer changes the Machine between the
/// controller's read and its write, the real server answers 409, the
/// controller reads again and plans again, and the other writer's condition
/// is never written back with an old value. The race is made, not hoped
/// for: the controller reaches the management server through the fault
/// proxy, which holds (hangs) the controller's next request — its condition
/// write, the only request a Node change makes it send with
/// `--secret-resync 1h` and no leader election — while a third writer
/// changes the Machine; released, the held write meets the change. Beside
/// it the real Machine controller writes NodeHealthy, Ready and the rest.
#[test]
fn a_concurrent_cluster_api_write_is_never_lost() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let path = format!("{CAPI}/namespaces/{}/machines/m1/status", env.ns);
    // The third writer: read, change its own condition, write guarded by
    // the resourceVersion it read, again on 409 (as CAPI's patch helper).
    let third = |msg: &str| loop {
        let m = env.mgmt.get(path.trim_end_matches("/status")).unwrap();
        let mut conds: Vec<Value> = m["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c["type"] != "test.sandbox-readiness.io/Other")
            .collect();
        conds.push(
            json!({"type":"test.sandbox-readiness.io/Other","status":"True","reason":"Written",
            "message":msg,"lastTransitionTime":"2026-01-01T00:00:00Z"}),
        );
        let body = json!({"metadata":{"resourceVersion":m["metadata"]["resourceVersion"]},
            "status":{"conditions":conds}});
        if env.mgmt.try_write("PATCH", &path, MERGE, &body).is_ok() {
            return;
        }
    };
    third("third write 0");
    let proxy = test_api::FaultProxy::http(env.mgmt.dir()).unwrap();
    let admin = proxy.client_cert("admin", &["system:masters"]);
    let kc = env.dir.path().join("proxied.kubeconfig");
    std::fs::write(&kc, proxy.kubeconfig_inline(&admin)).unwrap();
    let _ctl = env.controller_as(&kc, &["--secret-resync", "1h"], &[]);
    env.wait_status("m1", "False", Duration::from_secs(30));
    for (n, (status, reason)) in [
        ("True", "Converged"),
        ("False", "SysctlMismatch"),
        ("True", "Converged"),
    ]
    .into_iter()
    .enumerate()
    {
        // The last write's Event (each of these transitions records one)
        // has been sent: the request held next can only be this flip's.
        poll(
            Duration::from_secs(30),
            "the last write's Event at the proxy",
            || {
                proxy
                    .requests()
                    .iter()
                    .any(|r| r.path.contains("/events") && (200..300).contains(&r.status))
            },
        );
        let mark = proxy.clear_requests();
        proxy.faults().hung();
        env.agent_writes("w1", status, reason, &[SYSCTL]);
        // The controller's write has reached the proxy and is held there.
        poll(
            Duration::from_secs(30),
            "the controller's write at the proxy",
            || proxy.arrived() > mark,
        );
        let msg = format!("third write {}", n + 1);
        third(&msg);
        proxy.faults().clear();
        env.wait_status("m1", status, Duration::from_secs(30));
        // The held request was the condition write, and the real server
        // refused it: the race ran.
        let first = proxy.requests().into_iter().next().unwrap();
        assert_eq!(
            (first.method.as_str(), first.path.as_str(), first.status),
            ("PATCH", path.as_str(), 409),
            "flip {n}: the held request was not the conflicting write"
        );
        let m = env.machine_obj("m1").unwrap();
        let other = condition_of(&m, "test.sandbox-readiness.io/Other")
            .expect("the third writer's condition lost");
        assert_eq!(
            other.2, msg,
            "flip {n}: an older value of the third writer's condition was written back"
        );
    }
    // CAPI's Ready summarises the gate: True with it (nothing of ours
    // stood in its way).
    let start = Instant::now();
    while condition_of(&env.machine_obj("m1").unwrap(), "NodeHealthy").is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "CAPI wrote no NodeHealthy"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn kubectl_waits_on_the_machine_condition() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let _ctl = env.controller(&[]);
    env.wait_status("m1", "False", Duration::from_secs(30));
    let kubectl = |timeout: &str| {
        env.mgmt
            .kubectl_cmd(&[
                "wait",
                "-n",
                &env.ns,
                &format!("--for=condition={}", env.ty),
                "machine.cluster.x-k8s.io/m1",
                &format!("--timeout={timeout}"),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Times out while False.
    let out = kubectl("2s").wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    // Returns once the Node turns True: the Node changes once kubectl's
    // watch is open (its -v=6 round trip with watch=true), not after a
    // guessed sleep; the time is printed, not bounded.
    let ty = format!("--for=condition={}", env.ty);
    let waiter = env.mgmt.kubectl_watching(
        &[
            "wait",
            "-n",
            &env.ns,
            &ty,
            "machine.cluster.x-k8s.io/m1",
            "--timeout=60s",
        ],
        Duration::from_secs(20),
    );
    let start = Instant::now();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let (ok, out, err) = waiter.finish();
    assert!(ok, "{err}");
    assert!(out.contains("condition met"), "{out}\n{err}");
    eprintln!(
        "Node True → kubectl wait on the Machine returned: {:?}",
        start.elapsed()
    );
}

/// A deleted Cluster: the real Cluster API deletes its Machines first
/// (the Cluster's finalizer), so the Cluster is gone only after them; the
/// controller drops the Cluster's workload client, and a new Cluster of
/// the name gets a new one.
#[test]
fn a_deleted_cluster_drops_its_workload_client() {
    let env = Env::start();
    // No MachineDeployment: a paused one would hold the Cluster's deletion
    // (CAPI deletes the descendants first, and a paused one keeps its
    // finalizer); the gated Machines are selected on their own.
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let ctl = env.controller(&[]);
    env.wait_status("m1", "True", Duration::from_secs(30));
    let cluster = format!("{CAPI}/namespaces/{}/clusters/{CLUSTER}", env.ns);
    env.mgmt
        .write("DELETE", &cluster, "application/json", &json!({}));
    let start = Instant::now();
    while !ctl.log().contains("its workload client is dropped") {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{}\n{}",
            ctl.log(),
            env.capi_log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The Machine went before the Cluster (CAPI's cascade), its Node with
    // it.
    assert!(env.machine_obj("m1").is_none(), "m1 outlived its Cluster");
    // A new Cluster of the name: a new client reads its Nodes.
    env.create_cluster(CLUSTER);
    env.node("w2");
    env.machine("md-a", "m2", true, &[SYSCTL], Some("w2"));
    env.agent_writes("w2", "False", "SysctlMismatch", &[SYSCTL]);
    env.wait_status("m2", "False", Duration::from_secs(10));
    env.agent_writes("w2", "True", "Converged", &[SYSCTL]);
    env.wait_status("m2", "True", Duration::from_secs(5));
}

/// A Cluster deleted while the controller's watches are down is never
/// reported deleted to it: its watch comes back to a compacted history (a
/// 410), relists, and the list no longer holds it. Its workload client and
/// Node cache are dropped all the same.
#[test]
fn a_cluster_deleted_during_a_relist_drops_its_workload_client() {
    let env = Env::start();
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let proxy = test_api::FaultProxy::http(env.mgmt.dir()).unwrap();
    let admin = proxy.client_cert("admin", &["system:masters"]);
    let kc = env.dir.path().join("proxied.kubeconfig");
    std::fs::write(&kc, proxy.kubeconfig_inline(&admin)).unwrap();
    let ctl = env.controller_as(&kc, &[], &[]);
    env.wait_status("m1", "True", Duration::from_secs(30));
    // The controller's management watches go down and stay down...
    proxy.faults().down();
    proxy.faults().reset_connections();
    // ...while the Cluster is deleted (Cluster API's cascade takes m1
    // first).
    let cluster = format!("{CAPI}/namespaces/{}/clusters/{CLUSTER}", env.ns);
    env.mgmt
        .write("DELETE", &cluster, "application/json", &json!({}));
    poll(Duration::from_secs(90), "the Cluster gone", || {
        env.mgmt.get(&cluster).is_none()
    });
    // The Cluster watch resumes from a history compacted meanwhile: 410,
    // then a list that no longer holds the Cluster.
    let clusters = "/apis/cluster.x-k8s.io/v1beta2/clusters";
    proxy
        .faults()
        .script("GET", clusters, vec![test_api::Scripted::watch_gone()]);
    proxy.clear_requests();
    proxy.faults().up().unwrap();
    poll(
        Duration::from_secs(90),
        "the workload client dropped",
        || ctl.log().contains("its workload client is dropped"),
    );
    // The watch resumed first (and got the 410), and the Clusters were
    // listed again after it: a relist, which reports no deletion.
    let seen = proxy.requests();
    let watches: Vec<_> = seen
        .iter()
        .filter(|r| r.path == clusters && r.query.contains("watch=true"))
        .collect();
    assert!(
        watches.first().is_some_and(|r| r.status == 200),
        "{watches:#?}"
    );
    assert!(
        seen.iter()
            .any(|r| r.path == clusters && !r.query.contains("watch=true") && r.status == 200),
        "no relist of the Clusters: {seen:#?}"
    );
    no_secret_in(&ctl.log());
}

/// One incarnation: a Node left under a reused name by another machine
/// (another `spec.providerID`) is not the Machine's, whatever it says:
/// `Unknown` / `NodeOfAnotherMachine`, and its True is never mirrored.
#[test]
fn a_node_of_another_machine_under_the_name_is_not_its_verdict() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let ctl = env.controller(&[]);
    env.wait_status("m1", "False", Duration::from_secs(30));
    // The machine is replaced under the same Node name: the old Node goes,
    // another machine registers the name (kubelet's --provider-id), and
    // its agent says True.
    let name = env.node_name("w1");
    env.wl
        .kubectl_ok(&["delete", "node", &name, "--wait=true"], None);
    env.wl
        .node_with_provider_id(&name, "sandbox-readiness-test://another-machine");
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    env.wait_status("m1", "Unknown", Duration::from_secs(30));
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "NodeOfAnotherMachine", "{c:?}");
    assert!(c.2.contains("another-machine"), "{c:?}");
    no_secret_in(&ctl.log());
}

/// One boot: a condition observed on another boot than the one kubelet
/// reports (the agent's `sandbox-readiness.io/verdict-boot` against
/// `status.nodeInfo.bootID`) is nobody's verdict on this boot, True or not.
#[test]
fn a_verdict_of_another_boot_is_not_mirrored() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    let name = env.node_name("w1");
    let boot = |id: &str| {
        env.wl.write(
            "PATCH",
            &format!("/api/v1/nodes/{name}/status"),
            STRATEGIC,
            &json!({"status":{"nodeInfo":{"bootID":id}}}),
        );
    };
    let verdict_boot = |id: &str| {
        env.wl.write(
            "PATCH",
            &format!("/api/v1/nodes/{name}"),
            MERGE,
            &json!({"metadata":{"annotations":{"sandbox-readiness.io/verdict-boot":id}}}),
        );
    };
    boot("boot-1");
    verdict_boot("boot-1");
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let _ctl = env.controller(&[]);
    env.wait_status("m1", "True", Duration::from_secs(30));
    // The node reboots: kubelet reports the new boot; the agent has not
    // written this boot's verdict yet.
    boot("boot-2");
    env.wait_status("m1", "Unknown", Duration::from_secs(30));
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "VerdictOfAnotherBoot", "{c:?}");
    assert!(c.2.contains("boot-1") && c.2.contains("boot-2"), "{c:?}");
    // The agent's verdict on this boot.
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    verdict_boot("boot-2");
    env.wait_status("m1", "True", Duration::from_secs(30));
}

/// The docs' MachineHealthCheck (readiness-gate.md: `False` for 900 s,
/// here 5 s) never remediates a Machine the controller could not judge: a
/// pool whose machine config it cannot read is `Unknown`, not `False`. The
/// same check does act once its node really says False.
#[test]
fn the_docs_health_check_leaves_an_unreadable_pool_alone() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine_with_config(
        "md-a",
        "m1",
        true,
        "version: v1alpha1\nmachine: [unclosed\n",
        &[],
        Some("w1"),
    );
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let _ctl = env.controller(&[]);
    env.wait_status("m1", "Unknown", Duration::from_secs(30));
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "DesiredStateNotChecked", "{c:?}");
    let timeout = 5;
    env.post(
        &format!("{CAPI}/namespaces/{}/machinehealthchecks", env.ns),
        json!({"apiVersion": MACHINE_AV, "kind": "MachineHealthCheck",
            "metadata": {"name": "sandbox", "namespace": env.ns},
            "spec": {"clusterName": CLUSTER,
                "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "md-a"}},
                "checks": {"unhealthyMachineConditions": [
                    {"type": env.ty, "status": "False", "timeoutSeconds": timeout}]},
                "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": 1}}}}),
    );
    // Cluster API's health check on the Machine: `HealthCheckSucceeded`.
    let health = || {
        env.machine_obj("m1")
            .and_then(|m| condition_of(&m, "HealthCheckSucceeded"))
            .map(|c| c.0)
    };
    poll(
        Duration::from_secs(60),
        "the health check's first verdict",
        || health().is_some(),
    );
    // Watched for six times the check's timeout (the check acts on a
    // False within about three: printed below): healthy throughout.
    let window = Duration::from_secs(6 * timeout);
    let start = Instant::now();
    while start.elapsed() < window {
        assert_eq!(
            health().as_deref(),
            Some("True"),
            "{:?}",
            env.machine_obj("m1")
        );
        assert_eq!(env.status("m1").as_deref(), Some("Unknown"));
        std::thread::sleep(Duration::from_millis(200));
    }
    // The node says False: the Machine is False, and the same check marks
    // it unhealthy within that window.
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    env.wait_status("m1", "False", Duration::from_secs(30));
    let flipped = Instant::now();
    poll(
        Duration::from_secs(120),
        "the health check acting on False",
        || health().as_deref() == Some("False"),
    );
    eprintln!(
        "the health check acted {:?} after the Machine turned False",
        flipped.elapsed()
    );
}
