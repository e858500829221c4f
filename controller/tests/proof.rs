//! The pod proof (controller/src/proof) on real kubelet nodes: each
//! workload Node here is `scripts/kubelet-node.sh`'s (kubelet v1.36.3 on
//! Talos 1.13.9's containerd 2.2.7 and runc 1.4.3, or an older line, with
//! the gVisor extension's files present, absent or broken), joined to a
//! workload cluster of the test's own; Cluster API is real and sets each
//! Machine's nodeRef from the Node's providerID. The agent's condition is
//! written by the test (True: the agent's verdict is the proof's input,
//! not what is judged here), so every refusal below is kubelet's alone.
//!
//! Not here, because this machine cannot show it (docs/developer/kubelet-matrix.md):
//! a runsc pod that runs (the gVisor shim needs CAP_SYS_RESOURCE, which
//! this VM's root lacks: every runsc pod fails here), the host's
//! `user.max_user_namespaces` at 0 (not writable here), and a reboot (one
//! boot for every node of this VM: the boot rule is held by the unit tests
//! of `proof::proven`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    by_controller, code, kubelet::KubeletNode, machine_status_write, poll, provider_id, AuditEvent,
    Env, CAPI, MERGE,
};
use serde_json::{json, Value};

const NS: &str = "sandbox-readiness-proof";
const PROVE: &str = "sandbox-readiness.io/prove";

/// A kubelet node for Machine `short` of `env`: up, its Node given the
/// providerID the Machine's infrastructure reports (kubelet's
/// `--provider-id`; set once, as the API allows).
fn node(env: &Env, short: &str, opts: &[&str]) -> KubeletNode {
    let name = env.node_name(short);
    let n = KubeletNode::up(&env.wl, &name, opts);
    env.wl.write(
        "PATCH",
        &format!("/api/v1/nodes/{name}"),
        MERGE,
        &json!({"spec":{"providerID":provider_id(&name)}}),
    );
    n
}

/// A pool `md` asking for `prove`, and its Machine `machine` on Node `short`
/// (CAPI sets the nodeRef), the agent saying True there.
fn pool(env: &Env, md: &str, machine: &str, short: &str, prove: &str) {
    env.deployment(md, true, true, 0);
    set_prove(env, md, prove);
    env.machine(md, machine, true, &[], Some(short));
    env.agent_writes(short, "True", "Converged", &[]);
}

fn set_prove(env: &Env, md: &str, prove: &str) {
    env.mgmt.write(
        "PATCH",
        &format!("{CAPI}/namespaces/{}/machinedeployments/{md}", env.ns),
        MERGE,
        &json!({"metadata":{"annotations":{PROVE:prove}}}),
    );
}

