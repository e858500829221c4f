//! The HTTPS server: its lifecycle (start, down/up, restart with the store
//! kept), authentication, faults and hooks around every request, and the
//! REST handlers (get, list, watch, create, update, patch, delete) over the
//! store, with authorization, NodeRestriction admission and CRD validation
//! on the way in.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::authn::{self, PeerCert};
use crate::authz::{self, Decision, Rbac};
use crate::discovery;
use crate::faults::{FaultState, Faults, Scripted};
use crate::identity::{Attributes, NodeAuthzMode, Op, User};
use crate::kubeconfig;
use crate::patch::{self, PatchKind};
use crate::resources::{Registry, ResourceType};
use crate::routes::{self, Query, ResPath, Route};
use crate::schema::CrdSet;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{self, ApiError};
use crate::store::{at_version, Store, UpdateMode};
use crate::table;
use crate::tls::{Ca, ClientCert, TlsError};
use crate::watch::{self as watching, lock, WatchSpec};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// kube-apiserver refuses request bodies over 3 MiB (`maxRequestBodyBytes`).
const MAX_BODY: usize = 3 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Tls(#[from] TlsError),
    #[error("listening on 127.0.0.1: {0}")]
    Io(#[from] std::io::Error),
    #[error("the CRD schemas: {0}")]
    Schema(String),
    #[error("the RBAC YAML: {0}")]
    Rbac(String),
    #[error("the server's runtime: {0}")]
    Runtime(String),
}

/// One request as the server saw it, for a test's assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    /// The authenticated user (None when authentication failed or a script answered first).
    pub user: Option<String>,
    /// Which credential of that user was presented, as kube-apiserver's
    /// audit log tells pods of one ServiceAccount apart
    /// (`authentication.kubernetes.io/credential-id`): `token:<hash>` (see
    /// [`token_credential`]) or `x509:<serial>`; None without a credential.
    pub credential: Option<String>,
    /// The store's resourceVersion when the reply was made: every change
    /// this request made is at or before it.
    pub rv: u64,
    pub status: u16,
}

/// The credential id a request with bearer `token` is recorded under: a
/// hash, so the log does not hold the token.
pub fn token_credential(token: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    token.hash(&mut h);
    format!("token:{:016x}", h.finish())
}

type HookFn = Box<dyn FnMut(&mut Store) + Send>;

struct Hook {
    method: String,
    path_prefix: String,
    f: HookFn,
}

pub(crate) struct Inner {
    port: u16,
    ca: Ca,
    tls: Arc<rustls::ServerConfig>,
    store: Arc<Mutex<Store>>,
    registry: Arc<Registry>,
    crds: &'static CrdSet,
    tokens: HashMap<String, User>,
    revoked: Mutex<HashSet<u64>>,
    rbac: Rbac,
    node_mode: NodeAuthzMode,
    faults: Arc<FaultState>,
    hooks: Mutex<Vec<Hook>>,
    log: Mutex<Vec<RequestRecord>>,
    accept: Mutex<Option<JoinHandle<()>>>,
    /// Bumped to drop every open connection (restart, down).
    conn_gen: watch::Sender<u64>,
    /// Open connections: down and restart return once they are all gone.
    open: watch::Sender<usize>,
    bookmark_interval: Duration,
    rt: tokio::runtime::Handle,
}

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn bind(port: u16) -> std::io::Result<TcpListener> {
    let sock = TcpSocket::new_v4()?;
    sock.set_reuseaddr(true)?;
    sock.bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    sock.listen(1024)
}

impl Inner {
    fn drop_connections(&self) {
        self.conn_gen.send_modify(|g| *g += 1);
    }

    pub(crate) async fn stop_listening(&self) {
        let handle = guard(&self.accept).take();
        if let Some(h) = handle {
            h.abort();
            let _ = h.await;
        }
        self.drop_connections();
        let mut open = self.open.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(5), open.wait_for(|n| *n == 0)).await;
    }

    pub(crate) async fn listen(self: &Arc<Self>) -> std::io::Result<()> {
        if guard(&self.accept).is_some() {
            return Ok(());
        }
        let listener = {
            let _enter = self.rt.enter();
            bind(self.port)?
        };
        let me = Arc::clone(self);
        let handle = self.rt.spawn(accept_loop(me, listener));
        *guard(&self.accept) = Some(handle);
        Ok(())
    }
}

