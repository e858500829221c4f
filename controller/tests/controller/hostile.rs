//! A hostile tenant: what a workload cluster's admins can create does not
//! set what the controller holds. 2,000 Nodes with 60 KiB annotations in
//! the tenant's cluster (kube-apiserver stores up to 256 KiB of them per
//! object) once made every replica cache all of them — about 120 MiB, past
//! the chart's 128 MiB limit, for every tenant's gate. The controller keeps
//! only the Nodes its Machines name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");
const HOSTILE_NODES: usize = 2_000;
const ANNOTATION_BYTES: usize = 60 * 1024;
/// The chart's memory limit (charts/sandbox-readiness-controller/values.yaml).
const LIMIT_MIB: u64 = 128;

#[test]
fn a_tenant_of_2000_large_nodes_does_not_set_the_controllers_memory() {
    let env = Env::with_private_workload();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    // The tenant's Nodes, each carrying a desired-state annotation of
    // 60 KiB (under the reader's 64 KiB: nothing drops it for its size).
    let padding = "x".repeat(ANNOTATION_BYTES);
    let value = json!({"v": 1, "pad": padding}).to_string();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (env, value) = (&env, &value);
            s.spawn(move || {
                for i in (t..HOSTILE_NODES).step_by(8) {
                    env.wl.write(
                        "POST",
                        "/api/v1/nodes",
                        "application/json",
                        &json!({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": format!("hostile-{i:04}"),
                                "annotations": {"sandbox-readiness.io/desired": value}}}),
                    );
                }
            });
        }
    });
    let ctl = env.controller(&[]);
    env.wait_status("m1", "False", Duration::from_secs(120));
    // The tenant's own gate still follows its node.
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    env.wait_status("m1", "True", Duration::from_secs(30));
    // Every one of the tenant's Nodes was listed (page by page) and
    // dropped: the peak is the controller's own.
    let hwm = common::cluster::peak_rss_kib(ctl.child.id()).unwrap();
    eprintln!(
        "controller VmHWM with {HOSTILE_NODES} Nodes of {} KiB annotations: {} KiB",
        ANNOTATION_BYTES / 1024,
        hwm
    );
    assert!(
        hwm < LIMIT_MIB * 1024,
        "the controller's peak RSS {hwm} KiB is past the chart's {LIMIT_MIB} MiB limit"
    );
}
