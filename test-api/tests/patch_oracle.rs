//! The merge oracle: for a table of patches and for generated ones, the patch
//! module's result equals `kubectl patch --local -f OBJ --type=T -p PATCH -o json`
//! (kubectl v1.32 links apimachinery's strategic merge and evanphx/json-patch,
//! the code kube-apiserver runs), and kubectl fails exactly when we do.
//!
//! kubectl runs offline (`--local`), so this needs no cluster; it must be on
//! PATH (it is on every machine of this project's kind).

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{json, Map, Value};
use test_api::patch::{apply_patch, patch_meta_for, PatchKind};

fn type_flag(kind: PatchKind) -> &'static str {
    match kind {
        PatchKind::Strategic => "strategic",
        PatchKind::Merge => "merge",
        PatchKind::Json => "json",
    }
}

/// kubectl's verdict: the patched object, or its error text.
fn kubectl(obj: &Value, kind: PatchKind, patch: &str) -> Result<Value, String> {
    let mut file = tempfile::Builder::new()
        .suffix(".json")
        .tempfile()
        .map_err(|e| format!("tempfile: {e}"))?;
    file.write_all(obj.to_string().as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let out = Command::new("kubectl")
        .args(["patch", "--local", "-o", "json", "-f"])
        .arg(file.path())
        .args(["--type", type_flag(kind), "-p", patch])
        // No kubeconfig is read for --local; an empty one keeps it that way.
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap_or_else(|e| panic!("kubectl must be on PATH for the oracle: {e}"));
    if out.status.success() {
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "kubectl printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Numbers compare by value: kubectl re-encodes `1.0` as `1`.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// kubectl --local decodes the result as an object with `kind` and
/// `apiVersion`; a result without them is an error there, which the server
/// reports at decoding (not in the patch module). Map our result the same way.
fn as_kubectl_would(result: Value) -> Result<Value, String> {
    let ok = result.as_object().is_some_and(|m| {
        m.get("kind")
            .is_some_and(|k| k.as_str().is_some_and(|s| !s.is_empty()))
            && m.get("apiVersion").is_some_and(Value::is_string)
    });
    if ok {
        Ok(result)
    } else {
        Err(format!("result has no kind/apiVersion: {result}"))
    }
}

/// How a case ended when both sides agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agreed {
    BothApplied,
    BothFailed,
}

/// One comparison; `Err` describes a disagreement.
fn check(obj: &Value, kind: PatchKind, patch: &str) -> Result<Agreed, String> {
    let meta = obj["apiVersion"]
        .as_str()
        .zip(obj["kind"].as_str())
        .and_then(|(v, k)| patch_meta_for(v, k));
    let ours = apply_patch(kind, obj, patch.as_bytes(), meta)
        .map_err(|e| e.detail().to_string())
        .and_then(as_kubectl_would);
    let theirs = kubectl(obj, kind, patch);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) if same(a, b) => Ok(Agreed::BothApplied),
        (Err(_), Err(_)) => Ok(Agreed::BothFailed),
        _ => Err(format!(
            "--type={} -p '{patch}' on {obj}\n  ours:    {ours:?}\n  kubectl: {theirs:?}",
            type_flag(kind)
        )),
    }
}

/// Runs `cases` through both, a few kubectl processes at a time, and returns
/// the disagreements (and prints how many agreed by applying, by failing).
fn run_all(cases: &[(Value, PatchKind, String)]) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    // per patch type: [applied alike, refused by both]
    let counts = Mutex::new([[0usize; 2]; 3]);
    let slot = |k: PatchKind| match k {
        PatchKind::Strategic => 0,
        PatchKind::Merge => 1,
        PatchKind::Json => 2,
    };
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((obj, kind, patch)) = cases.get(i) else {
                    break;
                };
                match check(obj, *kind, patch) {
                    Ok(agreed) => {
                        let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
                        c[slot(*kind)][usize::from(agreed == Agreed::BothFailed)] += 1;
                    }
                    Err(e) => failures
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(format!("#{i} {e}")),
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    let counts = counts.into_inner().unwrap_or_else(|p| p.into_inner());
    for (name, [applied, refused]) in ["strategic", "merge", "json"].iter().zip(counts) {
        if applied + refused > 0 {
            eprintln!("--type={name}: {applied} applied alike, {refused} refused by both");
        }
    }
    eprintln!("{} cases, {} disagree", cases.len(), failures.len());
    failures
}

