//! Shared by the test-api integration tests: a server with an admin token and
//! a node certificate, and kubectl run against it through a kubeconfig.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use test_api::{TestApiServer, User};

pub const ADMIN_TOKEN: &str = "admin-token";

pub async fn server() -> TestApiServer {
    TestApiServer::builder()
        .token(ADMIN_TOKEN, User::new("admin", &["system:masters"]))
        .start()
        .await
        .unwrap()
}

pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
        "spec": {},
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                "lastHeartbeatTime": "2026-12-01T00:00:00Z", "lastTransitionTime": "2026-12-01T00:00:00Z"
            }],
            "nodeInfo": {"kubeletVersion": "v1.32.4"}
        }
    })
}

pub fn machine(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "b"}, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "X", "name": "x"}}
    })
}

/// Where a test keeps its kubeconfigs.
pub struct Kube {
    pub dir: tempfile::TempDir,
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Kube {
    pub fn new() -> Kube {
        Kube {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A kubeconfig with the admin token.
    pub fn admin(&self, srv: &TestApiServer) -> PathBuf {
        self.write("admin.kubeconfig", &srv.kubeconfig_token(ADMIN_TOKEN))
    }

    /// A kubeconfig with a node certificate for `node`.
    pub fn node(&self, srv: &TestApiServer, node: &str) -> PathBuf {
        let c = srv.client_cert(&format!("system:node:{node}"), &["system:nodes"]);
        self.write(&format!("{node}.kubeconfig"), &srv.kubeconfig_inline(&c))
    }
}

/// Runs kubectl with this kubeconfig (and no cache shared with other tests).
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Out {
    let cache = kubeconfig.with_extension("cache");
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .arg("--cache-dir")
        .arg(&cache)
        .args(args)
        .output()
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Sets (or adds) a condition in an object's status.conditions as the test.
pub fn set_condition(
    srv: &TestApiServer,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    ctype: &str,
    status: &str,
) {
    let mut obj = srv.get(api_version, kind, ns, name).unwrap();
    let conds = obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != ctype).collect();
    conds.push(json!({
        "type": ctype, "status": status, "reason": "Test", "message": "set by the test",
        "lastTransitionTime": "2026-12-01T00:00:00Z"
    }));
    obj["status"]["conditions"] = json!(conds);
    srv.put(obj).unwrap();
}

/// Waits for a child with a deadline; kills it past the deadline.
pub fn wait_child(mut child: std::process::Child, limit: std::time::Duration) -> Out {
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn kubectl_spawn(kubeconfig: &Path, args: &[&str]) -> std::process::Child {
    Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_extension("cache"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A kube-rs client from a kubeconfig text (with kube-rs's default retry of
/// 429/503/504).
pub async fn kube_client(kubeconfig: &str) -> kube::Client {
    kube::Client::try_from(kube_config(kubeconfig).await).unwrap()
}

pub async fn kube_config(kubeconfig: &str) -> kube::Config {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap()
}

/// An admin client that shows every answer as it comes (no retries).
pub async fn admin_client_no_retry(srv: &TestApiServer) -> kube::Client {
    let mut cfg = kube_config(&srv.kubeconfig_token(ADMIN_TOKEN)).await;
    cfg.default_retry = false;
    kube::Client::try_from(cfg).unwrap()
}

pub async fn admin_client(srv: &TestApiServer) -> kube::Client {
    kube_client(&srv.kubeconfig_token(ADMIN_TOKEN)).await
}

/// A raw request through kube-rs's client: (status, headers, JSON body or Null).
pub async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, http::HeaderMap, Value) {
    use http_body_util::BodyExt;
    let mut b = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        b = b.header("Content-Type", ct);
    }
    let req = b
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}
