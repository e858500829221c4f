//! A real Cluster API rollout held by the readiness gate, with two replicas
//! of the controller under deploy/'s RBAC (applied for real, each replica
//! with a token of its ServiceAccount) holding it across a leader failover
//! on the real server's Lease.
//!
//! Cluster API v1.13.6 and CABPT v0.6.11 are real: the MachineDeployment
//! of examples/rollout/ (replicas 2, maxSurge 1, maxUnavailable 0,
//! minReadySeconds 1, gated on `sandbox-readiness.io/SandboxReady`) rolls
//! from the plain TalosConfigTemplate to the one that sets
//! `user.max_user_namespaces: 11255`; its MachineSets, Machines, Ready and
//! Available, and the scale-down decisions are CAPI's. The test plays the
//! infrastructure (each TestMachine provisioned once CABPT's bootstrap data
//! exists, its Node registered as kubelet with `--provider-id`, CAPI setting
//! the nodeRef) and the agent on each node (its desired-state annotation
//! from that bootstrap data's sysctls; the first node of the new template
//! at 0 — SysctlMismatch — until the test raises the limit): a real agent's
//! own verdicts are tests/capi_rollout.rs's, and here the step the
//! failover is timed against must be the test's.
//!
//! The leader is SIGKILLed while the first new Machine is held False, the
//! limit raised 3 s later with no one leading: the standby must lead within
//! 20 s and write that change; every Machine status write is checked, from
//! the audit log, against the Lease holder at that point of the log (each
//! replica told by its token's credential id).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use base64::Engine as _;
use common::*;
use serde_json::{json, Value};

const REPLICAS: usize = 2;
const LEASE: &str = "sandbox-readiness-controller";
const INFRA: &str = "/apis/infrastructure.cluster.x-k8s.io/v1alpha1";

/// The test's part of the world: TestMachines provisioned, Nodes
/// registered, the played agent's verdicts.
#[derive(Default)]
struct Played {
    /// TestMachine → (its Node, the pool's user.max_user_namespaces).
    nodes: BTreeMap<String, (String, Option<String>)>,
    /// Node → the verdict last written.
    written: BTreeMap<String, &'static str>,
    /// The first node of the new template (held at 0).
    held: Option<String>,
    raised: bool,
}

/// `machine.sysctls` of a machine config (its documents).
fn sysctls_of(config: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for doc in config.split("\n---") {
        let Ok(v) = serde_yaml_ng::from_str::<Value>(doc) else {
            continue;
        };
        if let Some(m) = v["machine"]["sysctls"].as_object() {
            for (k, val) in m {
                let val = match val {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.insert(k.clone(), val);
            }
        }
    }
    out
}

/// One round of the played infrastructure and agents.
fn play(env: &Env, p: &Mutex<Played>) {
    let ns = &env.ns;
    let list = env
        .mgmt
        .try_get(&format!("{INFRA}/namespaces/{ns}/testmachines"))
        .ok()
        .flatten()
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default();
    for tm in &list {
        let name = tm["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if tm["metadata"]["deletionTimestamp"].is_string()
            || p.lock().unwrap().nodes.contains_key(&name)
        {
            continue;
        }
        let Some(machine) = cluster::owner_name(tm, "Machine") else {
            continue;
        };
        let Some(m) = env
            .mgmt
            .try_get(&format!("{CAPI}/namespaces/{ns}/machines/{machine}"))
            .ok()
            .flatten()
        else {
            continue;
        };
        let Some(secret) = m["spec"]["bootstrap"]["dataSecretName"].as_str() else {
            continue;
        };
        let Some(s) = env
            .mgmt
            .try_get(&format!("/api/v1/namespaces/{ns}/secrets/{secret}"))
            .ok()
            .flatten()
        else {
            continue;
        };
        let config = base64::engine::general_purpose::STANDARD
            .decode(s["data"]["value"].as_str().unwrap_or_default())
            .unwrap();
        let sysctls = sysctls_of(&String::from_utf8_lossy(&config));
        let limit = sysctls.get("user.max_user_namespaces").cloned();
        let ann = json!({"v":1,"sysctls":sysctls}).to_string();
        env.node(&name);
        env.annotate_desired(&name, Some(&ann));
        env.provision(&name, &name);
        let mut g = p.lock().unwrap();
        if limit.is_some() && g.held.is_none() {
            g.held = Some(name.clone());
        }
        g.nodes.insert(
            name,
            (
                env.node_name(tm["metadata"]["name"].as_str().unwrap()),
                limit,
            ),
        );
    }
    let live: BTreeSet<String> = list
        .iter()
        .filter(|t| !t["metadata"]["deletionTimestamp"].is_string())
        .filter_map(|t| t["metadata"]["name"].as_str().map(String::from))
        .collect();
    let todo: Vec<(String, &'static str)> = {
        let g = p.lock().unwrap();
        g.nodes
            .iter()
            .filter(|(tm, _)| live.contains(*tm))
            .filter_map(|(tm, (node, limit))| {
                let held = g.held.as_deref() == Some(tm.as_str()) && !g.raised;
                let verdict = if held && limit.is_some() {
                    "False"
                } else {
                    "True"
                };
                (g.written.get(node).copied() != Some(verdict)).then(|| (tm.clone(), verdict))
            })
            .collect()
    };
    for (tm, verdict) in todo {
        let reason = if verdict == "True" {
            "Converged"
        } else {
            "SysctlMismatch"
        };
        let node = env.node_name(&tm);
        // The Node may be gone (CAPI deletes it with its Machine).
        if env
            .wl
            .try_get(&format!("/api/v1/nodes/{node}"))
            .ok()
            .flatten()
            .is_none()
        {
            continue;
        }
        let t = now();
        let body = json!({"status":{"conditions":[{"type":TY,"status":verdict,"reason":reason,
            "message":format!("the agent says {reason}"),"lastHeartbeatTime":t,"lastTransitionTime":t}]}});
        if env
            .wl
            .try_write(
                "PATCH",
                &format!("/api/v1/nodes/{node}/status"),
                STRATEGIC,
                &body,
            )
            .is_ok()
        {
            p.lock().unwrap().written.insert(node, verdict);
        }
    }
}

/// The `jti` of a ServiceAccount token (the audit log's credential id).
fn jti(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .unwrap();
    let v: Value = serde_json::from_slice(&raw).unwrap();
    format!("JTI={}", v["jti"].as_str().unwrap())
}

fn holder(env: &Env) -> Option<String> {
    env.mgmt
        .get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{DEPLOY_NS}/leases/{LEASE}"
        ))
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
        .filter(|h| !h.is_empty())
}