fn node() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "worker-1",
            "labels": {"kubernetes.io/hostname": "worker-1", "a": "1"},
            "annotations": {"x": "y"},
            "finalizers": ["f1", "f2"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "o1", "uid": "u1"},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "o2", "uid": "u2"}
            ]
        },
        "spec": {
            "podCIDR": "10.0.0.0/24",
            "podCIDRs": ["10.0.0.0/24"],
            "taints": [{"key": "k1", "effect": "NoSchedule"}]
        },
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            ],
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.5"},
                {"type": "Hostname", "address": "worker-1"}
            ],
            "capacity": {"cpu": "2", "memory": "4Gi"}
        }
    })
}

fn machine() -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default", "labels": {"a": "1"}},
        "spec": {"clusterName": "c1", "readinessGates": [{"conditionType": "X"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "R", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    })
}

fn merge_and_json_table() -> Vec<(Value, PatchKind, String)> {
    let merge = [
        r#"{"metadata":{"labels":{"b":"2"}}}"#,
        r#"{"metadata":{"labels":{"a":null}}}"#,
        r#"{"metadata":{"annotations":null}}"#,
        r#"{"status":{"conditions":[{"type":"X","status":"True"}]}}"#,
        r#"{"spec":{"new":{"a":null,"b":{"c":null,"d":1}}}}"#,
        r#"{"spec":{"new":[1,null,{"a":null,"b":2}]}}"#,
        r#"{"spec":{"podCIDR":{"a":null,"b":1}}}"#,
        r#"{"spec":{"taints":{"a":null}}}"#,
        r#"{"status":{"capacity":[null,{"a":null}]}}"#,
        r#"{}"#,
        r#"null"#,
        r#"[1,2]"#,
        r#""str""#,
        r#"5"#,
        r#"{"kind":null}"#,
        r#"{"metadata":{"name":"other"}}"#,
        r#"{"metadata":{"labels":{"x":"1"}},"status":null}"#,
        r#"{"a":"#,
    ];
    let jsons = [
        r#"[{"op":"add","path":"/metadata/labels/b","value":"2"}]"#,
        r#"[{"op":"add","path":"/metadata/labels/b"}]"#,
        r#"[{"op":"remove","path":"/metadata/labels/a"}]"#,
        r#"[{"op":"remove","path":"/metadata/labels/absent"}]"#,
        r#"[{"op":"remove","path":"/metadata/absent/x"}]"#,
        r#"[{"op":"replace","path":"/spec/podCIDR","value":"x"}]"#,
        r#"[{"op":"replace","path":"/spec/absent","value":"x"}]"#,
        r#"[{"op":"replace","path":"/status/conditions/7","value":{}}]"#,
        r#"[{"op":"replace","path":"/status/conditions/-1","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/-","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/0","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/2","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/3","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/-3","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/-4","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/x","value":{"type":"Z"}}]"#,
        r#"[{"op":"remove","path":"/status/conditions/-1"}]"#,
        r#"[{"op":"remove","path":"/status/conditions/2"}]"#,
        r#"[{"op":"remove","path":"/status/conditions/0/reason"}]"#,
        r#"[{"op":"test","path":"/status/conditions/1/type","value":"Ready"}]"#,
        r#"[{"op":"test","path":"/status/conditions/1/type","value":"NotReady"}]"#,
        r#"[{"op":"test","path":"/status/absent","value":null}]"#,
        r#"[{"op":"test","path":"/status/capacity","value":{"cpu":"2","memory":"4Gi","x":"1"}}]"#,
        r#"[{"op":"test","path":"/status/capacity","value":{"cpu":"2","memory":"4Gi"}}]"#,
        r#"[{"op":"test","path":"/metadata/finalizers","value":["f1","f2"]},{"op":"add","path":"/metadata/finalizers/-","value":"f3"}]"#,
        r#"[{"op":"move","from":"/metadata/labels/a","path":"/metadata/annotations/a"}]"#,
        r#"[{"op":"move","from":"/metadata/labels/absent","path":"/metadata/annotations/a"}]"#,
        r#"[{"op":"move","from":"/metadata","path":"/metadata/x"}]"#,
        r#"[{"op":"copy","from":"/metadata/labels","path":"/metadata/annotations"}]"#,
        r#"[{"op":"copy","from":"/metadata/absent","path":"/metadata/c"}]"#,
        r#"[{"op":"copy","from":"/status/conditions/5","path":"/metadata/c"}]"#,
        r#"[{"op":"replace","path":"","value":{"apiVersion":"v1","kind":"Node","metadata":{"name":"z"}}}]"#,
        r#"[{"op":"replace","path":"","value":5}]"#,
        r#"[{"op":"add","path":"spec/q","value":3}]"#,
        r#"[{"op":"add","path":"q","value":3}]"#,
        r#"[{"op":"add","path":"/metadata/labels/a~1b","value":"3"}]"#,
        r#"[{"op":"add","path":"/metadata/labels/a~0b","value":"3"}]"#,
        r#"[{"op":"remove","path":"/metadata/labels/kubernetes.io~1hostname"}]"#,
        r#"[{"op":"nope","path":"/x"}]"#,
        r#"[{"path":"/x"}]"#,
        r#"[{"op":"add","value":1}]"#,
        r#"[{"op":"add","path":5,"value":1}]"#,
        r#"[null]"#,
        r#"["x"]"#,
        r#"null"#,
        r#"[]"#,
        r#"{}"#,
        r#"[{"op":"add","path":"/status/conditions/0/reason/x","value":1}]"#,
        r#"[{"op":"add","path":"/metadata/labels/a","value":"2"},{"op":"remove","path":"/nope"}]"#,
        r#"[{"op":"add","path":"/status/conditions/01","value":{"type":"Z"}}]"#,
        r#"[{"op":"add","path":"/status/conditions/+1","value":{"type":"Z"}}]"#,
    ];
    let mut cases = Vec::new();
    for obj in [node(), machine()] {
        for p in merge {
            cases.push((obj.clone(), PatchKind::Merge, p.to_string()));
        }
        for p in jsons {
            cases.push((obj.clone(), PatchKind::Json, p.to_string()));
        }
    }
    cases
}

