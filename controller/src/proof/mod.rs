//! The pod proof: before a Machine of a pool that asks for it
//! ([`request`]) is declared ready, the node's own kubelet runs one pod per
//! requested combination (`hostUsers: false`, a RuntimeClass, or both) on
//! it, through the node's own CNI, admission and runtime. The agent's
//! verdict predicts that outcome; the pod is the outcome.
//!
//! One call, [`gate`], made by the reconcile with the decision it reached:
//! it passes every decision through unchanged but a `True` for a pool that
//! asks for a proof, which it holds until the pods ran on the Node's
//! current boot (then `True`/`SandboxProven`, the boot recorded in the
//! message so a restarted controller or a new leader does not prove again),
//! turns `False` with kubelet's words when one cannot run, or `Unknown`
//! with the reason when the controller cannot tell. [`sweep`], on the
//! resync tick, deletes every proof pod no running proof owns (a previous
//! leader's, a deleted Machine's, a deselected pool's). I/O; the pod and
//! its judging are [`pod`], the pool's request [`request`].
//!
//! What it writes in a workload cluster: the namespace
//! [`NAMESPACE`] once, then per proof one create and one delete per pod;
//! it reads pods there and kubelet's Events about them. It lists and
//! deletes only pods with its label in its namespace.

pub mod pod;
pub mod request;

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace, Pod};
use kube::{
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
    Api, Client, ResourceExt,
};
use serde_json::{json, Value};

use crate::{
    condition::{Decision, NodeSeen, Status, Verdict},
    context::{Context, Key},
    machine::MachineView,
    patch::Existing,
    qps::timed,
    workload::Lookup,
};

use self::{
    pod::Outcome,
    request::{Combo, Request},
};

/// The workload cluster namespace of the proof pods (created if missing,
/// labelled for the `restricted` Pod Security level).
pub const NAMESPACE: &str = "sandbox-readiness-proof";

pub const SANDBOX_PROVEN: &str = "SandboxProven";
pub const PROOF_FAILED: &str = "ProofFailed";
pub const PROOF_IN_PROGRESS: &str = "ProofInProgress";
pub const PROOF_REFUSED: &str = "ProofRefused";
pub const PROOF_NOT_RUN: &str = "ProofNotRun";
pub const PROOF_REQUEST_INVALID: &str = "ProofRequestInvalid";
pub const PROOF_NAMESPACE_TERMINATING: &str = "ProofNamespaceTerminating";
pub use pod::{PROOF_IMAGE_UNAVAILABLE, PROOF_INTERRUPTED, PROOF_TIMED_OUT};

/// While a proof runs, its Machine is looked at again this often.
const POLL: Duration = Duration::from_secs(1);
/// A proof undecided this long after it started is `Unknown` (the pod's
/// own deadline, and time for kubelet to say so).
const GIVE_UP: Duration = Duration::from_secs(pod::DEADLINE_SECONDS + 30);
/// A proof that did not prove is run again after this, doubled for each
/// such result in a row up to [`RETRY_MAX`]; a new boot runs it at once.
const RETRY: Duration = Duration::from_secs(30);
const RETRY_MAX: Duration = Duration::from_secs(600);
/// A running proof not looked at for this long no longer owns its pods
/// (its Machine was deleted or deselected): [`sweep`] deletes them.
const OWNED_FOR: Duration = Duration::from_secs(30);

