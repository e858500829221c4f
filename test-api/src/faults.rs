//! Faults a test switches on: the server down (connection refused), hung
//! (accepts, never answers), slow, and scripted answers per method and path
//! prefix, consumed one per matching request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::status;

/// One canned answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Scripted {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Scripted {
    /// An answer with the metav1.Status kube-apiserver sends for `code`
    /// (401, 403, 404, 409, 429, 500, 503; others get a generic reason).
    pub fn status(code: u16) -> Scripted {
        let (reason, message) = match code {
            401 => ("Unauthorized", "Unauthorized"),
            403 => ("Forbidden", "forbidden (scripted)"),
            404 => ("NotFound", "the server could not find the requested resource"),
            409 => (
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
            ),
            429 => ("TooManyRequests", "Too many requests, please try again later."),
            500 => ("InternalError", "Internal error occurred: scripted"),
            503 => ("ServiceUnavailable", "The server is currently unable to handle the request"),
            _ => ("Unknown", "scripted"),
        };
        let body: Value = status::status(code, reason, message, None).body;
        Scripted {
            status: code,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string(),
        }
    }

    /// A 429 with `Retry-After: secs`, as kube-apiserver's max-in-flight filter sends it.
    pub fn too_many_requests(retry_after_secs: u64) -> Scripted {
        let mut s = Scripted::status(429);
        s.headers
            .push(("Retry-After".into(), retry_after_secs.to_string()));
        s
    }

    pub fn header(mut self, name: &str, value: &str) -> Scripted {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

struct Script {
    method: String,
    path_prefix: String,
    answers: VecDeque<Scripted>,
}

#[derive(Default)]
pub(crate) struct FaultState {
    pub(crate) hung: AtomicBool,
    pub(crate) slow: Mutex<Option<Duration>>,
    scripts: Mutex<Vec<Script>>,
}

impl FaultState {
    pub(crate) fn take_script(&self, method: &str, path: &str) -> Option<Scripted> {
        let mut scripts = self.scripts.lock().unwrap_or_else(|e| e.into_inner());
        let s = scripts.iter_mut().find(|s| {
            s.method.eq_ignore_ascii_case(method)
                && path.starts_with(&s.path_prefix)
                && !s.answers.is_empty()
        })?;
        s.answers.pop_front()
    }

    pub(crate) fn slow(&self) -> Option<Duration> {
        *self.slow.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fault switches of one server (`TestApiServer::faults`).
#[derive(Clone)]
pub struct Faults {
    pub(crate) state: Arc<FaultState>,
    pub(crate) server: Arc<crate::server::Inner>,
}

impl Faults {
    /// Closes the listening socket and drops every connection: clients get
    /// "connection refused" until `up`.
    pub async fn down(&self) {
        self.server.stop_listening().await;
    }

    /// Listens again on the same port.
    pub async fn up(&self) -> std::io::Result<()> {
        self.server.listen().await
    }

    /// Accepts connections and never answers (no TLS handshake, no response)
    /// until `clear`.
    pub fn hung(&self) {
        self.state.hung.store(true, Ordering::SeqCst);
    }

    /// Every answer waits `d` first.
    pub fn slow(&self, d: Duration) {
        *self.state.slow.lock().unwrap_or_else(|e| e.into_inner()) = Some(d);
    }

    /// The next requests whose method is `method` and whose path starts with
    /// `path_prefix` get these answers, one each, then the server answers
    /// again.
    pub fn script(&self, method: &str, path_prefix: &str, answers: Vec<Scripted>) {
        let mut scripts = self.state.scripts.lock().unwrap_or_else(|e| e.into_inner());
        scripts.push(Script {
            method: method.to_string(),
            path_prefix: path_prefix.to_string(),
            answers: answers.into(),
        });
    }

    /// Hung, slow and scripts off (down is undone by `up`).
    pub fn clear(&self) {
        self.state.hung.store(false, Ordering::SeqCst);
        *self.state.slow.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.state
            .scripts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