#[test]
fn merge_and_json_patches_agree_with_kubectl() {
    let cases = merge_and_json_table();
    let failures = run_all(&cases);
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree with kubectl:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn lease() -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l1", "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "n1"}]},
        "spec": {"holderIdentity": "worker-1", "leaseDurationSeconds": 40, "renewTime": "2026-12-01T00:00:00.000000Z"}
    })
}

fn secret() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s1", "namespace": "default", "labels": {"a": "1"}},
        "type": "Opaque",
        "data": {"value": "eA==", "other": "eQ=="}
    })
}

fn namespace() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ns1", "finalizers": ["a"]},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active", "conditions": [{"type": "NamespaceDeletionDiscoveryFailure", "status": "False"}]}
    })
}

fn event() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "worker-1", "uid": "n1"},
        "reason": "R", "message": "m", "count": 1, "type": "Normal",
        "source": {"component": "sandbox-readiness"}
    })
}

/// A Node carrying a field the Go types do not know (kubectl --local keeps it).
fn node_with_unknown_field() -> Value {
    let mut n = node();
    n["spec"]["extra"] = json!({"a": 1});
    n["status"]["extraList"] = json!([{"a": 1}]);
    n
}

fn strategic_table() -> Vec<(Value, PatchKind, String)> {
    let on_node = [
        // conditions: added (a new type goes first), updated, kept
        r#"{"status":{"conditions":[{"type":"sandbox-readiness.io/Ready","status":"True","reason":"AllProbesPassed"}]}}"#,
        r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady"}]}}"#,
        r#"{"status":{"conditions":[{"type":"Ready","message":null}]}}"#,
        r#"{"status":{"conditions":[{"type":"New","status":"True","message":null}]}}"#,
        r#"{"status":{"conditions":[{"type":"New","status":"True","x":{"$patch":"delete"}}]}}"#,
        r#"{"status":{"conditions":[{"type":"B","status":"True"},{"type":"A","status":"True"},{"type":"Ready","status":"True"}]}}"#,
        r#"{"status":{"conditions":[{"type":"MemoryPressure","$patch":"delete"}]}}"#,
        r#"{"status":{"conditions":[{"type":"Absent","$patch":"delete"}]}}"#,
        r#"{"status":{"conditions":[{"$patch":"delete"}]}}"#,
        r#"{"status":{"conditions":[{"type":"Only","status":"True"},{"$patch":"replace"}]}}"#,
        r#"{"status":{"conditions":[{"$patch":"replace"}]}}"#,
        r#"{"status":{"conditions":[{"$patch":"merge"}]}}"#,
        r#"{"status":{"conditions":[{"type":"X","$patch":"bogus"}]}}"#,
        r#"{"status":{"conditions":[{"status":"True"}]}}"#,
        r#"{"status":{"conditions":[]}}"#,
        r#"{"status":{"conditions":null}}"#,
        r#"{"status":{"conditions":"notalist"}}"#,
        r#"{"status":{"conditions":[{"type":"A"},"x"]}}"#,
        r#"{"status":{"conditions":[[1]]}}"#,
        r#"{"status":{"conditions":[null]}}"#,
        r#"{"status":{"conditions":[{"type":1,"status":"True"}]}}"#,
        // $setElementOrder
        r#"{"status":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"MemoryPressure"}]}}"#,
        r#"{"status":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"New"},{"type":"MemoryPressure"}],"conditions":[{"type":"New","status":"True"}]}}"#,
        r#"{"status":{"$setElementOrder/conditions":[{"type":"Ready"}],"conditions":[{"type":"New","status":"True"}]}}"#,
        r#"{"status":{"$setElementOrder/conditions":[{"type":"New"},{"type":"Ready"}],"conditions":[{"type":"Ready","status":"False"},{"type":"New","status":"True"}]}}"#,
        r#"{"status":{"$setElementOrder/conditions":"x"}}"#,
        r#"{"status":{"$setElementOrder/conditions":[{"nokey":1}]}}"#,
        r#"{"status":{"$setElementOrderX/conditions":[]}}"#,
        r#"{"status":{"$setElementOrder/nothing":[{"type":"A"}]}}"#,
        r#"{"status":{"$setElementOrder/addresses":[{"type":"Hostname"},{"type":"InternalIP"}],"addresses":[{"type":"Hostname","address":"w1"}]}}"#,
        r#"{"metadata":{"$setElementOrder/finalizers":["f2","f1"]}}"#,
        r#"{"metadata":{"$setElementOrder/finalizers":["f3","f2","f1"],"finalizers":["f3"]}}"#,
        // addresses merge by type
        r#"{"status":{"addresses":[{"type":"ExternalIP","address":"1.2.3.4"}]}}"#,
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.6"}]}}"#,
        // labels and annotations
        r#"{"metadata":{"labels":{"b":"2"}}}"#,
        r#"{"metadata":{"labels":{"a":null,"c":"3"}}}"#,
        r#"{"metadata":{"annotations":null}}"#,
        r#"{"metadata":{"labels":{"$patch":"replace","only":"1"}}}"#,
        r#"{"metadata":{"labels":{"$patch":"delete"}}}"#,
        r#"{"metadata":{"labels":{"$patch":"merge"}}}"#,
        r#"{"metadata":{"newmap":{"$patch":"replace","x":"1"}}}"#,
        r#"{"metadata":{"newmap":{"a":null,"b":{"c":null}}}}"#,
        // ownerReferences by uid
        r#"{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o3","uid":"u3"}]}}"#,
        r#"{"metadata":{"ownerReferences":[{"uid":"u2","name":"renamed"}]}}"#,
        r#"{"metadata":{"ownerReferences":[{"uid":"u1","$patch":"delete"}]}}"#,
        r#"{"metadata":{"ownerReferences":[{"name":"nouid"}]}}"#,
        // finalizers: a primitive list with merge strategy
        r#"{"metadata":{"finalizers":["f3"]}}"#,
        r#"{"metadata":{"finalizers":["f2","f0"]}}"#,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["f1"]}}"#,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["absent"]}}"#,
        r#"{"metadata":{"$deleteFromPrimitiveList/absentlist":["x"]}}"#,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":null}}"#,
        r#"{"metadata":{"$deleteFromPrimitiveListfinalizers":["f1"]}}"#,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["f1"],"finalizers":["f9"]}}"#,
        r#"{"metadata":{"finalizers":[1]}}"#,
        r#"{"spec":{"podCIDRs":["10.0.1.0/24"]}}"#,
        // atomic lists are replaced
        r#"{"spec":{"taints":[{"key":"k2","effect":"NoExecute"}]}}"#,
        r#"{"spec":{"taints":[{"key":"k2","effect":"NoExecute","x":null}]}}"#,
        r#"{"spec":{"taints":[]}}"#,
        // $retainKeys
        r#"{"metadata":{"$retainKeys":["name","labels"],"labels":{"b":"2"}}}"#,
        r#"{"metadata":{"$retainKeys":["name"],"labels":{"b":"2"}}}"#,
        r#"{"metadata":{"$retainKeys":["name"],"labels":null}}"#,
        r#"{"metadata":{"$retainKeys":"name"}}"#,
        r#"{"spec":{"$retainKeys":[]}}"#,
        r#"{"newtop":{"$retainKeys":["a"],"a":1}}"#,
        // maps merge recursively; other values are replaced
        r#"{"status":{"capacity":{"cpu":"4","pods":"110"}}}"#,
        r#"{"spec":{"podCIDR":null,"unschedulable":true}}"#,
        r#"{"spec":{"configSource":{"configMap":{"name":"c"}}}}"#,
        r#"{"spec":{"podCIDR":{"a":1}}}"#,
        r#"{"status":{"capacity":"x"}}"#,
        // directives at the top
        r#"{"$patch":"delete"}"#,
        r#"{"$patch":"replace","apiVersion":"v1","kind":"Node","metadata":{"name":"r"}}"#,
        r#"{}"#,
        r#"null"#,
        r#"[]"#,
        r#""x""#,
        r#"{"a":"#,
        // fields the Go types do not know: fine while nothing must be merged
        r#"{"spec":{"brandnew":{"a":1}}}"#,
        r#"{"spec":{"brandnewlist":[{"a":1}]}}"#,
    ];
    let on_unknown = [
        r#"{"spec":{"extra":{"b":2}}}"#,
        r#"{"spec":{"extra":"scalar"}}"#,
        r#"{"status":{"extraList":[{"a":2}]}}"#,
        r#"{"spec":{"EXTRA":{"b":2}}}"#,
        r#"{"Spec":{"podCIDR":"x"}}"#,
    ];
    let on_lease = [
        r#"{"spec":{"holderIdentity":"worker-2","leaseTransitions":1}}"#,
        r#"{"spec":{"renewTime":"2026-12-01T00:00:10.000000Z"}}"#,
        r#"{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"worker-2","uid":"n2"}]}}"#,
        r#"{"spec":{"holderIdentity":null}}"#,
        r#"{"spec":{"renewTime":{"a":1}}}"#,
    ];
    let on_secret = [
        r#"{"data":{"value":"eg==","other":null}}"#,
        r#"{"stringData":{"k":"v"}}"#,
        r#"{"metadata":{"labels":{"a":null}},"type":"kubernetes.io/tls"}"#,
        r#"{"data":{"$patch":"replace","only":"eA=="}}"#,
    ];
    let on_namespace = [
        r#"{"status":{"conditions":[{"type":"NamespaceContentRemaining","status":"True"}]}}"#,
        r#"{"spec":{"finalizers":["other"]}}"#,
        r#"{"metadata":{"finalizers":["b"]}}"#,
    ];
    let on_event = [
        r#"{"count":2,"lastTimestamp":"2026-12-01T00:00:00Z"}"#,
        r#"{"involvedObject":{"resourceVersion":"5"}}"#,
        r#"{"series":{"count":2}}"#,
    ];
    let mut cases = Vec::new();
    let mut add = |obj: Value, patches: &[&str]| {
        for p in patches {
            cases.push((obj.clone(), PatchKind::Strategic, p.to_string()));
        }
    };
    add(node(), &on_node);
    add(node_with_unknown_field(), &on_unknown);
    add(lease(), &on_lease);
    add(secret(), &on_secret);
    add(namespace(), &on_namespace);
    add(event(), &on_event);
    // A Node without status or metadata lists: lists are created.
    add(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}}),
        &on_node[..12],
    );
    cases
}

