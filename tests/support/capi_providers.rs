//! The test providers of a real Cluster API management cluster: the parts
//! that stand for what cannot run here, each held to a rule that keeps it
//! honest. They are small pollers (every 250 ms over the admin's HTTPS), as
//! a provider may be; everything else — MachineDeployments, MachineSets,
//! Machines, readiness gates, health checks, TalosConfigs and their
//! bootstrap data — is the real CAPI v1.13.6 and CABPT v0.6.11
//! (`scripts/control-plane.sh capi`). CRDs: tests/support/capi/crds.yaml.
//!
//! - **TestControlPlane** (v1beta2 control-plane contract) stands for the
//!   workload kube-apiserver that `control-plane.sh up` started: it writes
//!   the `<cluster>-kubeconfig` Secret (labelled
//!   `cluster.x-k8s.io/cluster-name`, the only Secrets CAPI's cache sees)
//!   with that server's admin credentials and reports
//!   `status.initialization.controlPlaneInitialized` — never a hand patch of
//!   the Cluster's status — and `status.externalManagedControlPlane` (a
//!   control plane of no Machines, as Kamaji's or a cloud's: without it
//!   CAPI finds no control-plane Machine and never drains or deletes a
//!   deleted worker's Node, `isDeleteNodeAllowed`). No `spec.version`, so
//!   MachineSet preflight checks that compare versions have nothing to
//!   compare.
//! - **TestCluster** (InfraCluster) sets its `spec.controlPlaneEndpoint` to
//!   the workload API server (a cloud's load balancer) and reports
//!   `provisioned`; CAPI copies the endpoint onto the Cluster.
//! - **TestMachine** (InfraMachine) is one node: once its Machine has
//!   bootstrap data (CABPT's `<machine>-bootstrap-data` Secret), the
//!   provider reads that machine config with the project's desired-state
//!   library, registers the Node in the workload cluster with that node's
//!   own kubelet credentials and `spec.providerID`, and starts a real
//!   `sandbox-readiness serve` in a child user namespace of its own with the
//!   config's `user.max_user_namespaces` written there and the environment
//!   of the config's ExtensionServiceConfig — as Talos would (a config
//!   without that document is a node without the extension: no agent). It plays only
//!   that per-user-namespace sysctl: a config that sets any other sysctl is
//!   refused (its TestMachine never provisions and says why), so no probe
//!   reads the host's value for it. `spec.ignoredSysctls` (from the
//!   template: a property of the cloud image, never of the bootstrap data)
//!   plays a kernel that does not apply a sysctl: the node keeps Talos's
//!   KSPP default (0). Its finalizer stops the agent when CAPI deletes it.
//!   `spec.kubeletNode` (a list of `scripts/kubelet-node.sh up` options,
//!   from the template: a property of the image the cloud boots) makes the
//!   node a real kubelet on the pinned node runtime instead of a Node
//!   registered by the test; its agent writes that Node with kubelet's own
//!   credential and sees that node's host tree (`--host-root`: its CRI
//!   socket, drop-ins, runsc and shim, as the extension's mounts give it),
//!   and the finalizer takes the node down. Either Node gets the config's
//!   `machine.nodeLabels`, as Talos's kubelet registers with them.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::common::{Agent, AgentSpec};
use crate::support::cluster::{owner_name, RealCluster};
use crate::support::kubelet::KubeletNode;

const FINALIZER: &str = "test.sandbox-readiness.io/machine";
const INFRA: &str = "/apis/infrastructure.cluster.x-k8s.io/v1alpha1";
const CONTROL: &str = "/apis/controlplane.cluster.x-k8s.io/v1alpha1";
const MERGE: &str = "application/merge-patch+json";

/// Talos's built-in value of `user.max_user_namespaces` (KSPP), what a node
/// has when its machine config does not raise it or its kernel ignores it.
const TALOS_DEFAULT_USERNS: u32 = 0;

/// What the providers did, for the tests' assertions.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// TestMachine name → the `user.max_user_namespaces` its node got.
    pub nodes: BTreeMap<String, u32>,
    /// TestMachine name → why it was refused.
    pub refused: BTreeMap<String, String>,
    /// TestMachines whose agents were stopped by their finalizer.
    pub stopped: Vec<String>,
}

/// The running providers of one namespace; stopped (every agent killed) on
/// drop.
pub struct Providers {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub record: Arc<Mutex<Record>>,
}

