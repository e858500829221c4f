//! The controller at the scale of a real management cluster (issue 23's
//! bench, issue 30's real servers, issue 32's 10,000 Machines): by default
//! 1,000 Machines in 10 MachineDeployments across 2 workload clusters; with
//! `SCALE_MACHINES=10000`, 10,000 Machines in 1,000 MachineDeployments
//! across 10 workload clusters, each its own kube-apiserver and etcd
//! (Nodes are cluster-scoped: clusters sharing one server would each watch
//! all its Nodes, which is another thing). Each Machine with its Node
//! (kubelet-shaped, full status) and the agent's condition written, and a
//! bootstrap-data Secret of a Cozystack-sized machine config (tens of KB).
//! Real kube-apiservers (`scripts/control-plane.sh up`): the management one
//! with Cluster API's CRDs and webhooks (`control-plane.sh capi`: every
//! Machine and MachineDeployment passes CAPI's defaulting and validating
//! webhooks), its Clusters paused (`spec.paused`) while the world is made,
//! so CAPI's managers admit the objects and leave them alone; then the
//! managers are stopped (their webhook configurations removed with them)
//! and the Clusters unpaused, since the controller, as CAPI's own
//! controllers, leaves a paused Cluster's Machines alone: Machines
//! reconciled by CAPI against Nodes nobody provisioned would measure CAPI,
//! not this controller, on two cores. The Machines' status is written as
//! CAPI would have it; each Machine's TalosConfig is cloned from its
//! MachineDeployment's TalosConfigTemplate (CAPI's `cloned-from`
//! annotations), which is where the controller reads the pool's sysctls.
//! The world is seeded through pooled kube-rs connections, many requests
//! in flight, so the servers and not the client's TLS handshakes are the
//! limit.
//!
//! Measured, per `--kube-qps`: time from the controller's start to every
//! Machine's condition written (the server's clock: its audit log's
//! `stageTimestamp` of the last write), against a plain client — a tokio
//! loop with the controller's concurrency (16) and the same token bucket
//! (`--kube-qps`, burst 100), listing the Machines (500 a page, as the
//! controller's watcher) and merge-patching each one's `status.conditions`
//! with a condition, guarded by its resourceVersion, as the controller
//! writes — run on the same world just before and just after the
//! controller's phase; peak RSS (VmHWM); over a rest period after a 10 s
//! settle: writes (the management server's audit log, by the controller's
//! User-Agent), the controller's CPU time (/proc/PID/stat) and its
//! reconciles (`/metrics`, `reconciles_total`); then one full pass, forced
//! as an operator forces one — a TalosConfigTemplate changed (an
//! annotation), which has the controller look at every Machine again — its
//! CPU over its reconciles: CPU per reconcile (at rest the controller
//! reconciles nothing for 10 minutes, so the rest period cannot tell it); and
//! the latency of one Node condition flip to its Machine (p50/p99/max over
//! the flips, polled every 20 ms).
//! Every Node's agent beats once before each controller starts: seeding
//! 10,000 Machines outlasts the default `--stale-after` (15 min), and a
//! real agent beats every 5 min.
//!
//! Then, per `SCALE_SHRINK` (MachineDeployment counts, e.g. `100,10`): the
//! world cut down to its first that many MachineDeployments (the rest's
//! Machines, TalosConfigs, bootstrap Secrets, Nodes, MachineDeployments and
//! templates deleted, so the controller's caches hold what a world of that
//! size holds; Machines per MachineDeployment unchanged), a controller
//! started on it, and the same rest period measured: CPU per reconcile at
//! 10, 100 and 1,000 MachineDeployments. Shrinking, not growing, keeps
//! every object admitted by CAPI's webhooks, which cannot be started twice
//! on one server.
//!
//! Then an outage, at the first `--kube-qps`: a controller with a short
//! `--stale-after` (`SCALE_STALE_SECS`, 30) while every Node's agent
//! heartbeats (a third of that apart, as the agent's 5 min against the
//! default 15 min); the writes over a quiet period of heartbeats alone; one
//! workload cluster stopped (`control-plane.sh stop`) for
//! `SCALE_OUTAGE_SECS` (60): the writes per Machine over the outage (each
//! of its Machines once, to Unknown, none of the other cluster's), then the
//! cluster started again: the time until all are True and the writes that
//! took.
//!
//! `cargo bench -p sandbox-readiness-controller --bench scale` (release
//! build of the controller). Knobs (environment): `SCALE_MACHINES` (1000 or
//! 10000: the defaults of the size knobs and of `SCALE_QPS`,
//! `SCALE_OUTAGE_SECS` and `SCALE_SHRINK` below; the 10,000 ones in
//! brackets), `SCALE_CLUSTERS` (2 [10]), `SCALE_MDS` (10 [1000], spread
//! round-robin over the clusters), `SCALE_PER_MD` (100 [10]), `SCALE_QPS`
//! (`50,200` [`500`]), `SCALE_REST_SECS` (60), `SCALE_FLIPS` (120),
//! `SCALE_OUTAGE_SECS` (60 [0]; 0 skips the outage), `SCALE_STALE_SECS`
//! (30), `SCALE_SHRINK` (none [`100,10`]), `SCALE_SEED_CONCURRENCY`
//! (requests in flight while seeding, 32), `SCALE_BOOTSTRAP_SECRETS` (1; 0
//! seeds no bootstrap-data Secret: the controller reads none since issue
//! 31), `SCALE_CLONE_DATA` (1; 0 seeds each Machine's TalosConfig with a
//! stub for data, not the template's machine config: the controller
//! watches TalosConfigs' metadata only), `SCALE_CONTROLLER_BIN` (another build of the controller),
//! `SCALE_CONTROLLER_LOG` (its log filter, `warn`). Starting
//! 11 servers on 2 cores: set `SR_CONTROL_PLANE_READY_TIMEOUT=300`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/cluster.rs"]
mod cluster;

use std::{
    collections::{BTreeMap, HashSet},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant, SystemTime},
};

use cluster::RealCluster;
use futures_util::StreamExt;
use serde_json::{json, Value};

/// The controller's User-Agent (controller/src/qps.rs).
const UA: &str = "sandbox-readiness-controller/";
const TY: &str = "sandbox-readiness.io/SandboxReady";
const AV: &str = "cluster.x-k8s.io/v1beta2";
const BOOTSTRAP: &str = "/apis/bootstrap.cluster.x-k8s.io/v1alpha3";
const BOOTSTRAP_AV: &str = "bootstrap.cluster.x-k8s.io/v1alpha3";

/// The world's size (see the top of the file).
#[derive(Clone, Copy)]
struct Size {
    clusters: usize,
    mds: usize,
    per_md: usize,
}

fn env_usize(key: &str) -> Option<usize> {
    std::env::var(key).ok().and_then(|s| s.trim().parse().ok())
}

/// `SCALE_MACHINES=10000`: the 10,000-Machine mode's defaults.
fn ten_thousand() -> bool {
    match env_usize("SCALE_MACHINES") {
        None | Some(1000) => false,
        Some(10_000) => true,
        Some(n) => panic!("SCALE_MACHINES: 1000 or 10000, not {n} (the size knobs make any other)"),
    }
}

impl Size {
    fn from_env() -> Size {
        let big = ten_thousand();
        let s = Size {
            clusters: env_usize("SCALE_CLUSTERS").unwrap_or(if big { 10 } else { 2 }),
            mds: env_usize("SCALE_MDS").unwrap_or(if big { 1000 } else { 10 }),
            per_md: env_usize("SCALE_PER_MD").unwrap_or(if big { 10 } else { 100 }),
        };
        assert!(
            s.clusters > 0 && s.mds >= s.clusters && s.per_md > 0,
            "at least one MachineDeployment per cluster"
        );
        s
    }
}

