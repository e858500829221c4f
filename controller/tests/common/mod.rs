//! The controller's tests on the real control plane (issue 30): a
//! management kube-apiserver running the real Cluster API v1.13.6 and CABPT
//! v0.6.11 managers (`scripts/control-plane.sh capi`, their CRDs and
//! webhooks) and a workload kube-apiserver, both shared by the tests of a
//! binary (each test has a namespace of its own, its Node names prefixed
//! with it); private clusters for outages (`stop`/`start`). The controller
//! binary runs against them; its writes are counted from the management
//! server's audit log by the User-Agent it sends.
//!
//! Infrastructure is played, Cluster API is real. Each test's Cluster
//! points at a TestCluster and a TestControlPlane (the test providers'
//! CRDs, tests/support/capi/crds.yaml) that this file provisions at once:
//! the control-plane endpoint and the `<cluster>-kubeconfig` Secret are the
//! workload API server's. Each Machine (valid per CAPI's webhooks) points at
//! a TestMachine the test provisions when it says the node is up
//! ([`Env::set_node_ref`]): `spec.providerID` equal to that of the Node
//! registered as kubelet with `--provider-id` does, and CAPI's own Machine
//! controller then sets `status.nodeRef` through its cluster cache, writing
//! its own conditions beside ours. Why not the full test-provider pool of
//! tests/capi_rollout.rs (real agents in child user namespaces): these
//! tests drive the Node's condition step by step (False for 30 s, a message
//! only, a heartbeat with nothing changed) and time the controller against
//! each step; a real agent decides its own verdicts. MachineDeployments here
//! carry the mirror annotation and the gate the controller reads and are
//! paused (`cluster.x-k8s.io/paused`): their rollouts are capi_rollout.rs's.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../tests/support/cluster.rs"]
pub mod cluster;
#[path = "../../../tests/support/kubelet.rs"]
pub mod kubelet;

use std::{
    io::{BufRead, BufReader},
    ops::Deref,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant, SystemTime},
};

#[allow(unused_imports)]
pub use cluster::{poll, AuditEvent, RealCluster};
use serde_json::{json, Value};

/// The namespace and ServiceAccount deploy/ runs the controller as.
pub const DEPLOY_NS: &str = "sandbox-readiness-system";
pub const SA_NAME: &str = "sandbox-readiness-controller";
pub const SA_USER: &str =
    "system:serviceaccount:sandbox-readiness-system:sandbox-readiness-controller";

pub const CLUSTER: &str = "c1";
pub const TY: &str = "sandbox-readiness.io/SandboxReady";
pub const MACHINE_AV: &str = "cluster.x-k8s.io/v1beta2";
pub const CAPI: &str = "/apis/cluster.x-k8s.io/v1beta2";
const INFRA: &str = "/apis/infrastructure.cluster.x-k8s.io/v1alpha1";
const CONTROL: &str = "/apis/controlplane.cluster.x-k8s.io/v1alpha1";
pub const MERGE: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
/// The User-Agent the controller sends (controller/src/qps.rs): how its
/// requests are told from the test's and Cluster API's in the audit log.
pub const UA: &str = "sandbox-readiness-controller/";

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

/// The pinned kubectl (v1.36.3), not the one on PATH.
pub fn kubectl_bin() -> PathBuf {
    cluster::bin_dir()
        .unwrap_or_else(|e| panic!("{e}"))
        .join("kubectl")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `kubectl kustomize deploy/` (the pinned kubectl), one JSON value per
/// rendered object.
pub fn rendered() -> Vec<Value> {
    let out = Command::new(kubectl_bin())
        .arg("kustomize")
        .arg(repo().join("deploy"))
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

/// Registers the test providers' CRDs and starts Cluster API on `c`.
pub fn prepare_management(c: &RealCluster) {
    c.start_capi();
    c.register_test_provider_crds();
}

/// The management cluster the tests of this binary share, Cluster API
/// running on it.
pub fn management() -> &'static RealCluster {
    static READY: OnceLock<()> = OnceLock::new();
    let c = RealCluster::shared_as("management");
    READY.get_or_init(|| prepare_management(c));
    c
}

/// The workload cluster the tests of this binary share.
pub fn workload() -> &'static RealCluster {
    RealCluster::shared_as("workload")
}