#[test]
fn strategic_merge_patches_agree_with_kubectl() {
    let cases = strategic_table();
    let failures = run_all(&cases);
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree with kubectl:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Generated cases. proptest draws them from a fixed seed (so a failure
// reproduces), then they run through kubectl in parallel like the table;
// a failure names the object and patch in full.

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &[T]) -> impl Strategy<Value = T> {
    prop::sample::select(items.to_vec())
}

fn obj(pairs: Vec<(String, Value)>) -> Value {
    Value::Object(pairs.into_iter().collect::<Map<String, Value>>())
}

/// A string-keyed map from a few keys to a few values or null.
fn small_map(
    keys: &'static [&'static str],
    values: &'static [&'static str],
) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        pick(keys).prop_map(String::from),
        prop_oneof![3 => pick(values).prop_map(|v| json!(v)), 1 => Just(Value::Null)],
        0..3,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

const COND_TYPES: &[&str] = &[
    "Ready",
    "MemoryPressure",
    "DiskPressure",
    "sandbox-readiness.io/Ready",
    "New",
];
const ADDR_TYPES: &[&str] = &["InternalIP", "Hostname", "ExternalIP"];
const FINALIZERS: &[&str] = &["f0", "f1", "f2", "f3"];
const UIDS: &[&str] = &["u1", "u2", "u3"];

