//! The live CRI tier: what the container runtime itself says, over its unix
//! socket (`runtime.v1.RuntimeService/Version` and `Status` with
//! `verbose=true`).
//!
//! Two generations of runtimes report handlers differently:
//! - containerd 2.x (and CRI-O) fill `StatusResponse.runtime_handlers`, each
//!   with `features` when the runtime could introspect the handler. An unset
//!   `features` means "could not ask the shim" (e.g. the shim binary is
//!   missing), which is not the same as "every feature false", so it stays
//!   unset in the report.
//! - containerd 1.6/1.7 never fill it; their handlers are only visible in the
//!   verbose `info["config"]` JSON, under `.containerd.runtimes.<name>`.
//!
//! Every failure (endpoint syntax, absent socket, refused connection, hung
//! peer, gRPC status, unparsable `info`) becomes a sentence in
//! `CriRuntime.error`; nothing here panics, and the whole exchange runs under
//! one deadline so a hung runtime cannot hold a report.

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::{
    cri::{
        self, runtime_service_client::RuntimeServiceClient, StatusRequest, StatusResponse,
        VersionRequest,
    },
    v1::{CriRuntime, RuntimeCondition, RuntimeHandler},
};

use super::pb_duration;

/// The default deadline for the whole exchange (`--cri-timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

use crate::report::names::CRI_SOCKET_ABSENT;
pub use crate::report::names::{SOURCE_INFO_CONFIG, SOURCE_RUNTIME_HANDLERS};

/// The CRI API version we speak; containerd and crictl use the same string.
const KUBE_RUNTIME_API_VERSION: &str = "0.1.0";

/// Asks the CRI runtime at `endpoint` (`unix:///path` or an absolute path)
/// for its version, conditions and runtime handlers, all within `timeout`.
pub async fn observe(endpoint: &str, timeout: Duration) -> CriRuntime {
    let started = Instant::now();
    let mut out = CriRuntime {
        endpoint: endpoint.to_string(),
        ..CriRuntime::default()
    };
    // The exchange writes into `out` as it goes, so a timeout in Status still
    // reports what Version said.
    let result = tokio::time::timeout(timeout, exchange(endpoint, &mut out)).await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => out.error = e,
        Err(_) => {
            out.error = format!(
                "CRI did not answer within {}",
                humantime::format_duration(timeout)
            );
        }
    }
    out.duration = Some(pb_duration(started.elapsed()));
    out
}

/// Connects, calls Version then Status, and fills `out`. The error is the
/// sentence for `CriRuntime.error`.
async fn exchange(endpoint: &str, out: &mut CriRuntime) -> Result<(), String> {
    let (path, channel) = connect(endpoint).await?;
    let mut client = RuntimeServiceClient::new(channel);

    let version = client
        .version(VersionRequest {
            version: KUBE_RUNTIME_API_VERSION.to_string(),
        })
        .await
        .map_err(|s| status_error(&path, "Version", &s))?
        .into_inner();
    out.reachable = true;
    out.runtime_name = version.runtime_name;
    out.runtime_version = version.runtime_version;
    out.runtime_api_version = version.runtime_api_version;

    let status = client
        .status(StatusRequest { verbose: true })
        .await
        .map_err(|s| status_error(&path, "Status", &s))?
        .into_inner();
    fill_status(out, status)
}

/// Connects to the CRI socket at `endpoint` (`unix:///path` or an absolute
/// path): its path and a channel both CRI services can use. The error is a
/// sentence. No deadline of its own: callers run it under theirs.
pub async fn connect(endpoint: &str) -> Result<(PathBuf, Channel), String> {
    let path = socket_path(endpoint)?;
    check_socket(&path).await?;

    let dial_path = path.clone();
    let connector = tower::service_fn(move |_: Uri| {
        let p = dial_path.clone();
        async move { UnixStream::connect(p).await.map(TokioIo::new) }
    });
    // The URI is a placeholder required by tonic; the connector ignores it.
    let channel = Endpoint::try_from("http://[::]")
        .map_err(|e| format!("internal: bad placeholder URI: {e}"))?
        .connect_with_connector(connector)
        .await
        .map_err(|e| connect_error(&path, &e))?;
    Ok((path, channel))
}

