//! The Helm chart (charts/sandbox-readiness-controller) with Helm v4 built
//! from its module (scripts/build-helm.sh; `SR_HELM_BIN`, which the test
//! command exports): `helm lint`; deploy/ is its rendering; every object it
//! renders with every option on passes the real kube-apiserver (CAPI's and
//! the Prometheus Operator's CRDs registered) in a server-side dry run;
//! `helm install` on the real management cluster, the controller run as the
//! chart's Deployment runs it (its arguments, its ServiceAccount's token)
//! gating a Machine; `helm upgrade`; `helm uninstall` leaving nothing of the
//! release. No kubelet runs in the management cluster here, so the
//! Deployment's pods never start: the binary runs in their place.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::Value;

use crate::common::{by_controller, code, Env};

const CHART: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../charts/sandbox-readiness-controller"
);

fn helm() -> PathBuf {
    let dir = std::env::var("SR_HELM_BIN").unwrap_or_else(|_| {
        let out = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/build-helm.sh"
        ))
        .arg("path")
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "no helm: {} (scripts/build-helm.sh builds it; the test command exports SR_HELM_BIN)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    });
    Path::new(&dir).join("helm")
}

/// `helm ARGS` against the cluster of `kubeconfig`: stdout; fails the test
/// with stderr.
fn run_helm(kubeconfig: Option<&Path>, args: &[&str]) -> String {
    let mut cmd = Command::new(helm());
    if let Some(k) = kubeconfig {
        cmd.arg("--kubeconfig").arg(k);
    }
    // Helm's own state (repositories, cache) in a directory of the test's.
    let home = tempfile::tempdir().unwrap();
    let out = cmd
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn docs(yaml: &str) -> Vec<Value> {
    format!("\n{yaml}")
        .split("\n---")
        .filter_map(|d| serde_yaml_ng::from_str::<Value>(d).ok())
        .filter(|v| !v.is_null())
        .collect()
}

/// Every option on.
const ALL: &[&str] = &[
    "--set",
    "image.repository=registry.example.com/platform/sandbox-readiness-controller",
    "--set",
    "image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000",
    "--set",
    "replicas=3",
    "--set",
    "priorityClassName=system-cluster-critical",
    "--set",
    "httpListen=[::]:9090",
    "--set",
    "extraArgs={--stale-after=20m}",
    "--set",
    "logLevel=debug",
    "--set",
    "logFormat=json",
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "metrics.prometheusRule.labels.release=kube-prometheus-stack",
];

#[test]
fn the_chart_lints_and_deploy_is_its_rendering() {
    run_helm(None, &["lint", "--strict", CHART]);
    let mut args = vec!["lint", "--strict", CHART];
    args.extend_from_slice(ALL);
    run_helm(None, &args);
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/render-deploy.sh"
    ))
    .arg("--check")
    .env("HELM", helm())
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The options reach the objects.
    let mut args = vec!["template", "r1", CHART, "--namespace", "ns1"];
    args.extend_from_slice(ALL);
    let objects = docs(&run_helm(None, &args));
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for want in [
        "PodDisruptionBudget",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
        "Deployment",
    ] {
        assert!(kinds.contains(&want), "{want}: {kinds:?}");
    }
    let dep = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        "registry.example.com/platform/sandbox-readiness-controller@sha256:0000000000000000000000000000000000000000000000000000000000000000"
    );
    assert_eq!(dep["spec"]["replicas"], 3);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for want in [
        "--http-listen=[::]:9090",
        "--stale-after=20m",
        "--leader-elect=true",
    ] {
        assert!(args.contains(&want), "{want}: {args:?}");
    }
    let sm = objects
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor")
        .unwrap();
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
}

