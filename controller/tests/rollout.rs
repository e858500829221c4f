//! A MachineDeployment rollout played by the test by Cluster API's own
//! rules, with two replicas of the controller under deploy/'s RBAC holding
//! it through the readiness gate across a leader failover.
//!
//! What stays played, and why: the real Cluster API and CABPT roll real
//! agents' pools in tests/capi_rollout.rs (the gate holding a rollout, a
//! stalled one remediated, the controller down, the gate added in place);
//! this file keeps only what those do not show yet — two controller
//! replicas electing a leader through a Lease, each write counted against
//! the Lease holder at that resourceVersion from the stand-in's change
//! log, under the RBAC of deploy/ — until the controller tier moves onto
//! the real control plane.
//!
//! The model (kubernetes-sigs/cluster-api v1.12.0):
//! - `Ready` summarises the Machine's conditions and every
//!   `spec.readinessGates[].conditionType`; a gate condition that is missing
//!   or not True keeps Ready from True (`setReadyCondition`,
//!   internal/controllers/machine/machine_controller_status.go:735, the
//!   gates appended to `forConditionTypes` at :747-752). The model takes
//!   NodeHealthy and the gates.
//! - `Available` is Ready True for `minReadySeconds` since Ready's
//!   lastTransitionTime (`setAvailableCondition`, same file :857, the
//!   `time.Since(readyCondition.LastTransitionTime.Time) - minReadySeconds`
//!   test at :886).
//! - The rolling-update planner scales the new MachineSet up to
//!   `replicas + maxSurge` (`reconcileNewMachineSet`,
//!   internal/controllers/machinedeployment/machinedeployment_rollout_rollingupdate.go:179)
//!   and scales old MachineSets down only while the available Machines stay
//!   at least `minAvailable = replicas - maxUnavailable`
//!   (`reconcileOldMachineSetsRollingUpdate`, same file :216, :224-225).
//!
//! The pool: replicas 2, maxSurge 1, maxUnavailable 0, minReadySeconds 1;
//! the old MachineSet's bootstrap data sets no sysctls, the new one's
//! `user.max_user_namespaces: 11255`. The first new node's agent sees 0
//! for 30 s (SysctlMismatch), then the limit is raised.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant, SystemTime},
};

use common::*;
use serde_json::{json, Value};

const REPLICAS: usize = 2;
const MAX_SURGE: usize = 1;
const MAX_UNAVAILABLE: usize = 0;
const MIN_READY: Duration = Duration::from_secs(1);
const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");

fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(s).ok()
}

/// Cluster API's Machine controller, as far as the rollout needs it:
/// NodeHealthy once the Machine has a Node, Ready from NodeHealthy and
/// the gates, written only when it changes (lastTransitionTime on a status
/// change). Returns (name, Ready True since) for Machines not deleting.
fn play_machine_controller(env: &Env) -> Vec<(String, Option<SystemTime>, bool)> {
    env.mgmt.with_store(|s| {
        let mut out = Vec::new();
        for mut m in s.list(MACHINE_AV, "Machine") {
            if m["metadata"]["namespace"] != NS {
                continue;
            }
            let name = m["metadata"]["name"].as_str().unwrap().to_string();
            let deleting = m["metadata"].get("deletionTimestamp").is_some();
            let conds: Vec<Value> = m["status"]["conditions"].as_array().cloned().unwrap_or_default();
            let get = |t: &str| conds.iter().find(|c| c["type"] == t).cloned();
            let has_node = m["status"]["nodeRef"]["name"].is_string();
            let node_healthy = if has_node { "True" } else { "Unknown" };
            let gates: Vec<String> = m["spec"]["readinessGates"]
                .as_array()
                .map(|g| g.iter().filter_map(|g| g["conditionType"].as_str().map(String::from)).collect())
                .unwrap_or_default();
            let gates_true = gates.iter().all(|g| get(g).is_some_and(|c| c["status"] == "True"));
            let ready = if node_healthy == "True" && gates_true { "True" } else { "False" };
            let mut changed = false;
            let mut new_conds: Vec<Value> = Vec::new();
            for (ty, status) in [("NodeHealthy", node_healthy), ("Ready", ready)] {
                match get(ty) {
                    Some(c) if c["status"] == status => new_conds.push(c),
                    _ => {
                        changed = true;
                        new_conds.push(json!({"type":ty,"status":status,"reason":if status == "True" {ty} else {"NotReady"},
                            "message":"","lastTransitionTime":now()}));
                    }
                }
            }
            let ready_since = new_conds
                .iter()
                .find(|c| c["type"] == "Ready" && c["status"] == "True")
                .and_then(|c| parse_time(c["lastTransitionTime"].as_str()?));
            if changed {
                let mut all: Vec<Value> =
                    conds.into_iter().filter(|c| c["type"] != "NodeHealthy" && c["type"] != "Ready").collect();
                all.extend(new_conds);
                m["status"]["conditions"] = json!(all);
                m["metadata"].as_object_mut().unwrap().remove("resourceVersion");
                s.put(m).unwrap();
            }
            out.push((name, ready_since, deleting));
        }
        out
    })
}

