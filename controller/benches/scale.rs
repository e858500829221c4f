//! The controller at the scale of a real management cluster (issue 23's
//! bench, issue 30's real servers): 1,000 Machines in 10 MachineDeployments
//! across 2 workload clusters, each Machine with its Node (kubelet-shaped,
//! full status) and the agent's condition written, and a bootstrap-data
//! Secret of a Cozystack-sized machine config (tens of KB). Three real
//! kube-apiservers (`scripts/control-plane.sh up`): the management one with
//! Cluster API's CRDs and webhooks (`control-plane.sh capi`: every Machine
//! and MachineDeployment passes CAPI's defaulting and validating webhooks),
//! its Clusters paused (`spec.paused`) while the world is made, so CAPI's
//! managers admit the objects and leave them alone; then the managers are
//! stopped (their webhook configurations removed with them) and the
//! Clusters unpaused, since the controller, as CAPI's own controllers,
//! leaves a paused Cluster's Machines alone: 1,000 Machines reconciled by
//! CAPI against Nodes nobody provisioned would measure CAPI, not this
//! controller, on two cores. The Machines' status is written as CAPI would
//! have it; each Machine's TalosConfig is cloned from its
//! MachineDeployment's TalosConfigTemplate (CAPI's `cloned-from`
//! annotations), which is where the controller reads the pool's sysctls.
//!
//! Measured, per `--kube-qps`: time from the controller's start to all
//! 1,000 Machine conditions written; peak RSS (VmHWM); writes over a rest
//! period (the management server's audit log, by the controller's
//! User-Agent); and the latency of one Node condition flip to its Machine
//! (p50/p99/max over the flips, polled every 20 ms), plus what the
//! management kube-apiserver itself sustains, so a slow server is seen as
//! such.
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
//! build of the controller). Knobs (environment): `SCALE_QPS` (default
//! `50,200`), `SCALE_REST_SECS` (60), `SCALE_FLIPS` (120), `SCALE_PER_MD`
//! (100), `SCALE_OUTAGE_SECS` (60; 0 skips the outage), `SCALE_STALE_SECS`
//! (30).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/cluster.rs"]
mod cluster;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime},
};

use cluster::RealCluster;
use serde_json::{json, Value};

/// The controller's User-Agent (controller/src/qps.rs).
const UA: &str = "sandbox-readiness-controller/";
const TY: &str = "sandbox-readiness.io/SandboxReady";
const AV: &str = "cluster.x-k8s.io/v1beta2";
const BOOTSTRAP: &str = "/apis/bootstrap.cluster.x-k8s.io/v1alpha3";
const BOOTSTRAP_AV: &str = "bootstrap.cluster.x-k8s.io/v1alpha3";
const CLUSTERS: usize = 2;
const MDS_PER_CLUSTER: usize = 5;
/// Machines per MachineDeployment: 100 (1,000 in all); `SCALE_PER_MD`
/// makes a smaller world for a quick look.
fn per_md() -> usize {
    std::env::var("SCALE_PER_MD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
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

fn machine_deployment(ns: &str, cluster: &str, md: &str) -> Value {
    json!({"apiVersion":AV,"kind":"MachineDeployment","metadata":{"name":md,"namespace":ns,
        "annotations":{"sandbox-readiness.io/mirror":"true","cluster.x-k8s.io/paused":""}},
        "spec":{"clusterName":cluster,"replicas":per_md(),
        "selector":{"matchLabels":{"cluster.x-k8s.io/deployment-name":md}},
        "template":{"metadata":{"labels":{"cluster.x-k8s.io/deployment-name":md}},"spec":{"clusterName":cluster,
            "bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"TalosConfigTemplate","name":md}},
            "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"KubevirtMachineTemplate","name":md},
            "version":"v1.32.4","readinessGates":[{"conditionType":TY}]}}}})
}

const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";

/// (namespace, machine, workload index, node)
type Seat = (String, String, usize, String);

struct World {
    mgmt: RealCluster,
    wl: Vec<RealCluster>,
    /// (namespace, machine, workload index, node)
    machines: Vec<(String, String, usize, String)>,
    secret_bytes: usize,
    node_bytes: usize,
}

/// `f` over `items`, 4 threads (the servers are on loopback; one client
/// at a time would measure the client's TLS handshakes).
fn each<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(it) = items.get(i) else { return };
                f(it);
            });
        }
    });
}