/// A shared cluster or one of the test's own.
#[derive(Clone)]
pub enum Side {
    Shared(&'static RealCluster),
    Private(Arc<RealCluster>),
}

impl Deref for Side {
    type Target = RealCluster;
    fn deref(&self) -> &RealCluster {
        match self {
            Side::Shared(c) => c,
            Side::Private(c) => c,
        }
    }
}

/// The `spec.providerID` of Node `node` (kubelet's `--provider-id`).
pub fn provider_id(node: &str) -> String {
    format!("sandbox-readiness-test://{node}")
}

/// Whether an audit event is the controller's.
pub fn by_controller(e: &AuditEvent) -> bool {
    e["userAgent"].as_str().is_some_and(|u| u.starts_with(UA))
}

/// Whether an audit event is a write of Machine `ns/name`'s status.
pub fn machine_status_write(e: &AuditEvent, ns: &str, name: &str) -> bool {
    let o = &e["objectRef"];
    o["resource"] == "machines"
        && o["subresource"] == "status"
        && o["namespace"] == ns
        && o["name"] == name
        && matches!(e["verb"].as_str(), Some("patch" | "update"))
}

pub fn code(e: &AuditEvent) -> i64 {
    e["responseStatus"]["code"].as_i64().unwrap_or(0)
}

pub struct Env {
    pub mgmt: Side,
    pub wl: Side,
    /// This test's namespace on the management cluster; its Node names
    /// start with it.
    pub ns: String,
    /// The condition type of this test (`--condition-type`, the gates, the
    /// Node conditions): every controller watches every namespace of the
    /// shared management cluster, and one mirrors only its own type, so a
    /// test's controller never writes another test's Machines.
    pub ty: String,
    pub dir: tempfile::TempDir,
    pub mgmt_kubeconfig: PathBuf,
}

impl Env {
    /// The shared management and workload clusters, a namespace of the
    /// test's own with Cluster `c1` whose control plane is the workload
    /// API server.
    pub fn start() -> Env {
        let (m, w) = std::thread::scope(|s| {
            let m = s.spawn(management);
            let w = s.spawn(workload);
            (m.join(), w.join())
        });
        let (m, w) = match (m, w) {
            (Ok(m), Ok(w)) => (m, w),
            (Err(e), _) | (_, Err(e)) => std::panic::resume_unwind(e),
        };
        Env::with(Side::Shared(m), Side::Shared(w))
    }

    /// As [`Env::start`], the workload cluster the test's own (to stop it).
    pub fn with_private_workload() -> Env {
        let (m, w) = std::thread::scope(|s| {
            let m = s.spawn(management);
            let w = s.spawn(RealCluster::private);
            (m.join(), w.join())
        });
        let (m, w) = match (m, w) {
            (Ok(m), Ok(w)) => (m, w),
            (Err(e), _) | (_, Err(e)) => std::panic::resume_unwind(e),
        };
        Env::with(Side::Shared(m), Side::Private(Arc::new(w)))
    }

    /// As [`Env::start`], the management cluster the test's own (to stop
    /// it), Cluster API running on it.
    pub fn with_private_management() -> Env {
        let (m, w) = std::thread::scope(|s| {
            let m = s.spawn(|| {
                let c = RealCluster::private();
                prepare_management(&c);
                c
            });
            let w = s.spawn(workload);
            (m.join(), w.join())
        });
        let (m, w) = match (m, w) {
            (Ok(m), Ok(w)) => (m, w),
            (Err(e), _) | (_, Err(e)) => std::panic::resume_unwind(e),
        };
        Env::with(Side::Private(Arc::new(m)), Side::Shared(w))
    }