/// Every object of the chart with every option on, dry-run server-side on
/// the real kube-apiserver with CAPI's and the Prometheus Operator's CRDs.
#[test]
fn every_object_the_chart_renders_passes_the_real_server() {
    let env = Env::with_private_management();
    env.mgmt.register_prometheus_operator_crds();
    env.mgmt
        .kubectl_ok(&["create", "namespace", "chart-dry-run"], None);
    let mut args = vec!["template", "r1", CHART, "--namespace", "chart-dry-run"];
    args.extend_from_slice(ALL);
    let rendered = run_helm(None, &args);
    let n = docs(&rendered).len();
    assert!(n >= 10, "only {n} objects");
    let out = env.mgmt.kubectl_ok(
        &["apply", "--dry-run=server", "-f", "-", "-o", "name"],
        Some(&rendered),
    );
    assert_eq!(out.lines().count(), n, "{out}");
}

/// Everything of release `release` the server still has: (kind, namespace/name).
fn left_of(env: &Env, release: &str) -> Vec<String> {
    let (_, out, _) = env.mgmt.kubectl(&[
        "get",
        "serviceaccounts,deployments,services,poddisruptionbudgets,roles,rolebindings,clusterroles,clusterrolebindings,secrets",
        "-A",
        "-l",
        &format!("app.kubernetes.io/instance={release}"),
        "-o",
        "name",
    ]);
    let (_, releases, _) = env.mgmt.kubectl(&[
        "get",
        "secrets",
        "-A",
        "-l",
        &format!("owner=helm,name={release}"),
        "-o",
        "name",
    ]);
    out.lines()
        .chain(releases.lines())
        .map(str::to_string)
        .collect()
}

/// `helm install` on the real management cluster (CAPI running), the
/// controller run with the chart's arguments and its ServiceAccount's
/// token gating a Machine; `helm upgrade` changes what it says; `helm
/// uninstall` leaves nothing of the release.
#[test]
fn the_chart_installs_gates_upgrades_and_uninstalls() {
    let env = Env::with_private_management();
    let kc = env.mgmt_kubeconfig.clone();
    let release = "sr";
    run_helm(
        Some(&kc),
        &[
            "install",
            release,
            CHART,
            "--namespace",
            "sandbox-readiness-system",
            "--create-namespace",
        ],
    );
    let manifest = docs(&run_helm(
        Some(&kc),
        &[
            "get",
            "manifest",
            release,
            "--namespace",
            "sandbox-readiness-system",
        ],
    ));
    let dep = manifest.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &dep["spec"]["template"]["spec"];
    let sa = pod["serviceAccountName"].as_str().unwrap();
    assert_eq!(sa, "sr-sandbox-readiness-controller");
    let args: Vec<String> = pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        // Another port than the chart's: tests run side by side.
        .filter(|a| !a.starts_with("--http-listen") && !a.starts_with("--condition-type"))
        .map(str::to_string)
        .collect();
    let token = env
        .mgmt
        .service_account_token("sandbox-readiness-system", sa);
    let sa_kc = env
        .mgmt
        .token_kubeconfig(&token, &env.dir.path().join("sa.kubeconfig"));
    let sysctl = ("user.max_user_namespaces", "11255");
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[sysctl], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[sysctl]);
    let mark = env.mgmt.audit_mark();
    let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
    argv.extend([
        "--leader-elect-resource-namespace",
        "sandbox-readiness-system",
    ]);
    let ctl = env.controller_as(&sa_kc, &argv, &[("POD_NAME", "sr-0")]);
    env.wait_status("m1", "True", Duration::from_secs(60));
    env.agent_writes("w1", "False", "SysctlMismatch", &[sysctl]);
    env.wait_status("m1", "False", Duration::from_secs(30));
    let writes = env.mgmt.audit_writes_since(mark, by_controller);
    let denied: Vec<&Value> = writes.iter().filter(|w| code(w) == 403).collect();
    assert!(
        denied.is_empty(),
        "the chart's RBAC refused: {denied:#?}\n{}",
        ctl.log()
    );
    for w in &writes {
        assert_eq!(
            w["user"]["username"],
            format!("system:serviceaccount:sandbox-readiness-system:{sa}"),
            "{w:#}"
        );
    }
    drop(ctl);

    // An upgrade: three replicas, no PodDisruptionBudget.
    run_helm(
        Some(&kc),
        &[
            "upgrade",
            release,
            CHART,
            "--namespace",
            "sandbox-readiness-system",
            "--set",
            "replicas=3",
            "--set",
            "podDisruptionBudget.enabled=false",
        ],
    );
    let got = env
        .mgmt
        .get("/apis/apps/v1/namespaces/sandbox-readiness-system/deployments/sr-sandbox-readiness-controller")
        .unwrap();
    assert_eq!(got["spec"]["replicas"], 3);
    assert!(env
        .mgmt
        .get("/apis/policy/v1/namespaces/sandbox-readiness-system/poddisruptionbudgets/sr-sandbox-readiness-controller")
        .is_none());

    // Uninstalled: nothing of the release is left (the namespace is the
    // operator's, as `--create-namespace` leaves it).
    assert!(!left_of(&env, release).is_empty());
    run_helm(
        Some(&kc),
        &[
            "uninstall",
            release,
            "--namespace",
            "sandbox-readiness-system",
            "--wait",
        ],
    );
    let left = left_of(&env, release);
    assert!(left.is_empty(), "left after helm uninstall: {left:?}");
}

