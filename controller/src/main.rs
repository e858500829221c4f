//! `sandbox-readiness-controller`: the CLI layer (flags, exit codes); the
//! work is the library's ([`sandbox_readiness_controller::run`]).
//!
//! Exit codes: 2 for anything refused at start (flags, the management
//! kubeconfig, Cluster API older than 1.11), 1 when the management cluster
//! cannot be reached at start.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Parser;
use kube::{
    config::{KubeConfigOptions, Kubeconfig},
    Client, Config,
};
use sandbox_readiness_controller::{
    context, discovery, kubeconfig, leader, metrics::Metrics, ops, qps, run,
};

/// Mirrors each workload Node's sandbox readiness condition onto its Cluster
/// API Machine, so a Machine readiness gate holds a rollout until the new
/// worker is really ready.
#[derive(Parser, Debug)]
#[command(name = "sandbox-readiness-controller", version)]
struct Args {
    /// The management cluster's kubeconfig (else the in-cluster config).
    #[arg(long, env = "SANDBOX_READINESS_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The condition type read on Nodes and written on Machines (the
    /// agent's --condition-type; the Machines' readiness gate).
    #[arg(
        long,
        env = "SANDBOX_READINESS_CONDITION_TYPE",
        default_value = "sandbox-readiness.io/SandboxReady"
    )]
    condition_type: String,
    /// A Node condition whose heartbeat is older than this (the agent's is
    /// 5 min), or a workload cluster unreadable this long, is Unknown.
    #[arg(long, env = "SANDBOX_READINESS_STALE_AFTER", default_value = "15m", value_parser = humantime::parse_duration)]
    stale_after: Duration,
    /// How often each `<cluster>-kubeconfig` Secret is read again (also at
    /// once after a 401 or a TLS failure).
    #[arg(long, env = "SANDBOX_READINESS_SECRET_RESYNC", default_value = "30s", value_parser = humantime::parse_duration)]
    secret_resync: Duration,
    /// Accept workload kubeconfigs that speak plain http:// or set
    /// insecure-skip-tls-verify (refused by default: the Secret's
    /// credentials and the Nodes' verdicts would cross an unauthenticated
    /// channel; the Machines say WorkloadKubeconfigRefused).
    #[arg(long, env = "SANDBOX_READINESS_ALLOW_INSECURE_WORKLOAD_KUBECONFIG", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    allow_insecure_workload_kubeconfig: bool,
    /// Leader election, endpoints, client limits (controller-ops).
    #[command(flatten)]
    ops: ops::OpsArgs,
    /// Log format on stderr: text, or json (one object per line, for a
    /// cluster's log pipeline; the agent's variable and values).
    #[arg(long, env = "SANDBOX_READINESS_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

/// `metav1.Condition.type`: an optional DNS subdomain prefix and `/`, then
/// a name of alphanumerics, `-`, `_`, `.` starting and ending alphanumeric;
/// at most 316 characters (Cluster API's readinessGates validation).
fn valid_condition_type(t: &str) -> bool {
    let (prefix, name) = match t.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, t),
    };
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    t.len() <= 316 && name_ok && prefix_ok
}