/// A Node as a kubelet and a controller would have left it.
fn gen_node() -> impl Strategy<Value = Value> {
    let conds = prop::sample::subsequence(COND_TYPES.to_vec(), 0..=4)
        .prop_shuffle()
        .prop_flat_map(|types| {
            let n = types.len();
            (
                Just(types),
                prop::collection::vec(pick(&["True", "False", "Unknown"]), n),
            )
        });
    let addrs = prop::sample::subsequence(ADDR_TYPES.to_vec(), 0..=3).prop_shuffle();
    let fins = prop::sample::subsequence(FINALIZERS.to_vec(), 0..=3).prop_shuffle();
    let owners = prop::sample::subsequence(UIDS.to_vec(), 0..=2);
    let labels = small_map(&["a", "b", "kubernetes.io/hostname"], &["1", "2"]);
    (conds, addrs, fins, owners, labels).prop_map(|((types, statuses), addrs, fins, owners, labels)| {
        let labels: Map<String, Value> = labels
            .as_object()
            .map(|m| m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let mut meta = json!({"name": "worker-1", "labels": labels});
        if !fins.is_empty() {
            meta["finalizers"] = json!(fins);
        }
        if !owners.is_empty() {
            meta["ownerReferences"] = Value::Array(
                owners
                    .iter()
                    .map(|u| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": format!("o-{u}"), "uid": u}))
                    .collect(),
            );
        }
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": meta,
            "spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "k1", "effect": "NoSchedule"}]},
            "status": {
                "conditions": types.iter().zip(&statuses).map(|(t, s)| json!({"type": t, "status": s, "reason": "R"})).collect::<Vec<_>>(),
                "addresses": addrs.iter().map(|t| json!({"type": t, "address": format!("addr-{t}")})).collect::<Vec<_>>()
            }
        })
    })
}

