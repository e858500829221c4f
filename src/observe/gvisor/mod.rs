//! gVisor, tier by tier: the `runsc` and shim binaries ([`binaries`]), the
//! CRI drop-ins that register the handler ([`drop_ins`]), what the host has
//! for runsc's preconditions ([`preconditions`]), and a real sandbox smoke
//! test, `runsc do true` ([`sandbox`]).
//!
//! The live CRI tier is in [`super::cri`]. Only raw facts are returned: the
//! preconditions and the verdict over all tiers are computed once, by
//! [`crate::report::derive()`].
//!
//! Every external process runs through [`crate::hostio::run`]: its own
//! process group, a cleared environment and a deadline; on timeout the whole
//! group is killed, because runsc forks a gofer and a sandbox and a hung one
//! must not outlive the probe.

pub mod binaries;
pub mod drop_ins;
pub mod preconditions;
pub mod sandbox;
pub mod sandbox_env;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use binaries::{parse_runsc_version, VersionCache};
pub use drop_ins::{
    handlers_from_drop_in, observe_drop_ins, runsc_platform, ConfigLookup, MAX_DROP_IN_BYTES,
    MAX_DROP_IN_FILES, PLUGIN_CRI_V1_RUNTIME, PLUGIN_GRPC_V1_CRI,
};
pub use preconditions::observe_kvm;
pub use sandbox::sandbox_probe;
pub use sandbox_env::SandboxEnv;
// The names live with the report, which derives from them; re-exported so
// the observer's users find them here too.
pub use crate::report::names::{
    PRECONDITION_KVM, PRECONDITION_MAX_USER_NAMESPACES, PRECONDITION_PTRACE_SCOPE, RUNSC,
    RUNSC_RUNTIME_TYPE, RUNSC_SHIM,
};

use super::{cri, off_thread, skipped, GvisorConfig, Scope};
use crate::host::HostPaths;
use crate::hostio::{Capture, Keep};
use crate::proto::v1::{Binary, DropIn, Gvisor};

/// How much of a child's stdout (head: the version line) and stderr (tail:
/// the error is at the end) is kept.
const CAPTURE: Capture = Capture {
    stdout: Keep::Head(64 * 1024),
    stderr: Keep::Tail(64 * 1024),
    kill_group_after_exit: false,
};

pub use crate::report::names::CANNOT_RUN_HERE;

/// Default `runsc` location: where the Talos gVisor extension installs it.
pub fn default_runsc_path(host: &HostPaths) -> PathBuf {
    host.default_bin_dir().join(RUNSC)
}

/// Default `containerd-shim-runsc-v1` location.
pub fn default_shim_path(host: &HostPaths) -> PathBuf {
    host.default_bin_dir().join(RUNSC_SHIM)
}

/// The gVisor tiers' raw facts from one observation.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Every tier's data; `preconditions`, `readiness` and `reasons` are
    /// left for [`crate::report::derive()`].
    pub gvisor: Gvisor,
    /// Whether the host has a kvm device (`None`: could not be checked).
    pub kvm_present: Option<bool>,
}

/// Observes the gVisor tiers. Holds what outlives one observation: the
/// `runsc --version` answer for an unchanged binary.
#[derive(Debug, Default)]
pub struct GvisorObserver {
    versions: VersionCache,
}

impl GvisorObserver {
    /// Observes the binaries (asking `runsc --version` only for a binary it
    /// has not seen yet).
    pub async fn observe_binaries(
        &self,
        runsc: &Path,
        shim: &Path,
        exec_timeout: Duration,
    ) -> Vec<Binary> {
        binaries::observe_binaries(&self.versions, runsc, shim, exec_timeout).await
    }

    /// Observes every tier; the sandbox one only when `scope` asks for it.
    /// `rootless` is for an agent outside the initial user namespace.
    pub async fn observe(
        &self,
        g: &GvisorConfig,
        paths: &HostPaths,
        rootless: bool,
        scope: Scope,
    ) -> Observed {
        let files = {
            let (dir, paths, env) = (g.cri_conf_dir.clone(), paths.clone(), g.sandbox_env.clone());
            let (sandbox, runsc) = (scope.sandbox, g.runsc_path.clone());
            off_thread(move || {
                let (refused, blockers) = if sandbox {
                    (binaries::exec_refusal(&runsc), env.blockers())
                } else {
                    (None, Vec::new())
                };
                let found = (observe_drop_ins(&dir, &paths), observe_kvm(&paths));
                (found, refused, blockers)
            })
        };
        let (binaries, cri, files) = tokio::join!(
            self.observe_binaries(&g.runsc_path, &g.shim_path, g.exec_timeout),
            cri::observe(&g.cri_endpoint, g.cri_timeout),
            files,
        );
        let (((drop_ins, configured_handlers), kvm_present), refused, blockers) = files
            .unwrap_or_else(|e| {
                let error = DropIn {
                    path: g.cri_conf_dir.display().to_string(),
                    parsed: false,
                    error: format!("the drop-ins could not be read: {e}"),
                };
                (((vec![error], Vec::new()), None), Some(e), Vec::new())
            });
        let sandbox = if let Some(why) = refused {
            skipped(why)
        } else if !blockers.is_empty() {
            skipped(format!(
                "{CANNOT_RUN_HERE}, whatever the node can do: {}",
                blockers.join("; ")
            ))
        } else if scope.sandbox {
            let platform = configured_handlers
                .iter()
                .find(|h| h.name == RUNSC)
                .map(|h| h.platform.clone())
                .filter(|p| !p.is_empty());
            sandbox_probe(
                &g.runsc_path,
                rootless,
                platform.as_deref(),
                g.sandbox_timeout,
            )
            .await
        } else {
            skipped("not run (ask for it with --sandbox-probe or --require-sandbox-probe)")
        };
        Observed {
            gvisor: Gvisor {
                binaries,
                drop_ins,
                configured_handlers,
                cri: Some(cri),
                sandbox: Some(sandbox),
                ..Gvisor::default()
            },
            kvm_present,
        }
    }
}

/// Observes the binaries once, without a cache (each call asks
/// `runsc --version` again); an agent holds a [`GvisorObserver`] instead.
pub async fn observe_binaries(runsc: &Path, shim: &Path, exec_timeout: Duration) -> Vec<Binary> {
    GvisorObserver::default()
        .observe_binaries(runsc, shim, exec_timeout)
        .await
}