const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn ts(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn now() -> String {
    ts(SystemTime::now())
}

/// A PEM-looking block of `n` base64 lines (certificates and keys are most
/// of a real machine config's bytes).
fn pem(kind: &str, seed: usize, lines: usize) -> String {
    let mut s = format!("-----BEGIN {kind}-----\n");
    for i in 0..lines {
        let line: String = (0..64)
            .map(|j| {
                let c = (seed * 31 + i * 7 + j * 13) % 62;
                (match c {
                    0..=25 => b'A' + c as u8,
                    26..=51 => b'a' + (c - 26) as u8,
                    _ => b'0' + (c - 52) as u8,
                }) as char
            })
            .collect();
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str(&format!("-----END {kind}-----\n"));
    s
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>()
}

/// A Talos worker machine config as CABPT writes it for a Cozystack pool:
/// PKI, kubelet and containerd settings, registry mirrors, files, the
/// pool's sysctls, and the cluster section with its CA and secrets.
fn machine_config(seed: usize) -> String {
    let mut c =
        String::from("version: v1alpha1\ndebug: false\npersist: true\nmachine:\n  type: worker\n");
    c.push_str(&format!("  token: {seed:06}.abcdefghijklmnop\n"));
    c.push_str("  ca:\n    crt: |\n");
    c.push_str(&indent(&pem("CERTIFICATE", seed, 18), 6));
    c.push_str("    key: \"\"\n  certSANs: []\n");
    c.push_str("  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.32.4\n    defaultRuntimeSeccompProfileEnabled: true\n    disableManifestsDirectory: true\n    extraArgs:\n      rotate-server-certificates: \"true\"\n      max-pods: \"512\"\n    extraConfig:\n      maxParallelImagePulls: 5\n      serializeImagePulls: false\n    nodeIP:\n      validSubnets: [\"10.0.0.0/8\"]\n");
    c.push_str("  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n        vip: null\n    nameservers: [\"1.1.1.1\", \"8.8.8.8\"]\n");
    c.push_str("  install:\n    disk: /dev/sda\n    image: ghcr.io/cozystack/cozystack/talos:v1.10.3\n    wipe: false\n");
    c.push_str("  registries:\n    mirrors:\n");
    for r in [
        "docker.io",
        "ghcr.io",
        "quay.io",
        "registry.k8s.io",
        "gcr.io",
    ] {
        c.push_str(&format!(
            "      {r}:\n        endpoints: [\"https://mirror.example.internal/{r}\"]\n"
        ));
    }
    c.push_str("  files:\n");
    for (i, path) in [
        "/etc/cri/conf.d/20-customization.part",
        "/etc/cri/conf.d/30-runsc.part",
        "/etc/lvm/lvm.conf",
        "/var/etc/drbd.d/global_common.conf",
    ]
    .iter()
    .enumerate()
    {
        c.push_str(&format!(
            "    - op: create\n      path: {path}\n      permissions: 0o644\n      content: |\n"
        ));
        for l in 0..60 {
            c.push_str(&format!(
                "        # setting {i}.{l}: plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runsc.options.value_{l} = {seed}\n"
            ));
        }
    }
    c.push_str(&format!("  sysctls:\n    {}: \"{}\"\n", SYSCTL.0, SYSCTL.1));
    c.push_str("cluster:\n  id: Zm9vYmFyYmF6\n  secret: c2VjcmV0LXNlY3JldA==\n  controlPlane:\n    endpoint: https://10.0.0.1:6443\n  clusterName: tenant\n  network:\n    dnsDomain: cozy.local\n    podSubnets: [\"10.244.0.0/16\"]\n    serviceSubnets: [\"10.96.0.0/16\"]\n    cni:\n      name: none\n");
    c.push_str(&format!(
        "  token: {seed:06}.qrstuvwxyzabcdef\n  secretboxEncryptionSecret: c2VjcmV0Ym94\n"
    ));
    for k in ["ca", "aggregatorCA", "serviceAccount"] {
        c.push_str(&format!("  {k}:\n    crt: |\n"));
        c.push_str(&indent(&pem("CERTIFICATE", seed + k.len(), 18), 6));
        c.push_str("    key: |\n");
        c.push_str(&indent(&pem("EC PRIVATE KEY", seed + 2 * k.len(), 4), 6));
    }
    c.push_str("  discovery:\n    enabled: true\n    registries:\n      kubernetes:\n        disabled: true\n      service: {}\n");
    c
}

/// A Node as kubelet writes it (labels, annotations, addresses, capacity,
/// conditions, images, nodeInfo, runtime handlers), with the agent's
/// condition and desired-state annotation.
fn node(name: &str, i: usize, status: &str, reason: &str) -> Value {
    let t = now();
    let images: Vec<Value> = (0..40)
        .map(|k| {
            json!({"names":[format!("ghcr.io/cozystack/cozystack/image-{k}@sha256:{:064x}", k * 7919 + i),
                             format!("ghcr.io/cozystack/cozystack/image-{k}:v0.{k}.{i}")],
                   "sizeBytes": 10_000_000 + k * 1_234_567})
        })
        .collect();
    let cond = |ty: &str, st: &str, r: &str, m: &str| json!({"type":ty,"status":st,"reason":r,"message":m,"lastHeartbeatTime":t,"lastTransitionTime":t});
    json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,
        "labels":{"beta.kubernetes.io/arch":"amd64","beta.kubernetes.io/os":"linux","kubernetes.io/arch":"amd64",
            "kubernetes.io/hostname":name,"kubernetes.io/os":"linux","node.kubernetes.io/instance-type":"u1.xlarge",
            "topology.kubernetes.io/zone":format!("zone-{}", i % 3),"topology.kubernetes.io/region":"r1",
            "sandbox-readiness.io/runsc":"true"},
        "annotations":{"node.alpha.kubernetes.io/ttl":"0","volumes.kubernetes.io/controller-managed-attach-detach":"true",
            "cluster.x-k8s.io/cluster-name":"tenant","cluster.x-k8s.io/machine":name,
            "sandbox-readiness.io/desired":json!({"v":1,"sysctls":{SYSCTL.0:SYSCTL.1}}).to_string()}},
        "spec":{"podCIDR":format!("10.244.{}.0/24", i % 250),"podCIDRs":[format!("10.244.{}.0/24", i % 250)],
            "providerID":format!("kubevirt://{name}")},
        "status":{
            "addresses":[{"type":"InternalIP","address":format!("10.1.{}.{}", i / 250, i % 250)},{"type":"Hostname","address":name}],
            "allocatable":{"cpu":"3950m","ephemeral-storage":"94998384074","hugepages-2Mi":"0","memory":"15850036Ki","pods":"512"},
            "capacity":{"cpu":"4","ephemeral-storage":"102626232Ki","hugepages-2Mi":"0","memory":"16388660Ki","pods":"512"},
            "conditions":[
                cond("MemoryPressure","False","KubeletHasSufficientMemory","kubelet has sufficient memory available"),
                cond("DiskPressure","False","KubeletHasNoDiskPressure","kubelet has no disk pressure"),
                cond("PIDPressure","False","KubeletHasSufficientPID","kubelet has sufficient PID available"),
                cond("Ready","True","KubeletReady","kubelet is posting ready status"),
                cond(TY,status,reason,&format!("the agent says {reason}")),
            ],
            "daemonEndpoints":{"kubeletEndpoint":{"Port":10250}},
            "images":images,
            "nodeInfo":{"architecture":"amd64","bootID":format!("{i:08}-0000-4000-8000-000000000000"),
                "containerRuntimeVersion":"containerd://2.0.5","kernelVersion":"6.12.25-talos",
                "kubeProxyVersion":"","kubeletVersion":"v1.32.4","machineID":format!("{i:032x}"),
                "operatingSystem":"linux","osImage":"Talos (v1.10.3)","systemUUID":format!("{i:08}-1111-4111-8111-111111111111")},
            "runtimeHandlers":[{"name":"runsc","features":{"recursiveReadOnlyMounts":true,"userNamespaces":true}},
                {"name":"runc","features":{"recursiveReadOnlyMounts":true,"userNamespaces":true}},
                {"name":"","features":{"recursiveReadOnlyMounts":true,"userNamespaces":true}}]}})
}

