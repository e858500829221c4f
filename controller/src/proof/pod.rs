//! The proof pod: its name, its manifest, and what kubelet did with it.
//! Pure: the orchestration is in [`super`].
//!
//! What kubelet does with a pod it cannot start is not a pod status: the
//! pod stays `Pending` and kubelet retries the sandbox with a backoff,
//! recording a Warning Event each time (`FailedCreatePodSandBox` with the
//! runtime's words, as the kubelet matrix recorded them:
//! docs/developer/kubelet-matrix.md). So a proof reads the pod and, while
//! it is not running, kubelet's Events about it (by the pod's uid).

use serde_json::{json, Value};

use super::request::Combo;

/// The label every proof pod carries (and nothing else the controller
/// touches: it lists, and deletes, only pods with it).
pub const MANAGED_BY: (&str, &str) = (
    "app.kubernetes.io/managed-by",
    "sandbox-readiness-controller",
);
/// The label naming the Machine a pod proves (a digest of its uid: label
/// values are short).
pub const PROOF_OF: &str = "sandbox-readiness.io/proof-of";
/// Annotations: the Machine (`namespace/name`), its uid, the Node's bootID
/// and the pod's requirements, as the annotation named them.
pub const MACHINE: &str = "sandbox-readiness.io/machine";
pub const MACHINE_UID: &str = "sandbox-readiness.io/machine-uid";
pub const BOOT: &str = "sandbox-readiness.io/boot";
pub const POD: &str = "sandbox-readiness.io/pod";

/// kubelet stops the pod after this (`activeDeadlineSeconds`): a node that
/// never answers ends the proof, and a pod left by a controller that died
/// does not run for ever.
pub const DEADLINE_SECONDS: u64 = 120;

/// Longest excerpt of kubelet's words kept in the Machine's message.
pub const EXCERPT: usize = 400;

/// FNV-1a, 64 bits: names and labels derived from uids (not a security
/// boundary: every pod is also checked by its annotations).
fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The [`PROOF_OF`] label value of a Machine.
pub fn proof_of(machine_uid: &str) -> String {
    format!("{:016x}", fnv(&[machine_uid]))
}

/// 12 hex digits of the parts' digest.
pub fn digest(parts: &[&str]) -> String {
    format!("{:012x}", fnv(parts) & 0xffff_ffff_ffff)
}

/// A proof pod's name: the Machine and boot, the run (`run`, unique per
/// create) and the combination. A controller that restarts (or a new
/// leader) finds a running proof's pods by their label and annotations,
/// not by name.
pub fn name(machine_uid: &str, boot: &str, combo: &Combo, run: &str) -> String {
    format!(
        "sr-proof-{}-{run}-{}",
        digest(&[machine_uid, boot]),
        combo.slug()
    )
}

/// What a proof pod is made from.
pub struct Spec<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub machine: &'a (String, String),
    pub machine_uid: &'a str,
    pub node: &'a str,
    pub node_uid: &'a str,
    pub boot: &'a str,
    pub combo: &'a Combo,
    pub image: &'a str,
}

/// The pod: on the node by `spec.nodeName` (no scheduler), tolerating every
/// taint, the `restricted` Pod Security level, a projected service-account
/// token and a memory `emptyDir` (idmapped mounts on tmpfs are where
/// user-namespace pods fail), tiny requests, the image already on the node
/// (`IfNotPresent`), and a deadline. Owned by its Node, so the workload
/// cluster's garbage collector removes it with the Node.
pub fn manifest(s: &Spec<'_>) -> Value {
    let mut spec = json!({
        "nodeName": s.node,
        "tolerations": [{"operator": "Exists"}],
        "restartPolicy": "Never",
        "activeDeadlineSeconds": DEADLINE_SECONDS,
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"}
        },
        "containers": [{
            "name": "proof",
            "image": s.image,
            "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}},
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]}
            },
            "volumeMounts": [
                {"name": "token", "mountPath": "/var/run/secrets/sandbox-readiness", "readOnly": true},
                {"name": "scratch", "mountPath": "/scratch"}
            ]
        }],
        "volumes": [
            {"name": "token", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}}]}},
            {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
        ]
    });
    if s.combo.userns {
        spec["hostUsers"] = json!(false);
    }
    if let Some(c) = &s.combo.class {
        spec["runtimeClassName"] = json!(c);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": s.name,
            "namespace": s.namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1, PROOF_OF: proof_of(s.machine_uid)},
            "annotations": {
                MACHINE: format!("{}/{}", s.machine.0, s.machine.1),
                MACHINE_UID: s.machine_uid,
                BOOT: s.boot,
                POD: s.combo.name(),
            },
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": s.node, "uid": s.node_uid}]
        },
        "spec": spec
    })
}