/// Copies conditions and handlers out of a Status response. The error, if
/// any, says why the handler list could not be determined.
fn fill_status(out: &mut CriRuntime, status: StatusResponse) -> Result<(), String> {
    out.conditions = status
        .status
        .map(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| RuntimeCondition {
            r#type: c.r#type,
            status: c.status,
            reason: c.reason,
            message: c.message,
        })
        .collect();

    let config = status.info.get("config").map(String::as_str);
    out.root_dir = config
        .and_then(root_dir_from_info_config)
        .unwrap_or_default();
    if !status.runtime_handlers.is_empty() {
        out.handlers_source = SOURCE_RUNTIME_HANDLERS.to_string();
        // info.config only adds runtime types here; when it is missing or
        // broken the handler list from the runtime is still complete, so the
        // tier does not fail for it.
        let types = config
            .and_then(|c| runtime_types_from_info_config(c).ok())
            .unwrap_or_default();
        out.handlers = status
            .runtime_handlers
            .into_iter()
            .map(|h| from_runtime_handler(h, &types))
            .collect();
        return Ok(());
    }

    out.handlers_source = SOURCE_INFO_CONFIG.to_string();
    let Some(config) = config else {
        return Err(format!(
            "the runtime reported no runtime_handlers and no info[\"config\"] \
             (info keys: {})",
            info_keys(&status.info)
        ));
    };
    out.handlers = handlers_from_info_config(config)?;
    Ok(())
}

/// containerd's root directory from its verbose `info["config"]`:
/// `containerdRootDir` in 1.6 and 2.1 alike (the CRI plugin's own `rootDir`
/// is a directory below it).
pub fn root_dir_from_info_config(json: &str) -> Option<String> {
    let root: Value = serde_json::from_str(json).ok()?;
    root.get("containerdRootDir")
        .and_then(Value::as_str)
        .filter(|d| d.starts_with('/'))
        .map(str::to_string)
}

fn from_runtime_handler(h: cri::RuntimeHandler, types: &RuntimeTypes) -> RuntimeHandler {
    // The unnamed entry is containerd's duplicate of the default handler.
    let lookup = if h.name.is_empty() {
        types.default_name.as_deref().unwrap_or("")
    } else {
        h.name.as_str()
    };
    RuntimeHandler {
        runtime_type: types.by_name.get(lookup).cloned().unwrap_or_default(),
        user_namespaces: h.features.map(|f| f.user_namespaces),
        recursive_read_only_mounts: h.features.map(|f| f.recursive_read_only_mounts),
        name: h.name,
    }
}

fn info_keys(info: &HashMap<String, String>) -> String {
    if info.is_empty() {
        return "none".to_string();
    }
    let mut keys: Vec<&str> = info.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys.join(", ")
}

/// The runtime handlers in containerd's verbose `info["config"]` JSON
/// (`.containerd.runtimes.<name>.runtimeType`, the same in 1.6, 1.7 and 2.x),
/// sorted by name. Features are left unset: this JSON does not carry them.
pub fn handlers_from_info_config(json: &str) -> Result<Vec<RuntimeHandler>, String> {
    let types = runtime_types_from_info_config(json)?;
    let mut handlers: Vec<RuntimeHandler> = types
        .by_name
        .into_iter()
        .map(|(name, runtime_type)| RuntimeHandler {
            name,
            runtime_type,
            user_namespaces: None,
            recursive_read_only_mounts: None,
        })
        .collect();
    handlers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(handlers)
}

#[derive(Debug, Default)]
struct RuntimeTypes {
    by_name: HashMap<String, String>,
    default_name: Option<String>,
}