/// What a played rollout saw.
struct Played {
    /// new Machine → its gate statuses in order (as polled).
    history: HashMap<String, Vec<String>>,
    deleted: Vec<(String, Duration)>,
    first_true_after_raise: Option<Duration>,
    /// From the limit raised to the rollout complete.
    done: Duration,
    /// From the rollout's start to the limit raised.
    raised: Duration,
}

/// Creates the old MachineSet's Machines (True nodes) and waits for them to
/// be written True, by whichever controller runs.
async fn old_machine_set(env: &Env, machines: &mut BTreeMap<String, &'static str>) {
    for i in 1..=REPLICAS {
        let (m, n) = (format!("old-{i}"), format!("w-old-{i}"));
        env.node(&n);
        env.agent_writes(&n, "True", "Converged", &[]);
        let mut obj = machine("md-a", &m, true);
        obj["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
        env.mgmt
            .create(boot_secret(&format!("{m}-boot"), &[]))
            .unwrap();
        env.mgmt.create(obj).unwrap();
        env.set_node_ref(&m, &n);
        machines.insert(m, "old");
    }
}

/// The rollout to the new template (11255), played every 50 ms.
/// `raise(elapsed)` says when new-1's limit is raised; `tick(elapsed)` runs
/// every round (a test kills a replica there).
async fn play_rollout(
    env: &Env,
    mut machines: BTreeMap<String, &'static str>,
    limit: Duration,
    mut raise: impl FnMut(Duration) -> bool,
    mut tick: impl FnMut(Duration),
) -> Played {
    let start = Instant::now();
    let mut next_new = 1;
    let mut provisioning: HashMap<String, Instant> = HashMap::new(); // new Machine → created at
    let mut history: HashMap<String, Vec<String>> = HashMap::new(); // new Machine → its statuses in order
    let mut deleted: Vec<(String, Duration)> = Vec::new();
    let mut raised_at: Option<Instant> = None;
    let mut raised = Duration::ZERO;
    let mut first_true_after_raise: Option<Duration> = None;
    loop {
        tick(start.elapsed());
        assert!(
            start.elapsed() < limit,
            "the rollout did not complete: {history:?} deleted {deleted:?}"
        );
        let view = play_machine_controller(env);
        let now = SystemTime::now();
        let available = |name: &str| {
            view.iter().any(|(n, since, del)| {
                n == name
                    && !del
                    && since.is_some_and(|s| now.duration_since(s).unwrap_or_default() >= MIN_READY)
            })
        };
        let live: Vec<&(String, Option<SystemTime>, bool)> =
            view.iter().filter(|(_, _, d)| !d).collect();
        let old_live: Vec<String> = live
            .iter()
            .filter(|(n, _, _)| machines.get(n) == Some(&"old"))
            .map(|(n, _, _)| n.clone())
            .collect();
        let new_live: Vec<String> = live
            .iter()
            .filter(|(n, _, _)| machines.get(n) == Some(&"new"))
            .map(|(n, _, _)| n.clone())
            .collect();
        let total_available = live.iter().filter(|(n, _, _)| available(n)).count();

        // Old Machines never leave True.
        for m in &old_live {
            assert_eq!(
                env.status(m).as_deref(),
                Some("True"),
                "{m} left True: {:?}",
                env.condition(m)
            );
        }
        // New Machines: record each status change of the gate condition.
        for m in &new_live {
            if let Some(s) = env.status(m) {
                let h = history.entry(m.clone()).or_default();
                if h.last() != Some(&s) {
                    h.push(s.clone());
                    if s == "True" && m == "new-1" {
                        first_true_after_raise = raised_at.map(|t| t.elapsed());
                    }
                }
            }
        }

        if old_live.is_empty()
            && new_live.len() == REPLICAS
            && new_live.iter().all(|m| available(m))
        {
            break;
        }
        // reconcileNewMachineSet: surge up to replicas + maxSurge.
        if new_live.len() < REPLICAS && live.len() < REPLICAS + MAX_SURGE {
            let m = format!("new-{next_new}");
            next_new += 1;
            let mut obj = machine("md-a", &m, true);
            obj["metadata"]["labels"]["cluster.x-k8s.io/set-name"] = json!("md-a-new");
            env.mgmt
                .create(boot_secret(&format!("{m}-boot"), &[SYSCTL]))
                .unwrap();
            env.mgmt.create(obj).unwrap();
            machines.insert(m.clone(), "new");
            provisioning.insert(m, Instant::now());
        }
        // Provisioned after 300 ms: the Node registers, nodeRef is set, the
        // agent writes its first verdict: 0 for the first new worker until
        // the limit is raised; later workers boot converged.
        for (m, t) in provisioning.clone() {
            if t.elapsed() >= Duration::from_millis(300) {
                let n = format!("w-{m}");
                env.node(&n);
                env.set_node_ref(&m, &n);
                if m == "new-1" {
                    env.agent_writes(&n, "False", "SysctlMismatch", &[SYSCTL]);
                } else {
                    env.agent_writes(&n, "True", "Converged", &[SYSCTL]);
                }
                provisioning.remove(&m);
            }
        }
        // The limit raised on new-1's node when `raise` says so.
        if raised_at.is_none() && raise(start.elapsed()) && env.status("new-1").is_some() {
            env.agent_writes("w-new-1", "True", "Converged", &[SYSCTL]);
            raised_at = Some(Instant::now());
            raised = start.elapsed();
        } else if raised_at.is_none() && env.wl.get("v1", "Node", "", "w-new-1").is_some() {
            // The stuck agent keeps its heartbeat.
            env.agent_writes("w-new-1", "False", "SysctlMismatch", &[SYSCTL]);
        }
        // reconcileOldMachineSetsRollingUpdate: scale down one old Machine
        // only if the available ones stay >= replicas - maxUnavailable.
        if !old_live.is_empty() && total_available > REPLICAS - MAX_UNAVAILABLE {
            let m = old_live[0].clone();
            assert!(
                raised_at.is_some(),
                "{m} deleted while new-1's agent is at 0 ({:?})",
                start.elapsed()
            );
            env.mgmt.delete(MACHINE_AV, "Machine", NS, &m).unwrap();
            let mut obj = env.mgmt.get(MACHINE_AV, "Machine", NS, &m).unwrap();
            assert!(obj["metadata"]["deletionTimestamp"].is_string());
            obj["metadata"]["finalizers"] = json!([]);
            obj["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            env.mgmt.put(obj).unwrap();
            deleted.push((m, start.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Played {
        history,
        deleted,
        first_true_after_raise,
        done: raised_at.unwrap().elapsed(),
        raised,
    }
}

/// Every change of the Machines' gate condition and of the Lease's holder,
/// in the store's order (its change log, read every round: no transition
/// is missed between polls).
#[derive(Default)]
struct Recorder {
    rv: u64,
    /// (resourceVersion, holderIdentity) at each Lease change.
    holders: Vec<(u64, String)>,
    /// Machine → each (status, reason, message) its gate condition took.
    conds: Conds,
}

impl Recorder {
    fn drain(&mut self, srv: &test_api::TestApiServer) {
        let changes = srv
            .with_store(|s| s.changes_since(self.rv))
            .expect("the change log was compacted under the recorder");
        for c in changes {
            self.rv = c.rv;
            if c.key.plural == "leases" && c.key.namespace == DEPLOY_NS {
                let h = c.obj["spec"]["holderIdentity"].as_str().unwrap_or("");
                self.holders.push((c.rv, h.to_string()));
            } else if c.key.plural == "machines" && c.key.namespace == NS {
                if let Some((s, r, m, _)) = condition_of(&c.obj, TY) {
                    let seq = self.conds.entry(c.key.name.clone()).or_default();
                    if seq.last() != Some(&(s.clone(), r.clone(), m.clone())) {
                        seq.push((s, r, m));
                    }
                }
            }
        }
    }

    /// Who held the Lease at `rv`.
    fn holder_at(&self, rv: u64) -> Option<&str> {
        holder_at(&self.holders, rv)
    }

    fn holder(&self) -> Option<&str> {
        self.holder_at(u64::MAX)
    }
}

/// Who held the Lease at `rv`, from its (resourceVersion, holderIdentity)
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
/// the resourceVersion the server answered at, HTTP status).
type Write<'a> = (&'a str, String, u64, u16);
/// Machine → each (status, reason, message) its gate condition took.
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
    // gate condition, no more (the change log holds every change).
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

/// The same rollout with two replicas under the RBAC deploy/ renders (the
/// ClusterRole, Role and bindings loaded into the management server, each
/// replica with its own token for the ServiceAccount the bindings name),
/// the leader SIGKILLed while new-1 is held and the limit raised while no
/// one leads: one writer at a time (by the request log and the Lease's
/// history in the store), the standby leading within 20 s, one write per
/// change of a condition, and no condition leaving True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_under_deploys_rbac_hold_the_rollout_through_a_failover() {
    use std::cell::{Cell, RefCell};
    const TOKENS: [(&str, &str); 2] = [("sa-token-a", "ctl-a"), ("sa-token-b", "ctl-b")];
    let env = Env::start_rbac(&[TOKENS[0].0, TOKENS[1].0]).await;
    let pod_of = |cred: &str| {
        TOKENS
            .iter()
            .find(|(t, _)| test_api::token_credential(t) == cred)
            .map(|(_, p)| *p)
    };
    env.deployment("md-a", true, true, MIN_READY.as_secs() as u32);
    let mut machines: BTreeMap<String, &str> = BTreeMap::new();
    old_machine_set(&env, &mut machines).await;
    let rec = RefCell::new(Recorder::default());
    let replicas = RefCell::new(vec![
        Some(env.replica(TOKENS[0].0, TOKENS[0].1, &["--stale-after", "15m"])),
        None,
    ]);
    let t0 = Instant::now();
    while rec.borrow().holder() != Some("ctl-a") {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "ctl-a does not lead"
        );
        rec.borrow_mut().drain(&env.mgmt);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    replicas.borrow_mut()[1] =
        Some(env.replica(TOKENS[1].0, TOKENS[1].1, &["--stale-after", "15m"]));
    for i in 1..=REPLICAS {
        env.wait_status(&format!("old-{i}"), "True", Duration::from_secs(20))
            .await;
    }

    // SIGKILL of the leader once new-1 is held False; the limit raised 3 s
    // later, with no leader: the new one has that change to write.
    let killed: Cell<Option<(Duration, Instant, &str)>> = Cell::new(None);
    let took_over: Cell<Option<Duration>> = Cell::new(None);
    let played = play_rollout(
        &env,
        machines,
        Duration::from_secs(90),
        |_| {
            killed
                .get()
                .is_some_and(|(_, at, _)| at.elapsed() >= Duration::from_secs(3))
        },
        |t| {
            let mut r = rec.borrow_mut();
            r.drain(&env.mgmt);
            match killed.get() {
                None if t >= Duration::from_secs(5)
                    && env.status("new-1").as_deref() == Some("False") =>
                {
                    let leader = r.holder().unwrap().to_string();
                    let i = TOKENS.iter().position(|(_, p)| *p == leader).unwrap();
                    replicas.borrow_mut()[i].take().unwrap().kill(); // Child::kill is SIGKILL
                    let other = TOKENS[1 - i].1;
                    killed.set(Some((t, Instant::now(), other)));
                }
                Some((_, at, other)) if took_over.get().is_none() => {
                    if r.holder() == Some(other) {
                        took_over.set(Some(at.elapsed()));
                    }
                    assert!(
                        at.elapsed() < Duration::from_secs(20),
                        "{other} did not take over within 20 s of the SIGKILL"
                    );
                }
                _ => {}
            }
        },
    )
    .await;
    // Settle: anything still to be written lands, and nothing more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut rec = rec.into_inner();
    rec.drain(&env.mgmt);
    let (killed_at, _, successor) = killed.get().expect("the leader was never killed");
    let failover = took_over.get().expect("no takeover");
    eprintln!(
        "two replicas: leader SIGKILLed at {killed_at:?} into the rollout, {successor} leading {:.1} s later; limit raised at {:?}; \
         completed {:?} after; conditions {:?}",
        failover.as_secs_f64(),
        played.raised,
        played.done,
        rec.conds
    );
    assert!(
        failover <= Duration::from_secs(20),
        "failover took {failover:?}"
    );

    // One writer at a time: every Machine status write came from the
    // replica that held the Lease when the server answered it.
    let reqs = env.mgmt.requests();
    let denied: Vec<String> = reqs
        .iter()
        .filter(|r| r.user.as_deref() == Some(SA_USER) && r.status == 403)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        denied.is_empty(),
        "deploy/ does not grant what the controller needs: {denied:?}"
    );
    let writes: Vec<Write<'_>> = reqs
        .iter()
        .filter_map(|r| {
            let name = machine_status_write(r)?;
            assert_eq!(r.user.as_deref(), Some(SA_USER), "{r:?}");
            let pod = pod_of(r.credential.as_deref().unwrap_or("")).unwrap();
            Some((pod, name.to_string(), r.rv, r.status))
        })
        .collect();
    let faults = rollout_faults(&writes, &rec.holders, &rec.conds);
    assert!(
        faults.is_empty(),
        "{faults:#?}\nwrites {writes:?}\nholders {:?}\nconditions {:?}",
        rec.holders,
        rec.conds
    );
    let by = |p: &str| writes.iter().filter(|w| w.0 == p).count();
    assert!(by("ctl-a") > 0 && by(successor) > 0, "{writes:?}");
    assert!(
        writes.iter().any(|w| w.0 == successor && w.1 == "new-1"),
        "the new leader did not write new-1's change: {writes:?}"
    );
    assert_eq!(
        rec.conds["new-1"]
            .iter()
            .map(|c| c.0.as_str())
            .collect::<Vec<_>>(),
        ["Unknown", "False", "True"]
    );
    assert!(
        played.deleted.iter().all(|(_, at)| *at >= played.raised),
        "{:?}",
        played.deleted
    );
    assert_eq!(played.deleted.len(), REPLICAS);
    // Every new Machine's gate, as the played Machine controller saw it
    // polled, ended True; new-1's turned True soon after its Node did.
    for (m, h) in &played.history {
        assert_eq!(h.last().map(String::as_str), Some("True"), "{m}: {h:?}");
    }
    let t = played
        .first_true_after_raise
        .expect("new-1 never turned True after the limit was raised");
    // Within the failover bound: the raise may land before the successor leads.
    assert!(
        t < Duration::from_secs(25),
        "new-1 True {t:?} after its Node"
    );
}