/// Counts a connection as open until its task ends.
struct OpenConn(Arc<Inner>);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    loop {
        let sock = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // EMFILE and friends: back off rather than spin.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let mut gen = inner.conn_gen.subscribe();
        let conn_inner = Arc::clone(&inner);
        inner.open.send_modify(|n| *n += 1);
        let open = OpenConn(Arc::clone(&inner));
        tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = gen.changed() => {}
                _ = serve_connection(conn_inner, sock) => {}
            }
            drop(open);
        });
    }
}

async fn serve_connection(inner: Arc<Inner>, sock: TcpStream) {
    while inner.faults.hung.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = sock.set_nodelay(true);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&inner.tls));
    let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(sock)).await
    else {
        return;
    };
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|der| authn::peer_cert(der.as_ref()));
    let svc_inner = Arc::clone(&inner);
    let service = hyper::service::service_fn(move |req| {
        let inner = Arc::clone(&svc_inner);
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(handle(inner, peer, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed_unsync());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.body)
}

fn scripted_response(s: &Scripted) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(s.body.clone())).boxed_unsync());
    *r.status_mut() = StatusCode::from_u16(s.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in &s.headers {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::try_from(k.as_str()),
            http::HeaderValue::try_from(v.as_str()),
        ) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

enum Reply {
    Json(u16, Value),
    Watch(tokio::sync::mpsc::Receiver<Bytes>),
    Text(u16, &'static str),
}

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Reply {
        Reply::Json(e.code, e.body)
    }
}

fn header(req: &Request<Incoming>, name: http::header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn handle(
    inner: Arc<Inner>,
    peer: Option<PeerCert>,
    req: Request<Incoming>,
) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let content_type = header(&req, http::header::CONTENT_TYPE).map(str::to_string);
    let accept = header(&req, http::header::ACCEPT).map(str::to_string);
    let authorization = header(&req, http::header::AUTHORIZATION).map(str::to_string);
    // The certificate wins over a token, as in `authn::authenticate`.
    let credential = match (&peer, authn::bearer(authorization.as_deref())) {
        (Some(p), _) => Some(format!("x509:{}", p.serial)),
        (None, Some(t)) => Some(token_credential(t)),
        (None, None) => None,
    };
    let record = |user: Option<&User>, status: u16| {
        let rv = lock(&inner.store).resource_version();
        guard(&inner.log).push(RequestRecord {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            content_type: content_type.clone(),
            user: user.map(|u| u.name.clone()),
            credential: credential.clone(),
            rv,
            status,
        });
    };

    while inner.faults.hung.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(d) = inner.faults.slow() {
        tokio::time::sleep(d).await;
    }
    if let Some(s) = inner.faults.take_script(&method, &path) {
        record(None, s.status);
        return scripted_response(&s);
    }
    let user = {
        let revoked = guard(&inner.revoked);
        authn::authenticate(
            peer.as_ref(),
            &revoked,
            authorization.as_deref(),
            &inner.tokens,
        )
    };
    let Some(user) = user else {
        record(None, 401);
        return error_response(&status::unauthorized());
    };
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => {
            record(Some(&user), e.code);
            return error_response(&e);
        }
    };
    {
        let mut hooks = guard(&inner.hooks);
        for h in hooks.iter_mut() {
            if h.method.eq_ignore_ascii_case(&method) && path.starts_with(&h.path_prefix) {
                let mut store = lock(&inner.store);
                (h.f)(&mut store);
            }
        }
    }
    let reply = route(
        &inner,
        &user,
        &method,
        &path,
        &Query::parse(&query),
        accept.as_deref(),
        content_type.as_deref(),
        &body,
    );
    match reply {
        Reply::Json(code, v) => {
            record(Some(&user), code);
            json_response(code, &v)
        }
        Reply::Text(code, t) => {
            record(Some(&user), code);
            let mut r = Response::new(Full::new(Bytes::from_static(t.as_bytes())).boxed_unsync());
            *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
            r
        }
        Reply::Watch(rx) => {
            record(Some(&user), 200);
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
            });
            let mut r = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
    }
}

