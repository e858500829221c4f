//! The reader's side, pure: what a Node as the API server returns it says
//! about its sandbox readiness — the condition, how old its heartbeat is,
//! and whether the desired state it was judged against (the
//! `sandbox-readiness.io/desired` annotation) covers a pool's. One reader
//! ([`read`]) and one judge ([`judge`]) for `check --from-node-conditions`
//! and the readiness-gate controller, so both take a Node the same way;
//! each then words the [`Judged`] its own way (check as a row, the
//! controller as a Machine condition with its reasons).

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::{
    desired,
    nodestatus::{condition::Status, VERDICT_BOOT_ANNOTATION},
    proto::v1::DesiredState,
};

/// A Node's condition heartbeat older than this is stale by default
/// (`check --max-heartbeat-age`, the controller's `--stale-after`): the
/// agent heartbeats every 5 min (`serve --node-heartbeat`) and writes
/// within 1 s of a change, so 15 min is two missed heartbeats plus 5 min
/// for an API server outage and the writer's backoff.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(15 * 60);

/// The agent writes its condition, then its desired-state annotation: a
/// `True` condition this fresh without an annotation is not yet judged
/// (not "not checked" for the moment between the two writes).
pub const ANNOTATION_GRACE: Duration = Duration::from_secs(10);

/// The Node's condition of the reader's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// A status other than the three words reads as `Unknown`: the Node
    /// says something no reader can take as `True`.
    pub status: Status,
    pub reason: String,
    pub message: String,
    /// `lastHeartbeatTime`, else `lastTransitionTime` (another writer may
    /// set only that); `None`: neither is there or readable.
    pub heartbeat: Option<SystemTime>,
}

/// What one Node says.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// `metadata.name` (empty when absent: the caller refuses such input).
    pub name: String,
    /// The condition, when the Node has it.
    pub condition: Option<Seen>,
    /// The desired-state annotation, parsed (`None`: no annotation).
    pub desired: Option<Result<DesiredState, String>>,
    /// The boot the Node is on and the one its condition was observed on.
    pub boot: Boot,
}

/// Which boot a Node's condition belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Boot {
    /// kubelet's `status.nodeInfo.bootID`: the boot the node is on now
    /// (empty: kubelet has not posted it).
    pub node: String,
    /// The agent's [`VERDICT_BOOT_ANNOTATION`]: the boot its condition was
    /// observed on (`None`: an agent that does not record it, or none yet).
    pub verdict: Option<String>,
}

impl Boot {
    /// The condition was observed on another boot than the node's own:
    /// what it says is not about the node as it runs now.
    pub fn mismatch(&self) -> Option<(&str, &str)> {
        match &self.verdict {
            Some(v) if !self.node.is_empty() && *v != self.node => Some((v, &self.node)),
            _ => None,
        }
    }
}

/// What the Node is judged against besides its own condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Pool {
    /// Nothing: the condition is the verdict.
    Own,
    /// The pool's desired state: a `True` Node's annotation must cover it.
    Known(DesiredState),
    /// The pool's desired state cannot be read (one line, no secret text).
    Unreadable(String),
    /// Not known yet (a passing read error): a `True` Node is undecided.
    NotYetKnown,
}

/// A Node's verdict as a reader takes it, most important cause first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// No condition of the type on the Node.
    NoCondition,
    /// The condition carries no heartbeat time.
    NoHeartbeat,
    /// The heartbeat is this old, more than the reader allows: the agent
    /// may have stopped, and its last word stays on the Node.
    Stale(Duration),
    /// The condition was observed on boot `verdict`; the node now runs
    /// boot `node` (rebooted since, or another machine's Node under the
    /// same name): nobody has checked this boot yet.
    AnotherBoot { verdict: String, node: String },
    /// The Node's own word: `False`, `Unknown`, or `True` (then covering
    /// the pool, when there is one).
    Said(Status),
    /// `True`, but without a desired-state annotation to compare with the
    /// pool's; `fresh`: within [`ANNOTATION_GRACE`] of the heartbeat.
    NoAnnotation { fresh: bool },
    /// `True`, but the annotation or the pool cannot be read.
    Unreadable(String),
    /// `True`, but the node checks less than its pool asks: the keys not
    /// covered, each a sentence.
    Uncovered(Vec<String>),
    /// `True`, and the pool is not known yet.
    PoolNotYetKnown,
}

