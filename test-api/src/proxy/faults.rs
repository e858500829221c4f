//! What the proxy does instead of forwarding: canned answers per method and
//! path prefix (consumed one per matching request), a hang, slow heads and
//! trickling bodies, resets, and rewrites of the real server's answers
//! (hostile content the real server would never store or send).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::guard;

/// A metav1.Status body as kube-apiserver writes it
/// (k8s.io/apimachinery `pkg/api/errors`).
pub fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// One canned answer, or a connection reset instead of one.
#[derive(Debug, Clone, PartialEq)]
pub struct Scripted {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Instead of answering, the connection is reset (RST).
    pub reset: bool,
}

impl Scripted {
    /// An answer with the metav1.Status kube-apiserver sends for `code`
    /// (401, 403, 404, 409, 410, 429, 500, 503; others get a generic reason).
    pub fn status(code: u16) -> Scripted {
        let (reason, message) = match code {
            401 => ("Unauthorized", "Unauthorized"),
            403 => ("Forbidden", "forbidden (scripted)"),
            404 => ("NotFound", "the server could not find the requested resource"),
            409 => (
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
            ),
            410 => ("Expired", "too old resource version: 1 (2)"),
            429 => ("TooManyRequests", "Too many requests, please try again later."),
            500 => ("InternalError", "Internal error occurred: scripted"),
            503 => ("ServiceUnavailable", "The server is currently unable to handle the request"),
            _ => ("Unknown", "scripted"),
        };
        Scripted::json(code, &status_body(code, reason, message))
    }

    /// A 429 with `Retry-After: secs`, as kube-apiserver's max-in-flight and
    /// priority-and-fairness filters send it.
    pub fn too_many_requests(retry_after_secs: u64) -> Scripted {
        Scripted::status(429).header("Retry-After", &retry_after_secs.to_string())
    }

    /// `code` with `body` as JSON (an object of the wrong kind, say).
    pub fn json(code: u16, body: &Value) -> Scripted {
        Scripted::raw(code, "application/json", body.to_string().into_bytes())
    }

    /// Any bytes (malformed JSON, an oversized object).
    pub fn raw(code: u16, content_type: &str, body: Vec<u8>) -> Scripted {
        Scripted {
            status: code,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
            reset: false,
        }
    }

    /// What a watch from a compacted resourceVersion gets: 200, then one
    /// ERROR event carrying a 410 Expired Status, then the end of the stream.
    pub fn watch_gone() -> Scripted {
        let event = json!({
            "type": "ERROR",
            "object": status_body(410, "Expired", "too old resource version: 1 (2)"),
        });
        Scripted::raw(200, "application/json", format!("{event}\n").into_bytes())
    }

