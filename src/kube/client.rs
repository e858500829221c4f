//! The few requests the agent makes, over HTTP/1.1 on rustls (hyper's
//! client, already in the binary for tonic): GET its Node, a strategic
//! merge PATCH of `nodes/NAME/status`, a merge PATCH of `nodes/NAME`.
//!
//! One connection per request: the agent writes a few times an hour, and a
//! fresh handshake always presents the credential as it is on disk now.
//! Every request is bounded by one deadline (connect, handshake, request
//! and response). A 401 re-reads the credential and tries once more.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use http_body_util::{BodyExt, Full, Limited};
use hyper::{body::Bytes, header, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::{
    kube::creds::{self, CredError, Loaded},
    nodestatus::condition::NodeCondition,
    text,
};

/// Largest response body read (a Node is tens of KiB).
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// What went wrong talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("credential: {0}")]
    Credentials(#[from] CredError),
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("cannot connect to {0}")]
    Connect(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("{method} {path}: {code} {message}")]
    Status {
        method: &'static str,
        path: String,
        code: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("the API server's answer is not a Node: {0}")]
    Decode(String),
}

impl KubeError {
    /// The failure reason for the metrics and the log's state changes.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Credentials(c) if c.is_missing() => "credentials_missing",
            Self::Credentials(_) => "credentials",
            Self::Timeout(_) => "timeout",
            Self::Connect(_) => "connect",
            Self::Tls(_) => "tls",
            Self::Http(_) | Self::Decode(_) => "protocol",
            Self::Status { code: 401, .. } => "unauthorized",
            Self::Status { code: 403, .. } => "forbidden",
            Self::Status { code: 404, .. } => "not_found",
            Self::Status { code: 409, .. } => "conflict",
            Self::Status { code: 429, .. } => "throttled",
            Self::Status { code, .. } if *code >= 500 => "server_error",
            Self::Status { .. } => "refused",
        }
    }

    /// `Retry-After` of a 429 or 503.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// What the agent reads of its Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    pub uid: String,
    /// `metadata.resourceVersion`: tells a read served from the API
    /// server's watch cache that lags behind what a write returned.
    pub resource_version: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
    pub conditions: Vec<NodeCondition>,
    pub boot_id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawNode {
    #[serde(default)]
    metadata: RawMeta,
    #[serde(default)]
    status: RawStatus,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    resource_version: String,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    #[serde(default)]
    conditions: Option<Vec<NodeCondition>>,
    #[serde(default)]
    node_info: RawInfo,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawInfo {
    #[serde(default, rename = "bootID")]
    boot_id: String,
}

/// Whether `read` is older than `known`, the same Node as a write
/// returned it: a cached read that has not caught up with the write yet.
/// resourceVersions are opaque to clients by contract, but etcd's are
/// increasing integers; anything else is never called older. Pure.
pub fn older(read: &NodeView, known: &NodeView) -> bool {
    read.uid == known.uid
        && matches!(
            (read.resource_version.parse::<u64>(), known.resource_version.parse::<u64>()),
            (Ok(r), Ok(k)) if r < k
        )
}

/// Parses the parts of a Node the agent uses (pure).
pub fn parse_node(body: &[u8]) -> Result<NodeView, KubeError> {
    let raw: RawNode =
        serde_json::from_slice(body).map_err(|e| KubeError::Decode(e.to_string()))?;
    if raw.metadata.uid.is_empty() {
        return Err(KubeError::Decode("no metadata.uid".into()));
    }
    Ok(NodeView {
        uid: raw.metadata.uid,
        resource_version: raw.metadata.resource_version,
        labels: raw.metadata.labels.unwrap_or_default(),
        annotations: raw.metadata.annotations.unwrap_or_default(),
        conditions: raw.status.conditions.unwrap_or_default(),
        boot_id: raw.status.node_info.boot_id,
    })
}

/// The `message` of a Kubernetes `Status` body, else the body's first
/// line; cleaned and bounded (it goes to the log).
fn status_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct S {
        #[serde(default)]
        message: String,
    }
    let m = serde_json::from_slice::<S>(body)
        .map(|s| s.message)
        .unwrap_or_else(|_| {
            String::from_utf8_lossy(body)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string()
        });
    text::clean_capped(&m, 300)
}