impl Providers {
    /// Registers the CRDs on `mgmt` (idempotent) and starts the providers
    /// for the objects in namespace `ns`.
    pub fn start(mgmt: Arc<RealCluster>, workload: Arc<RealCluster>, ns: &str) -> Providers {
        mgmt.register_test_provider_crds();
        let stop = Arc::new(AtomicBool::new(false));
        let record = Arc::new(Mutex::new(Record::default()));
        let mut world = World {
            mgmt,
            workload,
            ns: ns.to_string(),
            agents: BTreeMap::new(),
            kubelets: BTreeMap::new(),
            record: record.clone(),
        };
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                world.tick();
                std::thread::sleep(Duration::from_millis(250));
            }
            // Agents die with `world` (Agent kills on drop).
        });
        Providers {
            stop,
            thread: Some(thread),
            record,
        }
    }

    pub fn record(&self) -> Record {
        self.record.lock().unwrap().clone()
    }
}

impl Drop for Providers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct World {
    mgmt: Arc<RealCluster>,
    workload: Arc<RealCluster>,
    ns: String,
    agents: BTreeMap<String, Agent>,
    /// The real kubelet nodes (`spec.kubeletNode`), taken down when dropped.
    kubelets: BTreeMap<String, KubeletNode>,
    record: Arc<Mutex<Record>>,
}

impl Drop for World {
    /// The kubelet nodes first: their `down` needs their cluster's
    /// directory, which the workload RealCluster (a field dropped before
    /// them) removes.
    fn drop(&mut self) {
        self.kubelets.clear();
    }
}