fn world() -> World {
    let t = Instant::now();
    let (mgmt, wl) = std::thread::scope(|s| {
        let m = s.spawn(|| {
            let c = RealCluster::private();
            c.start_capi();
            c
        });
        let w: Vec<_> = (0..CLUSTERS)
            .map(|_| s.spawn(RealCluster::private))
            .collect();
        (
            m.join().unwrap(),
            w.into_iter().map(|w| w.join().unwrap()).collect::<Vec<_>>(),
        )
    });
    eprintln!(
        "scale: management (Cluster API's CRDs and webhooks) and {CLUSTERS} workload clusters up in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut machines = Vec::new();
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
            &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/clusters"),
            "application/json",
            &json!({"apiVersion":AV,"kind":"Cluster","metadata":{"name":cluster,"namespace":ns},"spec":{"paused":true,
                "infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"KubevirtCluster","name":cluster}}}),
        );
        let kubeconfig = std::fs::read_to_string(w.admin_kubeconfig()).unwrap();
        mgmt.write("POST", &format!("/api/v1/namespaces/{ns}/secrets"), "application/json",
            &json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{cluster}-kubeconfig"),"namespace":ns,
            "labels":{"cluster.x-k8s.io/cluster-name":cluster}},"type":"cluster.x-k8s.io/secret",
            "data":{"value":b64(&kubeconfig)}}));
        for d in 0..MDS_PER_CLUSTER {
            let md = format!("{cluster}-md-{d}");
            mgmt.write(
                "POST",
                &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigtemplates"),
                "application/json",
                &json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfigTemplate","metadata":{"name":md,"namespace":ns},
                    "spec":{"template":{"spec":{"generateType":"none","talosVersion":"v1.11","data":machine_config(d)}}}}),
            );
            mgmt.write(
                "POST",
                &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/machinedeployments"),
                "application/json",
                &machine_deployment(&ns, &cluster, &md),
            );
            for i in 0..per_md() {
                machines.push((
                    ns.clone(),
                    format!("{md}-{i:03}"),
                    c,
                    format!("{md}-node-{i:03}"),
                ));
            }
        }
    }
    let secret_bytes = std::sync::atomic::AtomicUsize::new(0);
    let node_bytes = std::sync::atomic::AtomicUsize::new(0);
    let seeded = std::sync::atomic::AtomicUsize::new(0);
    let indexed: Vec<(usize, &Seat)> = machines.iter().enumerate().collect();
    each(&indexed, |(k, (ns, name, c, nname))| {
        let k = *k;
        let cluster = format!("c{c}");
        let md = name.rsplit_once('-').unwrap().0.to_string();
        let cfg = machine_config(k);
        secret_bytes.fetch_max(cfg.len(), std::sync::atomic::Ordering::Relaxed);
        mgmt.write("POST", &format!("/api/v1/namespaces/{ns}/secrets"), "application/json",
            &json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("{name}-boot"),"namespace":ns,
            "labels":{"cluster.x-k8s.io/cluster-name":cluster}},"type":"cluster.x-k8s.io/secret",
            "data":{"value":b64(&cfg),"format":b64("cloud-config")}}));
        // As CAPI's MachineSet controller clones it from the template.
        mgmt.write("POST", &format!("{BOOTSTRAP}/namespaces/{ns}/talosconfigs"), "application/json",
            &json!({"apiVersion":BOOTSTRAP_AV,"kind":"TalosConfig","metadata":{"name":name,"namespace":ns,
                "annotations":{"cluster.x-k8s.io/cloned-from-name":md,
                    "cluster.x-k8s.io/cloned-from-groupkind":"TalosConfigTemplate.bootstrap.cluster.x-k8s.io"}},
                "spec":{"generateType":"none","talosVersion":"v1.11","data":cfg}}));
        let (obj, status) = machine(ns, &cluster, &md, name, nname);
        let base = format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/machines");
        mgmt.write("POST", &base, "application/json", &obj);
        mgmt.write(
            "PATCH",
            &format!("{base}/{name}/status"),
            MERGE,
            &json!({ "status": status }),
        );
        let n = node(nname, k, "True", "Converged");
        node_bytes.fetch_max(n.to_string().len(), std::sync::atomic::Ordering::Relaxed);
        let w = &wl[*c];
        w.write("POST", "/api/v1/nodes", "application/json", &n);
        // A create keeps only part of a Node's status: the rest as kubelet
        // writes it, through the status subresource.
        w.write(
            "PATCH",
            &format!("/api/v1/nodes/{nname}/status"),
            MERGE,
            &json!({"status": n["status"]}),
        );
        let done = seeded.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if done.is_multiple_of(250) {
            eprintln!("scale: {done} Machines seeded");
        }
    });
    unpause(&mgmt, CLUSTERS);
    World {
        mgmt,
        wl,
        machines,
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
            &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/tenant-{c}/clusters/c{c}"),
            MERGE,
            &json!({"spec":{"paused":false}}),
        );
    }
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
        .try_get("/apis/cluster.x-k8s.io/v1beta2/machines")
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

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