/// The delay before proof `results` (1 after the first result that did
/// not prove) is run again. Pure.
pub fn retry_after(results: u32) -> Duration {
    let doublings = results.saturating_sub(1).min(16);
    RETRY.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// What the Machine's message starts with once proven: the boot and the
/// pods. A restarted controller reads it back from the Machine.
pub fn record(boot: &str, req: &Request) -> String {
    format!("proven on boot {boot} by pods {}", req.names())
}

/// Whether the Machine's condition already holds this proof.
pub fn proven(old: Option<&Existing>, boot: &str, req: &Request) -> bool {
    old.is_some_and(|o| {
        o.status == Some(Status::True)
            && o.reason == SANDBOX_PROVEN
            && o.message.starts_with(&format!("{}; ", record(boot, req)))
    })
}

fn verdict(status: Status, reason: &str, message: String) -> Verdict {
    Verdict {
        status,
        reason: reason.into(),
        message: crate::condition::bound(message),
    }
}

/// A running proof, or the last result of one that did not prove.
enum Entry {
    Running {
        boot: String,
        started: Instant,
        touched: Instant,
        /// Combination (as the annotation names it) → the pod this proof
        /// created or took over (a previous leader's) for it.
        pods: HashMap<String, String>,
        /// Results that did not prove before this run.
        results: u32,
    },
    Settled {
        boot: String,
        request: Request,
        verdict: Verdict,
        retry_at: Instant,
        results: u32,
    },
}

impl Entry {
    /// Results that did not prove, in a row, before or up to this entry.
    fn results(&self) -> u32 {
        match self {
            Entry::Running { results, .. } | Entry::Settled { results, .. } => *results,
        }
    }
}

/// The proofs of this process, per Machine.
#[derive(Default)]
pub struct Proofs {
    entries: Mutex<HashMap<Key, Entry>>,
    /// Workload clusters whose namespace was seen (or made) in this process.
    namespaces: Mutex<HashSet<Key>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Proofs {
    /// Forgets the Machines `keep` refuses (on the resync tick).
    pub fn retain(&self, keep: impl Fn(&Key) -> bool) {
        lock(&self.entries).retain(|k, _| keep(k));
    }

    fn forget(&self, k: &Key) {
        lock(&self.entries).remove(k);
    }

    /// Running proofs (looked at within [`OWNED_FOR`]) and their pods.
    fn owned_pods(&self) -> HashSet<String> {
        lock(&self.entries)
            .values()
            .filter_map(|e| match e {
                Entry::Running { touched, pods, .. } if touched.elapsed() < OWNED_FOR => {
                    Some(pods.values())
                }
                _ => None,
            })
            .flatten()
            .cloned()
            .collect()
    }

    /// A result for this boot and request not yet due to be run again.
    fn settled(&self, k: &Key, boot: &str, req: &Request) -> Option<(Verdict, Duration)> {
        match lock(&self.entries).get(k) {
            Some(Entry::Settled {
                boot: b,
                request,
                verdict,
                retry_at,
                ..
            }) if b == boot && request == req => retry_at
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .map(|d| (verdict.clone(), d)),
            _ => None,
        }
    }

    /// The running proof of `k` on `boot`, started now if there is none.
    fn running(&self, k: &Key, boot: &str) -> (Instant, HashMap<String, String>) {
        let mut m = lock(&self.entries);
        let now = Instant::now();
        if let Some(Entry::Running {
            boot: b,
            started,
            touched,
            pods,
            ..
        }) = m.get_mut(k)
        {
            if b == boot {
                *touched = now;
                return (*started, pods.clone());
            }
        }
        let results = m.get(k).map_or(0, Entry::results);
        m.insert(
            k.clone(),
            Entry::Running {
                boot: boot.into(),
                started: now,
                touched: now,
                pods: HashMap::new(),
                results,
            },
        );
        (now, HashMap::new())
    }

    fn own(&self, k: &Key, combo: &Combo, pod: &str) {
        if let Some(Entry::Running { pods, .. }) = lock(&self.entries).get_mut(k) {
            pods.insert(combo.name(), pod.to_string());
        }
    }

    fn disown(&self, k: &Key, combo: &Combo) {
        if let Some(Entry::Running { pods, .. }) = lock(&self.entries).get_mut(k) {
            pods.remove(&combo.name());
        }
    }

    /// The pods a running proof of `k` owns now.
    fn pods_of(&self, k: &Key) -> Vec<String> {
        match lock(&self.entries).get(k) {
            Some(Entry::Running { pods, .. }) => pods.values().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Ends the running proof of `k`: a result that did not prove is kept
    /// until it is due again (the count of such results in a row grows); a
    /// proof forgets them.
    fn settle(&self, k: &Key, boot: &str, req: &Request, v: &Verdict) -> u32 {
        let mut m = lock(&self.entries);
        let before = m.get(k).map_or(0, Entry::results);
        if v.status == Status::True {
            m.remove(k);
            return 0;
        }
        let results = before.saturating_add(1);
        m.insert(
            k.clone(),
            Entry::Settled {
                boot: boot.into(),
                request: req.clone(),
                verdict: v.clone(),
                retry_at: Instant::now() + retry_after(results),
                results,
            },
        );
        results
    }
}

/// The pool's request: the Machine's MachineDeployment's annotations.
fn request_of(
    ctx: &Context,
    ns: &str,
    deployment: Option<&str>,
) -> Result<Option<Request>, String> {
    let Some(d) = deployment.and_then(|d| ctx.deployment(ns, d)) else {
        return Ok(None);
    };
    let a = d.metadata.annotations.as_ref();
    let get = |k: &str| a.and_then(|a| a.get(k)).map(String::as_str);
    request::parse(
        get(request::PROVE_ANNOTATION),
        get(request::IMAGE_ANNOTATION),
    )
}

/// One line about a workload API error: code and reason, the tenant's
/// text cleaned and cut.
fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!(
            "{} {}: {}",
            s.code,
            s.reason,
            sandbox_readiness::text::clean_capped(&s.message, 300)
        ),
        other => sandbox_readiness::text::clean_capped(&other.to_string(), 200),
    }
}

/// The reconcile's decision, held or replaced by the proof where the
/// pool asks for one; and how soon to look again for the proof's sake.
pub async fn gate(
    ctx: &Context,
    k: &Key,
    machine: &DynamicObject,
    v: &MachineView<'_>,
    seen: &NodeSeen,
    old: Option<&Existing>,
    decision: Decision,
) -> (Decision, Option<Duration>) {
    let (Decision::Write(said), NodeSeen::Node { node, .. }, Some(cluster)) =
        (&decision, seen, v.cluster)
    else {
        return (decision, None);
    };
    if said.status != Status::True {
        ctx.proofs.forget(k);
        return (decision, None);
    }
    let req = match request_of(ctx, &k.0, v.deployment) {
        Ok(Some(r)) => r,
        Ok(None) => {
            ctx.proofs.forget(k);
            return (decision, None);
        }
        Err(why) => {
            ctx.proofs.forget(k);
            return (
                Decision::Write(verdict(Status::Unknown, PROOF_REQUEST_INVALID, why)),
                None,
            );
        }
    };
    let (client, n) = {
        let w = ctx.workload(&k.0, cluster);
        let w = w.lock().await;
        (w.client(), w.lookup(node, &ctx.settings.condition_type))
    };
    let (Some(client), Lookup::Node(n)) = (client, n) else {
        return (Decision::Keep, Some(POLL));
    };
    let boot = n.boot_id().to_string();
    let node_uid = n.uid.clone();
    if boot.is_empty() || node_uid.is_empty() {
        return (
            Decision::Write(verdict(
                Status::Unknown,
                PROOF_NOT_RUN,
                format!("Node {node} reports no bootID (status.nodeInfo.bootID): a proof holds for one boot"),
            )),
            None,
        );
    }
    let done = |boot: &str| {
        verdict(
            Status::True,
            SANDBOX_PROVEN,
            format!("{}; {}", record(boot, &req), said.message),
        )
    };
    if proven(old, &boot, &req) {
        return (Decision::Write(done(&boot)), None);
    }
    if let Some((v, wait)) = ctx.proofs.settled(k, &boot, &req) {
        return (Decision::Write(v), Some(wait));
    }
    // A standby proves nothing: it looks at every Machine again when it
    // becomes the leader.
    if !ctx.gate.may_write() {
        return (Decision::Keep, None);
    }
    let uid = machine.uid().unwrap_or_default();
    let target = Target {
        k,
        cluster: (k.0.clone(), cluster.to_string()),
        machine_uid: &uid,
        node,
        node_uid: &node_uid,
        boot: &boot,
        req: &req,
    };
    match prove(ctx, &client, &target).await {
        None => {
            // While it runs, the proof of an earlier boot must not stand.
            // Any other True (the agent's before the pool asked for a proof,
            // this boot's proof of another request) stands until the result:
            // turning the proof on for a running pool makes no Machine
            // unready.
            let earlier_boot = old.is_some_and(|o| {
                o.status == Some(Status::True)
                    && o.reason == SANDBOX_PROVEN
                    && !o.message.starts_with(&format!("proven on boot {boot} "))
            });
            let held = if earlier_boot {
                Decision::Write(verdict(
                    Status::Unknown,
                    PROOF_IN_PROGRESS,
                    format!(
                        "proving boot {boot} of Node {node} with pods {}",
                        req.names()
                    ),
                ))
            } else {
                Decision::Keep
            };
            (held, Some(POLL))
        }
        Some((result, started)) => {
            let result = if result.status == Status::True {
                done(&boot)
            } else {
                result
            };
            finish(ctx, &client, &target, machine, &result, started).await;
            let results = ctx.proofs.settle(k, &boot, &req, &result);
            let again = (results > 0).then(|| retry_after(results));
            (Decision::Write(result), again)
        }
    }
}

/// One proof's subject.
struct Target<'a> {
    k: &'a Key,
    cluster: Key,
    machine_uid: &'a str,
    node: &'a str,
    node_uid: &'a str,
    boot: &'a str,
    req: &'a Request,
}

/// Makes sure the namespace exists (once per workload cluster and process).
async fn namespace(ctx: &Context, client: &Client, cluster: &Key) -> Result<(), Verdict> {
    if lock(&ctx.proofs.namespaces).contains(cluster) {
        return Ok(());
    }
    let api: Api<Namespace> = Api::all(client.clone());
    let not_run = |e: &kube::Error| {
        verdict(
            Status::Unknown,
            PROOF_NOT_RUN,
            format!("reading namespace {NAMESPACE} failed: {}", api_error(e)),
        )
    };
    match timed(api.get_opt(NAMESPACE)).await {
        Ok(Some(ns)) => {
            if ns.metadata.deletion_timestamp.is_some() {
                return Err(verdict(
                    Status::Unknown,
                    PROOF_NAMESPACE_TERMINATING,
                    format!(
                        "namespace {NAMESPACE} is being deleted; the proof waits until it is gone"
                    ),
                ));
            }
        }
        Ok(None) => {
            let ns: Namespace = serde_json::from_value(json!({
                "metadata": {"name": NAMESPACE, "labels": {
                    pod::MANAGED_BY.0: pod::MANAGED_BY.1,
                    "pod-security.kubernetes.io/enforce": "restricted"}}
            }))
            .map_err(|e| verdict(Status::Unknown, PROOF_NOT_RUN, e.to_string()))?;
            match timed(api.create(&PostParams::default(), &ns)).await {
                Ok(_) => ctx.metrics.proof_write("create"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(not_run(&e)),
            }
        }
        Err(e) => return Err(not_run(&e)),
    }
    lock(&ctx.proofs.namespaces).insert(cluster.clone());
    Ok(())
}

/// One round of a proof: `None` while it runs, else its result (the
/// message of a proof's `True` is made by the caller) and when it started.
async fn prove(ctx: &Context, client: &Client, t: &Target<'_>) -> Option<(Verdict, Instant)> {
    let (started, owned) = ctx.proofs.running(t.k, t.boot);
    let started_ok = |v: Verdict| Some((v, started));
    // An API error is not an answer: the proof goes on (the next round
    // tries again) until its time is up, and only then says it could not
    // run, with the last error. An outage of the workload cluster during a
    // proof therefore changes nothing on the Machine.
    let wait = |error: Option<Verdict>| {
        if started.elapsed() < GIVE_UP {
            if let Some(e) = &error {
                tracing::debug!(machine = %format!("{}/{}", t.k.0, t.k.1), error = %e.message, "proof round failed; trying again");
            }
            return None;
        }
        Some((
            error.unwrap_or_else(|| {
                verdict(
                    Status::Unknown,
                    PROOF_TIMED_OUT,
                    format!(
                        "kubelet on Node {} did not run or refuse the pods {} within {} s",
                        t.node,
                        t.req.names(),
                        GIVE_UP.as_secs()
                    ),
                )
            }),
            started,
        ))
    };
    match namespace(ctx, client, &t.cluster).await {
        Ok(()) => {}
        Err(v) if v.reason == PROOF_NOT_RUN => return wait(Some(v)),
        Err(v) => return started_ok(v),
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = format!("{}={}", pod::PROOF_OF, pod::proof_of(t.machine_uid));
    let listed = match timed(pods.list(&ListParams::default().labels(&selector))).await {
        Ok(l) => l.items,
        Err(e) => {
            return wait(Some(verdict(
                Status::Unknown,
                PROOF_NOT_RUN,
                format!("listing the proof pods failed: {}", api_error(&e)),
            )))
        }
    };
    let ours = |p: &Pod| {
        p.annotations().get(pod::MACHINE_UID).map(String::as_str) == Some(t.machine_uid)
            && p.labels().get(pod::MANAGED_BY.0).map(String::as_str) == Some(pod::MANAGED_BY.1)
    };
    let ann = |p: &Pod, key: &str| p.annotations().get(key).cloned().unwrap_or_default();
    // This run's pod for a combination: this boot's, not going away (a
    // previous run's pod may still be terminating; it is not waited for).
    let current = |p: &Pod, c: &Combo| {
        ann(p, pod::BOOT) == t.boot
            && ann(p, pod::POD) == c.name()
            && p.metadata.deletion_timestamp.is_none()
    };
    let mine: Vec<&Pod> = listed.iter().filter(|p| ours(p)).collect();
    // Pods of an earlier boot or request of this Machine.
    for p in &mine {
        let wanted = t.req.combos.iter().any(|c| current(p, c));
        if !wanted && p.metadata.deletion_timestamp.is_none() {
            delete(ctx, &pods, &p.name_any()).await;
        }
    }
    let mut outcomes: Vec<(&Combo, Outcome)> = Vec::new();
    for combo in &t.req.combos {
        let found = mine.iter().find(|p| current(p, combo));
        let outcome = match found {
            Some(p) => {
                ctx.proofs.own(t.k, combo, &p.name_any());
                let v = serde_json::to_value(p).unwrap_or(Value::Null);
                match pod::judge(&v, &[]) {
                    Outcome::Pending => pod::judge(&v, &events(client, p).await),
                    o => o,
                }
            }
            None if owned.contains_key(&combo.name()) => Outcome::Unknown {
                reason: PROOF_INTERRUPTED,
                text: "the proof pod was deleted by someone else".into(),
            },
            None => create(ctx, &pods, t, combo).await,
        };
        outcomes.push((combo, outcome));
    }
    let on = |c: &Combo| format!("pod {} on Node {}", c.name(), t.node);
    if let Some((c, reason, text)) = outcomes.iter().find_map(|(c, o)| match o {
        Outcome::Failed { reason, text } => Some((c, reason, text)),
        _ => None,
    }) {
        return started_ok(verdict(
            Status::False,
            PROOF_FAILED,
            format!("{}: {reason}: {text}", on(c)),
        ));
    }
    if let Some((c, reason, text)) = outcomes.iter().find_map(|(c, o)| match o {
        Outcome::Unknown { reason, text } if *reason != PROOF_NOT_RUN => Some((c, *reason, text)),
        _ => None,
    }) {
        return started_ok(verdict(
            Status::Unknown,
            reason,
            format!("{}: {text}", on(c)),
        ));
    }
    let error = outcomes.iter().find_map(|(c, o)| match o {
        Outcome::Unknown { reason, text } => Some(verdict(
            Status::Unknown,
            reason,
            format!("{}: {text}", on(c)),
        )),
        _ => None,
    });
    if error.is_none() && outcomes.iter().all(|(_, o)| *o == Outcome::Running) {
        return started_ok(verdict(Status::True, SANDBOX_PROVEN, String::new()));
    }
    wait(error)
}

/// A pod name's run part: a pod is never created twice under one name, so
/// a run never waits for the previous run's pod to finish terminating.
fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().to_string())
        .unwrap_or_default();
    let n = RUNS.fetch_add(1, Ordering::Relaxed).to_string();
    pod::digest(&[&t, &n])
}

/// kubelet's Events about pod `p` (by its uid).
async fn events(client: &Client, p: &Pod) -> Vec<Value> {
    let Some(uid) = p.uid() else {
        return Vec::new();
    };
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), NAMESPACE);
    let lp = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    match timed(api.list(&lp)).await {
        Ok(l) => l
            .items
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect(),
        // Read again on the next round.
        Err(_) => Vec::new(),
    }
}