/// An item of a merge-keyed list in a patch: usually an upsert, sometimes a
/// `$patch` directive, a null field or a missing key.
fn gen_keyed_item(
    key: &'static str,
    keys: &'static [&'static str],
    field: &'static str,
) -> impl Strategy<Value = Value> {
    (
        prop_oneof![24 => pick(keys).prop_map(|k| Some(json!(k))), 1 => Just(None)],
        prop_oneof![
            6 => pick(&["True", "False", "x", "y"]).prop_map(|v| json!(v)),
            1 => Just(Value::Null),
        ],
        prop_oneof![24 => Just(None), 3 => Just(Some("delete")), 1 => Just(Some("replace")), 1 => Just(Some("merge"))],
    )
        .prop_map(move |(k, v, directive)| {
            let mut pairs = Vec::new();
            if let Some(k) = k {
                pairs.push((key.to_string(), k));
            }
            pairs.push((field.to_string(), v));
            if let Some(d) = directive {
                pairs.push(("$patch".to_string(), json!(d)));
            }
            obj(pairs)
        })
}

fn gen_order(
    keys: &'static [&'static str],
    key: Option<&'static str>,
) -> impl Strategy<Value = Value> {
    prop::sample::subsequence(keys.to_vec(), 0..=keys.len())
        .prop_shuffle()
        .prop_map(move |ks| {
            Value::Array(
                ks.into_iter()
                    .map(|k| match key {
                        Some(key) => json!({ key: k }),
                        None => json!(k),
                    })
                    .collect(),
            )
        })
}