/// The management cluster's clients: the controller's, the Event
/// recorder's, each behind its own --kube-qps/--kube-burst bucket (see
/// `run::run`), and the Lease's, behind a bucket of its own
/// ([`qps::LEASE`]): a retry storm of the reconciles never delays a renewal.
/// The first two send writes only while `gate` is open (the Lease's is the
/// elector's own).
async fn management_client(
    path: Option<&PathBuf>,
    limits: qps::Limits,
    gate: &leader::Gate,
) -> Result<(Client, Client, Client), String> {
    let config = match path {
        Some(p) => {
            let kc = Kubeconfig::read_from(p)
                .map_err(|_| format!("--kubeconfig {}: not a readable kubeconfig", p.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|_| {
                    format!(
                        "--kubeconfig {}: its server or credentials cannot be loaded",
                        p.display()
                    )
                })?
        }
        None => Config::incluster()
            .map_err(|e| format!("no --kubeconfig and no in-cluster config: {e}"))?,
    };
    let failed = |e: kube::Error| format!("the management cluster's client: {e}");
    Ok((
        qps::gated_client(config.clone(), limits, gate.clone()).map_err(failed)?,
        qps::gated_client(config.clone(), limits, gate.clone()).map_err(failed)?,
        qps::client(config, qps::LEASE).map_err(failed)?,
    ))
}

async fn main_async(args: Args) -> ExitCode {
    if !valid_condition_type(&args.condition_type) {
        eprintln!(
            "--condition-type {:?} is not a condition type (an optional DNS prefix and '/', then a name)",
            args.condition_type
        );
        return ExitCode::from(2);
    }
    if args.stale_after.is_zero() || args.secret_resync.is_zero() {
        eprintln!("--stale-after and --secret-resync must be longer than zero");
        return ExitCode::from(2);
    }
    if let Err(e) = args.ops.check() {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let limits = args.ops.client_limits();
    let gate = if args.ops.leader_elect {
        leader::Gate::closed()
    } else {
        leader::Gate::always()
    };
    let (client, events, lease) =
        match management_client(args.kubeconfig.as_ref(), limits, &gate).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
    let groups = match tokio::time::timeout(Duration::from_secs(30), client.list_api_groups()).await
    {
        Ok(Ok(g)) => g,
        Ok(Err(e)) => {
            eprintln!("the management cluster's API groups cannot be read: {e}");
            return ExitCode::from(1);
        }
        Err(_) => {
            eprintln!("the management cluster's API groups cannot be read: no answer within 30 s");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = discovery::check(&groups) {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let settings = context::Settings {
        condition_type: args.condition_type,
        stale_after: args.stale_after,
        secret_resync: args.secret_resync,
        instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
        transport: kubeconfig::Transport {
            allow_insecure: args.allow_insecure_workload_kubeconfig,
        },
        limits,
    };
    let metrics = std::sync::Arc::new(Metrics::default());
    let mut ops = match ops::Ops::start(&lease, &args.ops, gate, metrics.clone()).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let gate = ops.gate();
    let endpoints = ops.take_listener();
    tokio::select! {
        r = run::run(client, events, settings, gate, metrics, endpoints) => match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        () = shutdown() => {
            // The leader hands its Lease back before it exits.
            ops.stop().await;
            ExitCode::SUCCESS
        }
    }
}

async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn main() -> ExitCode {
    let args = Args::parse();
    // SANDBOX_READINESS_LOG=debug|info|warn|error (default info).
    let level = std::env::var("SANDBOX_READINESS_LOG")
        .ok()
        .and_then(|s| s.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_max_level(level);
    if args.log_format == "json" {
        logs.json().init();
    } else {
        logs.init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(main_async(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/reference/controller-cli.md is this command, rendered
    /// (`SR_REGENERATE_DOCS=1` rewrites it).
    #[test]
    fn the_cli_reference_is_generated_from_these_definitions() {
        use clap::CommandFactory;
        use sandbox_readiness::clidoc;
        let md = clidoc::markdown(
            Args::command(),
            "Command-line reference: sandbox-readiness-controller",
            "<!-- Generated from controller/src/ by `cargo test -p sandbox-readiness-controller --bin sandbox-readiness-controller`; do not edit. SR_REGENERATE_DOCS=1 rewrites it. -->\n\n\
             The readiness-gate controller, in the Cluster API management cluster \
             (docs/deployment/controller.md). Exit codes: 0 after SIGTERM, 1 the management cluster could not be read or the loop failed, \
             2 bad usage or configuration (one line on stderr; also when `cluster.x-k8s.io/v1beta2` is not served). \
             Also read from the environment: `SANDBOX_READINESS_LOG` (`debug`, `info`, `warn`, `error`), \
             `POD_NAME` (this replica's name in the Lease and Events) and `POD_NAMESPACE` \
             (the Lease's namespace when --leader-elect-resource-namespace is not given).",
        );
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/reference/controller-cli.md");
        if let Err(e) = clidoc::check_or_write(&path, &md) {
            panic!("{e}");
        }
    }

    #[test]
    fn condition_types() {
        for ok in [
            "sandbox-readiness.io/SandboxReady",
            "Ready",
            "a.b/C_d.e-f",
            "x/y",
        ] {
            assert!(valid_condition_type(ok), "{ok}");
        }
        for bad in [
            "",
            "/Ready",
            "Bad_Prefix/Ready",
            "a/-x",
            "a/b/",
            "sandbox readiness",
            &"a".repeat(64),
        ] {
            assert!(!valid_condition_type(bad), "{bad}");
        }
    }
}