async fn create(ctx: &Context, pods: &Api<Pod>, t: &Target<'_>, combo: &Combo) -> Outcome {
    let name = &pod::name(t.machine_uid, t.boot, combo, &nonce());
    let manifest = pod::manifest(&pod::Spec {
        name,
        namespace: NAMESPACE,
        machine: t.k,
        machine_uid: t.machine_uid,
        node: t.node,
        node_uid: t.node_uid,
        boot: t.boot,
        combo,
        image: &t.req.image,
    });
    let p: Pod = match serde_json::from_value(manifest) {
        Ok(p) => p,
        Err(e) => {
            return Outcome::Unknown {
                reason: PROOF_NOT_RUN,
                text: e.to_string(),
            }
        }
    };
    // Owned before it exists: a sweep between the create and the next
    // round must not take it.
    ctx.proofs.own(t.k, combo, name);
    match timed(pods.create(&PostParams::default(), &p)).await {
        Ok(_) => {
            ctx.metrics.proof_write("create");
            tracing::info!(machine = %format!("{}/{}", t.k.0, t.k.1), node = t.node, pod = name, "proof pod created");
            Outcome::Pending
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Outcome::Pending,
        // A namespace just made has no ServiceAccount until the workload's
        // controller-manager makes it (about a second): not a refusal.
        Err(kube::Error::Api(s))
            if s.code == 403
                && s.message.contains("serviceaccount")
                && s.message.contains("not found") =>
        {
            ctx.proofs.disown(t.k, combo);
            Outcome::Pending
        }
        // Refused by admission (Pod Security, a policy, a webhook, a
        // quota) or invalid for this cluster: not the node's answer.
        Err(e @ kube::Error::Api(_)) if matches!(&e, kube::Error::Api(s) if matches!(s.code, 400 | 403 | 422)) =>
        {
            if let kube::Error::Api(s) = &e {
                if s.message.contains("being terminated") {
                    lock(&ctx.proofs.namespaces).remove(&t.cluster);
                    return Outcome::Unknown {
                        reason: PROOF_NAMESPACE_TERMINATING,
                        text: format!("namespace {NAMESPACE} is being deleted: {}", api_error(&e)),
                    };
                }
            }
            Outcome::Unknown {
                reason: PROOF_REFUSED,
                text: format!("the workload cluster refused the pod: {}", api_error(&e)),
            }
        }
        Err(e) => {
            // Not made (as far as anyone knows): the next round's create is
            // not an interruption.
            ctx.proofs.disown(t.k, combo);
            if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                lock(&ctx.proofs.namespaces).remove(&t.cluster);
            }
            Outcome::Unknown {
                reason: PROOF_NOT_RUN,
                text: format!("creating the pod failed: {}", api_error(&e)),
            }
        }
    }
}

