//! docs/get-started/quick-start.md, run as written against the playground
//! (`scripts/playground up`): every command block of the page is either run
//! here, verbatim, with the page's variables set to a pool of the
//! playground, or named below with the reason it cannot run on this
//! machine; a block added to the page that is neither fails the test.
//!
//! The pool is the page's premise: a MachineDeployment `$MD` of one worker
//! with a TalosConfigTemplate and no readiness gate, its TestMachineTemplate
//! booting a real kubelet on Talos's runtime stack (containerd 2.2, runc,
//! the gVisor extension's runsc and shim: scripts/kubelet-node.sh). The
//! page's YAML documents go into copies of the pool's templates as the page
//! tells a person to put them; its shell blocks run under `sh -e` in a
//! directory holding `mgmt.kubeconfig` and `workload.kubeconfig`, with the
//! pinned kubectl and this build's `sandbox-readiness` first on PATH.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use std::{
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use support::{
    cluster::{bin_dir, poll, RealCluster},
    markdown::{fenced, root},
    playground::{self, condition, status, Down},
};

const PAGE: &str = "docs/get-started/quick-start.md";
const GATE: &str = "sandbox-readiness.io/SandboxReady";
const NS: &str = "pool-a";
/// The page's own name for the pool.
const MD: &str = "tenant-a-workers";

/// One fenced block of the page: the step (`## N.` heading, "" before the
/// first) and its place among that step's blocks of the same language.
#[derive(Debug)]
struct Block {
    step: String,
    lang: &'static str,
    nth: usize,
    body: String,
}

fn blocks() -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(PAGE)).unwrap();
    let headings: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            l.strip_prefix("## ")
                .map(|h| (i, h.split('.').next().unwrap_or("").trim().to_string()))
        })
        .collect();
    let mut out: Vec<Block> = Vec::new();
    for lang in ["sh", "yaml"] {
        for (line, body) in fenced(&text, lang) {
            let step = headings
                .iter()
                .rev()
                .find(|(i, _)| *i < line)
                .map(|(_, h)| h.clone())
                .unwrap_or_default();
            let nth = out
                .iter()
                .filter(|b| b.step == step && b.lang == lang)
                .count();
            out.push(Block {
                step,
                lang,
                nth,
                body,
            });
        }
    }
    out
}

/// What the test does with each block: `(step, lang, nth)`.
enum Plan {
    /// Not runnable here, and why (each is run elsewhere where it can be).
    Skip(&'static str),
    /// The preamble's `export`s: the test sets these variables itself.
    Variables,
    /// Run verbatim.
    Run,
    /// The YAML a person adds to a copied template (the page's words).
    Documents,
}

fn plan(b: &Block) -> Option<Plan> {
    use Plan::*;
    Some(match (b.step.as_str(), b.lang, b.nth) {
        ("", "sh", 0) => Variables,
        ("1", "sh", 0) => Skip(
            "the build machine's packages and targets: scripts/install-test-deps.sh \
             installs them in the test command, which builds and runs `probe` too",
        ),
        ("2", "sh", 0) => Skip(
            "pushes to a registry, which this machine has none of; the test command \
             builds both images with these scripts and checks them (slow tier)",
        ),
        ("3", "sh", 0) => Skip(
            "Talos's imager in Docker with network; the imager profiles are checked \
             against Talos's own profile code (tests/talos_oracle.rs)",
        ),
        ("4", "yaml", 0) | ("7", "yaml", 0) => Documents,
        ("4", "sh", 0) | ("4", "sh", 1) => Run,
        ("5", "sh", 0) => Skip(
            "the playground already runs the controller as the chart installs it \
             (deploy/ applied; its replica a process: the management cluster has no \
             kubelet for `rollout status` to wait on); helm install is tests/helm.rs's",
        ),
        ("6", "sh", 0) | ("7", "sh", 0) | ("8", "sh", 0) => Run,
        _ => return None,
    })
}

struct Page {
    dir: PathBuf,
    work: PathBuf,
    path: String,
    mgmt: RealCluster,
}

impl Page {
    /// A block under `sh -e` (at most 5 minutes: the page's own `--wait
    /// 30m` and `--timeout` would outlast the test runner).
    fn sh(&self, b: &Block) -> Output {
        let started = Instant::now();
        let out = Command::new("timeout")
            .args(["300", "sh", "-ec", &b.body])
            .current_dir(&self.work)
            .env("PATH", &self.path)
            .env("NS", NS)
            .env("MD", MD)
            .env("REGISTRY", "registry.invalid/platform")
            .env("TALOS", "v1.11.5")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        eprintln!(
            "step {} block {}: exit {:?} in {:?}",
            b.step,
            b.nth,
            out.status.code(),
            started.elapsed()
        );
        out
    }

