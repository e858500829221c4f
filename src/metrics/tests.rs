use std::time::Duration;

use super::*;
use crate::proto::v1::{
    CriRuntime, Gvisor, NodeIdentity, RuntimeHandler, Sysctl, SysctlExpectation, UserNamespaces,
};

fn sysctl(name: &str, state: SysctlState, value: &str) -> Sysctl {
    Sysctl {
        name: name.into(),
        state: state as i32,
        value: value.into(),
        ..Sysctl::default()
    }
}

fn probe(outcome: ProbeOutcome, millis: i32) -> Option<Probe> {
    Some(Probe {
        outcome: outcome as i32,
        duration: Some(pbjson_types::Duration {
            seconds: 0,
            nanos: millis * 1_000_000,
        }),
        ..Probe::default()
    })
}

fn report(limit: &str) -> Report {
    Report {
        generation: 7,
        node: Some(NodeIdentity {
            kernel_release: "6.12.0-talos \"x\"".into(),
            ..NodeIdentity::default()
        }),
        user_namespaces: Some(UserNamespaces {
            sysctls: vec![
                sysctl("user.max_user_namespaces", SysctlState::Present, limit),
                sysctl("user.max_mnt_namespaces", SysctlState::Withheld, ""),
                sysctl("user.max_net_namespaces", SysctlState::Present, "many"),
                sysctl("user.max_pid_namespaces", SysctlState::Unreadable, "5"),
                sysctl("kernel.pid_max", SysctlState::Present, "4194304"),
            ],
            initial_user_namespace: true,
            userns_create: probe(ProbeOutcome::Passed, 3),
            idmap_mount: probe(ProbeOutcome::Failed, 250),
            ..UserNamespaces::default()
        }),
        gvisor: Some(Gvisor {
            readiness: GvisorReadiness::NotInstalled as i32,
            cri: Some(CriRuntime {
                reachable: true,
                handlers_source: crate::observe::cri::SOURCE_RUNTIME_HANDLERS.into(),
                handlers: vec![RuntimeHandler {
                    name: "runc".into(),
                    user_namespaces: Some(true),
                    ..RuntimeHandler::default()
                }],
                ..CriRuntime::default()
            }),
            ..Gvisor::default()
        }),
        ..Report::default()
    }
}

fn defaults(limit: &str) -> DesiredState {
    DesiredState {
        sysctls: vec![SysctlExpectation {
            name: "user.max_user_namespaces".into(),
            value: limit.into(),
        }],
        ..DesiredState::default()
    }
}

/// The value of the one line starting with `series ` (name and labels).
fn value(text: &str, series: &str) -> Option<String> {
    let mut found = text
        .lines()
        .filter_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_string);
    let v = found.next();
    assert!(found.next().is_none(), "{series} twice:\n{text}");
    v
}

#[test]
fn converged_and_findings_follow_the_defaults() {
    let stats = AgentStats::default();
    let text = render(&report("11255"), &defaults("11255"), &stats);
    let g = |s: &str| value(&text, &format!("{PREFIX}{s}"));
    assert_eq!(g("converged").as_deref(), Some("1"), "{text}");
    assert_eq!(
        g("findings{code=\"SYSCTL_MISMATCH\"}").as_deref(),
        Some("0")
    );

    let text = render(&report("0"), &defaults("11255"), &stats);
    let g = |s: &str| value(&text, &format!("{PREFIX}{s}"));
    assert_eq!(g("converged").as_deref(), Some("0"), "{text}");
    assert_eq!(
        g("findings{code=\"SYSCTL_MISMATCH\"}").as_deref(),
        Some("1")
    );
    // One series per code, whether or not it occurs.
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with(&format!("{PREFIX}findings{{")))
            .count(),
        FindingCode::ALL.len()
    );
}