    /// The connection is reset instead of answered.
    pub fn reset() -> Scripted {
        Scripted {
            status: 0,
            headers: Vec::new(),
            body: Vec::new(),
            reset: true,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Scripted {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// A change made to the real server's JSON answer before the client sees it.
pub type RewriteFn = Arc<dyn Fn(&mut Value) + Send + Sync>;

struct Matcher {
    method: String,
    path_prefix: String,
}

impl Matcher {
    fn matches(&self, method: &str, path: &str) -> bool {
        self.method.eq_ignore_ascii_case(method) && path.starts_with(&self.path_prefix)
    }
}

struct Script {
    on: Matcher,
    answers: VecDeque<Scripted>,
}

struct Rewrite {
    on: Matcher,
    left: usize,
    f: RewriteFn,
}

#[derive(Default)]
pub(crate) struct FaultState {
    pub(crate) hung: AtomicBool,
    slow: Mutex<Option<Duration>>,
    trickle: Mutex<Option<Duration>>,
    /// TCP mode: connections to reset as soon as they are accepted.
    pub(crate) resets: AtomicUsize,
    scripts: Mutex<Vec<Script>>,
    rewrites: Mutex<Vec<Rewrite>>,
}

impl FaultState {
    pub(crate) fn take_script(&self, method: &str, path: &str) -> Option<Scripted> {
        let mut scripts = guard(&self.scripts);
        let s = scripts
            .iter_mut()
            .find(|s| s.on.matches(method, path) && !s.answers.is_empty())?;
        s.answers.pop_front()
    }

    pub(crate) fn take_rewrite(&self, method: &str, path: &str) -> Option<RewriteFn> {
        let mut rewrites = guard(&self.rewrites);
        let r = rewrites
            .iter_mut()
            .find(|r| r.left > 0 && r.on.matches(method, path))?;
        r.left -= 1;
        Some(Arc::clone(&r.f))
    }

    pub(crate) fn slow(&self) -> Option<Duration> {
        *guard(&self.slow)
    }

    pub(crate) fn trickle(&self) -> Option<Duration> {
        *guard(&self.trickle)
    }

    pub(crate) fn take_reset(&self) -> bool {
        self.resets
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    pub(crate) async fn wait_unhung(&self) {
        while self.hung.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The fault switches of one proxy (`FaultProxy::faults`).
#[derive(Clone)]
pub struct Faults {
    pub(crate) state: Arc<FaultState>,
    pub(crate) proxy: Arc<super::Inner>,
}

impl Faults {
    /// Closes the listening socket and drops every connection: clients get
    /// "connection refused" until `up`.
    pub fn down(&self) {
        self.proxy.stop_listening();
    }

    /// Listens again on the same port.
    pub fn up(&self) -> std::io::Result<()> {
        self.proxy.listen()
    }

    /// Drops every open connection with a reset (RST); the proxy keeps
    /// listening.
    pub fn reset_connections(&self) {
        self.proxy.drop_connections(true);
    }

    /// TCP mode: the next `n` connections are reset as soon as they are
    /// accepted (HTTP mode: script [`Scripted::reset`] instead).
    pub fn reset_next(&self, n: usize) {
        self.state.resets.fetch_add(n, Ordering::SeqCst);
    }

    /// Accepts connections and never answers (no TLS handshake on new
    /// connections, no response on open ones, no bytes forwarded in TCP
    /// mode) until `clear`.
    pub fn hung(&self) {
        self.state.hung.store(true, Ordering::SeqCst);
    }

    /// Every answer's head waits `d` first.
    pub fn slow(&self, d: Duration) {
        *guard(&self.state.slow) = Some(d);
    }

    /// Every chunk of every answer's body waits `d` first (a slow body:
    /// watches and large lists trickle).
    pub fn trickle(&self, d: Duration) {
        *guard(&self.state.trickle) = Some(d);
    }

    /// The next requests whose method is `method` and whose path starts with
    /// `path_prefix` get these answers, one each, then the real server
    /// answers again.
    pub fn script(&self, method: &str, path_prefix: &str, answers: Vec<Scripted>) {
        guard(&self.state.scripts).push(Script {
            on: Matcher {
                method: method.to_string(),
                path_prefix: path_prefix.to_string(),
            },
            answers: answers.into(),
        });
    }

    /// The next `times` JSON answers of the real server to requests matching
    /// `method` and `path_prefix` go through `f` before the client sees them
    /// (each event's `object` for a watch).
    pub fn rewrite(
        &self,
        method: &str,
        path_prefix: &str,
        times: usize,
        f: impl Fn(&mut Value) + Send + Sync + 'static,
    ) {
        guard(&self.state.rewrites).push(Rewrite {
            on: Matcher {
                method: method.to_string(),
                path_prefix: path_prefix.to_string(),
            },
            left: times,
            f: Arc::new(f),
        });
    }

    /// An annotation `key` of `bytes` bytes in the next `times` answers
    /// matching `method` and `path_prefix` (kube-apiserver refuses to store
    /// more than 256 KiB of annotations: only a proxy can serve this).
    pub fn inject_annotation(
        &self,
        method: &str,
        path_prefix: &str,
        times: usize,
        key: &str,
        bytes: usize,
    ) {
        let key = key.to_string();
        self.rewrite(method, path_prefix, times, move |obj| {
            fn annotate(o: &mut Value, key: &str, bytes: usize) {
                if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    let anns = meta.entry("annotations").or_insert_with(|| json!({}));
                    if let Some(anns) = anns.as_object_mut() {
                        anns.insert(key.to_string(), Value::String("x".repeat(bytes)));
                    }
                }
            }
            match obj.get_mut("items").and_then(Value::as_array_mut) {
                Some(items) => items.iter_mut().for_each(|i| annotate(i, &key, bytes)),
                None => annotate(obj, &key, bytes),
            }
        });
    }

    /// Hung, slow, trickle, resets, scripts and rewrites off (down is undone
    /// by `up`).
    pub fn clear(&self) {
        self.state.hung.store(false, Ordering::SeqCst);
        self.state.resets.store(0, Ordering::SeqCst);
        *guard(&self.state.slow) = None;
        *guard(&self.state.trickle) = None;
        guard(&self.state.scripts).clear();
        guard(&self.state.rewrites).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_consumed_in_order_per_method_and_prefix() {
        let state = FaultState::default();
        let mut scripts = guard(&state.scripts);
        scripts.push(Script {
            on: Matcher {
                method: "PATCH".into(),
                path_prefix: "/api/v1/nodes/a".into(),
            },
            answers: vec![Scripted::status(503), Scripted::too_many_requests(2)].into(),
        });
        drop(scripts);
        assert_eq!(state.take_script("GET", "/api/v1/nodes/a"), None);
        assert_eq!(state.take_script("patch", "/api/v1/nodes/b/status"), None);
        let first = state.take_script("patch", "/api/v1/nodes/a/status");
        assert_eq!(first.map(|s| s.status), Some(503));
        let second = state
            .take_script("PATCH", "/api/v1/nodes/a")
            .expect("the 429");
        assert_eq!(second.status, 429);
        assert!(second
            .headers
            .iter()
            .any(|(k, v)| k == "Retry-After" && v == "2"));
        assert_eq!(state.take_script("PATCH", "/api/v1/nodes/a"), None);
    }

    #[test]
    fn status_bodies_are_kube_apiserver_statuses() {
        let s = Scripted::status(409);
        let v: Value = serde_json::from_slice(&s.body).expect("JSON");
        assert_eq!(
            (v["kind"].as_str(), v["reason"].as_str(), v["code"].as_u64()),
            (Some("Status"), Some("Conflict"), Some(409))
        );
        let gone: Value = serde_json::from_slice(&Scripted::watch_gone().body).expect("JSON");
        assert_eq!(gone["type"], "ERROR");
        assert_eq!(gone["object"]["reason"], "Expired");
        assert!(Scripted::reset().reset);
    }

    #[test]
    fn rewrites_run_the_given_number_of_times() {
        let state = FaultState::default();
        guard(&state.rewrites).push(Rewrite {
            on: Matcher {
                method: "GET".into(),
                path_prefix: "/api/v1/nodes".into(),
            },
            left: 2,
            f: Arc::new(|v: &mut Value| v["x"] = json!(1)),
        });
        assert!(state.take_rewrite("GET", "/api/v1/nodes/a").is_some());
        assert!(state.take_rewrite("PUT", "/api/v1/nodes/a").is_none());
        assert!(state.take_rewrite("GET", "/api/v1/nodes").is_some());
        assert!(state.take_rewrite("GET", "/api/v1/nodes").is_none());
    }
}