    pub fn with(mgmt: Side, wl: Side) -> Env {
        let ns = mgmt.unique("tenant");
        let dir = tempfile::tempdir().unwrap();
        mgmt.write(
            "POST",
            "/api/v1/namespaces",
            "application/json",
            &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}}),
        );
        let env = Env {
            mgmt_kubeconfig: mgmt.admin_kubeconfig().to_path_buf(),
            mgmt,
            wl,
            ty: format!("{TY}-{ns}"),
            ns,
            dir,
        };
        env.create_cluster(CLUSTER);
        env
    }

    /// Cluster `name` and its played infrastructure and control plane:
    /// the TestCluster provisioned with the workload API server as its
    /// endpoint, the TestControlPlane initialized, the kubeconfig Secret
    /// holding the workload's admin credentials (inline).
    pub fn create_cluster(&self, name: &str) {
        let ns = &self.ns;
        let port: u16 = self
            .wl
            .server_url()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        self.post(
            &format!("{INFRA}/namespaces/{ns}/testclusters"),
            json!({"apiVersion":"infrastructure.cluster.x-k8s.io/v1alpha1","kind":"TestCluster",
                "metadata":{"name":name,"namespace":ns},
                "spec":{"controlPlaneEndpoint":{"host":"127.0.0.1","port":port}}}),
        );
        self.mgmt.write(
            "PATCH",
            &format!("{INFRA}/namespaces/{ns}/testclusters/{name}/status"),
            MERGE,
            &json!({"status":{"initialization":{"provisioned":true}}}),
        );
        self.post(
            &format!("{CONTROL}/namespaces/{ns}/testcontrolplanes"),
            json!({"apiVersion":"controlplane.cluster.x-k8s.io/v1alpha1","kind":"TestControlPlane",
                "metadata":{"name":format!("{name}-cp"),"namespace":ns},"spec":{}}),
        );
        self.mgmt.write(
            "PATCH",
            &format!("{CONTROL}/namespaces/{ns}/testcontrolplanes/{name}-cp/status"),
            MERGE,
            &json!({"status":{"initialization":{"controlPlaneInitialized":true},
                "conditions":[{"type":"Available","status":"True","reason":"Available","lastTransitionTime":now()}]}}),
        );
        let kubeconfig = std::fs::read_to_string(self.wl.admin_kubeconfig()).unwrap();
        let secret = kubeconfig_secret(ns, name, &kubeconfig);
        let path = format!("/api/v1/namespaces/{ns}/secrets/{name}-kubeconfig");
        if self.mgmt.get(&path).is_some() {
            self.mgmt.write("PUT", &path, "application/json", &secret);
        } else {
            self.post(&format!("/api/v1/namespaces/{ns}/secrets"), secret);
        }
        self.post(
            &format!("{CAPI}/namespaces/{ns}/clusters"),
            json!({"apiVersion":MACHINE_AV,"kind":"Cluster","metadata":{"name":name,"namespace":ns},
                "spec":{"controlPlaneRef":{"apiGroup":"controlplane.cluster.x-k8s.io","kind":"TestControlPlane","name":format!("{name}-cp")},
                    "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TestCluster","name":name}}}),
        );
    }

    /// POST that must succeed.
    pub fn post(&self, collection: &str, obj: Value) -> Value {
        self.mgmt
            .write("POST", collection, "application/json", &obj)
    }

    /// The controller as the admin, mirroring this test's condition type.
    pub fn controller(&self, extra: &[&str]) -> Controller {
        self.controller_as(&self.mgmt_kubeconfig, extra, &[])
    }

    /// The controller with `kubeconfig`, mirroring this test's condition
    /// type.
    pub fn controller_as(
        &self,
        kubeconfig: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Controller {
        let mut args = vec!["--condition-type", self.ty.as_str()];
        args.extend_from_slice(extra);
        Controller::spawn_env(kubeconfig, &args, env)
    }

    /// Node `short`'s name in the workload cluster (prefixed with this
    /// test's namespace: the workload cluster is shared).
    pub fn node_name(&self, short: &str) -> String {
        format!("{}-{short}", self.ns)
    }

    /// A paused MachineDeployment `md` (the controller reads its mirror
    /// annotation and its template's gate; CAPI leaves it alone).
    pub fn deployment(&self, md: &str, mirror: bool, gate: bool, min_ready: u32) {
        self.post(
            &format!("{CAPI}/namespaces/{}/machinedeployments", self.ns),
            deployment(&self.ns, &self.ty, md, mirror, gate, min_ready),
        );
    }

    /// A Machine of `md` whose bootstrap data sets `sysctls`, its
    /// TestMachine not provisioned; `node`: provisioned as that Node's
    /// machine, returning once CAPI has set the nodeRef.
    pub fn machine(
        &self,
        md: &str,
        name: &str,
        gate: bool,
        sysctls: &[(&str, &str)],
        node: Option<&str>,
    ) {
        self.machine_with_config(md, name, gate, &machine_config(sysctls), sysctls, node);
    }

    /// As [`Env::machine`], the pool's machine config `cfg` as given (one
    /// the controller cannot read, say).
    pub fn machine_with_config(
        &self,
        md: &str,
        name: &str,
        gate: bool,
        cfg: &str,
        sysctls: &[(&str, &str)],
        node: Option<&str>,
    ) {
        let ns = &self.ns;
        // What the controller reads of the pool: the TalosConfigTemplate
        // the Machine's TalosConfig was cloned from (as CAPI's MachineSet
        // controller clones it). The rendered Secret is CAPI's, never read
        // by the controller.
        self.post(
            &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigtemplates"),
            json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfigTemplate",
                "metadata":{"name":format!("{name}-tct"),"namespace":ns},
                "spec":{"template":{"spec":{"generateType":"none","talosVersion":"v1.11","data":cfg}}}}),
        );
        self.post(
            &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigs"),
            json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfig",
                "metadata":{"name":format!("{name}-tc"),"namespace":ns,"annotations":{
                    "cluster.x-k8s.io/cloned-from-name":format!("{name}-tct"),
                    "cluster.x-k8s.io/cloned-from-groupkind":"TalosConfigTemplate.bootstrap.cluster.x-k8s.io"}},
                "spec":{"generateType":"none","talosVersion":"v1.11","data":cfg}}),
        );
        self.post(
            &format!("/api/v1/namespaces/{ns}/secrets"),
            boot_secret(ns, &format!("{name}-boot"), sysctls),
        );
        self.post(
            &format!("{INFRA}/namespaces/{ns}/testmachines"),
            json!({"apiVersion":"infrastructure.cluster.x-k8s.io/v1alpha1","kind":"TestMachine",
                "metadata":{"name":name,"namespace":ns},"spec":{}}),
        );
        self.post(
            &format!("{CAPI}/namespaces/{ns}/machines"),
            machine(ns, &self.ty, md, name, gate),
        );
        if let Some(n) = node {
            self.set_node_ref(name, n);
        }
    }

    /// The machine's infrastructure reports it provisioned as Node
    /// `node`'s (its providerID); waits (60 s) for CAPI's Machine
    /// controller to set `status.nodeRef`.
    pub fn set_node_ref(&self, machine: &str, node: &str) {
        self.provision(machine, node);
        self.wait_node_ref(machine, node);
    }

    /// As [`set_node_ref`](Self::set_node_ref), without waiting.
    pub fn provision(&self, machine: &str, node: &str) {
        let ns = &self.ns;
        let node = self.node_name(node);
        let path = format!("{INFRA}/namespaces/{ns}/testmachines/{machine}");
        self.mgmt.write(
            "PATCH",
            &path,
            MERGE,
            &json!({"spec":{"providerID":provider_id(&node)}}),
        );
        self.mgmt.write(
            "PATCH",
            &format!("{path}/status"),
            MERGE,
            &json!({"status":{"initialization":{"provisioned":true},
                "addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":node}]}}),
        );
    }

    pub fn wait_node_ref(&self, machine: &str, node: &str) {
        let node = self.node_name(node);
        let path = format!("{CAPI}/namespaces/{}/machines/{machine}", self.ns);
        let start = Instant::now();
        loop {
            let m = self.mgmt.get(&path).unwrap_or(Value::Null);
            if m["status"]["nodeRef"]["name"] == node.as_str() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "CAPI did not set {machine}'s nodeRef to {node} within 90 s: {m:#}\n{}",
                self.capi_log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The last lines of the Cluster API manager's log (for a failed wait).
    pub fn capi_log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.mgmt.dir().join("logs/capi-manager.log"))
            .unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        format!(
            "--- capi-manager\n{}",
            lines[lines.len().saturating_sub(15)..].join("\n")
        )
    }

    /// A Node registered by kubelet (`control-plane.sh node`: Ready, its
    /// providerID), with no sandbox condition.
    pub fn node(&self, short: &str) {
        let name = self.node_name(short);
        self.wl.node_with_provider_id(&name, &provider_id(&name));
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
        let name = self.node_name(node);
        let n = self.wl.get_node(&name);
        assert!(!n.is_null(), "no Node {name}");
        let old = n["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == self.ty.as_str()).cloned());
        let ltt = match &old {
            Some(o) if o["status"] == status => o["lastTransitionTime"].clone(),
            _ => json!(heartbeat),
        };
        let sysctls: serde_json::Map<String, Value> = desired_sysctls
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let ann = if sysctls.is_empty() {
            json!({"v":1})
        } else {
            json!({"v":1,"sysctls":sysctls})
        };
        // The annotation first: the condition that follows is read with it.
        self.annotate_desired(node, Some(&ann.to_string()));
        self.write_condition(
            node,
            json!({"type":self.ty,"status":status,"reason":reason,"message":format!("the agent says {reason}"),
                "lastHeartbeatTime":heartbeat,"lastTransitionTime":ltt}),
        );
    }

    /// Sets (or, `None`, removes) the Node's desired-state annotation.
    pub fn annotate_desired(&self, node: &str, value: Option<&str>) {
        let name = self.node_name(node);
        self.wl.write(
            "PATCH",
            &format!("/api/v1/nodes/{name}"),
            MERGE,
            &json!({"metadata":{"annotations":{"sandbox-readiness.io/desired":value}}}),
        );
    }

    /// Writes one Node condition through the status subresource (a
    /// strategic merge: the conditions merge by type, as kubelet's and the
    /// agent's writes do).
    pub fn write_condition(&self, node: &str, cond: Value) {
        let name = self.node_name(node);
        self.wl.write(
            "PATCH",
            &format!("/api/v1/nodes/{name}/status"),
            STRATEGIC,
            &json!({"status":{"conditions":[cond]}}),
        );
    }

    pub fn machine_obj(&self, machine: &str) -> Option<Value> {
        self.mgmt
            .get(&format!("{CAPI}/namespaces/{}/machines/{machine}", self.ns))
    }

    /// The Machine's condition of our type: (status, reason, message, lastTransitionTime).
    pub fn condition(&self, machine: &str) -> Option<(String, String, String, String)> {
        condition_of(&self.machine_obj(machine)?, &self.ty)
    }

    pub fn status(&self, machine: &str) -> Option<String> {
        self.condition(machine).map(|c| c.0)
    }

    /// Waits until the Machine's condition has `status`; the time it took.
    pub fn wait_status(&self, machine: &str, status: &str, limit: Duration) -> Duration {
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
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Events the controller recorded on a Machine: (type, reason).
    pub fn events(&self, machine: &str) -> Vec<(String, String)> {
        let list = self
            .mgmt
            .get(&format!(
                "/apis/events.k8s.io/v1/namespaces/{}/events",
                self.ns
            ))
            .unwrap_or(Value::Null);
        list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                e["regarding"]["name"] == machine
                    && e["reportingController"] == "sandbox-readiness-controller"
            })
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or("").to_string(),
                    e["reason"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// The controller's writes of Machine `machine`'s status so far (any
    /// answer, 409s included).
    pub fn status_writes(&self, machine: &str) -> Vec<AuditEvent> {
        self.mgmt
            .audit_writes(|e| by_controller(e) && machine_status_write(e, &self.ns, machine))
    }

    /// How many of those the server accepted.
    pub fn patches(&self, machine: &str) -> usize {
        self.status_writes(machine)
            .iter()
            .filter(|e| code(e) == 200)
            .count()
    }
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

pub fn kubeconfig_secret(ns: &str, cluster: &str, kubeconfig: &str) -> Value {
    json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{cluster}-kubeconfig"),"namespace":ns,
        "labels":{"cluster.x-k8s.io/cluster-name":cluster}},
        "type":"cluster.x-k8s.io/secret","data":{"value":b64(kubeconfig)}})
}