async fn delete(ctx: &Context, pods: &Api<Pod>, name: &str) {
    match timed(pods.delete(name, &DeleteParams::default())).await {
        Ok(_) => ctx.metrics.proof_write("delete"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            tracing::warn!(pod = name, error = %api_error(&e), "deleting a proof pod failed; the sweep tries again")
        }
    }
}

/// A proof's end: its pods deleted, its Event, its metrics.
async fn finish(
    ctx: &Context,
    client: &Client,
    t: &Target<'_>,
    machine: &DynamicObject,
    result: &Verdict,
    started: Instant,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for name in ctx.proofs.pods_of(t.k) {
        delete(ctx, &pods, &name).await;
    }
    let outcome = match result.status {
        Status::True => "proven",
        Status::False => "failed",
        Status::Unknown => "unknown",
    };
    ctx.metrics.proof_done(outcome, started.elapsed());
    tracing::info!(
        machine = %format!("{}/{}", t.k.0, t.k.1),
        node = t.node,
        boot = t.boot,
        outcome,
        reason = %result.reason,
        took = %humantime::format_duration(Duration::from_millis(started.elapsed().as_millis() as u64)),
        "proof ended"
    );
    let ty = if result.status == Status::True {
        "Normal"
    } else {
        "Warning"
    };
    crate::reconcile::event(
        ctx,
        machine,
        ty,
        &result.reason,
        &result.message,
        "ProveSandbox",
    )
    .await;
}