/// Reads a request body of at most `MAX_BODY` bytes. A larger one is read
/// on (up to `DRAIN_LIMIT`, then the connection is given up) so that the
/// client gets the 413 rather than a reset (kube-apiserver's
/// `NewRequestEntityTooLargeError("limit is N")`).
async fn read_body(mut body: Incoming) -> Result<Bytes, ApiError> {
    const DRAIN_LIMIT: usize = 64 * 1024 * 1024;
    let mut buf = Vec::new();
    let mut seen = 0usize;
    let unreadable =
        |e: hyper::Error| status::bad_request(&format!("the request body could not be read: {e}"));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(unreadable)?;
        if let Ok(data) = frame.into_data() {
            seen += data.len();
            if seen <= MAX_BODY {
                buf.extend_from_slice(&data);
            } else if seen > DRAIN_LIMIT {
                break;
            }
        }
    }
    if seen > MAX_BODY {
        return Err(status::status(
            413,
            "RequestEntityTooLarge",
            &format!("Request entity too large: limit is {MAX_BODY}"),
            None,
        ));
    }
    Ok(Bytes::from(buf))
}

fn not_found_path() -> ApiError {
    status::status(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

#[allow(clippy::too_many_arguments)]
fn route(
    inner: &Arc<Inner>,
    user: &User,
    method: &str,
    path: &str,
    q: &Query,
    accept: Option<&str>,
    content_type: Option<&str>,
    body: &Bytes,
) -> Reply {
    let reg = &inner.registry;
    let r = routes::route(reg, path);
    if !matches!(r, Route::Resource(_)) && method != "GET" {
        return status::method_not_allowed(&format!(
            "the server does not allow this method on the requested resource ({method} {path})"
        ))
        .into();
    }
    match r {
        Route::Version => Reply::Json(200, discovery::version()),
        Route::Health => Reply::Text(200, "ok"),
        Route::Api => Reply::Json(
            200,
            discovery::api_versions(&format!("127.0.0.1:{}", inner.port)),
        ),
        Route::Apis => Reply::Json(200, discovery::api_group_list(reg)),
        Route::Group(g) => match discovery::api_group(reg, &g) {
            Some(d) => Reply::Json(200, d),
            None => not_found_path().into(),
        },
        Route::GroupVersion(g, v) => match discovery::resource_list(reg, &g, &v) {
            Some(d) => Reply::Json(200, d),
            None => not_found_path().into(),
        },
        Route::Resource(rp) => {
            match resource(inner, user, method, rp, q, accept, content_type, body) {
                Ok(r) => r,
                Err(e) => e.into(),
            }
        }
        Route::Unknown => not_found_path().into(),
    }
}

/// A 403 with the whole message authz or admission rendered.
fn forbidden(group: &str, resource: &str, name: &str, message: &str) -> ApiError {
    ApiError {
        code: 403,
        body: authz::forbidden_status(group, resource, name, message),
    }
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| status::bad_request(&format!("the request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(status::bad_request("the request body is not a JSON object"));
    }
    Ok(v)
}

fn check_kind(rt: &ResourceType, version: &str, obj: &Value) -> Result<(), ApiError> {
    let want = rt.api_version(version);
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        if av != want {
            return Err(status::bad_request(&format!(
                "the API version in the data ({av}) does not match the expected API version ({want})"
            )));
        }
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str) {
        if k != rt.kind {
            return Err(status::bad_request(&format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    Ok(())
}

fn selectors(q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
        .map_err(|e| status::bad_request(&e.0))?;
    let f = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""))
        .map_err(|e| status::bad_request(&e.0))?;
    Ok((l, f))
}

const BUILTIN_PATCH_TYPES: [&str; 3] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
/// What kube-apiserver lists for a custom resource (server-side apply is
/// not served here, so it is not offered either).
const CRD_PATCH_TYPES: [&str; 2] = [
    "application/json-patch+json",
    "application/merge-patch+json",
];

#[allow(clippy::too_many_arguments)]
fn resource(
    inner: &Arc<Inner>,
    user: &User,
    method: &str,
    rp: ResPath,
    q: &Query,
    accept: Option<&str>,
    content_type: Option<&str>,
    body: &Bytes,
) -> Result<Reply, ApiError> {
    let Some(rt) = inner
        .registry
        .by_plural(&rp.group, &rp.version, &rp.plural)
        .cloned()
    else {
        return Err(not_found_path());
    };
    if rp.namespace.is_some() && !rt.namespaced {
        return Err(not_found_path());
    }
    if let Some(sub) = &rp.sub {
        if sub != "status" || !rt.status_subresource {
            return Err(not_found_path());
        }
    }
    let watch = q.flag("watch");
    let named = rp.name.is_some();
    let verb = match (method, named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => {
            return Err(status::method_not_allowed(&format!(
                "the server does not allow this method on the requested resource ({method})"
            )))
        }
    };
    if rp.sub.is_some() && !matches!(verb, "get" | "update" | "patch") {
        return Err(not_found_path());
    }
    let attrs = Attributes {
        user: user.clone(),
        verb: verb.to_string(),
        api_group: rt.group.clone(),
        resource: rt.plural.clone(),
        subresource: rp.sub.clone(),
        namespace: rp.namespace.clone(),
        name: rp.name.clone(),
        field_selector: q.get("fieldSelector").map(str::to_string),
        label_selector: q.get("labelSelector").map(str::to_string),
    };
    if let Decision::Deny(message) = authz::authorize(&attrs, &inner.rbac, inner.node_mode) {
        return Err(forbidden(
            &rt.group,
            &rt.plural,
            &authz::effective_name(&attrs),
            &message,
        ));
    }
    let ns = rp.namespace.clone().unwrap_or_default();
    let name = rp.name.clone().unwrap_or_default();
    let version = rp.version.clone();
    let include = q.get("includeObject").unwrap_or("Metadata").to_string();
    let table = table::wants_table(accept);
    let printer_columns = inner
        .crds
        .kind(&rt.group, &rt.kind)
        .and_then(|k| k.version(&version))
        .map(|v| v.printer_columns.clone());

    // Admission (NodeRestriction for node identities on Nodes) and CRD
    // validation, on the final object of a write.
    let sub = rp.sub.clone();
    let crds = inner.crds;
    let is_node_write = rt.group.is_empty() && rt.plural == "nodes" && user.node_name().is_some();
    let admit = |op: Op| {
        let rt = rt.clone();
        let sub = sub.clone();
        let version = version.clone();
        move |old: Option<&Value>, new: &mut Value| -> Result<(), ApiError> {
            let n = new
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if is_node_write {
                authz::admit_node_restriction(user, op, old, new, sub.as_deref(), &n)
                    .map_err(|m| forbidden(&rt.group, &rt.plural, &n, &m))?;
            }
            if rt.crd {
                // A status write is judged as the status strategy judges it
                // (status, labels, annotations), the main resource whole.
                if sub.is_some() {
                    crds.validate_status(&rt.group, &version, &rt.kind, new)
                        .map(|_| ())
                        .map_err(invalid_to_api)?;
                } else {
                    crds.validate(&rt.group, &version, &rt.kind, new)
                        .map_err(invalid_to_api)?;
                }
            }
            Ok(())
        }
    };

    match verb {
        "get" => {
            let s = lock(&inner.store);
            let Some(obj) = s.get_at(&rt, &ns, &name) else {
                return Err(status::not_found(&rt.group, &rt.plural, &name));
            };
            let obj = at_version(&rt, &version, obj);
            if table {
                return Ok(Reply::Json(
                    200,
                    table::table(&rt, &[obj], None, &include, printer_columns.as_deref()),
                ));
            }
            Ok(Reply::Json(200, obj))
        }
        "list" => {
            let (l, f) = selectors(q)?;
            let s = lock(&inner.store);
            let (items, rv) = s.list_at(&rt, rp.namespace.as_deref(), &l, &f);
            let items: Vec<Value> = items
                .into_iter()
                .map(|o| at_version(&rt, &version, o))
                .collect();
            if table {
                return Ok(Reply::Json(
                    200,
                    table::table(&rt, &items, Some(rv), &include, printer_columns.as_deref()),
                ));
            }
            Ok(Reply::Json(
                200,
                json!({
                    "kind": format!("{}List", rt.kind),
                    "apiVersion": rt.api_version(&version),
                    "metadata": {"resourceVersion": rv.to_string()},
                    "items": items,
                }),
            ))
        }
        "watch" => {
            let (l, mut f) = selectors(q)?;
            if named {
                f = FieldSelector::parse(&format!("metadata.name={name}"))
                    .map_err(|e| status::bad_request(&e.0))?;
            }
            let start = match q.get("resourceVersion").unwrap_or("") {
                "" | "0" => None,
                s => Some(s.parse::<u64>().map_err(|_| {
                    status::bad_request(&format!("invalid resource version: {s:?}"))
                })?),
            };
            let timeout = q
                .get("timeoutSeconds")
                .and_then(|t| t.parse::<u64>().ok())
                .map(Duration::from_secs);
            let spec = WatchSpec {
                rt: rt.clone(),
                version: version.clone(),
                namespace: rp.namespace.clone(),
                labels: l,
                fields: f,
                start,
                bookmarks: q.flag("allowWatchBookmarks"),
                bookmark_interval: inner.bookmark_interval,
                timeout,
            };
            Ok(Reply::Watch(watching::spawn(
                Arc::clone(&inner.store),
                spec,
            )))
        }
        "create" => {
            let obj = parse_json(body)?;
            check_kind(&rt, &version, &obj)?;
            let mut check = admit(Op::Create);
            let mut s = lock(&inner.store);
            let created =
                s.create_at(&rt, &ns, at_version(&rt, &version, &obj), false, &mut check)?;
            Ok(Reply::Json(201, at_version(&rt, &version, &created)))
        }
        "update" => {
            let obj = parse_json(body)?;
            check_kind(&rt, &version, &obj)?;
            let mode = if sub.is_some() {
                UpdateMode::Status
            } else {
                UpdateMode::Main
            };
            let mut check = admit(Op::Update);
            let mut s = lock(&inner.store);
            let updated = s.update_at(&rt, &ns, &name, obj, mode, &mut check)?;
            Ok(Reply::Json(200, at_version(&rt, &version, &updated)))
        }
        "patch" => {
            let ct = content_type
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            let kind = match ct.as_str() {
                "application/strategic-merge-patch+json" if !rt.crd => PatchKind::Strategic,
                "application/merge-patch+json" => PatchKind::Merge,
                "application/json-patch+json" => PatchKind::Json,
                _ if rt.crd => return Err(status::unsupported_media_type(&CRD_PATCH_TYPES)),
                _ => return Err(status::unsupported_media_type(&BUILTIN_PATCH_TYPES)),
            };
            let mode = if sub.is_some() {
                UpdateMode::Status
            } else {
                UpdateMode::Main
            };
            let mut check = admit(Op::Update);
            let mut s = lock(&inner.store);
            let Some(old) = s.get_at(&rt, &ns, &name) else {
                return Err(status::not_found(&rt.group, &rt.plural, &name));
            };
            let original = at_version(&rt, &version, old);
            let meta = patch::patch_meta_for(&rt.api_version(&version), &rt.kind);
            let mut patched = patch::apply_patch(kind, &original, body, meta)
                .map_err(|e| status::status(e.http_status(), e.reason(), &e.message(), None))?;
            // A patch is unconditional unless it names a resourceVersion.
            let rv_missing = patched
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if rv_missing {
                if let (Some(m), Some(rv)) = (
                    patched.get_mut("metadata").and_then(Value::as_object_mut),
                    original.pointer("/metadata/resourceVersion"),
                ) {
                    m.insert("resourceVersion".into(), rv.clone());
                }
            }
            let updated = s.update_at(&rt, &ns, &name, patched, mode, &mut check)?;
            Ok(Reply::Json(200, at_version(&rt, &version, &updated)))
        }
        "delete" => {
            let opts: Value = if body.is_empty() {
                json!({})
            } else {
                parse_json(body)?
            };
            let uid = opts.pointer("/preconditions/uid").and_then(Value::as_str);
            let rv = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str);
            let mut s = lock(&inner.store);
            if is_node_write {
                if let Some(old) = s.get_at(&rt, &ns, &name) {
                    authz::admit_node_restriction(user, Op::Delete, Some(old), old, None, &name)
                        .map_err(|m| forbidden(&rt.group, &rt.plural, &name, &m))?;
                }
            }
            let deleted = s.delete_at(&rt, &ns, &name, uid, rv)?;
            Ok(Reply::Json(200, at_version(&rt, &version, &deleted)))
        }
        _ => {
            // deletecollection
            let (l, f) = selectors(q)?;
            let mut s = lock(&inner.store);
            let targets: Vec<(String, String)> = {
                let (items, _) = s.list_at(&rt, rp.namespace.as_deref(), &l, &f);
                items
                    .iter()
                    .map(|o| {
                        let g = |p: &str| {
                            o.pointer(p)
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string()
                        };
                        (g("/metadata/namespace"), g("/metadata/name"))
                    })
                    .collect()
            };
            let mut items = Vec::new();
            for (n_ns, n) in targets {
                items.push(at_version(
                    &rt,
                    &version,
                    &s.delete_at(&rt, &n_ns, &n, None, None)?,
                ));
            }
            let rv = s.resource_version();
            Ok(Reply::Json(
                200,
                json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(&version),
                       "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
            ))
        }
    }
}

fn invalid_to_api(i: crate::schema::Invalid) -> ApiError {
    ApiError {
        code: i.http_status(),
        body: i.status(),
    }
}

/// Builds a server (`TestApiServer::builder()`).
pub struct Builder {
    tokens: HashMap<String, User>,
    node_mode: NodeAuthzMode,
    rbac_yaml: Vec<String>,
    capi_versions: Option<Vec<String>>,
    bookmark_interval: Duration,
}

impl Builder {
    /// A bearer token and the identity it authenticates as.
    pub fn token(mut self, token: &str, user: User) -> Builder {
        self.tokens.insert(token.to_string(), user);
        self
    }

    pub fn node_authz(mut self, mode: NodeAuthzMode) -> Builder {
        self.node_mode = mode;
        self
    }

    /// ClusterRoles and ClusterRoleBindings (multi-document YAML), added to
    /// any given before.
    pub fn rbac_yaml(mut self, yaml: &str) -> Builder {
        self.rbac_yaml.push(yaml.to_string());
        self
    }

    /// Serve `cluster.x-k8s.io` at these versions only (e.g. `&["v1beta1"]`
    /// to test a client's version check).
    pub fn capi_served_versions(mut self, versions: &[&str]) -> Builder {
        self.capi_versions = Some(versions.iter().map(|v| v.to_string()).collect());
        self
    }

    /// How often a watch that allows bookmarks gets one (default 1 s;
    /// kube-apiserver sends them about once a minute).
    pub fn bookmark_interval(mut self, d: Duration) -> Builder {
        self.bookmark_interval = d;
        self
    }

    /// Binds 127.0.0.1 on a free port and serves. The server runs on a
    /// runtime of its own, so a test may block (e.g. run kubectl) freely.
    pub async fn start(self) -> Result<TestApiServer, ServerError> {
        let crds = CrdSet::upstream_shared().map_err(|e| ServerError::Schema(e.to_string()))?;
        let mut rbac = Rbac::default();
        for text in &self.rbac_yaml {
            rbac.add_yaml(text)
                .map_err(|e| ServerError::Rbac(e.to_string()))?;
        }
        let registry = Arc::new(Registry::new(crds, self.capi_versions.as_deref()));
        let ca = Ca::generate()?;
        let tls = ca.server_config()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-api")
            .enable_all()
            .build()
            .map_err(|e| ServerError::Runtime(e.to_string()))?;
        let bound = {
            let _enter = runtime.enter();
            bind(0).and_then(|l| l.local_addr().map(|a| (l, a.port())))
        };
        let (listener, port) = match bound {
            Ok(b) => b,
            Err(e) => {
                // A runtime may not be dropped inside the caller's async context.
                runtime.shutdown_background();
                return Err(e.into());
            }
        };
        let (conn_gen, _) = watch::channel(0);
        let (open, _) = watch::channel(0);
        let mut store = Store::new(Arc::clone(&registry));
        for ns in ["default", "kube-system", "kube-node-lease", "kube-public"] {
            let _ = store.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "status": {"phase": "Active"}}));
        }
        let inner = Arc::new(Inner {
            port,
            ca,
            tls,
            store: Arc::new(Mutex::new(store)),
            registry,
            crds,
            tokens: self.tokens,
            revoked: Mutex::new(HashSet::new()),
            rbac,
            node_mode: self.node_mode,
            faults: Arc::new(FaultState::default()),
            hooks: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            accept: Mutex::new(None),
            conn_gen,
            open,
            bookmark_interval: self.bookmark_interval,
            rt: runtime.handle().clone(),
        });
        let handle = runtime.spawn(accept_loop(Arc::clone(&inner), listener));
        *guard(&inner.accept) = Some(handle);
        Ok(TestApiServer {
            inner,
            runtime: Some(runtime),
        })
    }
}