/// A Machine of a MachineDeployment, as Cluster API v1beta2 has it once
/// provisioned (labels, owner, finalizer, spec, status with nodeRef and
/// the Machine controller's conditions).
fn machine(ns: &str, cluster: &str, md: &str, name: &str, node: &str) -> (Value, Value) {
    let t = now();
    let spec = json!({"clusterName":cluster,
        "bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"TalosConfig","name":name},
                     "dataSecretName":format!("{name}-boot")},
        "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"KubevirtMachine","name":name},
        "version":"v1.32.4","providerID":format!("kubevirt://{node}"),
        "readinessGates":[{"conditionType":TY}]});
    let obj = json!({"apiVersion":AV,"kind":"Machine","metadata":{"name":name,"namespace":ns,
        "labels":{"cluster.x-k8s.io/cluster-name":cluster,"cluster.x-k8s.io/deployment-name":md,
            "cluster.x-k8s.io/set-name":format!("{md}-7d9f8c6b5"),"machine-template-hash":"3859472610"},
        "annotations":{"controlplane.cluster.x-k8s.io/kubeadm-cluster-configuration":"{}"},
        // No ownerReference to a MachineSet: the real garbage collector
        // (kube-controller-manager) deletes a dependent whose owner's uid
        // does not exist, and no MachineSet runs here.
        "finalizers":["machine.cluster.x-k8s.io"]},
        "spec":spec});
    let c = |ty: &str, st: &str, r: &str| json!({"type":ty,"status":st,"reason":r,"message":"","lastTransitionTime":t,"observedGeneration":1});
    let status = json!({"nodeRef":{"name":node},
        "addresses":[{"type":"InternalIP","address":"10.1.0.1"},{"type":"Hostname","address":node}],
        "phase":"Running","observedGeneration":1,"lastUpdated":t,
        "initialization":{"bootstrapDataSecretCreated":true,"infrastructureProvisioned":true},
        "nodeInfo":{"architecture":"amd64","bootID":"b","containerRuntimeVersion":"containerd://2.0.5","kernelVersion":"6.12.25-talos",
            "kubeProxyVersion":"","kubeletVersion":"v1.32.4","machineID":"m","operatingSystem":"linux","osImage":"Talos (v1.10.3)","systemUUID":"u"},
        "conditions":[c("Available","False","NotAvailable"),c("Ready","False","NotReady"),c("BootstrapConfigReady","True","Ready"),
            c("InfrastructureReady","True","Ready"),c("NodeHealthy","True","NodeHealthy"),c("NodeReady","True","NodeReady"),
            c("Deleting","False","NotDeleting"),c("Paused","False","NotPaused"),c("UpToDate","True","UpToDate")]});
    (obj, status)
}

fn machine_deployment(ns: &str, cluster: &str, md: &str, replicas: usize) -> Value {
    json!({"apiVersion":AV,"kind":"MachineDeployment","metadata":{"name":md,"namespace":ns,
        "annotations":{"sandbox-readiness.io/mirror":"true","cluster.x-k8s.io/paused":""}},
        "spec":{"clusterName":cluster,"replicas":replicas,
        "selector":{"matchLabels":{"cluster.x-k8s.io/deployment-name":md}},
        "template":{"metadata":{"labels":{"cluster.x-k8s.io/deployment-name":md}},"spec":{"clusterName":cluster,
            "bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"TalosConfigTemplate","name":md}},
            "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"KubevirtMachineTemplate","name":md},
            "version":"v1.32.4","readinessGates":[{"conditionType":TY}]}}}})
}

const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const MACHINES: &str = "/apis/cluster.x-k8s.io/v1beta2";
/// The plain client's condition type: its own, so the controller's
/// condition is neither written nor disturbed by it.
const PLAIN_TY: &str = "bench.sandbox-readiness.io/PlainClient";
/// The controller's reconciles at once (controller/src/run.rs) and its
/// `--kube-burst` default: the plain client's shape.
const CONCURRENCY: usize = 16;
const BURST: f64 = 100.0;

/// A cloned TalosConfig's data with `SCALE_CLONE_DATA=0`: the controller
/// reads TalosConfigs' metadata only, so their specs load the server alone.
const CLONE_STUB: &str =
    "version: v1alpha1\n# the template's machine config, not cloned (SCALE_CLONE_DATA=0)\n";

/// (namespace, machine, workload index, node)
type Seat = (String, String, usize, String);

struct World {
    mgmt: RealCluster,
    wl: Vec<RealCluster>,
    /// A client of each server: the management one, then the workloads'.
    mgmt_client: kube::Client,
    wl_clients: Vec<kube::Client>,
    /// (namespace, machine, workload index, node), MachineDeployment by
    /// MachineDeployment in `mds` order.
    machines: Vec<Seat>,
    /// (namespace, MachineDeployment, workload index), in seeding order.
    mds: Vec<(String, String, usize)>,
    per_md: usize,
    bootstrap_secrets: bool,
    secret_bytes: usize,
    node_bytes: usize,
}

/// `f` over `items`, 4 threads (the servers are on loopback; one client
/// at a time would measure the client's TLS handshakes).
fn each<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(it) = items.get(i) else { return };
                f(it);
            });
        }
    });
}

/// One request through a pooled kube-rs client: the answer, `Null` for a
/// create of what exists or a delete of what is gone (a retry after a
/// timeout that had landed). Retried on anything else a few times (a 429
/// from a server under the seeding's load), then fails the bench.
async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    ct: &str,
    body: Option<&Value>,
) -> Value {
    let mut tries = 0u32;
    loop {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ct)
            .body(
                body.map(|b| serde_json::to_vec(b).unwrap())
                    .unwrap_or_default(),
            )
            .unwrap();
        let e = match client.request::<Value>(req).await {
            Ok(v) => return v,
            Err(e) => e,
        };
        let text = e.to_string();
        let lower = text.to_lowercase();
        if (method == "POST" && lower.contains("already exists"))
            || (method == "DELETE" && lower.contains("not found"))
        {
            return Value::Null;
        }
        tries += 1;
        assert!(tries < 8, "{method} {path}: {text}");
        tokio::time::sleep(Duration::from_millis(250 << tries.min(4))).await;
    }
}

/// Each of `n` indices through `f`, `conc` at a time.
async fn each_async<F, Fut>(n: usize, conc: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures_util::stream::iter(0..n)
        .map(f)
        .buffer_unordered(conc)
        .for_each(|()| async {})
        .await;
}

