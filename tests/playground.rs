//! `scripts/playground`, end to end, as a person runs it: `up` in a new
//! directory (real control planes, Cluster API and CABPT, the test
//! providers as a program, the controller as the chart runs it, the pool
//! of examples/rollout/), then the commands it prints: roll to the
//! breaking template, see the new Machine held with the controller's
//! reason, roll back; then `down`, and nothing of it is left. The programs
//! are this build's (SR_PLAYGROUND_BUILD: `up` runs no cargo).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use support::{
    cluster::{bin_dir, poll, RealCluster},
    playground::{condition, status, Down},
};

const GATE: &str = "sandbox-readiness.io/SandboxReady";
const MACHINES: &str = "/apis/cluster.x-k8s.io/v1beta2/namespaces/pool-a/machines?labelSelector=cluster.x-k8s.io%2Fdeployment-name%3Dworkers";

fn playground(cmd: &str, dir: &Path) -> Output {
    support::playground::run(cmd, dir, &support::playground::build(common::BIN))
}

fn machines(mgmt: &RealCluster) -> Vec<Value> {
    mgmt.get(MACHINES)
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap().to_string()
}

/// The pinned kubectl with `kubeconfig`: its JSON output.
fn kubectl_json(kubeconfig: &Path, args: &[&str]) -> Value {
    let out = Command::new(bin_dir().unwrap().join("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .args(["-o", "json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl --kubeconfig {} {args:?}: {}",
        kubeconfig.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs the command line `up` printed that contains `marker` (a kubectl
/// command: the pinned kubectl first on PATH).
fn run_printed(printed: &str, marker: &str) {
    let line = printed
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("kubectl ") && l.contains(marker))
        .unwrap_or_else(|| panic!("`up` printed no kubectl command with {marker}:\n{printed}"));
    let path = format!(
        "{}:{}",
        bin_dir().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args(["-c", line])
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A live process (not a zombie waiting for its parent).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.to_string()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
}

/// Live processes in process group `pgid`.
fn group(pgid: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().to_string();
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(2) == Some(&pgid) && alive(&pid) {
            out.push(pid);
        }
    }
    out
}

fn pids_in(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .trim()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn up_shows_a_breaking_rollout_held_and_down_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("playground");
    // An empty DIR, as `up` takes it: the watchdog watches it from now.
    let _down = Down::guard(&dir, &support::playground::build(common::BIN));

    let started = Instant::now();
    let up = playground("up", &dir);
    let printed = String::from_utf8_lossy(&up.stdout).to_string();
    assert!(
        up.status.success(),
        "up failed: {}{printed}",
        String::from_utf8_lossy(&up.stderr)
    );
    eprintln!("up in {:?}", started.elapsed());

    // A second `up` on it, and a `down` of a directory that is not a
    // playground's, are refused (exit 2) and change nothing.
    let again = playground("up", &dir);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("holds a playground"),
        "{again:?}"
    );
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("keep"), "").unwrap();
    let refused = playground("down", other.path());
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(other.path().join("keep").exists());

    // Both kubeconfigs reach their cluster.
    let md = kubectl_json(
        &dir.join("management.kubeconfig"),
        &["-n", "pool-a", "get", "machinedeployment", "workers"],
    );
    let replicas = md["spec"]["replicas"].as_u64().unwrap() as usize;
    let nodes = kubectl_json(&dir.join("workload.kubeconfig"), &["get", "nodes"]);
    let node_names: BTreeSet<String> = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(name)
        .collect();

    // When `up` returned: every Machine Ready, the controller's condition
    // True, on a Node of the workload cluster.
    let mgmt = RealCluster::attach(&dir.join("management")).unwrap();
    let pool = machines(&mgmt);
    assert_eq!(pool.len(), replicas, "{pool:#?}");
    for m in &pool {
        assert_eq!(status(m, "Ready"), "True", "{m:#}");
        assert_eq!(status(m, GATE), "True", "{m:#}");
        let node = m["status"]["nodeRef"]["name"].as_str().unwrap();
        assert!(node_names.contains(node), "{node} not in {node_names:?}");
    }
    let old: BTreeSet<String> = pool.iter().map(name).collect();

    // The breaking template, as `up` says to roll to it: a new Machine,
    // its Node reporting the limit not in effect; the controller's
    // reason on it; CAPI keeps it not Ready for that gate, and keeps both
    // old Machines.
    run_printed(&printed, "workers-broken");
    let mut held = None;
    poll(
        Duration::from_secs(120),
        "a new Machine held by the gate",
        || {
            held = machines(&mgmt).into_iter().find(|m| {
                !old.contains(&name(m))
                    && condition(m, GATE).is_some_and(|c| c["status"] == "False")
                    && condition(m, "Ready").is_some_and(|c| {
                        c["status"] == "False" && c["message"].as_str().unwrap_or("").contains(GATE)
                    })
            });
            held.is_some()
        },
    );
    let held = held.unwrap();
    let gate = condition(&held, GATE).unwrap();
    assert_eq!(gate["reason"], "SysctlMismatch", "{held:#}");
    assert!(
        gate["message"]
            .as_str()
            .unwrap()
            .contains("user.max_user_namespaces is 0, expected 11255"),
        "{held:#}"
    );
    // Read after CAPI computed the held Machine's Ready from the gate: the
    // old Machines are all there, Ready, none being deleted.
    let now = machines(&mgmt);
    for m in now.iter().filter(|m| old.contains(&name(m))) {
        assert_eq!(status(m, "Ready"), "True", "{m:#}");
        assert!(m["metadata"]["deletionTimestamp"].is_null(), "{m:#}");
    }
    assert_eq!(
        now.iter().filter(|m| old.contains(&name(m))).count(),
        replicas,
        "an old Machine went while the new one is held: {now:#?}"
    );

    // Rolling back, as printed: the held Machine goes, the old ones stay.
    run_printed(&printed, "\"workers-plain\"");
    poll(Duration::from_secs(120), "the held Machine deleted", || {
        let s = machines(&mgmt);
        s.iter().map(name).collect::<BTreeSet<_>>() == old
            && s.iter().all(|m| status(m, "Ready") == "True")
    });

    // Everything `up` started, before `down`.
    let mut singles = Vec::new();
    for c in ["management", "workload"] {
        for (f, p) in pids_in(&dir.join(c).join("pids")) {
            singles.push((format!("{c}/{f}"), p));
        }
    }
    let groups = pids_in(&dir.join("pids"));
    let agents = group(
        &groups
            .iter()
            .find(|(f, _)| f == "test-providers.pid")
            .unwrap()
            .1,
    );
    assert!(
        agents.len() > replicas,
        "the providers' group holds no agent per Machine: {agents:?}"
    );
    let etcd_data: Vec<PathBuf> = ["management", "workload"]
        .iter()
        .map(|c| std::fs::read_link(dir.join(c).join("etcd")).unwrap())
        .collect();

    let down = playground("down", &dir);
    assert!(
        down.status.success(),
        "down failed: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!dir.exists(), "down left {}", dir.display());
    for d in &etcd_data {
        assert!(!d.exists(), "down left the etcd data {}", d.display());
    }
    // `down` returns once each is gone (a zombie its new parent has not yet
    // reaped is gone).
    for (what, p) in &singles {
        assert!(!alive(p), "{what} ({p}) still runs after down");
    }
    for (what, p) in &groups {
        assert!(
            group(p).is_empty(),
            "{what}'s process group {p} still has {:?} after down",
            group(p)
        );
    }
    // And `down` again is a no-op.
    assert!(playground("down", &dir).status.success());
}