/// Waits for Machine `m`'s condition to have `reason`: (status, message).
fn wait_reason(env: &Env, m: &str, reason: &str, within: Duration) -> (String, String) {
    let start = Instant::now();
    loop {
        if let Some((s, r, msg, _)) = env.condition(m) {
            if r == reason {
                return (s, msg);
            }
        }
        assert!(
            start.elapsed() < within,
            "{m}: no {reason} within {within:?}; now {:?}",
            env.condition(m)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pod_writes(e: &AuditEvent, verb: &str) -> bool {
    by_controller(e)
        && e["objectRef"]["resource"] == "pods"
        && e["objectRef"]["namespace"] == NS
        && e["verb"] == verb
}

fn proof_pods(env: &Env) -> Vec<Value> {
    env.wl
        .get(&format!("/api/v1/namespaces/{NS}/pods"))
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

/// A good node is proven once, with one pod create and one delete and one
/// Machine write; a restart of its kubelet and containerd (same boot) is
/// not proven again; a pod left by a previous leader is swept, a tenant's
/// pod in the same namespace never touched; a tenant's admission policy
/// refusing the pod gives Unknown with the policy's words.
#[test]
fn a_good_node_is_proven_once_and_nothing_is_left_or_taken() {
    let env = Env::with_private_workload();
    let mut k1 = node(&env, "k1", &[]);
    // What a previous leader left, and a tenant's own pod, on that node.
    env.wl.kubectl_ok(&["create", "namespace", NS], None);
    poll(
        Duration::from_secs(30),
        "the namespace's ServiceAccount",
        || {
            env.wl
                .get(&format!("/api/v1/namespaces/{NS}/serviceaccounts/default"))
                .is_some()
        },
    );
    let node_name = env.node_name("k1");
    let leftover = |name: &str, ours: bool| {
        let labels = if ours {
            json!({"app.kubernetes.io/managed-by":"sandbox-readiness-controller","sandbox-readiness.io/proof-of":"0000000000000000"})
        } else {
            json!({"app":"tenant"})
        };
        json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name,"namespace":NS,"labels":labels},
            "spec":{"nodeName":node_name,"tolerations":[{"operator":"Exists"}],"terminationGracePeriodSeconds":0,
                "containers":[{"name":"c","image":"registry.k8s.io/pause:3.10","imagePullPolicy":"Never"}]}})
    };
    env.wl.write(
        "POST",
        &format!("/api/v1/namespaces/{NS}/pods"),
        "application/json",
        &leftover("left-by-a-previous-leader", true),
    );
    env.wl.write(
        "POST",
        &format!("/api/v1/namespaces/{NS}/pods"),
        "application/json",
        &leftover("tenant-pod", false),
    );

    let wl_mark = env.wl.audit_mark();
    let c = env.controller_as(
        &env.mgmt_kubeconfig,
        &[],
        &[("SANDBOX_READINESS_LOG", "debug")],
    );
    let mgmt_mark = env.mgmt.audit_mark();
    let started = Instant::now();
    pool(&env, "md", "m1", "k1", "default+userns");
    let (status, msg) = wait_reason(&env, "m1", "SandboxProven", Duration::from_secs(120));
    println!(
        "proven in {:?} from the Machine's creation: {msg}",
        started.elapsed()
    );
    assert_eq!(status, "True");
    let boot = env.wl.get_node(&node_name)["status"]["nodeInfo"]["bootID"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.starts_with(&format!("proven on boot {boot} by pods default+userns; ")),
        "{msg}"
    );
    // One create and one delete in the workload cluster, the pod gone.
    let creates = env.wl.audit_wait(
        Duration::from_secs(30),
        wl_mark,
        |e| pod_writes(e, "create"),
        |w| !w.is_empty(),
    );
    let deletes = env.wl.audit_wait(
        Duration::from_secs(30),
        wl_mark,
        |e| pod_writes(e, "delete") && e["objectRef"]["name"] != "left-by-a-previous-leader",
        |w| !w.is_empty(),
    );
    assert_eq!(creates.len(), 1, "{creates:#?}");
    assert_eq!(code(&creates[0]), 201);
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    assert_eq!(
        creates[0]["objectRef"]["name"],
        deletes[0]["objectRef"]["name"]
    );
    let proof_pod = creates[0]["objectRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    poll(Duration::from_secs(60), "the proof pod gone", || {
        proof_pods(&env)
            .iter()
            .all(|p| p["metadata"]["name"] != proof_pod.as_str())
    });
    // One change of the Machine's condition for the proof: the proven
    // one, nothing in between (the Machine's first conditions,
    // NodeNotYetAssigned and ConditionNotYetReported, came before its Node
    // said True). A change of the Machine's generation (CAPI setting its
    // providerID) re-writes the same condition with the new
    // observedGeneration, as for any condition: not a change.
    let mut written = changes(&env, "m1", mgmt_mark);
    written.dedup();
    let proof: Vec<&(String, String, String)> = written
        .iter()
        .filter(|(_, r, _)| r.starts_with("Proof") || r == "SandboxProven")
        .collect();
    assert_eq!(proof.len(), 1, "{written:#?}");
    assert_eq!(written.last().map(|w| w.1.as_str()), Some("SandboxProven"));

    // The previous leader's pod is swept; the tenant's is never touched.
    env.wl.audit_wait(
        Duration::from_secs(90),
        wl_mark,
        |e| pod_writes(e, "delete") && e["objectRef"]["name"] == "left-by-a-previous-leader",
        |w| !w.is_empty(),
    );
    env.wl.audit_barrier();
    let touched = env.wl.audit_writes_since(wl_mark, |e| {
        by_controller(e) && e["objectRef"]["name"] == "tenant-pod"
    });
    assert!(touched.is_empty(), "{touched:#?}");
    assert!(env
        .wl
        .get(&format!("/api/v1/namespaces/{NS}/pods/tenant-pod"))
        .is_some());

    // kubelet and containerd restarted, the same boot: not proven again.
    k1.down();
    drop(k1);
    k1 = node(&env, "k1", &[]);
    let restart = env.wl.audit_mark();
    let from = c.log().len();
    env.agent_writes("k1", "True", "Converged", &[]);
    // The controller's pass over m1 since: a Node change reconciles it; a
    // proof started there would have created its pod before this pass ends.
    no_new_proof(
        &env,
        &c,
        from,
        restart,
        "a restart of kubelet and containerd (same boot)",
    );
    assert_eq!(env.status("m1").as_deref(), Some("True"));
    // Nor after the controller restarts: the proof is read back from the
    // Machine's condition.
    drop(c);
    let c = env.controller_as(
        &env.mgmt_kubeconfig,
        &[],
        &[("SANDBOX_READINESS_LOG", "debug")],
    );
    no_new_proof(&env, &c, 0, restart, "a controller restart");
    // The proof's Event.
    assert!(
        env.events("m1")
            .contains(&("Normal".to_string(), "SandboxProven".to_string())),
        "{:?}",
        env.events("m1")
    );

    // A tenant policy refusing pods in the namespace: Unknown, its words.
    let vap = json!({"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy",
        "metadata":{"name":"no-proof-pods"},
        "spec":{"failurePolicy":"Fail","matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],
            "operations":["CREATE"],"resources":["pods"]}],
            "namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":NS}}},
            "validations":[{"expression":"false","message":"the tenant's policy forbids pods here"}]}});
    env.wl.write(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        "application/json",
        &vap,
    );
    env.wl.write("POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", "application/json",
        &json!({"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyBinding",
            "metadata":{"name":"no-proof-pods"},"spec":{"policyName":"no-proof-pods","validationActions":["Deny"]}}));
    // In force once a dry-run create is refused.
    poll(Duration::from_secs(30), "the policy in force", || {
        let (rc, _, _) = env.wl.kubectl_stdin(
            &["create", "--dry-run=server", "-f", "-"],
            Some(&leftover("probe", false).to_string()),
        );
        rc != 0
    });
    set_prove(&env, "md", "default");
    let (status, msg) = wait_reason(&env, "m1", "ProofRefused", Duration::from_secs(60));
    assert_eq!(status, "Unknown");
    assert!(
        msg.contains("the tenant's policy forbids pods here"),
        "{msg}"
    );
    drop(k1);
}