fn world(rt: &tokio::runtime::Runtime, size: Size) -> World {
    let t = Instant::now();
    // The management server with CAPI's managers, beside the workload
    // servers 3 at a time: 11 starting at once on two cores miss their
    // readiness timeout.
    let (mgmt, wl) = std::thread::scope(|s| {
        let m = s.spawn(|| {
            let c = RealCluster::private();
            c.start_capi();
            c
        });
        let mut wl = Vec::new();
        for chunk in (0..size.clusters).collect::<Vec<_>>().chunks(3) {
            let hs: Vec<_> = chunk
                .iter()
                .map(|_| s.spawn(RealCluster::private))
                .collect();
            wl.extend(hs.into_iter().map(|h| h.join().unwrap()));
        }
        (m.join().unwrap(), wl)
    });
    eprintln!(
        "scale: management (Cluster API's CRDs and webhooks) and {} workload clusters up in {:.1} s",
        size.clusters,
        t.elapsed().as_secs_f64()
    );
    let mgmt_client = rt.block_on(admin_client(&mgmt));
    let wl_clients: Vec<kube::Client> = wl.iter().map(|c| rt.block_on(admin_client(c))).collect();
    for (c, w) in wl.iter().enumerate() {
        let ns = format!("tenant-{c}");
        let cluster = format!("c{c}");
        mgmt.write(
            "POST",
            "/api/v1/namespaces",
            "application/json",
            &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}}),
        );
        // Paused: CAPI's managers admit (webhooks) and leave its objects be.
        // CAPI's webhook refuses a Cluster with none of controlPlaneRef,
        // infrastructureRef and topology (the stand-in took `spec: {}`).
        mgmt.write(
            "POST",
            &format!("{MACHINES}/namespaces/{ns}/clusters"),
            "application/json",
            &json!({"apiVersion":AV,"kind":"Cluster","metadata":{"name":cluster,"namespace":ns},"spec":{"paused":true,
                "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"KubevirtCluster","name":cluster}}}),
        );
        let kubeconfig = std::fs::read_to_string(w.admin_kubeconfig()).unwrap();
        mgmt.write("POST", &format!("/api/v1/namespaces/{ns}/secrets"), "application/json",
            &json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{cluster}-kubeconfig"),"namespace":ns,
            "labels":{"cluster.x-k8s.io/cluster-name":cluster}},"type":"cluster.x-k8s.io/secret",
            "data":{"value":b64(&kubeconfig)}}));
    }
    // MachineDeployment d in cluster d % clusters: any first k of them
    // spread evenly (what SCALE_SHRINK keeps).
    let mds: Vec<(String, String, usize)> = (0..size.mds)
        .map(|d| {
            let c = d % size.clusters;
            (
                format!("tenant-{c}"),
                format!("c{c}-md-{}", d / size.clusters),
                c,
            )
        })
        .collect();
    let mut machines = Vec::new();
    for (ns, md, c) in &mds {
        for i in 0..size.per_md {
            machines.push((
                ns.clone(),
                format!("{md}-{i:03}"),
                *c,
                format!("{md}-node-{i:03}"),
            ));
        }
    }
    let conc = env_usize("SCALE_SEED_CONCURRENCY").unwrap_or(32);
    let bootstrap_secrets = env_usize("SCALE_BOOTSTRAP_SECRETS").unwrap_or(1) != 0;
    let clone_data = env_usize("SCALE_CLONE_DATA").unwrap_or(1) != 0;
    let secret_bytes = AtomicUsize::new(0);
    let node_bytes = AtomicUsize::new(0);
    let seeded = AtomicUsize::new(0);
    let t = Instant::now();
    rt.block_on(async {
        let m = &mgmt_client;
        each_async(mds.len(), conc, |d| {
            let (ns, md, c) = &mds[d];
            async move {
                call(m, "POST", &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigtemplates"), "application/json",
                    Some(&json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfigTemplate","metadata":{"name":md,"namespace":ns},
                        "spec":{"template":{"spec":{"generateType":"none","talosVersion":"v1.11","data":machine_config(d)}}}}))).await;
                call(m, "POST", &format!("{MACHINES}/namespaces/{ns}/machinedeployments"), "application/json",
                    Some(&machine_deployment(ns, &format!("c{c}"), md, size.per_md))).await;
            }
        })
        .await;
        eprintln!("scale: {} MachineDeployments seeded in {:.1} s", mds.len(), t.elapsed().as_secs_f64());
        each_async(machines.len(), conc, |k| {
            let (ns, name, c, nname) = &machines[k];
            let (secret_bytes, node_bytes, seeded) = (&secret_bytes, &node_bytes, &seeded);
            let w = &wl_clients[*c];
            let total = machines.len();
            async move {
                let cluster = format!("c{c}");
                let md = name.rsplit_once('-').unwrap().0.to_string();
                let cfg = machine_config(k);
                secret_bytes.fetch_max(cfg.len(), Ordering::Relaxed);
                let mgmt_side = async {
                    if bootstrap_secrets {
                        call(m, "POST", &format!("/api/v1/namespaces/{ns}/secrets"), "application/json",
                            Some(&json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{name}-boot"),"namespace":ns,
                            "labels":{"cluster.x-k8s.io/cluster-name":cluster}},"type":"cluster.x-k8s.io/secret",
                            "data":{"value":b64(&cfg),"format":b64("cloud-config")}}))).await;
                    }
                    // As CAPI's MachineSet controller clones it from the template.
                    call(m, "POST", &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigs"), "application/json",
                        Some(&json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfig","metadata":{"name":name,"namespace":ns,
                            "annotations":{"cluster.x-k8s.io/cloned-from-name":md,
                                "cluster.x-k8s.io/cloned-from-groupkind":"TalosConfigTemplate.bootstrap.cluster.x-k8s.io"}},
                            "spec":{"generateType":"none","talosVersion":"v1.11",
                                "data":if clone_data { cfg.as_str() } else { CLONE_STUB }}}))).await;
                    let (obj, status) = machine(ns, &cluster, &md, name, nname);
                    let base = format!("{MACHINES}/namespaces/{ns}/machines");
                    call(m, "POST", &base, "application/json", Some(&obj)).await;
                    call(m, "PATCH", &format!("{base}/{name}/status"), MERGE, Some(&json!({ "status": status }))).await;
                };
                let workload_side = async {
                    let n = node(nname, k, "True", "Converged");
                    node_bytes.fetch_max(n.to_string().len(), Ordering::Relaxed);
                    call(w, "POST", "/api/v1/nodes", "application/json", Some(&n)).await;
                    // A create keeps only part of a Node's status: the rest as
                    // kubelet writes it, through the status subresource.
                    call(w, "PATCH", &format!("/api/v1/nodes/{nname}/status"), MERGE, Some(&json!({"status": n["status"]}))).await;
                };
                futures_util::future::join(mgmt_side, workload_side).await;
                let done = seeded.fetch_add(1, Ordering::Relaxed) + 1;
                if done.is_multiple_of((total / 10).max(1)) {
                    eprintln!("scale: {done} Machines seeded");
                }
            }
        })
        .await;
    });
    unpause(&mgmt, size.clusters);
    World {
        mgmt,
        wl,
        mgmt_client,
        wl_clients,
        machines,
        mds,
        per_md: size.per_md,
        bootstrap_secrets,
        secret_bytes: secret_bytes.into_inner(),
        node_bytes: node_bytes.into_inner(),
    }
}

/// Stops CAPI's and CABPT's managers with their admission webhooks (the
/// world is made), then unpauses the Clusters for the controller.
fn unpause(mgmt: &RealCluster, clusters: usize) {
    mgmt.stop_capi_managers();
    for c in 0..clusters {
        mgmt.write(
            "PATCH",
            &format!("{MACHINES}/namespaces/tenant-{c}/clusters/c{c}"),
            MERGE,
            &json!({"spec":{"paused":false}}),
        );
    }
}

/// Cuts the world down to its first `keep` MachineDeployments: the others'
/// Machines (finalizer dropped first), TalosConfigs, bootstrap Secrets and
/// Nodes deleted, then the MachineDeployments and their templates. The
/// controller is not running meanwhile.
fn shrink(w: &mut World, rt: &tokio::runtime::Runtime, keep: usize) {
    if keep >= w.mds.len() {
        return;
    }
    let t = Instant::now();
    let gone_mds: Vec<(String, String, usize)> = w.mds.split_off(keep);
    let kept = keep * w.per_md;
    let gone: Vec<Seat> = w.machines.split_off(kept);
    let conc = env_usize("SCALE_SEED_CONCURRENCY").unwrap_or(32);
    rt.block_on(async {
        let m = &w.mgmt_client;
        let secrets = w.bootstrap_secrets;
        each_async(gone.len(), conc, |k| {
            let (ns, name, c, nname) = &gone[k];
            let wc = &w.wl_clients[*c];
            async move {
                let path = format!("{MACHINES}/namespaces/{ns}/machines/{name}");
                call(
                    m,
                    "PATCH",
                    &path,
                    MERGE,
                    Some(&json!({"metadata":{"finalizers":null}})),
                )
                .await;
                call(m, "DELETE", &path, "application/json", None).await;
                call(
                    m,
                    "DELETE",
                    &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigs/{name}"),
                    "application/json",
                    None,
                )
                .await;
                if secrets {
                    call(
                        m,
                        "DELETE",
                        &format!("/api/v1/namespaces/{ns}/secrets/{name}-boot"),
                        "application/json",
                        None,
                    )
                    .await;
                }
                call(
                    wc,
                    "DELETE",
                    &format!("/api/v1/nodes/{nname}"),
                    "application/json",
                    None,
                )
                .await;
            }
        })
        .await;
        each_async(gone_mds.len(), conc, |d| {
            let (ns, md, _) = &gone_mds[d];
            async move {
                call(
                    m,
                    "DELETE",
                    &format!("{MACHINES}/namespaces/{ns}/machinedeployments/{md}"),
                    "application/json",
                    None,
                )
                .await;
                call(
                    m,
                    "DELETE",
                    &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigtemplates/{md}"),
                    "application/json",
                    None,
                )
                .await;
            }
        })
        .await;
    });
    eprintln!(
        "scale: cut down to {keep} MachineDeployments, {kept} Machines, in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// The Machine's gate condition status and reason.
fn gate(m: &Value) -> Option<(String, String)> {
    m["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == TY)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
}

fn count_true(mgmt: &RealCluster) -> (usize, Vec<(String, String)>) {
    let list = mgmt
        .try_get(&format!("{MACHINES}/machines"))
        .ok()
        .flatten()
        .unwrap_or(Value::Null);
    let mut n = 0;
    let mut other = Vec::new();
    for m in list["items"].as_array().into_iter().flatten() {
        match gate(m) {
            Some((st, _)) if st == "True" => n += 1,
            Some(g) => other.push(g),
            None => {}
        }
    }
    (n, other)
}

/// The process's CPU time so far (user + system, /proc/PID/stat).
fn cpu_time(pid: u32) -> Duration {
    static TICK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let hz = *TICK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    });
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's name (which may hold spaces): state is field 3,
    // utime 14, stime 15.
    let rest = s.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0);
    Duration::from_secs_f64(ticks / hz)
}

/// The controller's `reconciles_total` from its `/metrics`.
fn reconciles(port: u16) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix("sandbox_readiness_controller_reconciles_total "))
        .and_then(|v| v.trim().parse().ok())
}