/// A strategic merge patch for a Node, touching the fields that merge.
fn gen_strategic_node_patch() -> impl Strategy<Value = Value> {
    let conditions = prop::option::of(prop::collection::vec(
        gen_keyed_item("type", COND_TYPES, "status"),
        0..4,
    ));
    let cond_order = prop::option::weighted(0.25, gen_order(COND_TYPES, Some("type")));
    let addresses = prop::option::weighted(
        0.4,
        prop::collection::vec(gen_keyed_item("type", ADDR_TYPES, "address"), 0..3),
    );
    let labels = prop::option::weighted(0.5, small_map(&["a", "b", "c"], &["1", "3"]));
    let finalizers = prop::option::weighted(
        0.4,
        prop::collection::vec(pick(FINALIZERS).prop_map(|f| json!(f)), 0..3),
    );
    let fin_delete = prop::option::weighted(
        0.3,
        prop::collection::vec(pick(FINALIZERS).prop_map(|f| json!(f)), 0..3),
    );
    let fin_order = prop::option::weighted(0.2, gen_order(FINALIZERS, None));
    let owners = prop::option::weighted(
        0.3,
        prop::collection::vec(gen_keyed_item("uid", UIDS, "name"), 0..3),
    );
    let taints = prop::option::weighted(
        0.2,
        prop::collection::vec(
            pick(&["k1", "k2"]).prop_map(|k| json!({"key": k, "effect": "NoSchedule"})),
            0..2,
        ),
    );
    let retain = prop::option::weighted(
        0.1,
        prop::sample::subsequence(
            vec!["name", "labels", "finalizers", "ownerReferences"],
            0..=4,
        ),
    );
    (
        conditions,
        cond_order,
        addresses,
        labels,
        (finalizers, fin_delete, fin_order),
        owners,
        taints,
        retain,
    )
        .prop_map(
            |(
                conditions,
                cond_order,
                addresses,
                labels,
                (finalizers, fin_delete, fin_order),
                owners,
                taints,
                retain,
            )| {
                let mut status = Vec::new();
                if let Some(c) = conditions {
                    status.push(("conditions".to_string(), Value::Array(c)));
                }
                if let Some(o) = cond_order {
                    status.push(("$setElementOrder/conditions".to_string(), o));
                }
                if let Some(a) = addresses {
                    status.push(("addresses".to_string(), Value::Array(a)));
                }
                let mut meta = Vec::new();
                if let Some(l) = labels {
                    meta.push(("labels".to_string(), l));
                }
                // An item both added and deleted is processed in Go's random map
                // order upstream (kubectl answers either way): not generated.
                let added = finalizers.clone().unwrap_or_default();
                if let Some(f) = finalizers {
                    meta.push(("finalizers".to_string(), Value::Array(f)));
                }
                if let Some(f) = fin_delete {
                    let f = f.into_iter().filter(|v| !added.contains(v)).collect();
                    meta.push((
                        "$deleteFromPrimitiveList/finalizers".to_string(),
                        Value::Array(f),
                    ));
                }
                if let Some(o) = fin_order {
                    meta.push(("$setElementOrder/finalizers".to_string(), o));
                }
                if let Some(o) = owners {
                    meta.push(("ownerReferences".to_string(), Value::Array(o)));
                }
                if let Some(r) = retain {
                    meta.push(("$retainKeys".to_string(), json!(r)));
                }
                let mut top = Vec::new();
                if !status.is_empty() {
                    top.push(("status".to_string(), obj(status)));
                }
                if !meta.is_empty() {
                    top.push(("metadata".to_string(), obj(meta)));
                }
                if let Some(t) = taints {
                    top.push(("spec".to_string(), json!({ "taints": t })));
                }
                obj(top)
            },
        )
}

/// Any small JSON value over keys that collide with the objects' own.
fn gen_json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..300).prop_map(|n| json!(n)),
        pick(&["", "1", "x", "Ready", "True"]).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                pick(&[
                    "metadata",
                    "labels",
                    "a",
                    "b",
                    "spec",
                    "status",
                    "conditions",
                    "type",
                    "name",
                    "podCIDR"
                ])
                .prop_map(String::from),
                inner,
                0..4,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A merge patch: an object over the objects' own keys (sometimes not an object).