/// A running test API server; dropping it stops it.
pub struct TestApiServer {
    inner: Arc<Inner>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        if let Some(h) = guard(&self.inner.accept).take() {
            h.abort();
        }
        self.inner.drop_connections();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl TestApiServer {
    pub fn builder() -> Builder {
        Builder {
            tokens: HashMap::new(),
            node_mode: NodeAuthzMode::default(),
            rbac_yaml: Vec::new(),
            capi_versions: None,
            bookmark_interval: Duration::from_secs(1),
        }
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.inner.port)
    }

    pub fn port(&self) -> u16 {
        self.inner.port
    }

    pub fn ca_pem(&self) -> String {
        self.inner.ca.ca_pem().to_string()
    }

    /// A client certificate of this server's CA: CN = `user`, O = `groups`
    /// (at most two). Panics only on a test bug (more than two groups) or a
    /// failure of the key generator; `try_client_cert` returns those instead.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> ClientCert {
        match self.try_client_cert(user, groups) {
            Ok(c) => c,
            Err(e) => panic!("test-api client certificate: {e}"),
        }
    }

    pub fn try_client_cert(&self, user: &str, groups: &[&str]) -> Result<ClientCert, TlsError> {
        self.inner.ca.client_cert(user, groups)
    }

    /// The certificate with this serial is refused (401) from the next request on.
    pub fn revoke(&self, serial: u64) {
        guard(&self.inner.revoked).insert(serial);
    }

    pub fn kubeconfig_inline(&self, cred: &ClientCert) -> String {
        kubeconfig::inline(&self.url(), self.inner.ca.ca_pem(), cred)
    }

    pub fn kubeconfig_files(
        &self,
        dir: &std::path::Path,
        cred: &ClientCert,
    ) -> std::io::Result<std::path::PathBuf> {
        kubeconfig::files(dir, &self.url(), self.inner.ca.ca_pem(), cred)
    }

    pub fn kubeconfig_kubelet_style(
        &self,
        dir: &std::path::Path,
        cred: &ClientCert,
    ) -> std::io::Result<std::path::PathBuf> {
        kubeconfig::kubelet_style(dir, &self.url(), self.inner.ca.ca_pem(), cred)
    }

    pub fn kubeconfig_token(&self, token: &str) -> String {
        kubeconfig::token(&self.url(), self.inner.ca.ca_pem(), token)
    }

    /// Runs `f` on the store (as root: no authorization, no admission).
    pub fn with_store<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut s = lock(&self.inner.store);
        f(&mut s)
    }

    /// Creates an object as the test (status kept, no authorization).
    pub fn create(&self, obj: Value) -> Result<Value, ApiError> {
        self.with_store(|s| s.create(obj))
    }

    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.with_store(|s| s.get(api_version, kind, namespace, name))
    }

    /// Replaces an object as the test (spec and status; a resourceVersion in
    /// `obj` is a precondition).
    pub fn put(&self, obj: Value) -> Result<Value, ApiError> {
        self.with_store(|s| s.put(obj))
    }

    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.with_store(|s| s.delete(api_version, kind, namespace, name))
    }

    pub fn faults(&self) -> Faults {
        Faults {
            state: Arc::clone(&self.inner.faults),
            server: Arc::clone(&self.inner),
        }
    }

    /// Runs `hook` on the store whenever a request with this method and a
    /// path starting with `path_prefix` arrives, before it is handled (after
    /// authentication): a concurrent writer between a client's read and write.
    pub fn on_request(
        &self,
        method: &str,
        path_prefix: &str,
        hook: impl FnMut(&mut Store) + Send + 'static,
    ) {
        guard(&self.inner.hooks).push(Hook {
            method: method.to_string(),
            path_prefix: path_prefix.to_string(),
            f: Box::new(hook),
        });
    }

    /// Drops every connection (watches end) and listens again on the same
    /// port; the store is kept, as an etcd-backed kube-apiserver restarts.
    pub async fn restart(&self) -> std::io::Result<()> {
        self.inner.stop_listening().await;
        self.inner.listen().await
    }

    /// Watches from a resourceVersion below the current one expire (410).
    pub fn compact(&self) {
        self.with_store(|s| s.compact());
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        guard(&self.inner.log).clone()
    }

    pub fn clear_requests(&self) {
        guard(&self.inner.log).clear();
    }
}