/// The controller's writes in the management server's audit log (the log
/// also holds every Secret's body: only the controller's lines are parsed).
fn writes(w: &World) -> Vec<Value> {
    cluster::audit_lines(&w.mgmt.dir().join("audit.log"))
        .iter()
        .filter(|l| l.contains(UA))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["userAgent"].as_str().is_some_and(|u| u.starts_with(UA))
                // The policy also logs Secret reads (level Metadata).
                && e["verb"].as_str().is_some_and(|v| {
                    ["create", "update", "patch", "delete", "deletecollection"].contains(&v)
                })
        })
        .collect()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// What the management kube-apiserver sustains: Machine status merge
/// patches from one client (kube-rs, as the controller sends them), 8 at a
/// time.
async fn server_rate(w: &World) -> f64 {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::ApiResource;
    let client = admin_client(&w.mgmt).await;
    let ar = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: AV.into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    };
    let n = 2000;
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..8 {
        let client = client.clone();
        let ar = ar.clone();
        let ms: Vec<(String, String)> = w
            .machines
            .iter()
            .skip(t)
            .step_by(8)
            .map(|(ns, m, _, _)| (ns.clone(), m.clone()))
            .collect();
        set.spawn(async move {
            for k in 0..n / 8 {
                let (ns, m) = &ms[k % ms.len()];
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
                let p = json!({"status":{"lastUpdated":now()}});
                api.patch_status(m, &PatchParams::default(), &Patch::Merge(&p))
                    .await
                    .unwrap();
            }
        });
    }
    while set.join_next().await.is_some() {}
    n as f64 / start.elapsed().as_secs_f64()
}

/// A kube-rs client as `c`'s admin (pooled connections: the heartbeats
/// and the server's rate are not measured in TLS handshakes).
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

