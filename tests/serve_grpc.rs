//! `serve` over real loopback sockets: the API, health, reflection, Watch on
//! a real sysctl change, refresh coalescing, hostile requests and SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::Agent;
use sandbox_readiness::proto::v1::{
    readiness_service_client::ReadinessServiceClient, CheckRequest, DesiredState, GetReportRequest,
    SysctlExpectation, WatchRequest,
};
use tokio_stream::StreamExt;

async fn client(agent: &Agent) -> ReadinessServiceClient<tonic::transport::Channel> {
    ReadinessServiceClient::connect(agent.url())
        .await
        .expect("connect")
}

fn limit_of(report: &sandbox_readiness::proto::v1::Report) -> String {
    sandbox_readiness::report::find_sysctl(report, "user.max_user_namespaces")
        .map(|s| s.value.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn get_report_and_check_with_and_without_a_desired_state() {
    let agent = Agent::start(
        Some(0),
        &[
            "--sysctl",
            "user.max_user_namespaces=11255",
            "--require-userns",
        ],
    );
    let mut c = client(&agent).await;

    let r = c
        .get_report(GetReportRequest::default())
        .await
        .expect("GetReport")
        .into_inner();
    let report = r.report.expect("report");
    assert_eq!(limit_of(&report), "0");
    assert!(report.generation >= 1);
    assert_eq!(report.fingerprint.len(), 32);
    assert!(
        !report
            .user_namespaces
            .as_ref()
            .expect("userns")
            .initial_user_namespace
    );

    // Empty desired state: the agent's defaults (from its flags) apply.
    let v = c
        .check(CheckRequest::default())
        .await
        .expect("Check")
        .into_inner();
    let verdict = v.verdict.expect("verdict");
    assert!(!verdict.converged);
    let codes: Vec<_> = verdict.findings.iter().map(|f| f.code.as_str()).collect();
    assert!(
        codes.contains(&"SYSCTL_MISMATCH") && codes.contains(&"USERNS_CREATE_FAILED"),
        "{codes:?}"
    );

    // An explicit desired state replaces the defaults; an extra sysctl is read on demand.
    let desired = DesiredState {
        sysctls: vec![
            SysctlExpectation {
                name: "user.max_user_namespaces".into(),
                value: "0".into(),
            },
            SysctlExpectation {
                name: "kernel.ostype".into(),
                value: "Linux".into(),
            },
        ],
        ..DesiredState::default()
    };
    let v = c
        .check(CheckRequest {
            desired: Some(desired),
            refresh: true,
            ..CheckRequest::default()
        })
        .await
        .expect("Check")
        .into_inner();
    let verdict = v.verdict.expect("verdict");
    assert!(verdict.converged, "{:?}", verdict.findings);
    assert!(v
        .report
        .expect("report")
        .sysctls
        .iter()
        .any(|s| s.name == "kernel.ostype"));
}

#[tokio::test]
async fn hostile_requests_are_refused_cleanly() {
    let agent = Agent::start(None, &[]);
    let mut c = client(&agent).await;
    for name in ["../../etc/shadow", "user..x", "user.max user", ""] {
        let desired = DesiredState {
            sysctls: vec![SysctlExpectation {
                name: name.into(),
                value: "1".into(),
            }],
            ..DesiredState::default()
        };
        let err = c
            .check(CheckRequest {
                desired: Some(desired),
                refresh: false,
                ..CheckRequest::default()
            })
            .await
            .expect_err("hostile name accepted");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{name:?}: {err}");
    }
    let many = DesiredState {
        sysctls: (0..65)
            .map(|i| SysctlExpectation {
                name: format!("kernel.x{i}"),
                value: "1".into(),
            })
            .collect(),
        ..DesiredState::default()
    };
    let err = c
        .check(CheckRequest {
            desired: Some(many),
            refresh: false,
            ..CheckRequest::default()
        })
        .await
        .expect_err("65 accepted");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    // Oversized message: over the decoding limit.
    let huge = DesiredState {
        require_runtime_handlers: vec!["x".repeat(100 * 1024)],
        ..DesiredState::default()
    };
    let err = c
        .check(CheckRequest {
            desired: Some(huge),
            refresh: false,
            ..CheckRequest::default()
        })
        .await
        .expect_err("huge accepted");
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");
    // The agent still answers.
    c.get_report(GetReportRequest::default())
        .await
        .expect("still serving");
}

#[tokio::test]
async fn health_and_reflection_v1_and_v1alpha() {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let agent = Agent::start(None, &[]);
    let channel = tonic::transport::Endpoint::from_shared(agent.url())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut h = HealthClient::new(channel.clone());
    let resp = h
        .check(HealthCheckRequest {
            service: "sandbox_readiness.v1.ReadinessService".into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(resp.status, 1, "SERVING");

    // Both reflection versions, through the same steps (grpcurl ≥ 1.8.8
    // speaks v1, older ones v1alpha).
    macro_rules! list_services {
        ($version:ident) => {{
            use tonic_reflection::pb::$version::{
                server_reflection_client::ServerReflectionClient,
                server_reflection_request::MessageRequest,
                server_reflection_response::MessageResponse, ServerReflectionRequest,
            };
            let mut r = ServerReflectionClient::new(channel.clone());
            let req = ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::ListServices(String::new())),
            };
            let mut stream = r
                .server_reflection_info(tokio_stream::iter(vec![req]))
                .await
                .expect(stringify!($version))
                .into_inner();
            let msg = stream.next().await.expect("answer").expect("ok");
            let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
                panic!("unexpected answer")
            };
            list.service.into_iter().map(|s| s.name).collect::<Vec<_>>()
        }};
    }
    for names in [list_services!(v1), list_services!(v1alpha)] {
        assert!(
            names
                .iter()
                .any(|n| n == "sandbox_readiness.v1.ReadinessService"),
            "{names:?}"
        );
        assert!(
            names.iter().any(|n| n == "grpc.health.v1.Health"),
            "{names:?}"
        );
    }
}

#[tokio::test]
async fn grpcurl_lists_the_services_without_the_proto_file() {
    let grpcurl = common::on_path("grpcurl")
        .expect("grpcurl is not installed (scripts/install-test-deps.sh installs it)");
    let agent = Agent::start(None, &[]);
    let out = tokio::process::Command::new(grpcurl)
        .args(["-plaintext", &agent.addr.to_string(), "list"])
        .output()
        .await
        .expect("grpcurl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("sandbox_readiness.v1.ReadinessService"),
        "{text}"
    );
    assert!(text.contains("grpc.health.v1.Health"), "{text}");
}

#[tokio::test]
async fn watch_sees_a_real_sysctl_change_within_3s_and_is_quiet_otherwise() {
    let agent = Agent::start(Some(11255), &["--heartbeat", "60s"]);
    let mut c = client(&agent).await;
    let mut stream = c
        .watch(WatchRequest::default())
        .await
        .expect("Watch")
        .into_inner();
    let first = stream.next().await.expect("first").expect("ok");
    let first = first.report.expect("report");
    assert_eq!(limit_of(&first), "11255");

    // Nothing changes: nothing is sent (the heartbeat is 60 s away).
    let quiet = tokio::time::timeout(Duration::from_secs(3), stream.next()).await;
    assert!(
        quiet.is_err(),
        "a report was sent although nothing changed: {quiet:?}"
    );

    let changed_at = Instant::now();
    agent.set_limit(0);
    let next = tokio::time::timeout(Duration::from_secs(3), stream.next())
        .await
        .expect("no new report within 3 s")
        .expect("stream open")
        .expect("ok");
    let seen = changed_at.elapsed();
    let report = next.report.expect("report");
    assert!(!next.heartbeat);
    assert_eq!(limit_of(&report), "0");
    assert!(report.generation > first.generation);
    let probe = report
        .user_namespaces
        .expect("userns")
        .userns_create
        .expect("probe");
    assert_eq!(
        probe.errno_name, "ENOSPC",
        "the probe reran with the change"
    );
    eprintln!("change seen by the watcher after {seen:?}");
}

#[tokio::test]
async fn a_thousand_concurrent_refreshes_share_at_most_two_observations() {
    let agent = Agent::start(None, &[]);
    let channel = tonic::transport::Endpoint::from_shared(agent.url())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let before = ReadinessServiceClient::new(channel.clone())
        .get_report(GetReportRequest::default())
        .await
        .expect("GetReport")
        .into_inner()
        .report
        .and_then(|r| r.agent)
        .map(|a| a.observations)
        .expect("observations");
    // A refresh is answered from an observation that started less than
    // --min-refresh-interval (1 s) before it: wait until the startup
    // observation (which started at its observed_at) is past that, or the
    // burst is answered from it and no refresh runs at all.
    let startup = ReadinessServiceClient::new(channel.clone())
        .get_report(GetReportRequest::default())
        .await
        .expect("GetReport")
        .into_inner()
        .report
        .and_then(|r| r.observed_at)
        .expect("observed_at");
    let stale_at = std::time::UNIX_EPOCH
        + Duration::new(startup.seconds as u64, startup.nanos as u32)
        + Duration::from_millis(1010);
    if let Ok(left) = stale_at.duration_since(std::time::SystemTime::now()) {
        tokio::time::sleep(left).await;
    }
    let burst = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..1000 {
        let mut c = ReadinessServiceClient::new(channel.clone());
        tasks.spawn(async move {
            c.check(CheckRequest {
                desired: None,
                refresh: true,
                ..CheckRequest::default()
            })
            .await
        });
    }
    let mut answered = 0;
    while let Some(r) = tasks.join_next().await {
        r.expect("task").expect("Check answered");
        answered += 1;
    }
    assert_eq!(answered, 1000);
    let took = burst.elapsed();
    let after = ReadinessServiceClient::new(channel)
        .get_report(GetReportRequest::default())
        .await
        .expect("GetReport")
        .into_inner()
        .report
        .and_then(|r| r.agent)
        .map(|a| a.observations)
        .expect("observations");
    // No observation starts sooner than --min-refresh-interval (1 s) after
    // the one before it: over a burst of `took`, at most one at its start,
    // one per whole second of it, and one the periodic poll may have begun
    // (the bound follows the burst's own length, so a slow machine that
    // stretches the burst does not fail the test, and coalescing still must
    // hold: 1,000 refreshes, a handful of observations).
    let allowed = 2 + took.as_secs();
    assert!(
        after - before <= allowed,
        "{before} → {after} over a burst of {took:?} (at most {allowed}): refreshes were not coalesced"
    );
    assert!(after > before, "no refresh ran at all");
}

#[tokio::test]
async fn sigterm_with_watchers_exits_within_a_second_with_status_0() {
    let mut agent = Agent::start(None, &[]);
    let mut streams = Vec::new();
    for _ in 0..5 {
        let mut c = client(&agent).await;
        let mut s = c
            .watch(WatchRequest::default())
            .await
            .expect("Watch")
            .into_inner();
        s.next().await.expect("first").expect("ok");
        streams.push(s);
    }
    let pid = agent.child.id();
    let start = Instant::now();
    // SAFETY: sends SIGTERM to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(status) = agent.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "still running after 2 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let took = start.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
}