/// The promtool of the test cache (Debian bookworm's Prometheus).
fn promtool() -> PathBuf {
    let cache = std::env::var_os("SR_TEST_CACHE")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/sandbox-readiness-tests"));
    let p = cache.join("prometheus-bookworm/usr/bin/promtool");
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-test-deps.sh",
        p.display()
    );
    p
}

/// `promtool ARGS` in `dir`: fails the test with its output unless it
/// succeeds; returns its stdout.
fn run_promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// The management cluster's rules (the chart's PrometheusRule, rendered with
/// its default labels): `promtool check rules` on its groups, and a unit
/// test of the no-leader alert with series that fire it and series that do
/// not.
#[test]
fn the_management_rules_pass_promtool() {
    let rendered = run_helm(
        None,
        &[
            "template",
            "r",
            CHART,
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ],
    );
    let rule = docs(&rendered).into_iter().next().unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    // kube-prometheus-stack's selector label, by default.
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let dir = tempfile::tempdir().unwrap();
    let groups = serde_json::json!({"groups": rule["spec"]["groups"]});
    std::fs::write(
        dir.path().join("management.rules.yaml"),
        serde_yaml_ng::to_string(&groups).unwrap(),
    )
    .unwrap();
    let out = run_promtool(dir.path(), &["check", "rules", "management.rules.yaml"]);
    let rules: usize = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rules"].as_array().unwrap().len())
        .sum();
    assert!(
        out.contains(&format!("SUCCESS: {rules} rules found")),
        "{out}"
    );
    std::fs::write(
        dir.path().join("management.test.yaml"),
        r#"rule_files: [management.rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # Two replicas, one leading, until the leader's series stops at 10m.
      - series: 'sandbox_readiness_controller_leader{pod="a"}'
        values: '1x10 _x30'
      - series: 'sandbox_readiness_controller_leader{pod="b"}'
        values: '0x40'
    alert_rule_test:
      - eval_time: 9m
        alertname: SandboxReadinessControllerNoLeader
        exp_alerts: []
      - eval_time: 25m
        alertname: SandboxReadinessControllerNoLeader
        exp_alerts:
          - exp_labels: {severity: critical}
            exp_annotations:
              summary: No replica of the sandbox-readiness controller leads; no Machine condition is written and gated rollouts stall.
  - interval: 1m
    input_series:
      - series: 'sandbox_readiness_controller_leader{pod="a"}'
        values: '0x40'
      - series: 'sandbox_readiness_controller_leader{pod="b"}'
        values: '1x40'
    alert_rule_test:
      - eval_time: 30m
        alertname: SandboxReadinessControllerNoLeader
        exp_alerts: []
"#,
    )
    .unwrap();
    run_promtool(dir.path(), &["test", "rules", "management.test.yaml"]);
}
