//! Flags shared by `probe`, `serve` and `check`, and their parsers.
//!
//! Every flag also reads `SANDBOX_READINESS_<FLAG>` from the environment,
//! because Talos passes an extension service its configuration as environment
//! (ExtensionServiceConfig `environment`). Repeatable flags take a
//! comma-separated list there.

use std::{path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

use sandbox_readiness::{
    evaluate::{self, DesiredError},
    host::HostPaths,
    observe::{canary::CanaryConfig, gvisor::SandboxEnv, GvisorConfig, ObserveConfig},
    proto::v1::{DesiredState, SysctlExpectation},
};

/// Parses durations such as `2s`, `500ms`, `1m`.
/// At most a week: every duration becomes a timer deadline, and a deadline
/// past what the clock can hold would panic the agent (and with
/// `panic=abort`, crash-loop it) instead of being refused here.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration (e.g. 2s, 500ms): {e}"))?;
    if d > MAX_DURATION {
        return Err(format!("{s:?} is longer than a week"));
    }
    Ok(d)
}

/// [`parse_duration`], refusing zero (for periods a timer ticks at, which
/// would spin, and for timeouts, which would fail every call).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be more than 0".into()),
        d => Ok(d),
    }
}

fn parse_sysctl(s: &str) -> Result<SysctlExpectation, DesiredError> {
    evaluate::parse_sysctl_flag(s)
}

pub fn parse_handler(s: &str) -> Result<String, DesiredError> {
    evaluate::validate_handler_name(s).map(|()| s.to_string())
}

/// The desired state, as flags (the same for `probe`, `serve` and `check`).
#[derive(Debug, Clone, Default, Args)]
pub struct DesiredArgs {
    /// Expected effective sysctl value, NAME=VALUE (repeatable), e.g. user.max_user_namespaces=11255.
    #[arg(long = "sysctl", value_name = "NAME=VALUE", value_parser = parse_sysctl, env = "SANDBOX_READINESS_SYSCTL", value_delimiter = ',')]
    pub sysctls: Vec<SysctlExpectation>,
    /// A user namespace must really be creatable.
    #[arg(long, env = "SANDBOX_READINESS_REQUIRE_USERNS")]
    pub require_userns: bool,
    /// An idmapped mount must really be creatable.
    #[arg(long, env = "SANDBOX_READINESS_REQUIRE_IDMAP_MOUNTS")]
    pub require_idmap_mounts: bool,
    /// A runtime handler the live CRI must report, with its shim present (repeatable), e.g. runsc.
    #[arg(long = "require-runtime-handler", value_name = "NAME", value_parser = parse_handler, env = "SANDBOX_READINESS_REQUIRE_RUNTIME_HANDLER", value_delimiter = ',')]
    pub require_runtime_handlers: Vec<String>,
    /// The gVisor summary must be READY.
    #[arg(long, env = "SANDBOX_READINESS_REQUIRE_GVISOR")]
    pub require_gvisor: bool,
    /// The sandbox smoke probe (runsc do true) must pass.
    #[arg(long, env = "SANDBOX_READINESS_REQUIRE_SANDBOX_PROBE")]
    pub require_sandbox_probe: bool,
    /// A runtime handler `hostUsers: false` pods must be able to use (repeatable; `default` is the runtime's default handler): user namespaces and idmapped mounts work, and the CRI reports user namespace support for it.
    #[arg(long = "require-pod-userns", value_name = "HANDLER", value_parser = parse_handler, env = "SANDBOX_READINESS_REQUIRE_POD_USERNS", value_delimiter = ',')]
    pub require_pod_userns: Vec<String>,
    /// A runtime handler whose CRI canary must pass (repeatable; `default` is the runtime's default handler): a host-network pod sandbox is started, stopped and removed through the CRI. Changes the node: `serve` runs it only for handlers in --allow-canary.
    #[arg(long = "require-canary", value_name = "HANDLER", value_parser = parse_handler, env = "SANDBOX_READINESS_REQUIRE_CANARY", value_delimiter = ',')]
    pub require_canary: Vec<String>,
}

impl DesiredArgs {
    /// The desired state these flags describe, validated.
    pub fn to_desired(&self) -> Result<DesiredState, DesiredError> {
        let d = DesiredState {
            sysctls: self.sysctls.clone(),
            require_userns: self.require_userns,
            require_idmap_mounts: self.require_idmap_mounts,
            require_runtime_handlers: self.require_runtime_handlers.clone(),
            require_gvisor: self.require_gvisor,
            require_sandbox_probe: self.require_sandbox_probe,
            require_pod_userns: self.require_pod_userns.clone(),
            require_canary: self.require_canary.clone(),
        };
        evaluate::validate(&d)?;
        Ok(d)
    }
}