fn gen_merge_patch() -> impl Strategy<Value = Value> {
    let section = prop::collection::btree_map(
        pick(&[
            "labels",
            "annotations",
            "conditions",
            "podCIDR",
            "clusterName",
            "x",
            "taints",
        ])
        .prop_map(String::from),
        gen_json_value(),
        0..3,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()));
    prop_oneof![
        8 => prop::collection::btree_map(pick(&["metadata", "spec", "status", "extra"]).prop_map(String::from), section, 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => gen_json_value(),
    ]
}

/// Paths that exist on most generated objects, or whose parent does.
const GOOD_POINTERS: &[&str] = &[
    "/metadata/labels/a",
    "/metadata/labels/zz",
    "/metadata/labels/kubernetes.io~1hostname",
    "/metadata/finalizers/0",
    "/metadata/finalizers/-",
    "/status/conditions/0",
    "/status/conditions/0/status",
    "/status/conditions/-",
    "/status/conditions/-1",
    "/spec/podCIDRs/0",
    "/spec/taints",
    "/spec/clusterName",
    "/spec/new",
];

/// Paths that are absent, malformed or quirky in evanphx/json-patch.
const ODD_POINTERS: &[&str] = &[
    "/metadata/finalizers/9",
    "/metadata/absent/x",
    "/status/conditions/7",
    "/status/conditions/x",
    "/status",
    "",
    "metadata/labels/q",
    "/",
];

fn gen_pointer() -> impl Strategy<Value = &'static str> {
    prop_oneof![4 => pick(GOOD_POINTERS), 1 => pick(ODD_POINTERS)]
}

/// A JSON patch of one or two operations over paths that exist, do not,
/// or cannot.
fn gen_json_patch() -> impl Strategy<Value = Value> {
    let op = (
        pick(&[
            "add", "add", "add", "remove", "replace", "replace", "move", "copy", "test", "bogus",
        ]),
        gen_pointer(),
        gen_pointer(),
        prop::option::weighted(0.9, gen_json_value()),
    )
        .prop_map(|(op, path, from, value)| {
            let mut pairs = vec![
                ("op".to_string(), json!(op)),
                ("path".to_string(), json!(path)),
            ];
            if op == "move" || op == "copy" {
                pairs.push(("from".to_string(), json!(from)));
            }
            if let Some(v) = value {
                if op != "remove" && op != "move" && op != "copy" {
                    pairs.push(("value".to_string(), v));
                }
            }
            obj(pairs)
        });
    prop::collection::vec(op, 1..3).prop_map(Value::Array)
}

/// Draws `n` values from `strategy` with a fixed seed.
fn draw<S: Strategy>(strategy: S, n: usize) -> Vec<S::Value> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .filter_map(|_| strategy.new_tree(&mut runner).ok().map(|t| t.current()))
        .collect()
}

fn generated_cases() -> Vec<(Value, PatchKind, String)> {
    let mut cases = Vec::new();
    for (o, p) in draw((gen_node(), gen_strategic_node_patch()), 96) {
        cases.push((o, PatchKind::Strategic, p.to_string()));
    }
    for p in draw(gen_strategic_node_patch(), 32) {
        // The same patches on a Lease: its metadata merges as a Node's does.
        let Some(meta) = p.get("metadata") else {
            continue;
        };
        cases.push((
            lease(),
            PatchKind::Strategic,
            json!({ "metadata": meta }).to_string(),
        ));
    }
    for (o, p) in draw((gen_node(), gen_merge_patch()), 48) {
        cases.push((o, PatchKind::Merge, p.to_string()));
    }
    for p in draw(gen_merge_patch(), 48) {
        cases.push((machine(), PatchKind::Merge, p.to_string()));
    }
    for (o, p) in draw((gen_node(), gen_json_patch()), 96) {
        cases.push((o, PatchKind::Json, p.to_string()));
    }
    for p in draw(gen_json_patch(), 32) {
        cases.push((machine(), PatchKind::Json, p.to_string()));
    }
    cases
}

#[test]
fn generated_patches_agree_with_kubectl() {
    let cases = generated_cases();
    assert!(
        cases.len() >= 250,
        "only {} cases were generated",
        cases.len()
    );
    let failures = run_all(&cases);
    assert!(
        failures.is_empty(),
        "{} of {} generated cases disagree with kubectl:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