/// Machine name → (gate status, deleting, is of the new template).
fn machines(env: &Env) -> BTreeMap<String, (Option<String>, bool, Value)> {
    env.mgmt
        .get(&format!("{CAPI}/namespaces/{}/machines", env.ns))
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m["metadata"]["name"].as_str().unwrap().to_string(),
                (
                    condition_of(&m, TY).map(|c| c.0),
                    m["metadata"]["deletionTimestamp"].is_string(),
                    m,
                ),
            )
        })
        .collect()
}

fn ready_since(m: &Value) -> bool {
    condition_of(m, "Ready").is_some_and(|c| c.0 == "True")
}

/// Who held the Lease at audit position `rv`, from its (position, holderIdentity)
/// history.
fn holder_at(holders: &[(u64, String)], rv: u64) -> Option<&str> {
    holders
        .iter()
        .rev()
        .find(|(at, _)| *at <= rv)
        .map(|(_, h)| h.as_str())
        .filter(|h| !h.is_empty())
}

/// A Machine status write as the request log has it: (replica, Machine,
/// its position in the audit log, HTTP status).
type Write<'a> = (&'a str, String, u64, u16);
/// Machine → each (status, reason, message) its gate condition took. The
/// generation does not count: Cluster API changes a new Machine's spec
/// twice as it reconciles it (the providerID copied from its
/// infrastructure), and a write for the new generation alone would be a
/// write that changes nothing the condition says.
type Conds = BTreeMap<String, Vec<(String, String, String)>>;

