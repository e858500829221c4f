//! `test-providers`: the test infrastructure and control-plane providers of
//! tests/support/capi_providers.rs (TestCluster, TestControlPlane,
//! TestMachine) as a program, the same source the rollout tests run, for
//! the playground (scripts/playground). Built with
//! `cargo build --example test-providers`.
//!
//! ```text
//! test-providers --management DIR --workload DIR [--namespace NS]
//! ```
//!
//! DIR: clusters that `scripts/control-plane.sh up` started (the management
//! one with `capi`). Registers the test providers' CRDs on the management
//! cluster, then plays the providers for the objects in namespace NS
//! (default `pool-a`, examples/rollout's) until SIGTERM, SIGINT or SIGHUP:
//! each TestMachine's node is a real `sandbox-readiness serve` (the first
//! on PATH) in a child user namespace, registered as a Node of the workload
//! cluster. On the signal it stops every agent it started and exits 0. Logs
//! one line per node it starts, refuses or stops (stderr). Bad arguments or
//! a DIR without a cluster: one line on stderr, exit 2.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "capi_providers.rs"]
mod capi_providers;
#[path = "../common/mod.rs"]
mod common;
#[path = "mod.rs"]
mod support;

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use nix::sys::signal::{SigSet, Signal};

const USAGE: &str = "usage: test-providers --management DIR --workload DIR [--namespace NS]";

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("test-providers: {msg}");
    std::process::exit(code)
}

struct Args {
    management: PathBuf,
    workload: PathBuf,
    namespace: String,
}

fn args() -> Result<Args, String> {
    let mut management = None;
    let mut workload = None;
    let mut namespace = "pool-a".to_string();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().ok_or_else(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--management" => management = Some(PathBuf::from(value("--management")?)),
            "--workload" => workload = Some(PathBuf::from(value("--workload")?)),
            "--namespace" => namespace = value("--namespace")?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        management: management.ok_or("--management DIR is required")?,
        workload: workload.ok_or("--workload DIR is required")?,
        namespace,
    })
}

/// The agent the TestMachines start (`common::BIN` outside a test build).
fn agent_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(common::BIN))
        .find(|p| p.is_file())
}

fn main() {
    let args = args().unwrap_or_else(|e| fail(2, &format!("{e}\n{USAGE}")));
    let Some(agent) = agent_on_path() else {
        fail(
            2,
            "no sandbox-readiness on PATH (the agent each TestMachine starts)",
        )
    };
    let attach = |role: &str, dir: &Path| {
        support::cluster::RealCluster::attach(dir)
            .map(Arc::new)
            .unwrap_or_else(|e| fail(2, &format!("--{role}: {e}")))
    };
    let mgmt = attach("management", &args.management);
    let workload = attach("workload", &args.workload);

    // The signals are taken by sigwait below, not by a handler: blocked
    // here, before any thread starts, so every thread inherits the mask
    // (the agents do not: Rust resets a child's mask before exec).
    let mut signals = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    if let Err(e) = signals.thread_block() {
        fail(1, &format!("cannot block the stop signals: {e}"));
    }

    let providers = capi_providers::Providers::start(mgmt, workload, &args.namespace);
    eprintln!(
        "test-providers: playing TestCluster, TestControlPlane and TestMachine in namespace {} (agent {})",
        args.namespace,
        agent.display()
    );

    // One line per change of what the providers did.
    let record = providers.record.clone();
    let done = Arc::new(AtomicBool::new(false));
    let logging = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen = capi_providers::Record::default();
            while !done.load(Ordering::Relaxed) {
                let now = record.lock().map(|r| r.clone()).unwrap_or_default();
                for (m, limit) in &now.nodes {
                    if !seen.nodes.contains_key(m) {
                        eprintln!(
                            "test-providers: {m}: node started, user.max_user_namespaces={limit}"
                        );
                    }
                }
                for (m, why) in &now.refused {
                    if !seen.refused.contains_key(m) {
                        eprintln!("test-providers: {m}: refused: {why}");
                    }
                }
                for m in now.stopped.iter().skip(seen.stopped.len()) {
                    eprintln!("test-providers: {m}: node stopped (its TestMachine is deleted)");
                }
                seen = now;
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };

    let got = signals.wait();
    eprintln!(
        "test-providers: {}: stopping every agent",
        got.map(|s| s.as_str()).unwrap_or("signal")
    );
    done.store(true, Ordering::Relaxed);
    drop(providers);
    let _ = logging.join();
}