/// What kubelet did with a proof pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its container runs: proven.
    Running,
    /// Not yet decided.
    Pending,
    /// The node cannot run it: kubelet's reason and its words (cleaned, cut).
    Failed { reason: String, text: String },
    /// Whether the node could run it is not known: our reason and why.
    Unknown { reason: &'static str, text: String },
}

/// The image could not be had: not the node's sandbox failing.
pub const PROOF_IMAGE_UNAVAILABLE: &str = "ProofImageUnavailable";
/// The pod's deadline passed with no answer from kubelet.
pub const PROOF_TIMED_OUT: &str = "ProofTimedOut";
/// Someone else deleted the pod (or its namespace, or its Node).
pub const PROOF_INTERRUPTED: &str = "ProofInterrupted";

fn excerpt(s: &str) -> String {
    sandbox_readiness::text::clean_capped(s, EXCERPT)
}

fn str_of<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// Waiting reasons of a container whose image cannot be had.
const IMAGE_WAITING: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
];

/// Decides from the pod and kubelet's Events about it (any order).
pub fn judge(pod: &Value, events: &[Value]) -> Outcome {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Outcome::Unknown {
            reason: PROOF_INTERRUPTED,
            text: "the proof pod is being deleted by someone else".into(),
        };
    }
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !statuses.is_empty()
        && statuses
            .iter()
            .all(|c| c.pointer("/state/running").is_some())
    {
        return Outcome::Running;
    }
    if str_of(pod, "/status/phase") == "Failed" {
        let reason = str_of(pod, "/status/reason");
        let text = excerpt(str_of(pod, "/status/message"));
        return if reason == "DeadlineExceeded" {
            Outcome::Unknown {
                reason: PROOF_TIMED_OUT,
                text: format!("kubelet did not start the pod within {DEADLINE_SECONDS} s: {text}"),
            }
        } else {
            Outcome::Failed {
                reason: if reason.is_empty() {
                    "PodFailed"
                } else {
                    reason
                }
                .to_string(),
                text,
            }
        };
    }
    for c in statuses {
        // A container that ran and ended (the image does not keep running):
        // the sandbox and the container both started.
        if c.pointer("/state/terminated").is_some()
            && str_of(c, "/state/terminated/reason") == "Completed"
        {
            return Outcome::Running;
        }
        let waiting = str_of(c, "/state/waiting/reason");
        let text = excerpt(str_of(c, "/state/waiting/message"));
        if IMAGE_WAITING.contains(&waiting) {
            return Outcome::Unknown {
                reason: PROOF_IMAGE_UNAVAILABLE,
                text: format!("{waiting}: {text}"),
            };
        }
        if matches!(
            waiting,
            "CreateContainerError" | "CreateContainerConfigError" | "RunContainerError"
        ) {
            return Outcome::Failed {
                reason: waiting.to_string(),
                text,
            };
        }
    }
    // kubelet's Warnings, oldest first (its retries repeat the first).
    let mut warnings: Vec<&Value> = events
        .iter()
        .filter(|e| str_of(e, "/type") == "Warning")
        .collect();
    warnings.sort_by_key(|e| {
        let t = str_of(e, "/firstTimestamp");
        if t.is_empty() {
            str_of(e, "/eventTime")
        } else {
            t
        }
    });
    for e in warnings {
        let reason = str_of(e, "/reason");
        let text = excerpt(str_of(e, "/message"));
        match reason {
            "FailedCreatePodSandBox" => {
                return Outcome::Failed {
                    reason: reason.to_string(),
                    text,
                }
            }
            // kubelet's reason for an image it could not pull or inspect:
            // not the node's sandbox failing.
            "ErrImageNeverPull" | "InspectFailed" => {
                return Outcome::Unknown {
                    reason: PROOF_IMAGE_UNAVAILABLE,
                    text: format!("{reason}: {text}"),
                }
            }
            "Failed" if text.to_ascii_lowercase().contains("pull") => {
                return Outcome::Unknown {
                    reason: PROOF_IMAGE_UNAVAILABLE,
                    text: format!("{reason}: {text}"),
                }
            }
            // A container kubelet could not create or start.
            "Failed" => {
                return Outcome::Failed {
                    reason: reason.to_string(),
                    text,
                }
            }
            _ => {}
        }
    }
    Outcome::Pending
}

#[cfg(test)]
mod tests {
    use super::*;

    fn combo(class: Option<&str>, userns: bool) -> Combo {
        Combo {
            class: class.map(str::to_string),
            userns,
        }
    }

    fn spec<'a>(machine: &'a (String, String), combo: &'a Combo) -> Spec<'a> {
        Spec {
            name: "sr-proof-x",
            namespace: "sandbox-readiness-proof",
            machine,
            machine_uid: "m-uid",
            node: "w1",
            node_uid: "n-uid",
            boot: "b1",
            combo,
            image: "registry.k8s.io/pause:3.10",
        }
    }