    fn run_ok(&self, b: &Block) -> Output {
        let out = self.sh(b);
        assert!(
            out.status.success(),
            "step {}'s block {} failed ({:?}):\n{}\nstdout:\n{}\nstderr:\n{}",
            b.step,
            b.nth,
            out.status.code(),
            b.body,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn get(&self, path: &str) -> Value {
        self.mgmt.get(path).unwrap_or(Value::Null)
    }

    fn machines(&self) -> Vec<Value> {
        self.get(&format!(
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/{NS}/machines?labelSelector=cluster.x-k8s.io%2Fdeployment-name%3D{MD}"
        ))["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The pool's Machines once there is exactly `n`, each Ready on the
    /// template `tct`.
    fn wait_pool(&self, n: usize, tct: &str, what: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            let seen = self.machines();
            if seen.len() == n
                && seen.iter().all(|m| {
                    status(m, "Ready") == "True"
                        && m["metadata"]["deletionTimestamp"].is_null()
                        && self.bootstrap_template(m) == tct
                })
            {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within 240 s\n{}",
                self.diagnose()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The pool's Machines and TestMachines, and the providers' last log
    /// lines: what a failed wait shows.
    fn diagnose(&self) -> String {
        let conditions = |o: &Value| -> String {
            o["status"]["conditions"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            format!(
                                "{}={} {} {}",
                                c["type"], c["status"], c["reason"], c["message"]
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n    ")
                })
                .unwrap_or_default()
        };
        let mut out = String::new();
        for m in self.machines() {
            out += &format!(
                "Machine {}:\n    {}\n",
                m["metadata"]["name"],
                conditions(&m)
            );
        }
        for t in self.get(&format!(
            "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/{NS}/testmachines"
        ))["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            out += &format!(
                "TestMachine {}:\n    {}\n",
                t["metadata"]["name"],
                conditions(&t)
            );
        }
        // Lossy: an agent's backtrace with a byte that is not UTF-8 must not
        // leave the diagnostics empty.
        let bytes = std::fs::read(self.dir.join("logs/test-providers.log")).unwrap_or_default();
        let log = String::from_utf8_lossy(&bytes);
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        out += "test-providers.log:\n";
        for l in tail.iter().rev() {
            out += &format!("    {l}\n");
        }
        out
    }

    /// The TalosConfigTemplate a Machine's TalosConfig was cloned from.
    fn bootstrap_template(&self, m: &Value) -> String {
        let Some(tc) = m["spec"]["bootstrap"]["configRef"]["name"].as_str() else {
            return String::new();
        };
        self.get(&format!(
            "/apis/bootstrap.cluster.x-k8s.io/v1alpha3/namespaces/{NS}/talosconfigs/{tc}"
        ))["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The pool's TalosConfigTemplate `from` as a person copies it: under
    /// `name`, server fields dropped, its strategicPatches edited by `edit`;
    /// written to the file the page names.
    fn copy_template(
        &self,
        from: &str,
        name: &str,
        file: &str,
        edit: impl FnOnce(&mut Vec<Value>),
    ) {
        let mut t = self.get(&format!(
            "/apis/bootstrap.cluster.x-k8s.io/v1alpha3/namespaces/{NS}/talosconfigtemplates/{from}"
        ));
        assert!(t.is_object(), "no TalosConfigTemplate {from}");
        t["metadata"] = json!({"name": name, "namespace": NS});
        t.as_object_mut().unwrap().remove("status");
        let mut patches = t["spec"]["template"]["spec"]["strategicPatches"]
            .as_array_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        edit(&mut patches);
        t["spec"]["template"]["spec"]["strategicPatches"] = Value::Array(patches);
        std::fs::write(self.work.join(file), serde_yaml_ng::to_string(&t).unwrap()).unwrap();
    }
}

/// A YAML block's documents, one strategic patch each.
fn documents(body: &str) -> Vec<Value> {
    body.split("\n---\n")
        .map(|d| d.trim())
        .filter(|d| !d.is_empty())
        .map(|d| Value::String(format!("{d}\n")))
        .collect()
}

/// The pool before the page: one worker on a real kubelet node, a
/// generated worker config without the extension's configuration, no
/// readiness gate.
fn premise(mgmt: &RealCluster) {
    let objects = [
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TestMachineTemplate",
            "metadata": {"name": "tenant-a-kubelet", "namespace": NS},
            "spec": {"template": {"spec": {"kubeletNode": []}}}}),
        json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfigTemplate",
            "metadata": {"name": MD, "namespace": NS},
            "spec": {"template": {"spec": {"generateType": "worker", "talosVersion": "v1.11"}}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": MD, "namespace": NS},
            "spec": {"clusterName": "c1", "replicas": 1,
                "rollout": {"strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
                "template": {"spec": {"clusterName": "c1",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                        "kind": "TalosConfigTemplate", "name": MD}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "TestMachineTemplate", "name": "tenant-a-kubelet"},
                    "minReadySeconds": 1}}}}),
    ];
    for o in objects {
        mgmt.kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(&o.to_string()));
    }
}

#[test]
fn the_quick_start_runs_as_written_on_the_playground() {
    let all = blocks();
    let unplanned: Vec<String> = all
        .iter()
        .filter(|b| plan(b).is_none())
        .map(|b| format!("step {:?} {} block {}:\n{}", b.step, b.lang, b.nth, b.body))
        .collect();
    assert!(
        unplanned.is_empty(),
        "{PAGE} has blocks this test neither runs nor skips with a reason:\n{}",
        unplanned.join("\n")
    );
    for b in &all {
        if let Some(Plan::Skip(why)) = plan(b) {
            eprintln!(
                "step {} {} block {}: not run here: {why}",
                b.step, b.lang, b.nth
            );
        }
        if let Some(Plan::Variables) = plan(b) {
            let set: Vec<&str> = b
                .body
                .split_whitespace()
                .filter_map(|w| w.split_once('=').map(|(k, _)| k))
                .collect();
            assert_eq!(set, ["REGISTRY", "TALOS", "NS", "MD"], "{}", b.body);
        }
    }
    let block = |step: &str, lang: &str, nth: usize| -> &Block {
        all.iter()
            .find(|b| b.step == step && b.lang == lang && b.nth == nth)
            .unwrap_or_else(|| panic!("{PAGE}: no {lang} block {nth} in step {step}"))
    };

    let build = playground::build(common::BIN);
    // A short base: a kubelet node's tree is DIR/workload/nodes/<Machine>,
    // and containerd's and kubelet's sockets under it must stay within a
    // unix socket path's 104 bytes (tempdir()'s /tmp/.tmpXXXXXX/playground
    // took containerd's ttrpc socket to 105).
    let tmp = tempfile::Builder::new()
        .prefix("qs")
        .rand_bytes(4)
        .tempdir_in("/tmp")
        .unwrap();
    // kubelet-node.sh wants every ancestor of a node's tree searchable (a
    // hostUsers: false container's root reaches its rootfs through them).
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir = tmp.path().join("pg");
    let _down = Down::guard(&dir, &build);
    let up = playground::run("up", &dir, &build);
    assert!(
        up.status.success(),
        "up failed: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let work = tmp.path().join("operator");
    std::fs::create_dir(&work).unwrap();
    for (mine, theirs) in [
        ("mgmt.kubeconfig", "management.kubeconfig"),
        ("workload.kubeconfig", "workload.kubeconfig"),
    ] {
        std::os::unix::fs::symlink(dir.join(theirs), work.join(mine)).unwrap();
    }
    let page = Page {
        path: format!(
            "{}:{}:{}",
            bin_dir().unwrap().display(),
            build.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        mgmt: RealCluster::attach(&dir.join("management")).unwrap(),
        dir,
        work,
    };
    // The playground's own pool (examples/rollout/) labels its Nodes as the
    // page labels the pool's: deleted first, so that the page's selectors
    // see the page's pool alone, as on a cluster whose other pools are
    // labelled otherwise.
    page.mgmt.kubectl_ok(
        &[
            "-n",
            NS,
            "delete",
            "machinedeployment",
            "workers",
            "--wait=false",
        ],
        None,
    );
    premise(&page.mgmt);
    let workload = RealCluster::attach(&page.dir.join("workload")).unwrap();
    poll(
        Duration::from_secs(180),
        "the playground pool's Nodes gone",
        || {
            workload
                .get("/api/v1/nodes?labelSelector=example.com%2Fpool%3Dgvisor")
                .and_then(|l| l["items"].as_array().map(Vec::is_empty))
                .unwrap_or(false)
        },
    );
    let before = page.wait_pool(1, MD, "the premise pool's worker Ready");
    eprintln!("premise: {}", before[0]["metadata"]["name"]);

    // 4. The copied template with the page's documents added; `check`
    // reads it; created, rolled onto, every worker reporting.
    let step4 = documents(&block("4", "yaml", 0).body);
    page.copy_template(MD, &format!("{MD}-agent"), "tct-agent.yaml", |p| {
        p.extend(step4.iter().cloned())
    });
    let check = page.sh(block("4", "sh", 0));
    let out = String::from_utf8_lossy(&check.stdout).to_string();
    assert!(
        matches!(check.status.code(), Some(0 | 1))
            && out.contains("DESIRED (from the pool's configuration):"),
        "step 4's check ({:?}):\n{out}\n{}",
        check.status.code(),
        String::from_utf8_lossy(&check.stderr)
    );
    page.run_ok(block("4", "sh", 1));
    let agent = page.wait_pool(1, &format!("{MD}-agent"), "the pool rolled onto $MD-agent");

    // 6. Mirror, then the gate.
    page.run_ok(block("6", "sh", 0));
    let md = page.get(&format!(
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/{NS}/machinedeployments/{MD}"
    ));
    assert_eq!(
        md["spec"]["template"]["spec"]["readinessGates"],
        json!([{"conditionType": GATE}]),
        "{md:#}"
    );
    assert_eq!(status(&agent[0], "Ready"), "True");

    // 7. The sysctl, gated: the second copy replaces step 4's documents.
    let step7 = documents(&block("7", "yaml", 0).body);
    page.copy_template(
        &format!("{MD}-agent"),
        &format!("{MD}-userns"),
        "tct-userns.yaml",
        |p| {
            p.retain(|d| !step4.contains(d));
            p.extend(step7.iter().cloned());
        },
    );
    page.run_ok(block("7", "sh", 0));
    let userns = page.wait_pool(
        1,
        &format!("{MD}-userns"),
        "the pool rolled onto $MD-userns",
    );
    let m = &userns[0];
    let c = condition(m, GATE).unwrap();
    assert_eq!(c["status"], "True", "{m:#}");

    // 8. The pod proof on the worker: a hostUsers: false pod and a gVisor
    // pod through its own kubelet. gVisor's shim sets its own
    // oom_score_adj, which needs CAP_SYS_RESOURCE: where this machine's
    // root lacks it, no runsc pod starts (docs/developer/kubelet-matrix.md)
    // and the proof must say so with kubelet's words — the agent, which
    // finds runsc installed and listed, said True: the case the proof is for.
    page.run_ok(block("8", "sh", 0));
    let name = m["metadata"]["name"].as_str().unwrap().to_string();
    let runsc_runs = sys_resource();
    let deadline = Instant::now() + Duration::from_secs(180);
    let last = loop {
        let m = page
            .machines()
            .into_iter()
            .find(|x| x["metadata"]["name"] == name.as_str())
            .unwrap_or(Value::Null);
        let reason = condition(&m, GATE).map(|c| c["reason"].clone());
        if reason == Some(json!("SandboxProven")) || reason == Some(json!("ProofFailed")) {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no proof within 180 s: {:#}\n{}",
            condition(&m, GATE).cloned().unwrap_or_default(),
            page.diagnose()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let c = condition(&last, GATE).unwrap();
    let message = c["message"].as_str().unwrap_or_default();
    eprintln!("{name}: {} {}: {message}", c["status"], c["reason"]);
    if runsc_runs {
        assert_eq!(
            (&c["status"], &c["reason"]),
            (&json!("True"), &json!("SandboxProven")),
            "{last:#}"
        );
        assert!(message.contains("default+userns, gvisor"), "{message}");
    } else {
        assert_eq!(
            (&c["status"], &c["reason"]),
            (&json!("False"), &json!("ProofFailed")),
            "{last:#}"
        );
        assert!(
            message.starts_with(&format!(
                "pod gvisor on Node {name}: FailedCreatePodSandBox:"
            )) && message.contains("failed to set OOM Score on shim"),
            "{message}"
        );
    }
}

/// Whether this process holds CAP_SYS_RESOURCE (bit 24 of CapEff): what
/// gVisor's shim needs to start here.
fn sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    eff & (1 << 24) != 0
}