/// The management server's audit log from a point on: each `events` call
/// returns the controller's events (ResponseComplete) written since the
/// last one. Read from a byte offset, not whole: the seeding's bodies make
/// this log a gigabyte at 10,000 Machines. A line the server is still
/// writing is left for the next call; one cut by the starting offset
/// began before it and does not parse.
struct Tail {
    path: PathBuf,
    at: u64,
}

impl Tail {
    fn now(w: &World) -> Tail {
        let path = w.mgmt.dir().join("audit.log");
        let at = std::fs::metadata(&path).map_or(0, |m| m.len());
        Tail { path, at }
    }

    fn events(&mut self) -> Vec<Value> {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(self.at)).is_err() || f.read_to_end(&mut bytes).is_err() {
            return Vec::new();
        }
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        self.at += end as u64 + 1;
        String::from_utf8_lossy(&bytes[..=end])
            .lines()
            .filter(|l| l.contains(UA))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    && e["userAgent"].as_str().is_some_and(|u| u.starts_with(UA))
            })
            .collect()
    }

    /// The controller's writes since the last call.
    fn writes(&mut self) -> Vec<Value> {
        self.events().into_iter().filter(is_write).collect()
    }
}

/// A write verb (the policy also logs Secret reads, level Metadata).
fn is_write(e: &Value) -> bool {
    e["verb"]
        .as_str()
        .is_some_and(|v| ["create", "update", "patch", "delete", "deletecollection"].contains(&v))
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// A token bucket as client-go's (and the controller's, controller/src/
/// qps.rs): `qps` a second, `burst` at once, full at the start; a taker
/// reserves its token and sleeps until it is due.
struct Bucket {
    qps: f64,
    burst: f64,
    state: std::sync::Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(qps: f64, burst: f64) -> Bucket {
        Bucket {
            qps,
            burst,
            state: std::sync::Mutex::new((burst, Instant::now())),
        }
    }

    async fn take(&self) {
        let wait = {
            let mut s = self.state.lock().unwrap();
            let now = Instant::now();
            s.0 = (s.0 + (now - s.1).as_secs_f64() * self.qps).min(self.burst) - 1.0;
            s.1 = now;
            (s.0 < 0.0).then(|| Duration::from_secs_f64(-s.0 / self.qps))
        };
        if let Some(d) = wait {
            tokio::time::sleep(d).await;
        }
    }
}

/// What the plain client took to write every Machine once.
struct Plain {
    took: Duration,
    writes: usize,
    failed: usize,
}

/// The plain client (see the top of the file): list every Machine, then
/// merge-patch each one's `status.conditions` — the list as read, with
/// [`PLAIN_TY`] set (`pass` in its message, so every pass changes every
/// Machine) — guarded by its resourceVersion; `CONCURRENCY` at once, every
/// request through one bucket of `qps`. Timed from its first request to
/// its last answer.
async fn plain(w: &World, qps: f64, pass: usize) -> Plain {
    let client = admin_client(&w.mgmt).await;
    let bucket = Bucket::new(qps, BURST);
    let start = Instant::now();
    let mut items: Vec<Value> = Vec::new();
    let mut cont: Option<String> = None;
    loop {
        bucket.take().await;
        let mut path = format!("{MACHINES}/machines?limit=500");
        if let Some(c) = &cont {
            path.push_str(&format!("&continue={c}"));
        }
        let mut page = call(&client, "GET", &path, "application/json", None).await;
        if let Some(list) = page["items"].as_array_mut() {
            items.append(list);
        }
        cont = page["metadata"]["continue"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        if cont.is_none() {
            break;
        }
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let lanes = (0..CONCURRENCY).map(|_| async {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(m) = items.get(i) else { return };
            let t = now();
            let mut conds: Vec<Value> = m["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c["type"] != PLAIN_TY)
                .collect();
            conds.push(json!({"type":PLAIN_TY,"status":"True","reason":"Written",
                "message":format!("pass {pass}"),"lastTransitionTime":t,
                "observedGeneration":m["metadata"]["generation"]}));
            let body = json!({"metadata":{"resourceVersion":m["metadata"]["resourceVersion"]},
                "status":{"conditions":conds}});
            let path = format!(
                "{MACHINES}/namespaces/{}/machines/{}/status",
                m["metadata"]["namespace"].as_str().unwrap_or(""),
                m["metadata"]["name"].as_str().unwrap_or("")
            );
            bucket.take().await;
            let req = http::Request::builder()
                .method("PATCH")
                .uri(&path)
                .header("content-type", MERGE)
                .body(serde_json::to_vec(&body).unwrap())
                .unwrap();
            if client.request::<Value>(req).await.is_err() {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    futures_util::future::join_all(lanes).await;
    Plain {
        took: start.elapsed(),
        writes: items.len(),
        failed: failed.into_inner(),
    }
}

/// A kube-rs client as `c`'s admin (pooled connections: the heartbeats
/// and the plain client are not measured in TLS handshakes).
async fn admin_client(c: &RealCluster) -> kube::Client {
    let cfg = kube::config::Kubeconfig::read_from(c.admin_kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(cfg, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}
/// One heartbeat of the agent on each of `nodes`: the condition's
/// `lastHeartbeatTime` alone, as the agent's unchanged report writes it
/// (a strategic merge by type keeps its status, reason and message);
/// 16 at a time. Returns how many failed (a stopped server).
async fn beat(client: &kube::Client, nodes: &[String]) -> usize {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::ApiResource;
    let ar = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Node".into(),
        plural: "nodes".into(),
    };
    let mut set = tokio::task::JoinSet::new();
    for lane in 0..16 {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let mine: Vec<String> = nodes.iter().skip(lane).step_by(16).cloned().collect();
        set.spawn(async move {
            let mut failed = 0;
            for n in mine {
                let p = json!({"status":{"conditions":[{"type":TY,"lastHeartbeatTime":now()}]}});
                if api
                    .patch_status(&n, &PatchParams::default(), &Patch::Strategic(&p))
                    .await
                    .is_err()
                {
                    failed += 1;
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(r) = set.join_next().await {
        failed += r.unwrap_or(0);
    }
    failed
}

/// One heartbeat of every Node's agent, all clusters at once, before a
/// controller starts: a 10,000-Machine world takes longer to seed than the
/// default `--stale-after` (15 min), and a real agent beats every 5 min.
fn fresh_heartbeats(w: &World, rt: &tokio::runtime::Runtime) {
    let t = Instant::now();
    let failed: usize = rt
        .block_on(futures_util::future::join_all(
            w.wl_clients
                .iter()
                .enumerate()
                .map(|(c, client)| async move {
                    let nodes: Vec<String> = w
                        .machines
                        .iter()
                        .filter(|m| m.2 == c)
                        .map(|m| m.3.clone())
                        .collect();
                    beat(client, &nodes).await
                }),
        ))
        .into_iter()
        .sum();
    assert_eq!(failed, 0, "heartbeats failed");
    eprintln!(
        "scale: {} Nodes beat in {:.1} s",
        w.machines.len(),
        t.elapsed().as_secs_f64()
    );
}

/// The agents of every workload cluster not marked down, heartbeating every
/// `every` until `stop`.
struct Heartbeats {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    down: std::sync::Arc<Vec<std::sync::atomic::AtomicBool>>,
    rounds: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeats {
    fn start(
        rt: &tokio::runtime::Runtime,
        clients: Vec<kube::Client>,
        nodes: Vec<Vec<String>>,
        every: Duration,
    ) -> Self {
        use std::sync::{atomic::*, Arc};
        let stop = Arc::new(AtomicBool::new(false));
        let down = Arc::new(
            (0..clients.len())
                .map(|_| AtomicBool::new(false))
                .collect::<Vec<_>>(),
        );
        let rounds = Arc::new(AtomicUsize::new(0));
        let (s, d, r) = (stop.clone(), down.clone(), rounds.clone());
        let task = rt.spawn(async move {
            while !s.load(Ordering::Relaxed) {
                let round = tokio::time::Instant::now();
                for (c, client) in clients.iter().enumerate() {
                    if !d[c].load(Ordering::Relaxed) {
                        beat(client, &nodes[c]).await;
                    }
                }
                r.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep_until(round + every).await;
            }
        });
        Heartbeats {
            stop,
            down,
            rounds,
            task,
        }
    }

    fn set_down(&self, c: usize, down: bool) {
        self.down[c].store(down, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the outage phase measured.
struct Outage {
    stale_after: u64,
    beat_every: Duration,
    quiet_secs: u64,
    quiet_writes: usize,
    outage_secs: u64,
    /// Of the stopped cluster's Machines: how many were written over the
    /// outage, of how many, and the most writes one of them got.
    down_written: usize,
    down_total: usize,
    down_max: usize,
    /// The reasons those writes carried.
    down_reasons: std::collections::BTreeMap<String, usize>,
    /// The running cluster's Machines written over the outage (0 expected).
    up_writes: usize,
    /// From the stop to every one of its Machines Unknown.
    all_unknown: Option<Duration>,
    /// From the start to all Machines True again, and the writes it took.
    recovered: Duration,
    recover_writes: usize,
    recover_max: usize,
    hwm_mib: f64,
    beat_rounds: usize,
}

/// The controller's Machine status writes among `writes`: (namespace,
/// name, the reason our condition was written with).
fn machine_writes(writes: &[Value]) -> Vec<(String, String, String)> {
    writes
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "machines")
        .map(|e| {
            let reason = e["requestObject"]["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == TY))
                .map(|c| {
                    format!(
                        "{}/{}",
                        c["status"].as_str().unwrap_or(""),
                        c["reason"].as_str().unwrap_or("")
                    )
                })
                .unwrap_or_else(|| "(not ours)".into());
            (
                e["objectRef"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e["objectRef"]["name"].as_str().unwrap_or("").to_string(),
                reason,
            )
        })
        .collect()
}

fn per_machine_max(ws: &[(String, String, String)]) -> usize {
    let mut n: std::collections::HashMap<(&str, &str), usize> = Default::default();
    for (ns, m, _) in ws {
        *n.entry((ns, m)).or_default() += 1;
    }
    n.values().copied().max().unwrap_or(0)
}

/// How many of workload cluster `c`'s Machines say `status` on the gate.
fn count_in(w: &World, c: usize, status: &str) -> usize {
    let list = w
        .mgmt
        .try_get(&format!(
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/tenant-{c}/machines"
        ))
        .ok()
        .flatten()
        .unwrap_or(Value::Null);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| gate(m).is_some_and(|g| g.0 == status))
        .count()
}

/// The outage phase (see the top of the file).
fn outage(
    w: &World,
    rt: &tokio::runtime::Runtime,
    qps: f64,
    quiet: Duration,
    down_for: Duration,
    stale: Duration,
) -> Outage {
    let clients: Vec<kube::Client> = w.wl.iter().map(|c| rt.block_on(admin_client(c))).collect();
    let nodes: Vec<Vec<String>> = (0..w.wl.len())
        .map(|c| {
            w.machines
                .iter()
                .filter(|m| m.2 == c)
                .map(|m| m.3.clone())
                .collect()
        })
        .collect();
    // Fresh heartbeats before the controller's first look.
    for (c, client) in clients.iter().enumerate() {
        assert_eq!(
            rt.block_on(beat(client, &nodes[c])),
            0,
            "heartbeats of cluster {c}"
        );
    }
    let every = stale / 3;
    let hb = Heartbeats::start(rt, clients.clone(), nodes.clone(), every);
    let stale_arg = format!("{}s", stale.as_secs());
    let mut child = spawn(w, qps, &["--stale-after", &stale_arg]);
    let pid = child.0.id();
    let total = w.machines.len();
    let t = Instant::now();
    while count_true(&w.mgmt).0 != total {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "outage: not all True before the outage"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    // Its start settles (every Machine reconciled once) before the quiet
    // period counts.
    std::thread::sleep(Duration::from_secs(10));
    let mut tail = Tail::now(w);
    std::thread::sleep(quiet);
    let quiet_writes = tail.writes().len();
    eprintln!(
        "outage: {quiet_writes} writes over {} s of heartbeats alone",
        quiet.as_secs()
    );

    // Cluster 0 down.
    let down_total = nodes[0].len();
    hb.set_down(0, true);
    let mut tail = Tail::now(w);
    // The outage's clock starts as its agents' heartbeats stop and the
    // server is asked to stop (which takes seconds).
    let stopped = Instant::now();
    w.wl[0].stop();
    eprintln!(
        "outage: cluster 0 stopped in {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
    let mut all_unknown = None;
    while stopped.elapsed() < down_for {
        if all_unknown.is_none() && count_in(w, 0, "Unknown") == down_total {
            all_unknown = Some(stopped.elapsed());
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let during = machine_writes(&tail.writes());
    let down: Vec<_> = during
        .iter()
        .filter(|m| m.0 == "tenant-0")
        .cloned()
        .collect();
    let mut down_reasons = std::collections::BTreeMap::new();
    for (_, _, r) in &down {
        *down_reasons.entry(r.clone()).or_insert(0) += 1;
    }
    let down_written = down
        .iter()
        .map(|m| &m.1)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let up_writes = during.len() - down.len();
    eprintln!("outage: {} writes over {} s of outage: {down_reasons:?}; the running cluster's: {up_writes}", down.len(), down_for.as_secs());

    // Cluster 0 back: the server, then its agents' next heartbeat.
    let mut tail = Tail::now(w);
    let starting = Instant::now();
    w.wl[0].start();
    eprintln!(
        "outage: cluster 0 started in {:.1} s",
        starting.elapsed().as_secs_f64()
    );
    let restarted = Instant::now();
    let failed = rt.block_on(beat(&clients[0], &nodes[0]));
    hb.set_down(0, false);
    eprintln!(
        "outage: cluster 0 started, its {} agents beat ({failed} failed) after {:.1} s",
        nodes[0].len(),
        restarted.elapsed().as_secs_f64()
    );
    while count_true(&w.mgmt).0 != total {
        assert!(
            restarted.elapsed() < Duration::from_secs(300),
            "outage: not all True 300 s after the restart"
        );
        if let Ok(Some(st)) = child.0.try_wait() {
            panic!("the controller exited: {st}");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let recovered = restarted.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let rec = machine_writes(&tail.writes());
    let hwm = cluster::peak_rss_kib(pid).unwrap_or(0) as f64 / 1024.0;
    hb.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let beat_rounds = hb.rounds.load(std::sync::atomic::Ordering::Relaxed);
    rt.block_on(async {
        let _ = hb.task.await;
    });
    drop(child);
    Outage {
        stale_after: stale.as_secs(),
        beat_every: every,
        quiet_secs: quiet.as_secs(),
        quiet_writes,
        outage_secs: down_for.as_secs(),
        down_written,
        down_total,
        down_max: per_machine_max(&down),
        down_reasons,
        up_writes,
        all_unknown,
        recovered,
        recover_writes: rec.len(),
        recover_max: per_machine_max(&rec),
        hwm_mib: hwm,
        beat_rounds,
    }
}

/// What one controller run measured.
struct Figures {
    qps: f64,
    machines: usize,
    mds: usize,
    all_written: Duration,
    /// The controller's start to its first Machine write (the server's
    /// clock).
    first_write: Duration,
    mgmt_writes: Vec<(String, usize)>,
    hwm_mib: f64,
    rest: Rest,
    flips: Vec<Duration>,
    /// The controller's Secret reads until all were written: (of
    /// `<cluster>-kubeconfig`, of any other Secret).
    secret_reads: (usize, usize),
    plain_before: Plain,
    plain_after: Plain,
}

/// A rest period: nothing changes.
struct Rest {
    secs: f64,
    writes: Vec<String>,
    cpu: Duration,
    reconciles: u64,
    /// The forced full pass after it: its CPU and its reconciles.
    pass: (Duration, u64),
}

impl Rest {
    fn cpu_pct(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.secs
    }

    /// The forced pass's CPU per reconcile, and its reconciles.
    fn per_reconcile(&self) -> String {
        let (cpu, n) = self.pass;
        if n == 0 {
            return "– (0)".into();
        }
        format!("{:.0} µs ({n})", cpu.as_secs_f64() * 1e6 / n as f64)
    }
}

/// A running controller with its `/metrics` port; killed when dropped (a
/// failed bench leaves no controller behind).
struct Controller(Child, u16);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(w: &World, qps: f64, extra: &[&str]) -> Controller {
    // SCALE_CONTROLLER_BIN: another build of the controller (the image's
    // static musl one), whose allocator is not glibc's.
    let bin = std::env::var_os("SCALE_CONTROLLER_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sandbox-readiness-controller").into());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(bin)
        .arg("--kubeconfig")
        .arg(w.mgmt.admin_kubeconfig())
        .args(["--kube-qps", &qps.to_string()])
        .args(["--http-listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        // SCALE_CONTROLLER_LOG: the controller's log filter (`info` shows
        // where its start goes: each list's end, each cluster's Nodes read).
        .env(
            "SANDBOX_READINESS_LOG",
            std::env::var("SCALE_CONTROLLER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Controller(child, port)
}

/// Removes the controller's condition from every Machine (the next run
/// starts from Machines it never wrote).
fn clear(w: &World) {
    each(&w.machines, |(ns, m, _, _)| {
        let path = format!("{MACHINES}/namespaces/{ns}/machines/{m}");
        let obj = w.mgmt.get(&path).unwrap();
        let conds: Vec<Value> = obj["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c["type"] != TY)
            .collect();
        w.mgmt.write(
            "PATCH",
            &format!("{path}/status"),
            MERGE,
            &json!({"status":{"conditions":conds}}),
        );
    });
}

/// A 10 s settle (the start's requeues and first resync tick pass), then
/// `rest` of nothing changing: the controller's writes, CPU time and
/// reconciles over it.
fn rest_period(w: &World, c: &Controller, rest: Duration) -> Rest {
    std::thread::sleep(Duration::from_secs(10));
    let pid = c.0.id();
    let mut tail = Tail::now(w);
    let (cpu0, rec0) = (cpu_time(pid), reconciles(c.1).unwrap_or(0));
    let t = Instant::now();
    std::thread::sleep(rest);
    let (cpu1, rec1) = (cpu_time(pid), reconciles(c.1).unwrap_or(0));
    let secs = t.elapsed().as_secs_f64();
    let writes = tail
        .writes()
        .iter()
        .map(|e| {
            format!(
                "{} {} {}/{} {}",
                e["verb"].as_str().unwrap_or(""),
                e["objectRef"]["resource"].as_str().unwrap_or(""),
                e["objectRef"]["namespace"].as_str().unwrap_or(""),
                e["objectRef"]["name"].as_str().unwrap_or(""),
                e["requestObject"]
            )
        })
        .collect();
    let pass = full_pass(w, c);
    Rest {
        secs,
        writes,
        cpu: cpu1.saturating_sub(cpu0),
        reconciles: rec1.saturating_sub(rec0),
        pass,
    }
}

/// One full pass, forced by a TalosConfigTemplate's change (an annotation:
/// the controller reconciles every Machine on any template event): the
/// controller's CPU from the change until it is idle again (under 10 ms
/// in a second: at rest it uses about 5), and the reconciles it counted.
/// Idleness is read from /proc, not `/metrics`: a scrape walks every
/// Machine for the gauges and would be counted in the pass.
fn full_pass(w: &World, c: &Controller) -> (Duration, u64) {
    let pid = c.0.id();
    let rec0 = reconciles(c.1).unwrap_or(0);
    let cpu0 = cpu_time(pid);
    let (ns, md, _) = &w.mds[0];
    w.mgmt.write(
        "PATCH",
        &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigtemplates/{md}"),
        MERGE,
        &json!({"metadata": {"annotations": {"bench.sandbox-readiness.io/pass": now()}}}),
    );
    let t = Instant::now();
    let mut last = cpu0;
    let cpu1 = loop {
        std::thread::sleep(Duration::from_secs(1));
        let c = cpu_time(pid);
        if c > cpu0 && c.saturating_sub(last) < Duration::from_millis(10) {
            break c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the forced pass did not end within 300 s"
        );
        last = c;
    };
    let n = reconciles(c.1).unwrap_or(0).saturating_sub(rec0);
    eprintln!(
        "scale: a full pass ({n} reconciles, {} Machines) took {:.2} s of CPU",
        w.machines.len(),
        cpu1.saturating_sub(cpu0).as_secs_f64()
    );
    (cpu1.saturating_sub(cpu0), n)
}

fn run(w: &World, rt: &tokio::runtime::Runtime, qps: f64, rest: Duration, flips: usize) -> Figures {
    let total = w.machines.len();
    let plain_before = rt.block_on(plain(w, qps, 1));
    eprintln!(
        "qps {qps}: the plain client wrote {} Machines in {:.1} s ({} failed)",
        plain_before.writes,
        plain_before.took.as_secs_f64(),
        plain_before.failed
    );
    fresh_heartbeats(w, rt);
    let mut tail = Tail::now(w);
    let spawned = SystemTime::now();
    let mut child = spawn(w, qps, &[]);
    let pid = child.0.id();
    let start = Instant::now();
    // Written: a Machine whose status the controller patched to True (200),
    // from the server's audit log — a list of 10,000 Machines every poll
    // would load the server being measured.
    let mut events: Vec<Value> = Vec::new();
    let mut written: HashSet<(String, String)> = HashSet::new();
    let mut last_written = SystemTime::UNIX_EPOCH;
    let mut said = Instant::now();
    while written.len() < total {
        for e in tail.events() {
            let o = &e["objectRef"];
            if is_write(&e)
                && o["resource"] == "machines"
                && o["subresource"] == "status"
                && e["responseStatus"]["code"] == 200
                && e["requestObject"]["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == TY && c["status"] == "True"))
            {
                written.insert((
                    o["namespace"].as_str().unwrap_or("").to_string(),
                    o["name"].as_str().unwrap_or("").to_string(),
                ));
                if let Some(t) = e["stageTimestamp"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339(t).ok())
                {
                    last_written = last_written.max(t);
                }
            }
            events.push(e);
        }
        if said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            eprintln!(
                "scale: {} of {total} written after {:.0} s",
                written.len(),
                start.elapsed().as_secs_f64()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "only {} of {total} written after 900 s",
            written.len()
        );
        if let Ok(Some(st)) = child.0.try_wait() {
            panic!("the controller exited: {st}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let all_written = last_written.duration_since(spawned).unwrap_or_default();
    // Once, the servers' view: every Machine says True.
    let (n, other) = count_true(&w.mgmt);
    assert_eq!(
        n,
        total,
        "the list disagrees with the audit log; others {:?}",
        &other[..other.len().min(5)]
    );
    events.extend(tail.events());
    let reads: Vec<String> = events
        .iter()
        .filter(|e| e["verb"] == "get" && e["objectRef"]["resource"] == "secrets")
        .map(|e| e["objectRef"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    let kubeconfig_reads = reads.iter().filter(|n| n.ends_with("-kubeconfig")).count();
    let secret_reads = (kubeconfig_reads, reads.len() - kubeconfig_reads);
    let writes: Vec<Value> = events.into_iter().filter(is_write).collect();
    // Where the time went: the controller's start to its first Machine
    // write, and the span of its Machine writes (the server's clock).
    let at: Vec<Duration> = writes
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "machines")
        .filter_map(|e| e["requestReceivedTimestamp"].as_str())
        .filter_map(|t| humantime::parse_rfc3339(t).ok())
        .filter_map(|t| t.duration_since(spawned).ok())
        .collect();
    let first_write = at.iter().min().copied().unwrap_or_default();
    if let Some(last) = at.iter().max() {
        eprintln!(
            "qps {qps}: first Machine write {:.1} s after the controller's start, last {:.1} s ({} writes, {:.0}/s between)",
            first_write.as_secs_f64(),
            last.as_secs_f64(),
            at.len(),
            at.len() as f64 / (*last - first_write).as_secs_f64().max(0.001)
        );
    }
    let mut by: BTreeMap<String, usize> = Default::default();
    for e in &writes {
        let o = &e["objectRef"];
        let what = match o["subresource"].as_str() {
            Some(s) => format!("{}/{s}", o["resource"].as_str().unwrap_or("")),
            None => o["resource"].as_str().unwrap_or("").to_string(),
        };
        *by.entry(format!(
            "{} {what} {}",
            e["verb"].as_str().unwrap_or(""),
            e["responseStatus"]["code"]
        ))
        .or_default() += 1;
    }
    // At rest: nothing changes, nothing should be written.
    let rest = rest_period(w, &child, rest);
    eprintln!(
        "scale: {} writes over {:.0} s at rest: {:#?}; CPU {:.2} s ({:.2} % of a core), {} reconciles",
        rest.writes.len(),
        rest.secs,
        rest.writes,
        rest.cpu.as_secs_f64(),
        rest.cpu_pct(),
        rest.reconciles
    );

    // Flips: one Node at a time goes False (then back True); the time
    // until its Machine says the same.
    let mut lat = Vec::new();
    for f in 0..flips {
        let (ns, m, c, n) = &w.machines[(f / 2 * 37) % total];
        let (st, reason) = if f % 2 == 0 {
            ("False", "SysctlMismatch")
        } else {
            ("True", "Converged")
        };
        let t = now();
        let body = json!({"status":{"conditions":[{"type":TY,"status":st,"reason":reason,
            "message":format!("the agent says {reason}"),"lastHeartbeatTime":t,"lastTransitionTime":t}]}});
        let path = format!("{MACHINES}/namespaces/{ns}/machines/{m}");
        let sent = Instant::now();
        w.wl[*c].write(
            "PATCH",
            &format!("/api/v1/nodes/{n}/status"),
            STRATEGIC,
            &body,
        );
        loop {
            let g = w.mgmt.get(&path).and_then(|m| gate(&m));
            if g.as_ref().is_some_and(|g| g.0 == st) {
                lat.push(sent.elapsed());
                break;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(30),
                "{m}: flip {f} not mirrored: {g:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!("scale: {} flips measured", lat.len());
    let hwm = cluster::peak_rss_kib(pid).unwrap_or(0) as f64 / 1024.0;
    drop(child);
    let plain_after = rt.block_on(plain(w, qps, 2));
    eprintln!(
        "qps {qps}: the plain client again: {} Machines in {:.1} s ({} failed)",
        plain_after.writes,
        plain_after.took.as_secs_f64(),
        plain_after.failed
    );
    lat.sort();
    Figures {
        qps,
        machines: total,
        mds: w.mds.len(),
        all_written,
        first_write,
        mgmt_writes: by.into_iter().collect(),
        hwm_mib: hwm,
        secret_reads,
        rest,
        flips: lat,
        plain_before,
        plain_after,
    }
}

/// A controller started on the (cut down) world, whose Machines already
/// say True: once every Machine was reconciled once, a rest period.
struct Stage {
    mds: usize,
    machines: usize,
    rest: Rest,
    hwm_mib: f64,
}

fn stage(w: &World, rt: &tokio::runtime::Runtime, qps: f64, rest: Duration) -> Stage {
    let total = w.machines.len();
    fresh_heartbeats(w, rt);
    let c = spawn(w, qps, &[]);
    let t = Instant::now();
    while reconciles(c.1).unwrap_or(0) < total as u64 {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "stage: not every Machine reconciled within 300 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let r = rest_period(w, &c, rest);
    let hwm = cluster::peak_rss_kib(c.0.id()).unwrap_or(0) as f64 / 1024.0;
    eprintln!(
        "stage {} MachineDeployments: {} writes at rest {:?}; CPU {:.2} s over {:.0} s, {} reconciles",
        w.mds.len(),
        r.writes.len(),
        r.writes,
        r.cpu.as_secs_f64(),
        r.secs,
        r.reconciles
    );
    Stage {
        mds: w.mds.len(),
        machines: total,
        rest: r,
        hwm_mib: hwm,
    }
}

fn main() {
    let size = Size::from_env();
    let big = ten_thousand();
    let qps: Vec<f64> = std::env::var("SCALE_QPS")
        .unwrap_or_else(|_| if big { "500" } else { "50,200" }.into())
        .split(',')
        .map(|q| {
            q.trim()
                .parse()
                .expect("SCALE_QPS: numbers, comma-separated")
        })
        .collect();
    let rest = env_secs("SCALE_REST_SECS", 60);
    let flips = env_usize("SCALE_FLIPS").unwrap_or(120);
    let shrink_to: Vec<usize> = std::env::var("SCALE_SHRINK")
        .unwrap_or_else(|_| if big { "100,10" } else { "" }.into())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .expect("SCALE_SHRINK: MachineDeployment counts")
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = Instant::now();
    let mut w = world(&rt, size);
    eprintln!(
        "scale: {} Machines in {} MachineDeployments, {} Nodes in {} workload clusters, seeded in {:.1} s from the start (bootstrap config {} B, Node {} B of JSON; bootstrap Secrets: {})",
        w.machines.len(),
        w.mds.len(),
        w.machines.len(),
        w.wl.len(),
        t.elapsed().as_secs_f64(),
        w.secret_bytes,
        w.node_bytes,
        w.bootstrap_secrets
    );
    let mut rows = Vec::new();
    for (i, q) in qps.iter().enumerate() {
        if i > 0 {
            clear(&w);
        }
        let f = run(&w, &rt, *q, rest, flips);
        eprintln!(
            "qps {}: the controller's writes until all were written (verb resource code: count): {:?}; its Secret reads: {} of <cluster>-kubeconfig, {} of others",
            f.qps, f.mgmt_writes, f.secret_reads.0, f.secret_reads.1
        );
        rows.push(f);
    }
    let outage_secs = env_secs("SCALE_OUTAGE_SECS", if big { 0 } else { 60 });
    let stale = env_secs("SCALE_STALE_SECS", 30);
    let out = (!outage_secs.is_zero()).then(|| outage(&w, &rt, qps[0], rest, outage_secs, stale));
    let mut stages = Vec::new();
    for keep in shrink_to {
        shrink(&mut w, &rt, keep);
        stages.push(stage(&w, &rt, qps[0], rest));
    }
    println!(
        "| Machines (MachineDeployments, workload clusters) | --kube-qps | all written | plain client before / after | ratio to it (≤ 1.3) | first write | peak RSS (VmHWM) | writes at rest | CPU at rest | CPU per reconcile (a full pass's reconciles) | flip → Machine p50 / p99 / max (n) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for f in &rows {
        let (b, a) = (
            f.plain_before.took.as_secs_f64(),
            f.plain_after.took.as_secs_f64(),
        );
        let all = f.all_written.as_secs_f64();
        println!(
            "| {} ({}, {}) | {} | {:.1} s | {:.1} s / {:.1} s ({} / {} failed) | {:.2} / {:.2} | {:.1} s | {:.1} MiB | {} in {:.0} s | {:.2} % | {} | {} / {} / {} ({}) |",
            f.machines,
            f.mds,
            w.wl.len(),
            f.qps,
            all,
            b,
            a,
            f.plain_before.failed,
            f.plain_after.failed,
            all / b,
            all / a,
            f.first_write.as_secs_f64(),
            f.hwm_mib,
            f.rest.writes.len(),
            f.rest.secs,
            f.rest.cpu_pct(),
            f.rest.per_reconcile(),
            ms(pct(&f.flips, 0.5)),
            ms(pct(&f.flips, 0.99)),
            ms(*f.flips.last().unwrap()),
            f.flips.len(),
        );
    }
    println!();
    println!("| MachineDeployments | Machines | writes at rest | CPU at rest | reconciles at rest | CPU per reconcile (a full pass's reconciles) | peak RSS |");
    println!("|---|---|---|---|---|---|---|");
    let first = rows.first().map(|f| Stage {
        mds: f.mds,
        machines: f.machines,
        rest: Rest {
            secs: f.rest.secs,
            writes: f.rest.writes.clone(),
            cpu: f.rest.cpu,
            reconciles: f.rest.reconciles,
            pass: f.rest.pass,
        },
        hwm_mib: f.hwm_mib,
    });
    for s in first.iter().chain(&stages) {
        println!(
            "| {} | {} | {} in {:.0} s | {:.2} % | {} | {} | {:.1} MiB |",
            s.mds,
            s.machines,
            s.rest.writes.len(),
            s.rest.secs,
            s.rest.cpu_pct(),
            s.rest.reconciles,
            s.rest.per_reconcile(),
            s.hwm_mib
        );
    }
    if let Some(o) = out {
        println!();
        println!("| --kube-qps | --stale-after | heartbeats | writes over heartbeats alone | one cluster down | its Machines written (most to one) | their reasons | the other's written | all its Machines Unknown after | all True after restart | writes to recover (most to one) | peak RSS |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        println!(
            "| {} | {} s | every {:.0} s ({} rounds) | {} in {} s | {} s | {} of {} ({}) | {:?} | {} | {} | {:.1} s | {} ({}) | {:.1} MiB |",
            qps[0],
            o.stale_after,
            o.beat_every.as_secs_f64(),
            o.beat_rounds,
            o.quiet_writes,
            o.quiet_secs,
            o.outage_secs,
            o.down_written,
            o.down_total,
            o.down_max,
            o.down_reasons,
            o.up_writes,
            o.all_unknown.map_or("not within the outage".into(), |d| format!("{:.0} s", d.as_secs_f64())),
            o.recovered.as_secs_f64(),
            o.recover_writes,
            o.recover_max,
            o.hwm_mib
        );
    }
}

fn env_secs(key: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(key)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}
