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

use serde_json::{json, Value};
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
    let applied = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((obj, kind, patch)) = cases.get(i) else {
                    break;
                };
                match check(obj, *kind, patch) {
                    Ok(Agreed::BothApplied) => {
                        applied.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Agreed::BothFailed) => {
                        refused.fetch_add(1, Ordering::Relaxed);
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
    eprintln!(
        "{} cases: {} applied alike, {} refused by both, {} disagree",
        cases.len(),
        applied.into_inner(),
        refused.into_inner(),
        failures.len()
    );
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