/// `Retry-After` in seconds (the API server never sends a date).
fn retry_after(h: &header::HeaderMap) -> Option<Duration> {
    h.get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(|s| Duration::from_secs(s.min(3600)))
}

/// The client: a kubeconfig path, its credential as last loaded.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    loaded: Option<Loaded>,
    timeout: Duration,
}

impl Client {
    pub fn new(kubeconfig: &Path, timeout: Duration) -> Self {
        Self {
            path: kubeconfig.to_path_buf(),
            loaded: None,
            timeout,
        }
    }

    /// The credential, (re-)loaded when never loaded, `force`d, or changed
    /// on disk.
    pub fn credential(&mut self, force: bool) -> Result<&Loaded, CredError> {
        let stale = force || self.loaded.as_ref().is_none_or(Loaded::changed_on_disk);
        if stale {
            self.loaded = Some(creds::load(&self.path)?);
        }
        self.loaded
            .as_ref()
            .ok_or(CredError::Missing(self.path.clone()))
    }

    /// The Node, from the API server's watch cache (`resourceVersion=0`),
    /// as kubelet reads its own: a quorum read from etcd on every resync of
    /// every node is what kubelet avoids at scale. The cache may lag a
    /// moment behind a write; the writer keeps the newer of the two
    /// ([`older`]).
    pub async fn get_node(&mut self, name: &str) -> Result<NodeView, KubeError> {
        let body = self
            .send(
                Method::GET,
                &format!("/api/v1/nodes/{name}?resourceVersion=0"),
                None,
                Vec::new(),
            )
            .await?;
        parse_node(&body)
    }

    /// Strategic merge patch of `nodes/NAME/status`.
    pub async fn patch_status(&mut self, name: &str, body: Vec<u8>) -> Result<NodeView, KubeError> {
        let path = format!("/api/v1/nodes/{name}/status");
        let b = self
            .send(
                Method::PATCH,
                &path,
                Some("application/strategic-merge-patch+json"),
                body,
            )
            .await?;
        parse_node(&b)
    }

    /// JSON merge patch of `nodes/NAME` (labels, annotations).
    pub async fn patch_metadata(
        &mut self,
        name: &str,
        body: Vec<u8>,
    ) -> Result<NodeView, KubeError> {
        let path = format!("/api/v1/nodes/{name}");
        let b = self
            .send(
                Method::PATCH,
                &path,
                Some("application/merge-patch+json"),
                body,
            )
            .await?;
        parse_node(&b)
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        content_type: Option<&'static str>,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, KubeError> {
        let mut retried = false;
        loop {
            let loaded = self.credential(retried)?.clone();
            let res = tokio::time::timeout(
                self.timeout,
                once(&loaded, method.clone(), path, content_type, body.clone()),
            )
            .await
            .map_err(|_| KubeError::Timeout(self.timeout))??;
            let (status, headers, bytes) = res;
            if status.is_success() {
                return Ok(bytes);
            }
            // A rotated credential: read it again and try once more.
            if status == StatusCode::UNAUTHORIZED && !retried {
                retried = true;
                continue;
            }
            return Err(KubeError::Status {
                method: method_name(&method),
                path: path.to_string(),
                code: status.as_u16(),
                message: status_message(&bytes),
                retry_after: retry_after(&headers),
            });
        }
    }
}

fn method_name(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::PATCH => "PATCH",
        Method::PUT => "PUT",
        _ => "request",
    }
}