impl Judged {
    /// The status a reader that has no more to go on gives: `Unknown`
    /// while the Node cannot tell or is not yet comparable, `False` when
    /// it says so or checks less than the pool asks.
    pub fn status(&self) -> Status {
        match self {
            Judged::Said(s) => *s,
            Judged::NoCondition
            | Judged::NoHeartbeat
            | Judged::Stale(_)
            | Judged::AnotherBoot { .. }
            | Judged::NoAnnotation { fresh: true }
            | Judged::PoolNotYetKnown => Status::Unknown,
            Judged::NoAnnotation { fresh: false }
            | Judged::Unreadable(_)
            | Judged::Uncovered(_) => Status::False,
        }
    }

    pub fn ready(&self) -> bool {
        self.status() == Status::True
    }

    /// One line for a person: why the Node is where it is (the
    /// condition's own reason and message when it is the Node's word).
    pub fn message(&self, r: &Reading, stale_after: Duration) -> String {
        match self {
            Judged::NoCondition => {
                "no condition on the Node (is the agent running with --kubeconfig?)".into()
            }
            Judged::NoHeartbeat => "the condition has no heartbeat time".into(),
            Judged::Stale(age) => format!(
                "the condition's heartbeat is {} old (stale after {}): the agent may have stopped",
                humantime::format_duration(Duration::from_secs(age.as_secs())),
                humantime::format_duration(stale_after)
            ),
            Judged::AnotherBoot { verdict, node } => format!(
                "the condition was observed on boot {verdict}, but the node now runs boot {node} \
                 (status.nodeInfo.bootID): this boot is not checked yet"
            ),
            Judged::Said(_) => match &r.condition {
                Some(c) if c.message.is_empty() => c.reason.clone(),
                Some(c) if c.reason.is_empty() => c.message.clone(),
                Some(c) => format!("{}: {}", c.reason, c.message),
                None => String::new(),
            },
            Judged::NoAnnotation { .. } => format!(
                "ready by its own desired state, but the Node has no {} annotation to compare with the pool's",
                desired::ANNOTATION
            ),
            Judged::Unreadable(why) => {
                format!("its desired state cannot be compared with the pool's: {why}")
            }
            Judged::Uncovered(keys) => format!(
                "the node checks less than its pool asks: {}",
                keys.join("; ")
            ),
            Judged::PoolNotYetKnown => "the pool's desired state is not known yet".into(),
        }
    }
}