/// What breaks "one writer at a time", "one write per change" and "no
/// flapping" in a run, one line each; empty for a good run. Kept apart from
/// the run so `the_rollout_checks_catch_a_bad_run` can show each one fails.
fn rollout_faults(writes: &[Write<'_>], holders: &[(u64, String)], conds: &Conds) -> Vec<String> {
    let mut faults = Vec::new();
    // One writer at a time: every Machine status write came from the
    // replica that held the Lease when the server answered it.
    for (pod, name, rv, _) in writes {
        if holder_at(holders, *rv) != Some(*pod) {
            faults.push(format!(
                "{pod} wrote {name} while not holding the Lease (rv {rv})"
            ));
        }
    }
    // One write per change: each accepted status write is one change of the
    // gate condition, no more (each accepted write carries the whole condition list: its gate condition is the change).
    for (m, seq) in conds {
        let n = writes.iter().filter(|w| &w.1 == m && w.3 == 200).count();
        if n != seq.len() {
            faults.push(format!("{m}: {n} writes for the changes {seq:?}"));
        }
    }
    // No flapping: no Machine's condition left True once True (the old
    // ones stay True to their deletion, the new ones go Unknown → False →
    // True or Unknown → True).
    for (m, seq) in conds {
        let statuses: Vec<&str> = seq.iter().map(|c| c.0.as_str()).collect();
        if let Some(first_true) = statuses.iter().position(|s| *s == "True") {
            if statuses[first_true..].iter().any(|s| *s != "True") {
                faults.push(format!("{m} flapped: {statuses:?}"));
            }
        }
        if statuses.last() != Some(&"True") {
            faults.push(format!("{m} did not end True: {statuses:?}"));
        }
    }
    faults
}

#[test]
fn the_rollout_checks_catch_a_bad_run() {
    let c = |s: &str| (s.to_string(), String::new(), String::new());
    let holders = vec![
        (10, "ctl-a".to_string()),
        (50, String::new()),
        (60, "ctl-b".to_string()),
    ];
    let good_conds: Conds = [("m1".to_string(), vec![c("Unknown"), c("True")])].into();
    let good: Vec<Write<'_>> = vec![
        ("ctl-a", "m1".into(), 20, 200),
        ("ctl-b", "m1".into(), 70, 200),
    ];
    assert_eq!(
        rollout_faults(&good, &holders, &good_conds),
        Vec::<String>::new()
    );
    // A 409 answered to the leader is no second write.
    let with_conflict = [good.clone(), vec![("ctl-b", "m1".into(), 71, 409)]].concat();
    assert_eq!(
        rollout_faults(&with_conflict, &holders, &good_conds),
        Vec::<String>::new()
    );

    let cases: Vec<(&str, Vec<Write<'_>>, Conds, &str)> = vec![
        (
            "the standby writes",
            vec![
                ("ctl-a", "m1".into(), 20, 200),
                ("ctl-b", "m1".into(), 40, 200),
            ],
            good_conds.clone(),
            "ctl-b wrote m1 while not holding",
        ),
        (
            "a write while no one leads",
            vec![
                ("ctl-a", "m1".into(), 20, 200),
                ("ctl-a", "m1".into(), 55, 200),
            ],
            good_conds.clone(),
            "ctl-a wrote m1 while not holding",
        ),
        (
            "one change written twice",
            vec![
                ("ctl-a", "m1".into(), 20, 200),
                ("ctl-a", "m1".into(), 21, 200),
                ("ctl-b", "m1".into(), 70, 200),
            ],
            good_conds.clone(),
            "m1: 3 writes",
        ),
        (
            "a flap through the failover",
            vec![
                ("ctl-a", "m1".into(), 20, 200),
                ("ctl-a", "m1".into(), 30, 200),
                ("ctl-b", "m1".into(), 70, 200),
            ],
            [("m1".to_string(), vec![c("True"), c("Unknown"), c("True")])].into(),
            "m1 flapped",
        ),
        (
            "left False",
            vec![("ctl-a", "m1".into(), 20, 200)],
            [("m1".to_string(), vec![c("False")])].into(),
            "m1 did not end True",
        ),
    ];
    for (what, writes, conds, want) in cases {
        let faults = rollout_faults(&writes, &holders, &conds);
        assert!(
            faults.iter().any(|f| f.contains(want)),
            "{what}: {faults:?}"
        );
    }
}

/// The rollout with two replicas under deploy/'s RBAC, the leader SIGKILLed
/// while the first new Machine is held and the limit raised while no one
/// leads: one writer at a time (by the audit log and the Lease's history
/// in it), the standby leading within 20 s, one write per change of a
/// condition, no condition leaving True, and no old Machine deleted before
/// the limit was raised.
#[test]
fn two_replicas_under_deploys_rbac_hold_the_rollout_through_a_failover() {
    let mut env = Env::start();
    // examples/rollout/'s gate: the only test of this binary on the
    // clusters, the default condition type is its own.
    env.ty = TY.to_string();
    apply_deploy(&env.mgmt);
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rollout");
    for f in [
        "machine-templates.yaml",
        "talosconfigtemplates.yaml",
        "machinedeployment.yaml",
    ] {
        env.mgmt.kubectl_ok(
            &[
                "apply",
                "--server-side",
                "-n",
                &env.ns,
                "-f",
                example.join(f).to_str().unwrap(),
            ],
            None,
        );
    }
    let mut tokens = BTreeMap::new();
    let mut kubeconfigs = BTreeMap::new();
    for pod in ["ctl-a", "ctl-b"] {
        let token = env.mgmt.service_account_token(DEPLOY_NS, SA_NAME);
        tokens.insert(jti(&token), pod);
        kubeconfigs.insert(
            pod,
            env.mgmt
                .token_kubeconfig(&token, &env.dir.path().join(format!("{pod}.kubeconfig"))),
        );
    }
    let replica = |pod: &str| {
        Controller::spawn_env(
            &kubeconfigs[pod],
            &[
                "--leader-elect=true",
                "--leader-elect-resource-namespace",
                DEPLOY_NS,
                "--stale-after",
                "15m",
            ],
            &[("POD_NAME", pod)],
        )
    };
    let mark = env.mgmt.audit_mark();
    let played = Mutex::new(Played::default());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                play(&env, &played);
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(&env, &played, &replica, &tokens, mark)
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    });
}