/// One request on a new connection.
async fn once(
    l: &Loaded,
    method: Method,
    path: &str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
) -> Result<(StatusCode, header::HeaderMap, Vec<u8>), KubeError> {
    let addr = (l.host.as_str(), l.port);
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| KubeError::Connect(format!("{}:{}: {e}", l.host, l.port)))?;
    let _ = tcp.set_nodelay(true);
    let tls = TlsConnector::from(l.tls.clone())
        .connect(l.server_name.clone(), tcp)
        .await
        .map_err(|e| KubeError::Tls(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| KubeError::Http(e.to_string()))?;
    // The connection task ends when the request is done and the sender
    // dropped (or with the deadline that drops this future).
    let conn = tokio::spawn(conn);
    let host = if l.host.contains(':') {
        format!("[{}]:{}", l.host, l.port)
    } else {
        format!("{}:{}", l.host, l.port)
    };
    let mut req = Request::builder()
        .method(method)
        .uri(format!("{}{path}", l.prefix))
        .header(header::HOST, host)
        .header(header::ACCEPT, "application/json")
        .header(
            header::USER_AGENT,
            concat!("sandbox-readiness/", env!("CARGO_PKG_VERSION")),
        );
    if let Some(ct) = content_type {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    if let Some(t) = &l.token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| KubeError::Http(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| KubeError::Http(e.to_string()));
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            conn.abort();
            return Err(e);
        }
    };
    let (parts, body) = resp.into_parts();
    let bytes = Limited::new(body, MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| KubeError::Http(format!("reading the answer: {e}")))?
        .to_bytes();
    drop(sender);
    conn.abort();
    Ok((parts.status, parts.headers, bytes.to_vec()))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_cached_read_behind_a_write_is_older() {
        let node = |uid: &str, rv: &str| NodeView {
            uid: uid.into(),
            resource_version: rv.into(),
            ..NodeView::default()
        };
        assert!(older(&node("u", "99"), &node("u", "100")));
        assert!(!older(&node("u", "100"), &node("u", "100")));
        assert!(!older(&node("u", "101"), &node("u", "100")));
        // Another Node (re-registered), or versions that are no integers:
        // never called older.
        assert!(!older(&node("v", "1"), &node("u", "100")));
        assert!(!older(&node("u", "a"), &node("u", "100")));
        let parsed = parse_node(br#"{"metadata":{"uid":"u","resourceVersion":"42"}}"#).unwrap();
        assert_eq!(parsed.resource_version, "42");
    }

    use super::*;

    #[test]
    fn a_node_as_the_api_server_returns_it() {
        let body = br#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"w1","uid":"u-1","labels":{"kubernetes.io/hostname":"w1"}},
            "status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-12-01T10:00:00Z","lastTransitionTime":"2026-12-01T09:00:00Z","reason":"KubeletReady","message":"ok"}],
            "nodeInfo":{"bootID":"b-1","machineID":"m"}}}"#;
        let n = parse_node(body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n.uid, "u-1");
        assert_eq!(n.boot_id, "b-1");
        assert_eq!(n.conditions.len(), 1);
        assert_eq!(n.labels.len(), 1);
        assert!(n.annotations.is_empty());
        let bare = parse_node(br#"{"metadata":{"uid":"u"}}"#).unwrap_or_else(|e| panic!("{e}"));
        assert!(bare.conditions.is_empty() && bare.boot_id.is_empty());
        assert!(parse_node(b"{}").is_err());
        assert!(parse_node(b"<html>").is_err());
    }

    #[test]
    fn status_messages_and_retry_after() {
        let forbidden = br#"{"kind":"Status","status":"Failure","message":"nodes \"b\" is forbidden: node \"a\" is not allowed to modify node \"b\"","reason":"Forbidden","code":403}"#;
        assert_eq!(
            status_message(forbidden),
            r#"nodes "b" is forbidden: node "a" is not allowed to modify node "b""#
        );
        assert_eq!(status_message(b"upstream down\nmore"), "upstream down");
        let mut h = header::HeaderMap::new();
        h.insert(header::RETRY_AFTER, header::HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(
            header::RETRY_AFTER,
            header::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn reasons() {
        let st = |code| KubeError::Status {
            method: "GET",
            path: "/".into(),
            code,
            message: String::new(),
            retry_after: None,
        };
        assert_eq!(st(403).reason(), "forbidden");
        assert_eq!(st(404).reason(), "not_found");
        assert_eq!(st(429).reason(), "throttled");
        assert_eq!(st(503).reason(), "server_error");
        assert_eq!(st(422).reason(), "refused");
        assert_eq!(
            KubeError::Timeout(Duration::from_secs(1)).reason(),
            "timeout"
        );
        assert_eq!(
            KubeError::Credentials(CredError::Missing("/x".into())).reason(),
            "credentials_missing"
        );
    }
}