fn time(v: &Value) -> Option<SystemTime> {
    v.as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// Reads `node` (a Node object as JSON, as the API server returns it).
pub fn read(node: &Value, condition_type: &str) -> Reading {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let condition = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"].as_str() == Some(condition_type))
        .map(|c| Seen {
            status: c["status"]
                .as_str()
                .and_then(Status::parse)
                .unwrap_or(Status::Unknown),
            reason: text(&c["reason"]),
            message: text(&c["message"]),
            heartbeat: time(&c["lastHeartbeatTime"]).or_else(|| time(&c["lastTransitionTime"])),
        });
    let desired = node["metadata"]["annotations"][desired::ANNOTATION]
        .as_str()
        .map(|a| desired::from_annotation(a).map_err(|e| e.to_string()));
    // Both are the tenant's text: kept only as a bootID can be (a UUID).
    let boot_id = |v: &Value| {
        v.as_str().map(|s| {
            s.chars()
                .take(64)
                .filter(|c| c.is_ascii_graphic())
                .collect::<String>()
        })
    };
    Reading {
        name: text(&node["metadata"]["name"]),
        condition,
        desired,
        boot: Boot {
            node: boot_id(&node["status"]["nodeInfo"]["bootID"]).unwrap_or_default(),
            verdict: boot_id(&node["metadata"]["annotations"][VERDICT_BOOT_ANNOTATION]),
        },
    }
}

/// Judges a reading at `now`: a heartbeat older than `stale_after` is
/// stale (a heartbeat in the future, clock skew, is fresh); a `True` Node
/// must also have been judged against a desired state that covers the
/// pool's, when there is a pool. A condition that is not `True` wins over
/// the pool: what the node says is wrong matters first.
pub fn judge(r: &Reading, now: SystemTime, stale_after: Duration, pool: &Pool) -> Judged {
    let Some(c) = &r.condition else {
        return Judged::NoCondition;
    };
    let Some(heartbeat) = c.heartbeat else {
        return Judged::NoHeartbeat;
    };
    let age = now.duration_since(heartbeat).unwrap_or_default();
    if age > stale_after {
        return Judged::Stale(age);
    }
    if let Some((verdict, node)) = r.boot.mismatch() {
        return Judged::AnotherBoot {
            verdict: verdict.into(),
            node: node.into(),
        };
    }
    if c.status != Status::True {
        return Judged::Said(c.status);
    }
    let pool = match pool {
        Pool::Own => return Judged::Said(Status::True),
        Pool::Unreadable(why) => return Judged::Unreadable(why.clone()),
        Pool::NotYetKnown => return Judged::PoolNotYetKnown,
        Pool::Known(p) => p,
    };
    match &r.desired {
        None => Judged::NoAnnotation {
            fresh: age < ANNOTATION_GRACE,
        },
        Some(Err(e)) => Judged::Unreadable(e.clone()),
        Some(Ok(node)) => match desired::covers(node, pool) {
            Ok(()) => Judged::Said(Status::True),
            Err(missing) => Judged::Uncovered(missing.iter().map(ToString::to_string).collect()),
        },
    }
}

/// Reads the JSON of `kubectl get nodes -o json` (a `NodeList`, a `List`
/// of Nodes, or one `Node`): one reading per Node. Bad input is one line
/// naming `origin` and the item: not JSON, another kind (a `MachineList`
/// says what to run instead), a Node without a name or listed twice.
pub fn read_list(text: &str, origin: &str, condition_type: &str) -> Result<Vec<Reading>, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("{origin}: not JSON (expected `kubectl get nodes -o json`): {e}"))?;
    let kind = v["kind"].as_str().unwrap_or("");
    let items: Vec<&Value> = match (kind, &v["items"]) {
        ("Node", _) => vec![&v],
        ("NodeList" | "List" | "", Value::Array(items)) => items.iter().collect(),
        ("MachineList" | "Machine", _) => {
            return Err(format!(
                "{origin}: a {kind} carries no Node conditions: give the Nodes (kubectl get nodes -o json)"
            ))
        }
        _ => {
            return Err(format!(
                "{origin}: expected a NodeList (kubectl get nodes -o json), found kind {:?}",
                kind.chars().take(80).collect::<String>()
            ))
        }
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |m: String| format!("{origin}: item {}: {m}", i + 1);
        match item["kind"].as_str() {
            None | Some("Node") => {}
            Some(k) => {
                return Err(at(format!(
                    "kind {:?} is not Node",
                    k.chars().take(80).collect::<String>()
                )))
            }
        }
        let r = read(item, condition_type);
        if r.name.is_empty() {
            return Err(at("no metadata.name".into()));
        }
        if !seen.insert(r.name.clone()) {
            return Err(at(format!("Node {} is listed twice", r.name)));
        }
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = crate::nodestatus::DEFAULT_CONDITION_TYPE;
    const STALE: Duration = DEFAULT_STALE_AFTER;

    fn node(status: &str, heartbeat: &str, annotation: Option<&str>) -> Value {
        let mut n = json!({
            "metadata": {"name": "worker-1", "annotations": {}},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": T, "status": status, "reason": "SysctlMismatch", "message": "user.max_user_namespaces is 0, expected 11255",
                 "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-12-01T09:00:00Z"}
            ]}
        });
        if let Some(a) = annotation {
            n["metadata"]["annotations"][desired::ANNOTATION] = json!(a);
        }
        n
    }

    fn now() -> SystemTime {
        humantime::parse_rfc3339("2026-12-01T10:10:00Z").unwrap_or(SystemTime::UNIX_EPOCH)
    }

    fn pool() -> Pool {
        Pool::Known(DesiredState {
            sysctls: vec![crate::proto::v1::SysctlExpectation {
                name: "user.max_user_namespaces".into(),
                value: "11255".into(),
            }],
            require_userns: true,
            require_gvisor: true,
            ..DesiredState::default()
        })
    }

    fn j(n: &Value, pool: &Pool) -> (Judged, String) {
        let r = read(n, T);
        let got = judge(&r, now(), STALE, pool);
        let m = got.message(&r, STALE);
        (got, m)
    }

    const FRESH: &str = "2026-12-01T10:05:00Z";

    #[test]
    fn the_nodes_own_word() {
        let (got, m) = j(&node("True", FRESH, None), &Pool::Own);
        assert_eq!(got, Judged::Said(Status::True));
        assert!(got.ready(), "{m}");
        let (got, m) = j(&node("False", FRESH, None), &Pool::Own);
        assert_eq!(got.status(), Status::False);
        assert!(
            m.starts_with("SysctlMismatch: user.max_user_namespaces is 0"),
            "{m}"
        );
        let (got, _) = j(&node("Unknown", FRESH, None), &Pool::Own);
        assert_eq!(got, Judged::Said(Status::Unknown));
        // A status no one should write is not True.
        let (got, _) = j(&node("true", FRESH, None), &Pool::Own);
        assert_eq!(got, Judged::Said(Status::Unknown));
        let (got, m) = j(&json!({"metadata": {"name": "w"}}), &Pool::Own);
        assert_eq!(
            (got.status(), m.contains("no condition")),
            (Status::Unknown, true)
        );
        // Not a Node at all reads as one without a condition.
        assert_eq!(j(&json!([1]), &Pool::Own).0, Judged::NoCondition);
        assert_eq!(read(&json!([1]), T).name, "");
    }

    #[test]
    fn lists() {
        let one = |name: &str| node("True", FRESH, None).tap_name(name);
        let list = json!({"kind": "List", "apiVersion": "v1", "items": [one("a"), one("b")]});
        let got = read_list(&list.to_string(), "o", T).unwrap_or_default();
        assert_eq!(
            got.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let single = one("c").to_string();
        assert_eq!(read_list(&single, "o", T).map(|l| l.len()), Ok(1));
        let empty = json!({"kind": "NodeList", "items": []}).to_string();
        assert_eq!(read_list(&empty, "o", T), Ok(vec![]));
        let err = |v: Value| read_list(&v.to_string(), "--kube-nodes n.json", T).unwrap_err();
        assert!(read_list("a\nb", "o", T)
            .unwrap_err()
            .starts_with("o: not JSON"));
        let e = err(json!({"kind": "MachineList", "items": []}));
        assert!(e.contains("MachineList carries no Node conditions"), "{e}");
        let e = err(json!({"kind": "PodList", "items": []}));
        assert!(e.ends_with("found kind \"PodList\""), "{e}");
        let e = err(json!({"kind": "List", "items": [one("a"), {"kind": "Node", "metadata": {}}]}));
        assert_eq!(e, "--kube-nodes n.json: item 2: no metadata.name");
        let e = err(json!({"kind": "List", "items": [one("a"), one("a")]}));
        assert_eq!(e, "--kube-nodes n.json: item 2: Node a is listed twice");
        let e = err(json!({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}));
        assert_eq!(e, "--kube-nodes n.json: item 1: kind \"Pod\" is not Node");
    }

    trait TapName {
        fn tap_name(self, name: &str) -> Value;
    }

    impl TapName for Value {
        fn tap_name(mut self, name: &str) -> Value {
            self["metadata"]["name"] = json!(name);
            self["kind"] = json!("Node");
            self
        }
    }

    #[test]
    fn heartbeats() {
        // Stale: the agent stopped; its last True means nothing now.
        let (got, m) = j(&node("True", "2026-12-01T09:00:00Z", None), &Pool::Own);
        assert_eq!(got.status(), Status::Unknown);
        assert!(
            m.contains("1h 10m old") && m.contains("stale after 15m"),
            "{m}"
        );
        // Exactly at the limit is fresh, one second past it stale.
        assert!(j(&node("True", "2026-12-01T09:55:00Z", None), &Pool::Own)
            .0
            .ready());
        assert!(!j(&node("True", "2026-12-01T09:54:59Z", None), &Pool::Own)
            .0
            .ready());
        // Fractional seconds, as some writers send.
        assert!(j(
            &node("True", "2026-12-01T10:05:00.123456Z", None),
            &Pool::Own
        )
        .0
        .ready());
        // Clock skew: a heartbeat in the future is fresh.
        assert!(j(&node("True", "2026-12-01T10:20:00Z", None), &Pool::Own)
            .0
            .ready());
        // Unreadable heartbeat: lastTransitionTime stands in (09:00, stale).
        let (got, _) = j(&node("True", "garbage", None), &Pool::Own);
        assert_eq!(got, Judged::Stale(Duration::from_secs(70 * 60)));
        let mut n = node("True", FRESH, None);
        if let Some(c) = n["status"]["conditions"][1].as_object_mut() {
            c.retain(|k, _| !k.starts_with("last"));
        }
        assert_eq!(j(&n, &Pool::Own).0, Judged::NoHeartbeat);
    }

    #[test]
    fn against_the_pool() {
        let userns =
            r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255"},"require":["userns"]}"#;
        let all = r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255"},"require":["userns","gvisor"]}"#;
        let (got, m) = j(&node("True", FRESH, None), &pool());
        assert_eq!(
            (got, m.contains("annotation")),
            (Judged::NoAnnotation { fresh: false }, true)
        );
        // Just written: the annotation follows the condition.
        let (got, _) = j(&node("True", "2026-12-01T10:09:55Z", None), &pool());
        assert_eq!(
            (got.status(), got),
            (Status::Unknown, Judged::NoAnnotation { fresh: true })
        );
        let (got, m) = j(&node("True", FRESH, Some(userns)), &pool());
        assert_eq!(got.status(), Status::False);
        assert!(
            m.contains("checks less than its pool asks") && m.contains("gvisor"),
            "{m}"
        );
        assert!(j(&node("True", FRESH, Some(all)), &pool()).0.ready());
        let (got, _) = j(&node("True", FRESH, Some("{\"v\":9}")), &pool());
        assert!(matches!(got, Judged::Unreadable(_)), "{got:?}");
        // False wins over the pool: what the node says is wrong comes first.
        assert_eq!(
            j(&node("False", FRESH, Some(userns)), &pool()).0,
            Judged::Said(Status::False)
        );
        assert_eq!(
            j(&node("True", FRESH, Some(all)), &Pool::NotYetKnown).0,
            Judged::PoolNotYetKnown
        );
        let (got, m) = j(
            &node("True", FRESH, Some(all)),
            &Pool::Unreadable("no secret".into()),
        );
        assert_eq!(got.status(), Status::False);
        assert!(m.ends_with("no secret"), "{m}");
    }
}