fn run(
    env: &Env,
    played: &Mutex<Played>,
    replica: &dyn Fn(&str) -> Controller,
    tokens: &BTreeMap<String, &str>,
    mark: cluster::AuditMark,
) {
    let mut replicas: BTreeMap<&str, Controller> = BTreeMap::new();
    replicas.insert("ctl-a", replica("ctl-a"));
    poll(Duration::from_secs(30), "ctl-a leads", || {
        holder(env).as_deref() == Some("ctl-a")
    });
    replicas.insert("ctl-b", replica("ctl-b"));
    // The old pool: 2 Machines Ready, their gates True.
    let start = Instant::now();
    let old: BTreeSet<String> = loop {
        let ms = machines(env);
        let ready: BTreeSet<String> = ms
            .iter()
            .filter(|(_, (g, del, m))| g.as_deref() == Some("True") && !del && ready_since(m))
            .map(|(n, _)| n.clone())
            .collect();
        if ready.len() == REPLICAS && ms.len() == REPLICAS {
            break ready;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the old pool never came up: {:?}\n{}",
            ms.iter()
                .map(|(n, (g, d, _))| (n, g, d))
                .collect::<Vec<_>>(),
            env.capi_log_tail()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("old pool Ready after {:?}: {old:?}", start.elapsed());
    env.mgmt.write(
        "PATCH",
        &format!("{CAPI}/namespaces/{}/machinedeployments/workers", env.ns),
        MERGE,
        &json!({"spec": {"template": {"spec": {"bootstrap": {"configRef": {"name": "workers-userns"}}}}}}),
    );
    let rolled = Instant::now();
    let mut killed: Option<(Instant, &str)> = None;
    let mut took_over: Option<Duration> = None;
    let mut raised_at: Option<Instant> = None;
    let mut deleted: Vec<(String, Duration)> = Vec::new();
    let mut first_true_after_raise: Option<Duration> = None;
    let mut history: BTreeMap<String, Vec<String>> = BTreeMap::new();
    loop {
        assert!(
            rolled.elapsed() < Duration::from_secs(300),
            "the rollout did not complete: {history:?} deleted {deleted:?}\n{}",
            env.capi_log_tail()
        );
        let ms = machines(env);
        let held = played.lock().unwrap().held.clone();
        for (n, (g, del, _)) in &ms {
            if old.contains(n) {
                if !del {
                    assert_eq!(g.as_deref(), Some("True"), "{n} left True");
                }
                if *del && !deleted.iter().any(|(d, _)| d == n) {
                    assert!(
                        raised_at.is_some(),
                        "{n} deleted while the first new node's agent is at 0 ({:?})",
                        rolled.elapsed()
                    );
                    deleted.push((n.clone(), rolled.elapsed()));
                }
            } else if let Some(g) = g {
                let h = history.entry(n.clone()).or_default();
                if h.last() != Some(g) {
                    h.push(g.clone());
                    if g == "True" && held.as_deref() == Some(n.as_str()) {
                        first_true_after_raise = raised_at.map(|t| t.elapsed());
                    }
                }
            }
        }
        let new_ready = ms
            .iter()
            .filter(|(n, (g, del, m))| {
                !old.contains(*n) && !del && g.as_deref() == Some("True") && ready_since(m)
            })
            .count();
        if new_ready == REPLICAS && ms.keys().all(|n| !old.contains(n)) {
            break;
        }
        match killed {
            None if held
                .as_deref()
                .is_some_and(|h| ms.get(h).and_then(|m| m.0.as_deref()) == Some("False")) =>
            {
                let leader = holder(env).expect("no leader");
                let pod = if leader == "ctl-a" { "ctl-a" } else { "ctl-b" };
                replicas.remove(pod).unwrap().kill(); // SIGKILL
                let other = if pod == "ctl-a" { "ctl-b" } else { "ctl-a" };
                killed = Some((Instant::now(), other));
                eprintln!("{pod} SIGKILLed {:?} into the rollout", rolled.elapsed());
            }
            Some((at, other)) => {
                if took_over.is_none() {
                    if holder(env).as_deref() == Some(other) {
                        took_over = Some(at.elapsed());
                    }
                    assert!(
                        at.elapsed() < Duration::from_secs(20),
                        "{other} did not take over within 20 s of the SIGKILL"
                    );
                }
                if raised_at.is_none() && at.elapsed() >= Duration::from_secs(3) {
                    played.lock().unwrap().raised = true;
                    raised_at = Some(Instant::now());
                }
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = rolled.elapsed();
    // Settle: anything still to be written lands, and nothing more.
    std::thread::sleep(Duration::from_secs(2));
    let (_, successor) = killed.expect("the leader was never killed");
    let failover = took_over.expect("no takeover");
    let held = played.lock().unwrap().held.clone().unwrap();

    // The audit log, in its order: the Lease's holders and the Machine
    // status writes of both replicas.
    let log = env.mgmt.audit_writes_since(mark, |e| {
        by_controller(e)
            && ((e["objectRef"]["resource"] == "leases" && e["objectRef"]["name"] == LEASE)
                || (e["objectRef"]["resource"] == "machines"
                    && e["objectRef"]["subresource"] == "status"
                    && e["objectRef"]["namespace"] == env.ns.as_str()))
    });
    let denied: Vec<String> = log
        .iter()
        .filter(|e| code(e) == 403)
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert!(
        denied.is_empty(),
        "deploy/ does not grant what the controller needs: {denied:?}"
    );
    let mut holders: Vec<(u64, String)> = Vec::new();
    let mut writes: Vec<Write<'_>> = Vec::new();
    let mut conds: Conds = BTreeMap::new();
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e["user"]["username"], SA_USER, "{e:#}");
        let cred = cluster::credential_id(e).unwrap_or_default();
        let pod = *tokens
            .get(cred)
            .unwrap_or_else(|| panic!("an unknown token: {e:#}"));
        let ok = matches!(code(e), 200 | 201);
        if e["objectRef"]["resource"] == "leases" {
            if ok {
                let h = e["requestObject"]["spec"]["holderIdentity"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| pod.to_string());
                holders.push((i as u64, h));
            }
            continue;
        }
        let name = e["objectRef"]["name"].as_str().unwrap().to_string();
        writes.push((pod, name.clone(), i as u64, code(e) as u16));
        if ok {
            if let Some((s, r, m, _)) = condition_of(&e["requestObject"], TY) {
                let seq = conds.entry(name).or_default();
                let now = (s, r, m);
                if seq.last() != Some(&now) {
                    seq.push(now);
                }
            }
        }
    }
    eprintln!(
        "two replicas: {successor} leading {:.1} s after the SIGKILL; rollout done {done:?} after it began; conditions {conds:?}",
        failover.as_secs_f64()
    );
    assert!(
        failover <= Duration::from_secs(20),
        "failover took {failover:?}"
    );
    let faults = rollout_faults(&writes, &holders, &conds);
    assert!(
        faults.is_empty(),
        "{faults:#?}\nwrites {writes:?}\nholders {holders:?}\nconditions {conds:?}"
    );
    let by = |p: &str| writes.iter().filter(|w| w.0 == p).count();
    assert!(by("ctl-a") > 0 && by(successor) > 0, "{writes:?}");
    assert!(
        writes.iter().any(|w| w.0 == successor && w.1 == held),
        "the new leader did not write {held}'s change: {writes:?}"
    );
    let mut statuses: Vec<&str> = conds[&held].iter().map(|c| c.0.as_str()).collect();
    statuses.dedup();
    assert_eq!(statuses, ["Unknown", "False", "True"], "{:?}", conds[&held]);
    assert_eq!(deleted.len(), REPLICAS, "{deleted:?}");
    for (m, h) in &history {
        assert_eq!(h.last().map(String::as_str), Some("True"), "{m}: {h:?}");
    }
    let t = first_true_after_raise.expect("the held Machine never turned True after the raise");
    // Within the failover bound: the raise may land before the successor leads.
    assert!(
        t < Duration::from_secs(25),
        "{held} True {t:?} after its Node"
    );
}