fn infra(name: &str) -> Value {
    json!({"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TestMachine","name":name})
}

pub fn deployment(ns: &str, ty: &str, md: &str, mirror: bool, gate: bool, min_ready: u32) -> Value {
    let mut spec = json!({"clusterName":CLUSTER,"bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"TalosConfigTemplate","name":md}},
        "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TestMachineTemplate","name":md},"minReadySeconds":min_ready});
    if gate {
        spec["readinessGates"] = json!([{"conditionType":ty}]);
    }
    let mut ann = json!({"cluster.x-k8s.io/paused":""});
    if mirror {
        ann["sandbox-readiness.io/mirror"] = json!("true");
    }
    json!({"apiVersion":MACHINE_AV,"kind":"MachineDeployment","metadata":{"name":md,"namespace":ns,"annotations":ann},
        "spec":{"clusterName":CLUSTER,"replicas":2,"selector":{"matchLabels":{"cluster.x-k8s.io/deployment-name":md}},
        "template":{"metadata":{"labels":{"cluster.x-k8s.io/deployment-name":md}},"spec":spec}}})
}

pub fn machine(ns: &str, ty: &str, md: &str, name: &str, gate: bool) -> Value {
    let mut spec = json!({"clusterName":CLUSTER,"bootstrap":{"dataSecretName":format!("{name}-boot"),
        "configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"TalosConfig","name":format!("{name}-tc")}},
        "infrastructureRef":infra(name)});
    if gate {
        spec["readinessGates"] = json!([{"conditionType":ty}]);
    }
    json!({"apiVersion":MACHINE_AV,"kind":"Machine","metadata":{"name":name,"namespace":ns,
        "labels":{"cluster.x-k8s.io/cluster-name":CLUSTER,"cluster.x-k8s.io/deployment-name":md}},"spec":spec})
}

pub const BOOTSTRAP: &str = "/apis/bootstrap.cluster.x-k8s.io/v1alpha3";
pub const BOOTSTRAP_AV: &str = "bootstrap.cluster.x-k8s.io/v1alpha3";

/// A whole machine config setting `sysctls` (with a token and a CA key, as
/// real ones carry).
pub fn machine_config(sysctls: &[(&str, &str)]) -> String {
    let mut cfg = String::from("version: v1alpha1\nmachine:\n  type: worker\n  token: SECRET-TOKEN-abcdef\n  ca:\n    crt: Q0VSVA==\n    key: U0VDUkVULUtFWQ==\n");
    if !sysctls.is_empty() {
        cfg.push_str("  sysctls:\n");
        for (k, v) in sysctls {
            cfg.push_str(&format!("    {k}: \"{v}\"\n"));
        }
    }
    cfg.push_str("cluster:\n  controlPlane:\n    endpoint: https://127.0.0.1:6443\n");
    cfg
}

/// The bootstrap data Secret CABPT writes: the whole machine config under
/// `value`.
pub fn boot_secret(ns: &str, name: &str, sysctls: &[(&str, &str)]) -> Value {
    let cfg = machine_config(sysctls);
    json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":name,"namespace":ns,
        "labels":{"cluster.x-k8s.io/cluster-name":CLUSTER}},
        "type":"cluster.x-k8s.io/secret","data":{"value":b64(&cfg),"format":b64("cloud-config")}})
}