/// Where and how the agent looks at the host.
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    /// procfs of the host.
    #[arg(long, default_value = "/proc", env = "SANDBOX_READINESS_PROC_ROOT")]
    pub proc_root: PathBuf,
    /// sysfs of the host.
    #[arg(long, default_value = "/sys", env = "SANDBOX_READINESS_SYS_ROOT")]
    pub sys_root: PathBuf,
    /// The host's filesystem root (where /etc, /usr/local/bin and /run are found).
    #[arg(long, default_value = "/", env = "SANDBOX_READINESS_HOST_ROOT")]
    pub host_root: PathBuf,
    /// runsc binary [default: <host-root>/usr/local/bin/runsc].
    #[arg(long, env = "SANDBOX_READINESS_RUNSC_PATH")]
    pub runsc_path: Option<PathBuf>,
    /// gVisor containerd shim [default: <host-root>/usr/local/bin/containerd-shim-runsc-v1].
    #[arg(long, env = "SANDBOX_READINESS_SHIM_PATH")]
    pub shim_path: Option<PathBuf>,
    /// CRI drop-in directory [default: <host-root>/etc/cri/conf.d].
    #[arg(long, env = "SANDBOX_READINESS_CRI_CONF_DIR")]
    pub cri_conf_dir: Option<PathBuf>,
    /// CRI endpoint [default: unix://<host-root>/run/containerd/containerd.sock].
    #[arg(long, env = "SANDBOX_READINESS_CRI_ENDPOINT")]
    pub cri_endpoint: Option<String>,
    /// Deadline for connecting to and asking the CRI runtime.
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_CRI_TIMEOUT")]
    pub cri_timeout: Duration,
    /// Deadline for every short exec (runsc --version).
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_EXEC_TIMEOUT")]
    pub exec_timeout: Duration,
    /// Deadline for the sandbox smoke probe.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_SANDBOX_TIMEOUT")]
    pub sandbox_timeout: Duration,
    /// Deadline for the user namespace / idmap probe helper.
    #[arg(long, default_value = "5s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_PROBE_TIMEOUT")]
    pub probe_timeout: Duration,
    /// Deadline for one CRI canary (RunPodSandbox, status, stop, remove).
    #[arg(long, default_value = "20s", value_parser = parse_positive_duration, env = "SANDBOX_READINESS_CANARY_TIMEOUT")]
    pub canary_timeout: Duration,
    /// Let a CRI canary pull the runtime's sandbox image when its image store lacks it (without it, the canary does not run then).
    #[arg(long, env = "SANDBOX_READINESS_CANARY_PULL")]
    pub canary_pull: bool,
    /// Tests only: read the agent's own /proc/self/status, /sys/fs/cgroup and
    /// sandbox root (which decide whether runsc can run at all) under DIR
    /// instead of /.
    #[arg(long, hide = true, value_name = "DIR")]
    pub self_root_for_tests: Option<PathBuf>,
}

impl HostArgs {
    /// The observation configuration these flags describe (no sysctls
    /// beyond the user namespace ones: a desired state adds its own).
    pub fn to_config(&self) -> ObserveConfig {
        let paths = HostPaths {
            proc_root: self.proc_root.clone(),
            sys_root: self.sys_root.clone(),
            host_root: self.host_root.clone(),
        };
        let bin = paths.default_bin_dir();
        let gvisor = GvisorConfig {
            runsc_path: self.runsc_path.clone().unwrap_or_else(|| bin.join("runsc")),
            shim_path: self
                .shim_path
                .clone()
                .unwrap_or_else(|| bin.join("containerd-shim-runsc-v1")),
            cri_conf_dir: self
                .cri_conf_dir
                .clone()
                .unwrap_or_else(|| paths.default_cri_conf_dir()),
            cri_endpoint: self
                .cri_endpoint
                .clone()
                .unwrap_or_else(|| paths.default_cri_endpoint()),
            cri_timeout: self.cri_timeout,
            exec_timeout: self.exec_timeout,
            sandbox_timeout: self.sandbox_timeout,
            sandbox_env: self
                .self_root_for_tests
                .as_deref()
                .map(SandboxEnv::under)
                .unwrap_or_default(),
        };
        ObserveConfig {
            paths,
            helper_exe: PathBuf::from("/proc/self/exe"),
            probe_timeout: self.probe_timeout,
            extra_sysctls: Vec::new(),
            gvisor,
            expose_machine_id: false,
            canary: CanaryConfig {
                timeout: self.canary_timeout,
                pull: self.canary_pull,
            },
        }
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table for people.
    #[default]
    Table,
    /// One JSON document (proto3 JSON mapping).
    Json,
}

/// Log format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_zero_can_be_refused() {
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(
            parse_positive_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_positive_duration("0s")
            .unwrap_err()
            .ends_with("must be more than 0"));
        assert!(parse_positive_duration("soon").is_err());
        assert_eq!(
            parse_duration("100000d").unwrap_err(),
            "\"100000d\" is longer than a week"
        );
        assert!(parse_duration("7d").is_ok());
    }

    /// The library reads an ExtensionServiceConfig's environment with the
    /// table in `desired::env`; it must be these flags' own variables,
    /// switches as switches, lists as comma-separated lists.
    #[test]
    fn the_librarys_environment_table_is_these_flags() {
        use clap::{builder::TypedValueParser, ArgAction, Args};
        use sandbox_readiness::desired::env::{parse_flag, Kind, VARS};
        let cmd = DesiredArgs::augment_args(clap::Command::new("t"));
        let mut ours: Vec<(String, Kind)> = cmd
            .get_arguments()
            .filter_map(|a| {
                let env = a.get_env()?.to_str()?.to_string();
                let kind = if matches!(a.get_action(), ArgAction::SetTrue) {
                    Kind::Flag
                } else {
                    assert_eq!(a.get_value_delimiter(), Some(','), "{env}");
                    Kind::List
                };
                Some((env, kind))
            })
            .collect();
        let mut lib: Vec<(String, Kind)> = VARS.iter().map(|(v, k)| (v.to_string(), *k)).collect();
        ours.sort_by(|a, b| a.0.cmp(&b.0));
        lib.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(ours, lib);
        let clap_bool = clap::builder::BoolValueParser::new();
        for v in ["true", "false", "1", "0", "yes", "TRUE", " true"] {
            let c = clap_bool
                .parse_ref(&cmd, None, std::ffi::OsStr::new(v))
                .ok();
            assert_eq!(parse_flag("X", v).ok(), c, "{v:?}");
        }
    }
}
