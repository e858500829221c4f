//! The controller against two test API servers: what it writes on a
//! Machine for each state of its Node, the desired-state check, the
//! Machines it selects, the workload kubeconfigs it refuses, a concurrent
//! writer playing Cluster API's Machine controller, kubectl waiting on the
//! condition, and Cluster API < 1.11 refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");

fn patches(env: &Env, machine: &str) -> usize {
    env.mgmt
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/machines/{machine}/status")))
        .count()
}

fn no_secret_in(log: &str) {
    for s in ["SECRET-TOKEN", "SECRET-KEY", "U0VDUkVULUtFWQ", ADMIN] {
        assert!(!log.contains(s), "the log shows {s}:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_cluster_api_before_1_11() {
    let mgmt = server(&["v1beta1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc");
    std::fs::write(&kc, mgmt.kubeconfig_token(ADMIN)).unwrap();
    let mut c = Controller::spawn(&kc, &[]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_node_unknown_false_true() {
    let env = Env::start().await;
    env.deployment("md-a", false, true, 0);
    env.machine("md-a", "m1", true, &[SYSCTL], None);
    let mut ctl = env.controller(&[]);
    env.wait_status("m1", "Unknown", Duration::from_secs(20))
        .await;
    assert_eq!(env.condition("m1").unwrap().1, "NodeNotYetAssigned");
    let m = env.mgmt.get(MACHINE_AV, "Machine", NS, "m1").unwrap();
    let c = m["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == TY)
        .unwrap()
        .clone();
    assert_eq!(c["observedGeneration"], m["metadata"]["generation"]);

    env.node("w1");
    env.set_node_ref("m1", "w1");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c = env.condition("m1").unwrap();
    assert_eq!(
        (c.0.as_str(), c.1.as_str()),
        ("Unknown", "ConditionNotYetReported"),
        "{c:?}"
    );
    let unknown_since = c.3.clone();

    // The agent at 0: False with its reason.
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let took = env.wait_status("m1", "False", Duration::from_secs(5)).await;
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "SysctlMismatch");
    assert!(c.2.contains("w1"), "{c:?}");
    assert!(took < Duration::from_secs(2), "False took {took:?}");
    let false_since = c.3.clone();
    assert!(false_since >= unknown_since);

    // At rest: heartbeats with nothing changed write nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = patches(&env, "m1");
    for _ in 0..3 {
        env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert_eq!(
        patches(&env, "m1"),
        before,
        "a heartbeat with nothing changed was written"
    );

    // The limit raised: True within 2 s of the Node's condition.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let took = env.wait_status("m1", "True", Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(2), "True took {took:?}");
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "Converged");
    assert!(c.3 > false_since, "lastTransitionTime did not move: {c:?}");

    // A message-only change keeps lastTransitionTime.
    let ltt = c.3.clone();
    let mut n = env.wl.get("v1", "Node", "", "w1").unwrap();
    for c in n["status"]["conditions"].as_array_mut().unwrap() {
        if c["type"] == TY {
            c["message"] = json!("a new sentence");
            c["lastHeartbeatTime"] = json!(now());
        }
    }
    env.wl.put(n).unwrap();
    let start = std::time::Instant::now();
    while !env.condition("m1").unwrap().2.contains("a new sentence") {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(env.condition("m1").unwrap().3, ltt);

    tokio::time::sleep(Duration::from_millis(500)).await;
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
    no_secret_in(&ctl.log());
    ctl.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_check_its_pools_sysctls_is_desired_state_not_checked() {
    let env = Env::start().await;
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
    env.wait_status("m1", "False", Duration::from_secs(20))
        .await;
    env.wait_status("m2", "False", Duration::from_secs(5)).await;
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
    env.wait_status("m1", "True", Duration::from_secs(3)).await;
    // A Node with no annotation at all (an agent that writes none; its
    // condition older than the moment between the agent's two writes).
    env.agent_writes_at(
        "w2",
        "True",
        "Converged",
        &[("user.max_user_namespaces", "1")],
        &ago(Duration::from_secs(20)),
    );
    let mut n = env.wl.get("v1", "Node", "", "w2").unwrap();
    n["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("sandbox-readiness.io/desired");
    env.wl.put(n).unwrap();
    let start = std::time::Instant::now();
    while !env.condition("m2").unwrap().2.contains("annotation") {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            env.condition("m2")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c = env.condition("m2").unwrap();
    assert_eq!(
        (c.0.as_str(), c.1.as_str()),
        ("False", "DesiredStateNotChecked"),
        "{c:?}"
    );
    no_secret_in(&ctl.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selects_gated_machines_and_those_of_mirrored_deployments() {
    let env = Env::start().await;
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
    env.wait_status("mirrored", "True", Duration::from_secs(20))
        .await;
    env.wait_status("gated", "True", Duration::from_secs(5))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.condition("plain"), None);
    // Annotating a deployment later selects its Machines.
    let mut md = env
        .mgmt
        .get(MACHINE_AV, "MachineDeployment", NS, "md-plain")
        .unwrap();
    md["metadata"]["annotations"] = json!({"sandbox-readiness.io/mirror":"true"});
    env.mgmt.put(md).unwrap();
    env.wait_status("plain", "True", Duration::from_secs(3))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_that_runs_a_command_is_refused_with_one_line() {
    let env = Env::start().await;
    let wl_kc = env.wl.kubeconfig_token(ADMIN);
    let exec = wl_kc.replace(
        &format!("token: {ADMIN}"),
        "exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/touch\n      args: [/tmp/sandbox-readiness-controller-exec-ran]",
    );
    assert_ne!(
        exec, wl_kc,
        "the fixture's kubeconfig changed shape:\n{wl_kc}"
    );
    let mut s = env.mgmt.get("v1", "Secret", NS, "c1-kubeconfig").unwrap();
    s["data"]["value"] = json!(b64(&exec));
    env.mgmt.put(s).unwrap();
    let _ = std::fs::remove_file("/tmp/sandbox-readiness-controller-exec-ran");
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let ctl = env.controller(&["--secret-resync", "1s"]);
    env.wait_status("m1", "Unknown", Duration::from_secs(20))
        .await;
    let c = env.condition("m1").unwrap();
    assert_eq!(c.1, "ConditionNotYetReported", "{c:?}");
    assert!(c.2.contains("exec"), "{c:?}");
    assert!(!std::path::Path::new("/tmp/sandbox-readiness-controller-exec-ran").exists());
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
    let mut s = env.mgmt.get("v1", "Secret", NS, "c1-kubeconfig").unwrap();
    s["data"]["value"] = json!(b64(&wl_kc));
    env.mgmt.put(s).unwrap();
    env.wait_status("m1", "True", Duration::from_secs(5)).await;
    no_secret_in(&ctl.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_cluster_api_write_is_never_lost() {
    let env = Env::start().await;
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    // Playing Cluster API's Machine controller: between the controller's
    // read and its write, NodeHealthy and Ready are updated (a new
    // message each time), as setReadyCondition does on every reconcile.
    let writes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w = writes.clone();
    env.mgmt.on_request("PATCH", &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{NS}/machines/m1/status"), move |s| {
        let n = w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n >= 6 {
            return;
        }
        let mut m = s.get(MACHINE_AV, "Machine", NS, "m1").unwrap();
        let mut conds: Vec<serde_json::Value> = m["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c["type"] != "NodeHealthy" && c["type"] != "Ready")
            .collect();
        conds.push(json!({"type":"NodeHealthy","status":"True","reason":"NodeHealthy","message":format!("capi write {n}"),"lastTransitionTime":now()}));
        conds.push(json!({"type":"Ready","status":"False","reason":"NotReady","message":format!("capi write {n}"),"lastTransitionTime":now()}));
        m["status"]["conditions"] = json!(conds);
        m["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        s.put(m).unwrap();
    });
    let _ctl = env.controller(&[]);
    env.wait_status("m1", "False", Duration::from_secs(20))
        .await;
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    env.wait_status("m1", "True", Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = writes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(n >= 2, "the controller wrote {n} times");
    let m = env.mgmt.get(MACHINE_AV, "Machine", NS, "m1").unwrap();
    let last = n.min(6) - 1;
    for ty in ["NodeHealthy", "Ready"] {
        let c = condition_of(&m, ty).unwrap_or_else(|| panic!("{ty} lost: {m}"));
        assert_eq!(
            c.2,
            format!("capi write {last}"),
            "{ty}: an older value was written back"
        );
    }
    assert_eq!(condition_of(&m, TY).unwrap().0, "True");
    let conflicts = env
        .mgmt
        .requests()
        .iter()
        .filter(|r| {
            r.method == "PATCH" && r.path.ends_with("/machines/m1/status") && r.status == 409
        })
        .count();
    assert!(conflicts >= 2, "the hook made no 409 ({conflicts})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_waits_on_the_machine_condition() {
    let env = Env::start().await;
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    let _ctl = env.controller(&[]);
    env.wait_status("m1", "False", Duration::from_secs(20))
        .await;
    let kubectl = |timeout: &str| {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", &env.mgmt_kubeconfig)
            .arg("--cache-dir")
            .arg(env.dir.path().join("cache"))
            .args([
                "wait",
                "-n",
                NS,
                &format!("--for=condition={TY}"),
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
    // Returns once the Node turns True.
    let child = kubectl("20s");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let start = std::time::Instant::now();
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("condition met"),
        "{out:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cluster_drops_its_workload_client() {
    let env = Env::start().await;
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let ctl = env.controller(&[]);
    env.wait_status("m1", "True", Duration::from_secs(20)).await;
    let lists = || {
        env.wl
            .requests()
            .iter()
            .filter(|r| {
                r.method == "GET" && r.path == "/api/v1/nodes" && !r.query.contains("watch=true")
            })
            .count()
    };
    assert_eq!(lists(), 1);
    env.mgmt.delete(MACHINE_AV, "Cluster", NS, CLUSTER).unwrap();
    let start = std::time::Instant::now();
    while !ctl.log().contains("its workload client is dropped") {
        assert!(start.elapsed() < Duration::from_secs(5), "{}", ctl.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The Machine keeps its condition (the cluster is not read, for less
    // than --stale-after); a new Cluster of the name gets a new client.
    assert_eq!(env.status("m1").as_deref(), Some("True"));
    env.mgmt.create(cluster(CLUSTER)).unwrap();
    let start = std::time::Instant::now();
    while lists() < 2 {
        assert!(start.elapsed() < Duration::from_secs(5), "no new client");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    env.wait_status("m1", "False", Duration::from_secs(5)).await;
}