/// deploy/ applied for real (`kubectl apply -k deploy/`, the pinned
/// kubectl): the Namespace, the ServiceAccount, the RBAC and the
/// Deployment (no scheduler or kubelet runs here: its pods never start;
/// the tests run the binary in their place, with the ServiceAccount's
/// token).
pub fn apply_deploy(c: &RealCluster) {
    c.kubectl_ok(
        &["apply", "-k", repo().join("deploy").to_str().unwrap()],
        None,
    );
    // The ServiceAccount exists as soon as the apply answered; a token is
    // minted for it by the TokenRequest API.
}

/// A kubeconfig in `dir` with a token of deploy/'s ServiceAccount (one per
/// replica, as each pod has its own projected token).
pub fn sa_kubeconfig(c: &RealCluster, dir: &Path, replica: &str) -> PathBuf {
    let token = c.service_account_token(DEPLOY_NS, SA_NAME);
    c.token_kubeconfig(&token, &dir.join(format!("{replica}.kubeconfig")))
}

/// The controller process; its stderr is kept for assertions and printed
/// when a test fails.
pub struct Controller {
    pub child: Child,
    pub log: Arc<Mutex<String>>,
}

impl Controller {
    pub fn spawn(kubeconfig: &Path, extra: &[&str]) -> Controller {
        Controller::spawn_env(kubeconfig, extra, &[])
    }

    pub fn spawn_env(kubeconfig: &Path, extra: &[&str], env: &[(&str, &str)]) -> Controller {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-readiness-controller"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .env("SANDBOX_READINESS_LOG", "info")
            .envs(env.iter().copied())
            .env_remove("KUBERNETES_SERVICE_HOST")
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