#[test]
fn only_present_numeric_namespace_limits_are_served() {
    let text = render(
        &report("11255"),
        &DesiredState::default(),
        &AgentStats::default(),
    );
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{PREFIX}sysctl_value{{")))
        .collect();
    assert_eq!(
        series,
        [format!(
            "{PREFIX}sysctl_value{{name=\"user.max_user_namespaces\"}} 11255"
        )],
        "{text}"
    );
}

#[test]
fn probes_gvisor_cri_and_build_info() {
    let text = render(
        &report("1"),
        &DesiredState::default(),
        &AgentStats::default(),
    );
    let g = |s: &str| value(&text, &format!("{PREFIX}{s}"));
    assert_eq!(
        g("probe_outcome{probe=\"userns_create\",outcome=\"passed\"}").as_deref(),
        Some("1")
    );
    assert_eq!(
        g("probe_outcome{probe=\"userns_create\",outcome=\"failed\"}").as_deref(),
        Some("0")
    );
    assert_eq!(
        g("probe_outcome{probe=\"idmap_mount\",outcome=\"failed\"}").as_deref(),
        Some("1")
    );
    // Not run: every outcome 0, no duration.
    assert_eq!(
        g("probe_outcome{probe=\"sandbox\",outcome=\"passed\"}").as_deref(),
        Some("0")
    );
    assert_eq!(g("probe_duration_seconds{probe=\"sandbox\"}"), None);
    assert_eq!(
        g("probe_duration_seconds{probe=\"idmap_mount\"}").as_deref(),
        Some("0.25")
    );
    assert_eq!(
        g("gvisor_readiness{state=\"not_installed\"}").as_deref(),
        Some("1")
    );
    assert_eq!(g("gvisor_readiness{state=\"ready\"}").as_deref(), Some("0"));
    assert_eq!(g("cri_reachable").as_deref(), Some("1"));
    assert_eq!(g("report_generation").as_deref(), Some("7"));
    let info = text
        .lines()
        .find(|l| l.starts_with(&format!("{PREFIX}build_info{{")))
        .unwrap_or_default();
    assert!(info.contains("kernel=\"6.12.0-talos \\\"x\\\"\""), "{info}");
    assert!(info.ends_with(" 1"), "{info}");
    // Not asked for: no pod-userns family.
    assert!(!text.contains("pod_userns_supported"), "{text}");
}

#[test]
fn pod_userns_per_handler_when_the_defaults_ask() {
    let d = DesiredState {
        require_pod_userns: vec!["runc".into(), "runsc".into()],
        ..DesiredState::default()
    };
    let text = render(&report("1"), &d, &AgentStats::default());
    let g = |s: &str| value(&text, &format!("{PREFIX}{s}"));
    assert_eq!(
        g("pod_userns_supported{handler=\"runc\"}").as_deref(),
        Some("1")
    );
    assert_eq!(
        g("pod_userns_supported{handler=\"runsc\"}").as_deref(),
        Some("0")
    );
}

#[test]
fn canaries_per_handler_only_once_one_ran() {
    let none = render(
        &report("1"),
        &DesiredState::default(),
        &AgentStats::default(),
    );
    assert!(!none.contains("canary_outcome"), "{none}");

    let mut r = report("1");
    r.canaries = vec![
        crate::proto::v1::Canary {
            handler: "runc".into(),
            result: probe(ProbeOutcome::Passed, 120),
            ..Default::default()
        },
        crate::proto::v1::Canary {
            handler: "runsc".into(),
            result: probe(ProbeOutcome::Failed, 40),
            ..Default::default()
        },
    ];
    let stats = AgentStats {
        canaries: 2,
        ..AgentStats::default()
    };
    let text = render(&r, &DesiredState::default(), &stats);
    let g = |s: &str| value(&text, &format!("{PREFIX}{s}"));
    for (series, want) in [
        ("canary_outcome{handler=\"runc\",outcome=\"passed\"}", "1"),
        ("canary_outcome{handler=\"runc\",outcome=\"failed\"}", "0"),
        ("canary_outcome{handler=\"runsc\",outcome=\"failed\"}", "1"),
        (
            "canary_outcome{handler=\"runsc\",outcome=\"inconclusive\"}",
            "0",
        ),
        ("canary_duration_seconds{handler=\"runc\"}", "0.12"),
        ("canaries_total", "2"),
    ] {
        assert_eq!(g(series).as_deref(), Some(want), "{series}\n{text}");
    }
}

#[test]
fn histogram_counts_land_in_their_bucket_and_accumulate() {
    let h = DurationHistogram::default();
    h.observe(Duration::from_millis(3));
    h.observe(Duration::from_millis(200));
    h.observe(Duration::from_secs(60));
    let s = h.snapshot();
    assert_eq!(s.count, 3);
    assert_eq!(s.buckets[0], (0.005, 1));
    assert_eq!(s.buckets[4], (0.1, 1));
    assert_eq!(s.buckets[5], (0.25, 2));
    assert_eq!(s.buckets[9], (10.0, 2));
    assert!((s.sum_seconds - 60.203).abs() < 1e-9, "{}", s.sum_seconds);

    let stats = AgentStats {
        observations: 4,
        observation_duration: s,
        ..AgentStats::default()
    };
    let text = render(&report("1"), &DesiredState::default(), &stats);
    let g = |s: &str| value(&text, &format!("{PREFIX}{s}"));
    assert_eq!(g("observations_total").as_deref(), Some("4"));
    assert_eq!(
        g("observation_duration_seconds_bucket{le=\"0.25\"}").as_deref(),
        Some("2")
    );
    assert_eq!(
        g("observation_duration_seconds_bucket{le=\"+Inf\"}").as_deref(),
        Some("3")
    );
    assert_eq!(
        g("observation_duration_seconds_count").as_deref(),
        Some("3")
    );
}

#[test]
fn every_family_is_declared_once_before_its_samples() {
    let text = render(&report("1"), &defaults("1"), &AgentStats::default());
    let mut declared: Vec<String> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or_default().to_string();
            assert!(!declared.contains(&name), "{name} declared twice");
            assert!(name.starts_with(PREFIX), "{name}");
            declared.push(name);
        } else if !line.starts_with('#') {
            let family = declared.last().expect("a sample before any TYPE");
            assert!(line.starts_with(family.as_str()), "{line} outside {family}");
        }
    }
}

#[test]
fn the_node_writer_families_appear_only_with_the_writer() {
    let none = render(
        &report("1"),
        &DesiredState::default(),
        &AgentStats::default(),
    );
    assert!(!none.contains("node_write"), "{none}");
    let stats = AgentStats {
        node_writer: Some(crate::metrics::NodeWriterStats {
            writes: 3,
            failures: vec![("forbidden", 2), ("timeout", 1)],
            last_success: Some(1_764_633_600.0),
        }),
        ..AgentStats::default()
    };
    let text = render(&report("1"), &DesiredState::default(), &stats);
    let g = |s: &str| value(&text, &format!("{PREFIX}{s}"));
    assert_eq!(g("node_writes_total").as_deref(), Some("3"));
    assert_eq!(
        g("node_write_failures_total{reason=\"forbidden\"}").as_deref(),
        Some("2")
    );
    assert_eq!(
        g("node_write_failures_total{reason=\"timeout\"}").as_deref(),
        Some("1")
    );
    assert!(
        g("node_last_write_success_timestamp_seconds").is_some(),
        "{text}"
    );
}
