//! Two test API servers (management and workload), the workload's
//! kubeconfig in the management cluster's `<cluster>-kubeconfig` Secret,
//! Cluster API objects shaped as v1beta2 has them, Node conditions written
//! into the workload store as the agent writes them, and the controller
//! binary run against it all.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use serde_json::{json, Value};
use test_api::{TestApiServer, User};

/// The namespace and ServiceAccount deploy/ runs the controller as.
pub const DEPLOY_NS: &str = "sandbox-readiness-system";
pub const SA_USER: &str =
    "system:serviceaccount:sandbox-readiness-system:sandbox-readiness-controller";
pub const SA_GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:sandbox-readiness-system",
];

/// `kubectl kustomize deploy/`, one JSON value per rendered object.
pub fn rendered() -> Vec<Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("\n---\n")
        .map(|d| serde_yaml_ng::from_str::<Value>(d).unwrap())
        .collect()
}

/// The rendered ClusterRole, Role and their bindings, as YAML for the test
/// API server's RBAC.
pub fn rbac_yaml() -> String {
    rendered()
        .into_iter()
        .filter(|d| d["kind"].as_str().unwrap().contains("Role"))
        .map(|d| serde_yaml_ng::to_string(&d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

pub const ADMIN: &str = "admin-token";
pub const NS: &str = "tenant-a";
pub const CLUSTER: &str = "c1";
pub const TY: &str = "sandbox-readiness.io/SandboxReady";
pub const MACHINE_AV: &str = "cluster.x-k8s.io/v1beta2";

pub fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

pub fn ago(d: Duration) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() - d).to_string()
}

pub async fn server(versions: &[&str]) -> TestApiServer {
    TestApiServer::builder()
        .token(ADMIN, User::new("admin", &["system:masters"]))
        .capi_served_versions(versions)
        .start()
        .await
        .unwrap()
}

pub struct Env {
    pub mgmt: TestApiServer,
    pub wl: TestApiServer,
    pub dir: tempfile::TempDir,
    pub mgmt_kubeconfig: PathBuf,
}

impl Env {
    /// As [`Env::start`], but the management server enforces the RBAC
    /// deploy/ renders, and each of `sa_tokens` authenticates as the
    /// ServiceAccount its binding names (one token per replica, as each
    /// pod has its own projected token). `mgmt_kubeconfig` is the first's.
    pub async fn start_rbac(sa_tokens: &[&str]) -> Env {
        let mut b = TestApiServer::builder()
            .token(ADMIN, User::new("admin", &["system:masters"]))
            .capi_served_versions(&["v1beta2", "v1beta1"])
            .rbac_yaml(&rbac_yaml());
        for t in sa_tokens {
            b = b.token(t, User::new(SA_USER, SA_GROUPS));
        }
        let mgmt = b.start().await.unwrap();
        let wl = server(&["v1beta2"]).await;
        let dir = tempfile::tempdir().unwrap();
        for t in sa_tokens {
            std::fs::write(
                dir.path().join(format!("{t}.kubeconfig")),
                mgmt.kubeconfig_token(t),
            )
            .unwrap();
        }
        let mgmt_kubeconfig = dir.path().join(format!("{}.kubeconfig", sa_tokens[0]));
        for ns in [NS, DEPLOY_NS] {
            mgmt.create(json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}}))
                .unwrap();
        }
        mgmt.create(cluster(CLUSTER)).unwrap();
        mgmt.create(kubeconfig_secret(CLUSTER, &wl.kubeconfig_token(ADMIN)))
            .unwrap();
        Env {
            mgmt,
            wl,
            dir,
            mgmt_kubeconfig,
        }
    }

    /// A replica under deploy/'s RBAC: token `sa_token` (given to
    /// [`Env::start_rbac`]), leader election in deploy/'s namespace, Lease
    /// identity `pod` (the Deployment sets POD_NAME from the pod's name).
    pub fn replica(&self, sa_token: &str, pod: &str, extra: &[&str]) -> Controller {
        let kc = self.dir.path().join(format!("{sa_token}.kubeconfig"));
        let mut args = vec![
            "--leader-elect=true",
            "--leader-elect-resource-namespace",
            DEPLOY_NS,
        ];
        args.extend_from_slice(extra);
        Controller::spawn_env(&kc, &args, &[("POD_NAME", pod)])
    }

    /// Management (v1beta2) and workload servers, the Cluster, its
    /// kubeconfig Secret (the workload's admin token, inline).
    pub async fn start() -> Env {
        let mgmt = server(&["v1beta2", "v1beta1"]).await;
        let wl = server(&["v1beta2"]).await;
        let dir = tempfile::tempdir().unwrap();
        let mgmt_kubeconfig = dir.path().join("mgmt.kubeconfig");
        std::fs::write(&mgmt_kubeconfig, mgmt.kubeconfig_token(ADMIN)).unwrap();
        mgmt.create(json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":NS}}))
            .unwrap();
        mgmt.create(cluster(CLUSTER)).unwrap();
        mgmt.create(kubeconfig_secret(CLUSTER, &wl.kubeconfig_token(ADMIN)))
            .unwrap();
        Env {
            mgmt,
            wl,
            dir,
            mgmt_kubeconfig,
        }
    }

    pub fn controller(&self, extra: &[&str]) -> Controller {
        Controller::spawn(&self.mgmt_kubeconfig, extra)
    }

    /// A MachineDeployment `md` with a bootstrap Secret `<machine>-boot`
    /// per Machine (created by [`Env::machine`]).
    pub fn deployment(&self, md: &str, mirror: bool, gate: bool, min_ready: u32) {
        self.mgmt
            .create(deployment(md, mirror, gate, min_ready))
            .unwrap();
    }

    /// A Machine of `md` whose bootstrap data sets `sysctls`; `node`: its
    /// nodeRef (None: not yet assigned).
    pub fn machine(
        &self,
        md: &str,
        name: &str,
        gate: bool,
        sysctls: &[(&str, &str)],
        node: Option<&str>,
    ) {
        self.mgmt
            .create(boot_secret(&format!("{name}-boot"), sysctls))
            .unwrap();
        self.mgmt.create(machine(md, name, gate)).unwrap();
        if let Some(n) = node {
            self.set_node_ref(name, n);
        }
    }

    pub fn set_node_ref(&self, machine: &str, node: &str) {
        let mut m = self.mgmt.get(MACHINE_AV, "Machine", NS, machine).unwrap();
        m["status"]["nodeRef"] = json!({"name": node});
        m["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        self.mgmt.put(m).unwrap();
    }

    /// A Node registered by kubelet (Ready), with no sandbox condition.
    pub fn node(&self, name: &str) {
        self.wl.create(node(name)).unwrap();
    }

    /// Writes the Node's condition as the agent does (heartbeat now;
    /// lastTransitionTime moved only when the status changes) and its
    /// desired-state annotation.
    pub fn agent_writes(
        &self,
        node: &str,
        status: &str,
        reason: &str,
        desired_sysctls: &[(&str, &str)],
    ) {
        self.agent_writes_at(node, status, reason, desired_sysctls, &now());
    }

    pub fn agent_writes_at(
        &self,
        node: &str,
        status: &str,
        reason: &str,
        desired_sysctls: &[(&str, &str)],
        heartbeat: &str,
    ) {
        let mut n = self.wl.get("v1", "Node", "", node).unwrap();
        let conds = n["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let old = conds.iter().find(|c| c["type"] == TY).cloned();
        let ltt = match &old {
            Some(o) if o["status"] == status => o["lastTransitionTime"].clone(),
            _ => json!(heartbeat),
        };
        let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != TY).collect();
        conds.push(json!({"type":TY,"status":status,"reason":reason,"message":format!("the agent says {reason}"),
            "lastHeartbeatTime":heartbeat,"lastTransitionTime":ltt}));
        n["status"]["conditions"] = json!(conds);
        let sysctls: serde_json::Map<String, Value> = desired_sysctls
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let ann = if sysctls.is_empty() {
            json!({"v":1})
        } else {
            json!({"v":1,"sysctls":sysctls})
        };
        n["metadata"]["annotations"]["sandbox-readiness.io/desired"] = json!(ann.to_string());
        n["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        self.wl.put(n).unwrap();
    }

    /// The Machine's condition of our type: (status, reason, message, lastTransitionTime).
    pub fn condition(&self, machine: &str) -> Option<(String, String, String, String)> {
        condition_of(&self.mgmt.get(MACHINE_AV, "Machine", NS, machine)?, TY)
    }

    pub fn status(&self, machine: &str) -> Option<String> {
        self.condition(machine).map(|c| c.0)
    }

    /// Waits until the Machine's condition has `status`; the time it took.
    pub async fn wait_status(&self, machine: &str, status: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            if self.status(machine).as_deref() == Some(status) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "{machine}: not {status} within {limit:?}; now {:?}",
                self.condition(machine)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Events recorded on a Machine: (type, reason).
    pub fn events(&self, machine: &str) -> Vec<(String, String)> {
        self.mgmt
            .with_store(|s| s.list("events.k8s.io/v1", "Event"))
            .into_iter()
            .filter(|e| e["regarding"]["name"] == machine && e["metadata"]["namespace"] == NS)
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or("").to_string(),
                    e["reason"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }
}

/// The Machine a request writes the status of (PATCH or PUT on
/// `…/machines/NAME/status`), from the test API server's request log.
pub fn machine_status_write(r: &test_api::RequestRecord) -> Option<&str> {
    if !matches!(r.method.as_str(), "PATCH" | "PUT") {
        return None;
    }
    let (before, name) = r.path.strip_suffix("/status")?.rsplit_once('/')?;
    before.ends_with("/machines").then_some(name)
}

pub fn condition_of(obj: &Value, ty: &str) -> Option<(String, String, String, String)> {
    let c = obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?;
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((
        s("status"),
        s("reason"),
        s("message"),
        s("lastTransitionTime"),
    ))
}

pub fn cluster(name: &str) -> Value {
    json!({"apiVersion":MACHINE_AV,"kind":"Cluster","metadata":{"name":name,"namespace":NS},"spec":{}})
}

pub fn kubeconfig_secret(cluster: &str, kubeconfig: &str) -> Value {
    json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{cluster}-kubeconfig"),"namespace":NS,
        "labels":{"cluster.x-k8s.io/cluster-name":cluster}},
        "type":"cluster.x-k8s.io/secret","data":{"value":b64(kubeconfig)}})
}

fn infra() -> Value {
    json!({"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TestMachine","name":"x"})
}

pub fn deployment(md: &str, mirror: bool, gate: bool, min_ready: u32) -> Value {
    let mut spec = json!({"clusterName":CLUSTER,"bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"TalosConfigTemplate","name":md}},
        "infrastructureRef":infra(),"minReadySeconds":min_ready});
    if gate {
        spec["readinessGates"] = json!([{"conditionType":TY}]);
    }
    let mut md_obj = json!({"apiVersion":MACHINE_AV,"kind":"MachineDeployment","metadata":{"name":md,"namespace":NS},
        "spec":{"clusterName":CLUSTER,"replicas":2,"selector":{"matchLabels":{"cluster.x-k8s.io/deployment-name":md}},
        "template":{"metadata":{"labels":{"cluster.x-k8s.io/deployment-name":md}},"spec":spec}}});
    if mirror {
        md_obj["metadata"]["annotations"] = json!({"sandbox-readiness.io/mirror":"true"});
    }
    md_obj
}

pub fn machine(md: &str, name: &str, gate: bool) -> Value {
    let mut spec = json!({"clusterName":CLUSTER,"bootstrap":{"dataSecretName":format!("{name}-boot")},"infrastructureRef":infra()});
    if gate {
        spec["readinessGates"] = json!([{"conditionType":TY}]);
    }
    json!({"apiVersion":MACHINE_AV,"kind":"Machine","metadata":{"name":name,"namespace":NS,
        "labels":{"cluster.x-k8s.io/cluster-name":CLUSTER,"cluster.x-k8s.io/deployment-name":md}},"spec":spec})
}

/// The bootstrap data Secret CABPT writes: the whole machine config under
/// `value` (with a token and a CA key, as real ones carry).
pub fn boot_secret(name: &str, sysctls: &[(&str, &str)]) -> Value {
    let mut cfg = String::from("version: v1alpha1\nmachine:\n  type: worker\n  token: SECRET-TOKEN-abcdef\n  ca:\n    crt: Q0VSVA==\n    key: U0VDUkVULUtFWQ==\n");
    if !sysctls.is_empty() {
        cfg.push_str("  sysctls:\n");
        for (k, v) in sysctls {
            cfg.push_str(&format!("    {k}: \"{v}\"\n"));
        }
    }
    cfg.push_str("cluster:\n  controlPlane:\n    endpoint: https://127.0.0.1:6443\n");
    json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":name,"namespace":NS},
        "type":"cluster.x-k8s.io/secret","data":{"value":b64(&cfg),"format":b64("cloud-config")}})
}

pub fn node(name: &str) -> Value {
    json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":{"kubernetes.io/hostname":name}},"spec":{},
        "status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status",
        "lastHeartbeatTime":now(),"lastTransitionTime":now()}],"nodeInfo":{"bootID":"b1","kubeletVersion":"v1.32.4"}}})
}

/// The controller process; its stderr is kept for assertions and printed
/// when a test fails.
pub struct Controller {
    pub child: Child,
    pub log: Arc<Mutex<String>>,
}

impl Controller {
    pub fn spawn(kubeconfig: &std::path::Path, extra: &[&str]) -> Controller {
        Controller::spawn_env(kubeconfig, extra, &[])
    }

    pub fn spawn_env(
        kubeconfig: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Controller {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-readiness-controller"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .envs(env.iter().copied())
            .env("SANDBOX_READINESS_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut g = l.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        Controller { child, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit (at most `limit`): its code and log.
    pub fn wait_exit(&mut self, limit: Duration) -> (Option<i32>, String) {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(st)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(50));
                return (st.code(), self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        (None, self.log())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- controller log\n{}", self.log());
        }
    }
}