fn runtime_types_from_info_config(json: &str) -> Result<RuntimeTypes, String> {
    let root: Value = serde_json::from_str(json)
        .map_err(|e| format!("info[\"config\"] is not valid JSON: {e}"))?;
    let containerd = root
        .get("containerd")
        .ok_or("info[\"config\"] has no \"containerd\" section (not containerd?)")?;
    let default_name = containerd
        .get("defaultRuntimeName")
        .and_then(Value::as_str)
        .map(str::to_string);
    let runtimes = match containerd.get("runtimes") {
        // Go marshals a nil map as null: no runtimes configured.
        None | Some(Value::Null) => {
            return Ok(RuntimeTypes {
                by_name: HashMap::new(),
                default_name,
            })
        }
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(format!(
                "info[\"config\"].containerd.runtimes is a {}, not an object",
                json_kind(other)
            ))
        }
    };
    let by_name = runtimes
        .iter()
        .map(|(name, rt)| {
            let runtime_type = rt
                .get("runtimeType")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            (name.clone(), runtime_type)
        })
        .collect();
    Ok(RuntimeTypes {
        by_name,
        default_name,
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `unix:///path` or `/path` → the socket path.
fn socket_path(endpoint: &str) -> Result<PathBuf, String> {
    let raw = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if raw.starts_with('/') {
        Ok(PathBuf::from(raw))
    } else {
        Err(format!(
            "unsupported CRI endpoint {endpoint:?}: expected unix:///absolute/path or an absolute path"
        ))
    }
}

async fn check_socket(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    // A stat can block (e.g. a stale network mount under the host root), so
    // it runs off the async threads and stays under the caller's deadline.
    let owned = path.to_path_buf();
    let stat = tokio::task::spawn_blocking(move || std::fs::metadata(owned))
        .await
        .map_err(|e| format!("cannot stat CRI socket {}: {e}", path.display()))?;
    match stat {
        Ok(m) if m.file_type().is_socket() => Ok(()),
        Ok(_) => Err(format!("CRI endpoint {} is not a socket", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(format!("CRI socket {} {CRI_SOCKET_ABSENT}", path.display()))
        }
        Err(e) => Err(format!("cannot stat CRI socket {}: {e}", path.display())),
    }
}

fn connect_error(path: &Path, e: &tonic::transport::Error) -> String {
    let p = path.display();
    match io_cause(e) {
        Some(io) if io.kind() == io::ErrorKind::ConnectionRefused => format!(
            "CRI socket {p} refused the connection (nothing is listening; is the runtime running?)"
        ),
        Some(io) if io.kind() == io::ErrorKind::NotFound => {
            format!("CRI socket {p} {CRI_SOCKET_ABSENT}")
        }
        Some(io) if io.kind() == io::ErrorKind::PermissionDenied => {
            format!("permission denied connecting to CRI socket {p}")
        }
        Some(io) => format!("cannot connect to CRI socket {p}: {io}"),
        None => format!("cannot connect to CRI socket {p}: {}", error_chain(e)),
    }
}

fn io_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cur = err.source();
    }
    None
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(err) = cur {
        parts.push(err.to_string());
        cur = err.source();
    }
    parts.join(": ")
}

pub fn status_error(path: &Path, rpc: &str, s: &tonic::Status) -> String {
    // tonic turns local transport failures (the peer hung up, a broken
    // HTTP/2 stream) into a Status with a source; the runtime never sent
    // that status, so say what really happened.
    if let Some(cause) = std::error::Error::source(s) {
        return format!(
            "CRI {rpc} on {} failed: the connection broke ({})",
            path.display(),
            error_chain(cause)
        );
    }
    let msg = s.message().trim();
    if msg.is_empty() {
        format!("CRI {rpc} failed with gRPC status {:?}", s.code())
    } else {
        format!(
            "CRI {rpc} failed with gRPC status {:?}: {}",
            s.code(),
            msg.lines().next().unwrap_or(msg)
        )
    }
}

// Tests may unwrap: a panic there is a failed test, which is the point.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CONTAINERD_16: &str = r#"{"containerd":{"snapshotter":"overlayfs","defaultRuntimeName":"runc",
        "defaultRuntime":{"runtimeType":"","options":null},
        "runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":false}},
                    "runsc":{"runtimeType":"io.containerd.runsc.v1","runtimePath":"",
                             "options":{"TypeUrl":"io.containerd.runsc.v1.options","ConfigPath":"/etc/containerd/runsc.toml"}}},
        "noPivot":false},"cni":{"binDir":"/opt/cni/bin"},"containerdEndpoint":"/run/containerd/containerd.sock",
        "containerdRootDir":"/var/lib/containerd","rootDir":"/var/lib/containerd/io.containerd.grpc.v1.cri"}"#;

    #[test]
    fn root_dir_from_verbose_status() {
        assert_eq!(
            root_dir_from_info_config(CONTAINERD_16).as_deref(),
            Some("/var/lib/containerd")
        );
        assert_eq!(
            root_dir_from_info_config(r#"{"containerdRootDir":"rel"}"#),
            None
        );
        assert_eq!(root_dir_from_info_config("{"), None);
    }

    #[test]
    fn info_config_of_containerd_1_6() {
        let h = handlers_from_info_config(CONTAINERD_16).unwrap();
        let got: Vec<(&str, &str)> = h
            .iter()
            .map(|h| (h.name.as_str(), h.runtime_type.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("runc", "io.containerd.runc.v2"),
                ("runsc", "io.containerd.runsc.v1")
            ]
        );
        assert!(h
            .iter()
            .all(|h| h.user_namespaces.is_none() && h.recursive_read_only_mounts.is_none()));
    }

    #[test]
    fn info_config_errors_are_sentences() {
        let e = handlers_from_info_config("OK").unwrap_err();
        assert!(e.starts_with("info[\"config\"] is not valid JSON"), "{e}");
        let e = handlers_from_info_config(r#"{"sandboxImage":"pause"}"#).unwrap_err();
        assert!(e.contains("no \"containerd\" section"), "{e}");
        let e = handlers_from_info_config(r#"{"containerd":{"runtimes":[1]}}"#).unwrap_err();
        assert!(e.contains("is a array"), "{e}");
        assert!(
            handlers_from_info_config(r#"{"containerd":{"runtimes":null}}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            socket_path("unix:///run/c.sock").unwrap(),
            PathBuf::from("/run/c.sock")
        );
        assert_eq!(
            socket_path("/run/c.sock").unwrap(),
            PathBuf::from("/run/c.sock")
        );
        for bad in [
            "",
            "unix://run/c.sock",
            "tcp://127.0.0.1:1",
            "c.sock",
            "http://[::]",
        ] {
            let e = socket_path(bad).unwrap_err();
            assert!(e.starts_with("unsupported CRI endpoint"), "{bad}: {e}");
        }
    }

    fn status(handlers: Vec<cri::RuntimeHandler>, info: &[(&str, &str)]) -> StatusResponse {
        StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![cri::RuntimeCondition {
                    r#type: "NetworkReady".into(),
                    status: false,
                    reason: "NetworkPluginNotReady".into(),
                    message: "cni plugin not initialized".into(),
                }],
            }),
            info: info
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            runtime_handlers: handlers,
            features: None,
        }
    }

    #[test]
    fn runtime_handlers_win_and_keep_unset_features() {
        let handlers = vec![
            cri::RuntimeHandler {
                name: "runsc".into(),
                features: Some(cri::RuntimeHandlerFeatures {
                    recursive_read_only_mounts: false,
                    user_namespaces: true,
                }),
            },
            cri::RuntimeHandler {
                name: "".into(),
                features: None,
            },
        ];
        let mut out = CriRuntime::default();
        fill_status(
            &mut out,
            status(
                handlers,
                &[("config", CONTAINERD_16), ("lastCNILoadStatus", "OK")],
            ),
        )
        .unwrap();
        assert_eq!(out.handlers_source, SOURCE_RUNTIME_HANDLERS);
        assert_eq!(out.handlers[0].user_namespaces, Some(true));
        assert_eq!(out.handlers[0].recursive_read_only_mounts, Some(false));
        assert_eq!(out.handlers[0].runtime_type, "io.containerd.runsc.v1");
        assert_eq!(out.handlers[1].user_namespaces, None);
        // The default duplicate borrows the default runtime's type.
        assert_eq!(out.handlers[1].runtime_type, "io.containerd.runc.v2");
        assert_eq!(out.conditions[0].reason, "NetworkPluginNotReady");
    }

    #[test]
    fn broken_config_is_an_error_not_a_panic() {
        let mut out = CriRuntime::default();
        let e = fill_status(
            &mut out,
            status(
                vec![],
                &[("config", "{\"containerd\":"), ("golang", "\"go1.19\"")],
            ),
        )
        .unwrap_err();
        assert!(e.starts_with("info[\"config\"] is not valid JSON"), "{e}");
        assert_eq!(out.conditions.len(), 1, "conditions survive the error");

        let e = fill_status(
            &mut CriRuntime::default(),
            status(vec![], &[("golang", "x")]),
        )
        .unwrap_err();
        assert!(e.contains("info keys: golang"), "{e}");
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(s in ".*") {
            let _ = handlers_from_info_config(&s);
        }

        #[test]
        fn arbitrary_json_never_panics(s in r#"[{}\[\]":,a-z0-9 ]{0,64}"#) {
            let _ = handlers_from_info_config(&s);
        }

        #[test]
        fn runtimes_round_trip(
            runtimes in proptest::collection::btree_map("[a-zA-Z0-9_.-]{0,12}", "[a-z0-9.]{0,24}", 0..6)
        ) {
            let map: serde_json::Map<String, Value> = runtimes
                .iter()
                .map(|(n, t)| (n.clone(), serde_json::json!({"runtimeType": t, "options": {}})))
                .collect();
            let json = serde_json::json!({"containerd": {"runtimes": map}, "cni": {}}).to_string();
            let got: Vec<(String, String)> = handlers_from_info_config(&json)
                .unwrap()
                .into_iter()
                .map(|h| (h.name, h.runtime_type))
                .collect();
            let want: Vec<(String, String)> = runtimes.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