/// Deletes every proof pod no running proof owns, in every workload
/// cluster the controller reaches: a previous leader's, a deleted
/// Machine's, a deselected pool's, one whose delete failed. The leader
/// only; on the resync tick.
pub async fn sweep(ctx: &Context) {
    if !ctx.gate.may_write() {
        return;
    }
    let owned = ctx.proofs.owned_pods();
    for (cluster, client) in ctx.workload_clients().await {
        let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let selector = format!("{}={}", pod::MANAGED_BY.0, pod::MANAGED_BY.1);
        let listed = match timed(pods.list(&ListParams::default().labels(&selector))).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => {
                tracing::debug!(cluster = %format!("{}/{}", cluster.0, cluster.1), error = %api_error(&e), "listing proof pods failed");
                continue;
            }
        };
        for p in listed {
            let name = p.name_any();
            if !owned.contains(&name) && p.metadata.deletion_timestamp.is_none() {
                tracing::info!(cluster = %format!("{}/{}", cluster.0, cluster.1), pod = %name, "deleting a proof pod no proof owns");
                delete(ctx, &pods, &name).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_that_did_not_prove_is_run_again_less_and_less_often() {
        let got: Vec<u64> = (1..=7).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(got, [30, 60, 120, 240, 480, 600, 600]);
        assert_eq!(retry_after(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn the_machine_holds_a_proof_for_one_boot_and_one_request() {
        let req = request::parse(Some("default+userns"), None)
            .unwrap()
            .unwrap();
        let other = request::parse(Some("gvisor"), None).unwrap().unwrap();
        let old = |status: Status, reason: &str, message: String| Existing {
            status: Some(status),
            reason: reason.into(),
            message,
            observed_generation: None,
            last_transition_time: None,
        };
        let held = old(
            Status::True,
            SANDBOX_PROVEN,
            format!("{}; ready", record("b1", &req)),
        );
        assert!(proven(Some(&held), "b1", &req));
        // A reboot, another request, another status: proven again.
        assert!(!proven(Some(&held), "b2", &req));
        assert!(!proven(Some(&held), "b1", &other));
        let f = old(
            Status::False,
            SANDBOX_PROVEN,
            format!("{}; x", record("b1", &req)),
        );
        assert!(!proven(Some(&f), "b1", &req));
        // The agent's True alone is not a proof.
        assert!(!proven(
            Some(&old(Status::True, "Converged", record("b1", &req))),
            "b1",
            &req
        ));
        assert!(!proven(None, "b1", &req));
        // A boot id that is a prefix of another is not it.
        assert!(!proven(Some(&held), "b", &req));
    }

    #[test]
    fn a_running_proof_owns_its_pods_until_it_settles() {
        let p = Proofs::default();
        let k: Key = ("ns".into(), "m1".into());
        let req = request::parse(Some("gvisor"), None).unwrap().unwrap();
        let (_, owned) = p.running(&k, "b1");
        assert!(owned.is_empty());
        let gvisor = req.combos[0].clone();
        p.own(&k, &gvisor, "sr-proof-x-gvisor");
        assert!(p.owned_pods().contains("sr-proof-x-gvisor"));
        assert_eq!(p.pods_of(&k), ["sr-proof-x-gvisor"]);
        p.disown(&k, &gvisor);
        assert!(p.owned_pods().is_empty());
        p.own(&k, &gvisor, "sr-proof-x-gvisor");
        let failed = verdict(Status::False, PROOF_FAILED, "x".into());
        assert_eq!(p.settle(&k, "b1", &req, &failed), 1);
        assert!(p.owned_pods().is_empty());
        let (v, wait) = p.settled(&k, "b1", &req).unwrap();
        assert_eq!(v, failed);
        assert!(wait <= RETRY && wait > RETRY - Duration::from_secs(5));
        // Another boot is not held by it.
        assert!(p.settled(&k, "b2", &req).is_none());
        // The next run counts on from it.
        p.running(&k, "b2");
        assert_eq!(p.settle(&k, "b2", &req, &failed), 2);
        let ok = verdict(Status::True, SANDBOX_PROVEN, String::new());
        p.running(&k, "b2");
        assert_eq!(p.settle(&k, "b2", &req, &ok), 0);
        assert!(p.settled(&k, "b2", &req).is_none());
    }
}