/// The items of a list; none when the read failed (the next tick reads
/// again: a provider outlives a busy or restarting server).
fn items(list: Result<Option<Value>, String>) -> Vec<Value> {
    list.ok()
        .flatten()
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

impl World {
    fn tick(&mut self) {
        self.clusters();
        self.control_planes();
        self.machines();
    }

    fn patch_status(&self, base: &str, plural: &str, name: &str, status: Value) {
        let path = format!("{base}/namespaces/{}/{plural}/{name}/status", self.ns);
        let _ = self
            .mgmt
            .try_write("PATCH", &path, MERGE, &json!({ "status": status }));
    }

    fn clusters(&self) {
        for c in items(
            self.mgmt
                .try_get(&format!("{INFRA}/namespaces/{}/testclusters", self.ns)),
        ) {
            let name = c["metadata"]["name"].as_str().unwrap_or_default();
            // The cloud's load balancer in front of the control plane: the
            // workload API server.
            if c["spec"]["controlPlaneEndpoint"]["host"].is_null() {
                let port: u16 = self
                    .workload
                    .server_url()
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_default();
                let _ = self.mgmt.try_write(
                    "PATCH",
                    &format!("{INFRA}/namespaces/{}/testclusters/{name}", self.ns),
                    MERGE,
                    &json!({"spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": port}}}),
                );
                continue;
            }
            if c["status"]["initialization"]["provisioned"] != true {
                self.patch_status(
                    INFRA,
                    "testclusters",
                    name,
                    json!({"initialization": {"provisioned": true}}),
                );
            }
        }
    }

    fn control_planes(&self) {
        for cp in items(self.mgmt.try_get(&format!(
            "{CONTROL}/namespaces/{}/testcontrolplanes",
            self.ns
        ))) {
            let name = cp["metadata"]["name"].as_str().unwrap_or_default();
            // CAPI sets the Cluster as owner once it reconciles the reference.
            let Some(cluster) = owner_name(&cp, "Cluster") else {
                continue;
            };
            let secret = format!("{cluster}-kubeconfig");
            let path = format!("/api/v1/namespaces/{}/secrets/{secret}", self.ns);
            if matches!(self.mgmt.try_get(&path), Ok(None)) {
                let kubeconfig = std::fs::read_to_string(self.workload.admin_kubeconfig()).unwrap();
                let body = json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": secret, "namespace": self.ns,
                        "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                    "type": "cluster.x-k8s.io/secret",
                    "data": {"value": base64::engine::general_purpose::STANDARD.encode(kubeconfig)}});
                let _ = self.mgmt.try_write(
                    "POST",
                    &format!("/api/v1/namespaces/{}/secrets", self.ns),
                    "application/json",
                    &body,
                );
            }
            if cp["status"]["initialization"]["controlPlaneInitialized"] != true
                || cp["status"]["externalManagedControlPlane"] != true
            {
                self.patch_status(
                    CONTROL,
                    "testcontrolplanes",
                    name,
                    json!({"initialization": {"controlPlaneInitialized": true},
                           "externalManagedControlPlane": true,
                           "conditions": [{"type": "Available", "status": "True", "reason": "Available",
                                           "lastTransitionTime": now()}]}),
                );
            }
        }
    }

    fn machines(&mut self) {
        let path = format!("{INFRA}/namespaces/{}/testmachines", self.ns);
        for m in items(self.mgmt.try_get(&path)) {
            let name = m["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let finalizers = m["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mine = |f: &Value| f == FINALIZER;
            if m["metadata"]["deletionTimestamp"].is_string() {
                if self.agents.remove(&name).is_some() {
                    self.record.lock().unwrap().stopped.push(name.clone());
                }
                self.kubelets.remove(&name);
                if finalizers.iter().any(mine) {
                    let rest: Vec<&Value> = finalizers.iter().filter(|f| !mine(f)).collect();
                    let _ = self.mgmt.try_write(
                        "PATCH",
                        &format!("{path}/{name}"),
                        MERGE,
                        &json!({"metadata": {"finalizers": rest}}),
                    );
                }
                continue;
            }
            if !finalizers.iter().any(mine) {
                let mut all = finalizers.clone();
                all.push(Value::from(FINALIZER));
                let _ = self.mgmt.try_write(
                    "PATCH",
                    &format!("{path}/{name}"),
                    MERGE,
                    &json!({"metadata": {"finalizers": all,
                        "resourceVersion": m["metadata"]["resourceVersion"]}}),
                );
                continue;
            }
            if m["status"]["initialization"]["provisioned"] == true
                || self.record.lock().unwrap().refused.contains_key(&name)
            {
                continue;
            }
            if let Err(why) = self.provision(&m, &name) {
                if !why.is_empty() {
                    self.record
                        .lock()
                        .unwrap()
                        .refused
                        .insert(name.clone(), why.clone());
                    self.patch_status(
                        INFRA,
                        "testmachines",
                        &name,
                        json!({"conditions": [{"type": "Ready", "status": "False",
                            "reason": "UnsupportedMachineConfig", "message": why,
                            "lastTransitionTime": now()}]}),
                    );
                }
            }
        }
    }

    /// Boots the node of TestMachine `name`: `Err("")` while its bootstrap
    /// data is not there yet, `Err(why)` when the config is refused.
    fn provision(&mut self, m: &Value, name: &str) -> Result<(), String> {
        use sandbox_readiness::desired::{talos, yaml};
        let machine = owner_name(m, "Machine").ok_or_default()?;
        let machine = self
            .mgmt
            .try_get(&format!(
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/{}/machines/{machine}",
                self.ns
            ))
            .ok()
            .flatten()
            .ok_or_default()?;
        let secret = machine["spec"]["bootstrap"]["dataSecretName"]
            .as_str()
            .ok_or_default()?;
        let secret = self
            .mgmt
            .try_get(&format!("/api/v1/namespaces/{}/secrets/{secret}", self.ns))
            .ok()
            .flatten()
            .ok_or_default()?;
        let config = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["value"].as_str().unwrap_or_default())
            .map_err(|e| format!("bootstrap data is not base64: {e}"))?;
        let docs = yaml::documents(&String::from_utf8_lossy(&config))
            .map_err(|e| format!("bootstrap data is not a machine config: {e}"))?;
        let sysctls = talos::sysctls(&docs)?;
        let ignored: Vec<&str> = m["spec"]["ignoredSysctls"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut limit = TALOS_DEFAULT_USERNS;
        for (key, (value, _)) in &sysctls {
            if key != "user.max_user_namespaces" {
                return Err(format!(
                    "sets {key}, which this test cloud cannot give a node of its own (only user.max_user_namespaces, per user namespace)"
                ));
            }
            if !ignored.contains(&key.as_str()) {
                limit = value
                    .parse()
                    .map_err(|_| format!("{key}={value} is not a number"))?;
            }
        }
        // The agent as machined starts it: the ExtensionServiceConfig's
        // environment, with the listener and the kubeconfig this test gives.
        // A config without that document is a node without the extension
        // (a pool before the quick start's step 4): no agent.
        let extension = talos::agent_environment(&docs)?;
        let with_agent = extension.is_some();
        let env: Vec<(String, String)> = extension
            .unwrap_or_default()
            .into_iter()
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k != "SANDBOX_READINESS_LISTEN" && k != "SANDBOX_READINESS_KUBECONFIG")
                    .then(|| (k.to_string(), v.to_string()))
            })
            .collect();
        // machine.nodeLabels, as Talos's kubelet registers its Node with
        // them (--node-labels); a value that is not a string is refused
        // as Talos's config validation refuses it.
        let mut labels = serde_json::Map::new();
        for doc in docs.iter().filter(|d| d.get("kind").is_none()) {
            if let Some(l) = doc
                .pointer("/machine/nodeLabels")
                .and_then(Value::as_object)
            {
                for (k, v) in l {
                    let v = v
                        .as_str()
                        .ok_or_else(|| format!("machine.nodeLabels.{k} is not a string"))?;
                    labels.insert(k.clone(), json!(v));
                }
            }
        }
        let provider_id = format!("sandbox-readiness-test://{}/{name}", self.ns);
        // A kubelet node's agent sees that node's host tree (its CRI socket,
        // drop-ins, runsc and shim), as the extension's mounts give it on
        // Talos; a simulated node's has no runtime to see.
        let mut host_root = None;
        let kubeconfig = match m["spec"]["kubeletNode"].as_array() {
            None => self.workload.node_with_provider_id(name, &provider_id),
            Some(opts) => {
                let opts: Vec<&str> = opts.iter().filter_map(Value::as_str).collect();
                // A node that does not come up is said on its TestMachine,
                // as an agent that does not start is: not a dead provider.
                let node = refusal(
                    "its kubelet node did not come up",
                    "kubelet-node.sh up failed",
                    || KubeletNode::up(&self.workload, name, &opts),
                )?;
                // kubelet's --provider-id, set once as the API allows.
                self.workload.write(
                    "PATCH",
                    &format!("/api/v1/nodes/{name}"),
                    MERGE,
                    &json!({"spec": {"providerID": provider_id}}),
                );
                let kubeconfig = node.root.join("etc/kubernetes/kubeconfig-kubelet");
                host_root = Some(node.root.clone());
                self.kubelets.insert(name.to_string(), node);
                kubeconfig
            }
        };
        if !labels.is_empty() {
            self.workload
                .try_write(
                    "PATCH",
                    &format!("/api/v1/nodes/{name}"),
                    MERGE,
                    &json!({"metadata": {"labels": labels}}),
                )
                .map_err(|e| format!("labelling Node {name}: {e:?}"))?;
        }
        let mut spec = AgentSpec::new(
            Some(limit),
            &[
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--poll-interval",
                "300ms",
                "--node-resync",
                "1s",
                // A heartbeat well inside the outage test's --stale-after
                // (a node's default is 5m).
                "--node-heartbeat",
                "2s",
            ],
        );
        if let Some(root) = &host_root {
            spec.extra
                .extend(["--host-root".to_string(), root.display().to_string()]);
        }
        spec.env = env;
        // An agent that refuses its configuration is a node that does not
        // come up: said, not a dead provider.
        if with_agent {
            let agent = refusal("its agent did not start", "the agent did not start", || {
                Agent::spawn(spec)
            })?;
            self.agents.insert(name.to_string(), agent);
        }
        self.record
            .lock()
            .unwrap()
            .nodes
            .insert(name.to_string(), limit);
        let path = format!("{INFRA}/namespaces/{}/testmachines/{name}", self.ns);
        self.mgmt
            .try_write(
                "PATCH",
                &path,
                MERGE,
                &json!({"spec": {"providerID": provider_id}}),
            )
            .map_err(|e| format!("setting spec.providerID: {e:?}"))?;
        self.patch_status(
            INFRA,
            "testmachines",
            name,
            json!({"initialization": {"provisioned": true},
                   "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                 {"type": "Hostname", "address": name}]}),
        );
        Ok(())
    }
}

/// `start`, whose failure is a panic (the test helpers' way), as a
/// refusal said on the TestMachine: `"{what}: {the panic's message}"`
/// (`fallback` when it has none), not a dead provider thread.
fn refusal<T>(what: &str, fallback: &str, start: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(start)).map_err(|e| {
        let why = e
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| fallback.into());
        format!("{what}: {why}")
    })
}

/// `None` → `Err("")`: not there yet, try again on the next tick.
trait OkOrDefault<T> {
    fn ok_or_default(self) -> Result<T, String>;
}
impl<T> OkOrDefault<T> for Option<T> {
    fn ok_or_default(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

fn now() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