/// After controller `c` logged a pass over m1 (its log from byte `from`:
/// "condition unchanged", a proof held for this boot), no proof pod was
/// created in the workload cluster since `mark`.
fn no_new_proof(
    env: &Env,
    c: &common::Controller,
    from: usize,
    mark: common::cluster::AuditMark,
    after: &str,
) {
    let m1 = format!("{}/m1", env.ns);
    poll(
        Duration::from_secs(30),
        &format!("the controller's pass over m1 after {after}"),
        || {
            c.log()[from..]
                .lines()
                .any(|l| l.contains("condition unchanged") && l.contains(&m1))
        },
    );
    env.wl.audit_barrier();
    let again = env.wl.audit_writes_since(mark, |e| pod_writes(e, "create"));
    assert!(again.is_empty(), "proven again after {after}: {again:#?}");
}

/// Each broken node fails its proof with kubelet's words on the Machine,
/// though the agent (written by the test) says True.
#[test]
fn each_broken_node_fails_with_kubelets_words() {
    let env = Env::with_private_workload();
    env.wl.write(
        "POST",
        "/apis/node.k8s.io/v1/runtimeclasses",
        "application/json",
        &json!({"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"gvisor"},"handler":"runsc"}),
    );
    // (machine, node options, pods asked, what kubelet's words must say)
    let cases: [(&str, &[&str], &str, &str); 4] = [
        (
            "runc11",
            &["--runc", "1.1"],
            "default+userns",
            "does not support user namespaces",
        ),
        (
            "noshim",
            &["--runsc", "no-shim"],
            "gvisor",
            "binary not installed",
        ),
        (
            "broken",
            &["--runsc", "broken"],
            "gvisor",
            "failed to create containerd task",
        ),
        (
            "c21",
            &["--containerd", "2.1"],
            "gvisor+userns",
            "does not support user namespaces",
        ),
    ];
    let nodes: Vec<KubeletNode> = cases
        .iter()
        .map(|(m, opts, _, _)| node(&env, m, opts))
        .collect();
    let _c = env.controller(&[]);
    for (m, _, prove, _) in &cases {
        pool(&env, &format!("md-{m}"), m, m, prove);
    }
    let mut rows = Vec::new();
    for (m, _, prove, says) in &cases {
        let (status, msg) = wait_reason(&env, m, "ProofFailed", Duration::from_secs(120));
        assert_eq!(status, "False", "{m}: {msg}");
        assert!(msg.contains("FailedCreatePodSandBox"), "{m}: {msg}");
        assert!(msg.contains(says), "{m}: {msg}");
        rows.push(format!("{m} ({prove}): {msg}"));
    }
    println!("{}", rows.join("\n"));
    // Nothing left once each proof ended.
    poll(Duration::from_secs(60), "every proof pod gone", || {
        proof_pods(&env).is_empty()
    });
    drop(nodes);
}

/// The condition changes written on Machine `m` since `mark`, by the
/// controller: (status, reason, message) of each accepted write.
fn changes(env: &Env, m: &str, mark: common::cluster::AuditMark) -> Vec<(String, String, String)> {
    env.mgmt
        .audit_writes_since(mark, |e| {
            by_controller(e) && machine_status_write(e, &env.ns, m) && code(e) == 200
        })
        .iter()
        .filter_map(|e| {
            let c = e["requestObject"]["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == env.ty.as_str())?
                .clone();
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            Some((s("status"), s("reason"), s("message")))
        })
        .collect()
}

/// The workload cluster down in the middle of a proof (its pod created, the
/// node's kubelet stopped so it cannot run yet): the proof goes on through
/// the outage and ends proven once the node is back, with at most two
/// condition changes on the Machine and no pod left.
#[test]
fn an_outage_during_a_proof_changes_little_and_leaves_no_pod() {
    let env = Env::with_private_workload();
    let k1 = node(&env, "k1", &[]);
    let c = env.controller_as(
        &env.mgmt_kubeconfig,
        &[],
        &[("SANDBOX_READINESS_LOG", "debug")],
    );
    pool(&env, "md", "m1", "k1", "default+userns");
    wait_reason(&env, "m1", "SandboxProven", Duration::from_secs(120));
    // A node that cannot answer yet: its kubelet and containerd stopped,
    // its Node (and the agent's fresh True) kept.
    k1.down();
    drop(k1);
    let mark = env.mgmt.audit_mark();
    let wl_mark = env.wl.audit_mark();
    set_prove(&env, "md", "default");
    env.wl.audit_wait(
        Duration::from_secs(60),
        wl_mark,
        |e| pod_writes(e, "create"),
        |w| !w.is_empty(),
    );
    let from = c.log().len();
    env.wl.stop();
    poll(
        Duration::from_secs(60),
        "a proof round failing on the outage",
        || {
            c.log()[from..]
                .lines()
                .any(|l| l.contains("proof round failed") && l.contains(&format!("{}/m1", env.ns)))
        },
    );
    env.wl.start();
    let _k1 = node(&env, "k1", &[]);
    let (status, msg) = loop {
        let (s, msg) = wait_reason(&env, "m1", "SandboxProven", Duration::from_secs(150));
        if msg.contains("by pods default; ") {
            break (s, msg);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, "True", "{msg}");
    // Changes, not writes: a change of the Machine's generation re-writes
    // the same condition with its new observedGeneration (as in the first
    // test).
    let mut written = changes(&env, "m1", mark);
    written.dedup();
    println!("condition changes through the outage: {written:?}");
    assert!(!written.is_empty() && written.len() <= 2, "{written:#?}");
    poll(Duration::from_secs(60), "every proof pod gone", || {
        proof_pods(&env).is_empty()
    });
}

/// The bench (benches/proof.sh): on one good node, `SR_PROOF_ROUNDS`
/// proofs (default 20), each started by a change of the pool's request;
/// for each, when the test first saw the proof pod's container running
/// (polling every 10 ms) and when the Machine said `True` with that proof.
/// Prints p50 and p99 of the controller's added latency (the second minus
/// the first) and of the whole proof.
#[test]
#[ignore]
fn bench_proof_latency() {
    let rounds: usize = std::env::var("SR_PROOF_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let env = Env::with_private_workload();
    let _k1 = node(&env, "k1", &[]);
    let _c = env.controller(&[]);
    pool(&env, "md", "m1", "k1", "default+userns");
    wait_reason(&env, "m1", "SandboxProven", Duration::from_secs(120));
    let mut added = Vec::new();
    let mut whole = Vec::new();
    for i in 0..rounds {
        let req = ["default", "default+userns"][i % 2];
        // This round's pod is one not there before it (a previous round's
        // may still be terminating).
        let before: Vec<Value> = proof_pods(&env)
            .iter()
            .map(|p| p["metadata"]["uid"].clone())
            .collect();
        let start = Instant::now();
        set_prove(&env, "md", req);
        let mut running = None;
        loop {
            if running.is_none()
                && proof_pods(&env).iter().any(|p| {
                    !before.contains(&p["metadata"]["uid"])
                        && p["metadata"]["annotations"]["sandbox-readiness.io/pod"] == req
                        && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
                })
            {
                running = Some(start.elapsed());
            }
            if let Some((s, _, msg, _)) = env.condition("m1") {
                if s == "True" && msg.contains(&format!("by pods {req}; ")) {
                    let at = start.elapsed();
                    let r = running.unwrap_or_else(|| {
                        panic!("round {i}: proven before its pod was seen running")
                    });
                    added.push(at.saturating_sub(r));
                    whole.push(at);
                    break;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "round {i}: not proven in 60 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "bench proof: {rounds} proofs; added latency p50 {:?} p99 {:?}; trigger to True p50 {:?} p99 {:?}",
        pct(&mut added, 0.5),
        pct(&mut added, 0.99),
        pct(&mut whole, 0.5),
        pct(&mut whole, 0.99)
    );
}