    #[test]
    fn the_pod_is_restricted_and_says_whose_it_is() {
        let m = ("ns".to_string(), "m1".to_string());
        let c = combo(Some("gvisor"), true);
        let p = manifest(&spec(&m, &c));
        assert_eq!(p["spec"]["hostUsers"], false);
        assert_eq!(p["spec"]["runtimeClassName"], "gvisor");
        assert_eq!(p["spec"]["nodeName"], "w1");
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            p["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let sc = &p["spec"]["containers"][0]["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"][0], "ALL");
        assert_eq!(p["spec"]["volumes"][1]["emptyDir"]["medium"], "Memory");
        assert_eq!(p["metadata"]["labels"][PROOF_OF], proof_of("m-uid"));
        assert_eq!(p["metadata"]["annotations"][MACHINE], "ns/m1");
        assert_eq!(p["metadata"]["annotations"][POD], "gvisor+userns");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Node");
        let plain = manifest(&spec(&m, &combo(None, false)));
        assert!(plain["spec"].get("hostUsers").is_none());
        assert!(plain["spec"].get("runtimeClassName").is_none());
        assert_eq!(p["metadata"]["name"], "sr-proof-x");
        // The Machine and boot, the run, the pod.
        let n = name("m-uid", "b1", &c, "r1");
        assert!(
            n.starts_with(&format!("sr-proof-{}-r1-", digest(&["m-uid", "b1"])))
                && n.ends_with("-gvisor-userns"),
            "{n}"
        );
        assert_ne!(n, name("m-uid", "b2", &c, "r1"));
        assert_ne!(n, name("m-uid", "b1", &c, "r2"));
        assert!(n.len() <= 253);
    }

    fn ev(reason: &str, message: &str, at: &str) -> Value {
        json!({"type": "Warning", "reason": reason, "message": message, "firstTimestamp": at})
    }

    #[test]
    fn what_kubelet_did_is_read_as_the_matrix_recorded_it() {
        let pending = json!({"status": {"phase": "Pending"}});
        assert_eq!(judge(&pending, &[]), Outcome::Pending);
        let running = json!({"status": {"phase": "Running",
            "containerStatuses": [{"state": {"running": {"startedAt": "x"}}}]}});
        assert_eq!(judge(&running, &[]), Outcome::Running);
        let userns = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces";
        let got = judge(
            &pending,
            &[
                ev(
                    "FailedMount",
                    "configmap not yet there",
                    "2026-12-06T10:00:00Z",
                ),
                ev("FailedCreatePodSandBox", userns, "2026-12-06T10:00:01Z"),
            ],
        );
        assert_eq!(
            got,
            Outcome::Failed {
                reason: "FailedCreatePodSandBox".into(),
                text: userns.into()
            }
        );
        let pull = judge(
            &pending,
            &[ev("Failed", "Failed to pull image \"x\": not found", "t")],
        );
        assert!(
            matches!(
                pull,
                Outcome::Unknown {
                    reason: PROOF_IMAGE_UNAVAILABLE,
                    ..
                }
            ),
            "{pull:?}"
        );
        let waiting = json!({"status": {"phase": "Pending", "containerStatuses": [
            {"state": {"waiting": {"reason": "ErrImageNeverPull", "message": "m"}}}]}});
        assert!(matches!(
            judge(&waiting, &[]),
            Outcome::Unknown {
                reason: PROOF_IMAGE_UNAVAILABLE,
                ..
            }
        ));
        let deadline = json!({"status": {"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active on the node longer than the specified deadline"}});
        assert!(matches!(
            judge(&deadline, &[]),
            Outcome::Unknown {
                reason: PROOF_TIMED_OUT,
                ..
            }
        ));
        let deleting =
            json!({"metadata": {"deletionTimestamp": "t"}, "status": {"phase": "Pending"}});
        assert!(matches!(
            judge(&deleting, &[]),
            Outcome::Unknown {
                reason: PROOF_INTERRUPTED,
                ..
            }
        ));
        // A Normal event or an unknown Warning decides nothing.
        let other = judge(
            &pending,
            &[json!({"type": "Normal", "reason": "Pulled", "message": "m"})],
        );
        assert_eq!(other, Outcome::Pending);
        // kubelet's words are cleaned and cut.
        let long = format!("{}\u{7}", "x".repeat(2000));
        match judge(&pending, &[ev("FailedCreatePodSandBox", &long, "t")]) {
            Outcome::Failed { text, .. } => {
                assert!(text.chars().count() <= EXCERPT + 1 && !text.contains('\u{7}'))
            }
            o => panic!("{o:?}"),
        }
    }
}