/// The controller's Machine status writes since audit position `mark`:
/// (namespace, name, the reason our condition was written with).
fn machine_writes_since(w: &World, mark: usize) -> Vec<(String, String, String)> {
    writes(w)
        .iter()
        .skip(mark)
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
    let nodes: Vec<Vec<String>> = (0..CLUSTERS)
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
    let pid = child.id();
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
    let mark = writes(w).len();
    std::thread::sleep(quiet);
    let quiet_writes = writes(w).len() - mark;
    eprintln!(
        "outage: {quiet_writes} writes over {} s of heartbeats alone",
        quiet.as_secs()
    );

    // Cluster 0 down.
    let down_total = nodes[0].len();
    hb.set_down(0, true);
    let mark = writes(w).len();
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
    let during = machine_writes_since(w, mark);
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
    let mark = writes(w).len();
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
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the controller exited: {st}");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let recovered = restarted.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let rec = machine_writes_since(w, mark);
    let hwm = vm_hwm_kib(pid).unwrap_or(0) as f64 / 1024.0;
    hb.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let beat_rounds = hb.rounds.load(std::sync::atomic::Ordering::Relaxed);
    rt.block_on(async {
        let _ = hb.task.await;
    });
    let _ = child.kill();
    let _ = child.wait();
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

struct Figures {
    qps: f64,
    all_written: Duration,
    mgmt_writes: Vec<(String, usize)>,
    hwm_mib: f64,
    rest_writes: usize,
    rest_secs: u64,
    flips: Vec<Duration>,
    /// The controller's Secret reads until all were written: (of
    /// `<cluster>-kubeconfig`, of any other Secret).
    secret_reads: (usize, usize),
}

fn spawn(w: &World, qps: f64, extra: &[&str]) -> Child {
    // SCALE_CONTROLLER_BIN: another build of the controller (the image's
    // static musl one), whose allocator is not glibc's.
    let bin = std::env::var_os("SCALE_CONTROLLER_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sandbox-readiness-controller").into());
    Command::new(bin)
        .arg("--kubeconfig")
        .arg(w.mgmt.admin_kubeconfig())
        .args(["--kube-qps", &qps.to_string()])
        .args(extra)
        .env("SANDBOX_READINESS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Removes the controller's condition from every Machine (the next run
/// starts from Machines it never wrote).
fn clear(w: &World) {
    each(&w.machines, |(ns, m, _, _)| {
        let path = format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/machines/{m}");
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

fn run(w: &World, qps: f64, rest: Duration, flips: usize) -> Figures {
    let mark = writes(w).len();
    let reads_mark = w.mgmt.secret_reads().len();
    let spawned = SystemTime::now();
    let mut child = spawn(w, qps, &[]);
    let pid = child.id();
    let start = Instant::now();
    let total = w.machines.len();
    let mut said = Instant::now();
    let all_written = loop {
        let (n, other) = count_true(&w.mgmt);
        if n == total {
            break start.elapsed();
        }
        if said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            eprintln!(
                "scale: {n} of {total} True after {:.0} s",
                start.elapsed().as_secs_f64()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "only {n} of {total} True after 600 s; others {:?}",
            &other[..other.len().min(5)]
        );
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the controller exited: {st}");
        }
        // A list of 1,000 Machines is megabytes: not so often that the
        // bench loads the server it measures.
        std::thread::sleep(Duration::from_millis(500));
    };
    std::thread::sleep(Duration::from_millis(500));
    let reads: Vec<String> = w
        .mgmt
        .secret_reads()
        .iter()
        .skip(reads_mark)
        .filter(|e| e["userAgent"].as_str().is_some_and(|u| u.starts_with(UA)))
        .map(|e| e["objectRef"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    let kubeconfig_reads = reads.iter().filter(|n| n.ends_with("-kubeconfig")).count();
    let secret_reads = (kubeconfig_reads, reads.len() - kubeconfig_reads);
    // Where the time went: the controller's start to its first Machine
    // write, and the span of its Machine writes (the server's clock).
    let at: Vec<Duration> = writes(w)
        .iter()
        .skip(mark)
        .filter(|e| e["objectRef"]["resource"] == "machines")
        .filter_map(|e| e["requestReceivedTimestamp"].as_str())
        .filter_map(|t| humantime::parse_rfc3339(t).ok())
        .filter_map(|t| t.duration_since(spawned).ok())
        .collect();
    if let (Some(first), Some(last)) = (at.iter().min(), at.iter().max()) {
        eprintln!(
            "qps {qps}: first Machine write {:.1} s after the controller's start, last {:.1} s ({} writes, {:.0}/s between)",
            first.as_secs_f64(),
            last.as_secs_f64(),
            at.len(),
            at.len() as f64 / (*last - *first).as_secs_f64().max(0.001)
        );
    }
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for e in writes(w).iter().skip(mark) {
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
    let before = writes(w).len();
    std::thread::sleep(rest);
    let at_rest: Vec<String> = writes(w)
        .iter()
        .skip(before)
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
    let rest_writes = at_rest.len();
    eprintln!(
        "scale: {rest_writes} writes over {} s at rest: {at_rest:#?}",
        rest.as_secs()
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
        let path = format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/machines/{m}");
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
    let hwm = vm_hwm_kib(pid).unwrap_or(0) as f64 / 1024.0;
    let _ = child.kill();
    let _ = child.wait();
    lat.sort();
    Figures {
        qps,
        all_written,
        mgmt_writes: by.into_iter().collect(),
        hwm_mib: hwm,
        secret_reads,
        rest_writes,
        rest_secs: rest.as_secs(),
        flips: lat,
    }
}

fn main() {
    let qps: Vec<f64> = std::env::var("SCALE_QPS")
        .unwrap_or_else(|_| "50,200".into())
        .split(',')
        .map(|q| {
            q.trim()
                .parse()
                .expect("SCALE_QPS: numbers, comma-separated")
        })
        .collect();
    let rest = Duration::from_secs(
        std::env::var("SCALE_REST_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let flips: usize = std::env::var("SCALE_FLIPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = Instant::now();
    let w = world();
    eprintln!(
        "scale: {} Machines, {} Nodes seeded in {:.1} s (bootstrap config {} B, Node {} B of JSON)",
        w.machines.len(),
        w.machines.len(),
        t.elapsed().as_secs_f64(),
        w.secret_bytes,
        w.node_bytes
    );
    let mut rows = Vec::new();
    for (i, q) in qps.iter().enumerate() {
        if i > 0 {
            clear(&w);
        }
        let f = run(&w, *q, rest, flips);
        eprintln!(
            "qps {}: the controller's writes until all were written (verb resource code: count): {:?}; its Secret reads: {} of <cluster>-kubeconfig, {} of others",
            f.qps, f.mgmt_writes, f.secret_reads.0, f.secret_reads.1
        );
        rows.push(f);
    }
    let outage_secs = env_secs("SCALE_OUTAGE_SECS", 60);
    let stale = env_secs("SCALE_STALE_SECS", 30);
    let out = (!outage_secs.is_zero()).then(|| outage(&w, &rt, qps[0], rest, outage_secs, stale));
    let rate = rt.block_on(server_rate(&w));
    println!("| --kube-qps | all {} written | target | peak RSS (VmHWM) | writes at rest | flip → Machine p50 / p99 / max (n) | server alone |", CLUSTERS * MDS_PER_CLUSTER * per_md());
    println!("|---|---|---|---|---|---|---|");
    for f in rows {
        let target =
            Duration::from_secs_f64((CLUSTERS * MDS_PER_CLUSTER * per_md()) as f64 / f.qps + 5.0);
        println!(
            "| {} | {:.1} s | ≤ {:.0} s | {:.1} MiB | {} in {} s | {} / {} / {} ({}) | {:.0} status PATCH/s |",
            f.qps,
            f.all_written.as_secs_f64(),
            target.as_secs_f64(),
            f.hwm_mib,
            f.rest_writes,
            f.rest_secs,
            ms(pct(&f.flips, 0.5)),
            ms(pct(&f.flips, 0.99)),
            ms(*f.flips.last().unwrap()),
            f.flips.len(),
            rate
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
