//! Cheap polling against real agents: `GetReport` and `Check` answer
//! "unchanged" without a body while the caller's token holds, and in full
//! when the node changed (a real sysctl flip in the agent's user namespace),
//! when the question differs, or when the token is not one the agent gave;
//! Watch heartbeats carry no report; the library's `Poller` uses tokens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Agent, AgentSpec};
use sandbox_readiness::{
    fleet::{
        client::{Client, ClientOptions},
        nodes::parse_entry,
        poll::Poller,
    },
    proto::v1::{
        readiness_service_client::ReadinessServiceClient, CheckRequest, CheckResponse,
        DesiredState, GetReportRequest, GetReportResponse, SysctlExpectation, WatchRequest,
    },
};
use tonic::transport::Channel;

const FLIP: Duration = Duration::from_secs(10);

/// Polls `f` until it gives something; fails the test after `within`.
async fn until<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn client(agent: &Agent) -> ReadinessServiceClient<Channel> {
    ReadinessServiceClient::new(common::connect(&agent.url()).await)
}

fn limit_of(report: &sandbox_readiness::proto::v1::Report) -> String {
    sandbox_readiness::report::find_sysctl(report, "user.max_user_namespaces")
        .map(|s| s.value.clone())
        .unwrap_or_default()
}

async fn get(
    c: &mut ReadinessServiceClient<Channel>,
    token: &str,
    refresh: bool,
) -> GetReportResponse {
    c.get_report(GetReportRequest {
        refresh,
        if_changed_from: token.into(),
        ..GetReportRequest::default()
    })
    .await
    .expect("GetReport")
    .into_inner()
}

fn sysctls(pairs: &[(&str, &str)]) -> DesiredState {
    DesiredState {
        sysctls: pairs
            .iter()
            .map(|(n, v)| SysctlExpectation {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..DesiredState::default()
    }
}

async fn check(
    c: &mut ReadinessServiceClient<Channel>,
    desired: Option<DesiredState>,
    token: &str,
) -> CheckResponse {
    c.check(CheckRequest {
        desired,
        if_changed_from: token.into(),
        ..CheckRequest::default()
    })
    .await
    .expect("Check")
    .into_inner()
}

fn assert_full(r: &CheckResponse, what: &str) {
    assert!(
        !r.unchanged && r.report.is_some() && r.verdict.is_some() && r.token.len() == 16,
        "{what}: {r:?}"
    );
}

#[tokio::test]
async fn get_report_is_unchanged_while_the_token_holds() {
    let agent = Agent::spawn(AgentSpec::pool_member(11255));
    let mut c = client(&agent).await;

    let first = get(&mut c, "", false).await;
    assert!(!first.unchanged);
    assert_eq!(limit_of(first.report.as_ref().unwrap()), "11255");
    let token = first.token.clone();
    assert_eq!(token.len(), 16, "{token:?}");

    let same = get(&mut c, &token, false).await;
    assert!(same.unchanged, "{same:?}");
    assert!(same.report.is_none());
    assert_eq!(same.token, token);
    // A refresh observes again, then compares.
    let refreshed = get(&mut c, &token, true).await;
    assert!(
        refreshed.unchanged && refreshed.report.is_none(),
        "{refreshed:?}"
    );

    // Not a token this agent gave: the full answer, never an error.
    for bogus in [
        "nope",
        "0000000000000000",
        &token.to_uppercase(),
        &token[..15],
    ] {
        let r = get(&mut c, bogus, false).await;
        assert!(!r.unchanged && r.report.is_some(), "{bogus:?}: {r:?}");
        assert_eq!(r.token, token, "{bogus:?}");
    }

    // The node changes: the old token no longer holds.
    agent.set_limit(0);
    let changed = until(FLIP, "GetReport to see the new limit", || {
        let (mut c, token) = (c.clone(), token.clone());
        async move { Some(get(&mut c, &token, false).await).filter(|r| !r.unchanged) }
    })
    .await;
    assert_eq!(limit_of(changed.report.as_ref().unwrap()), "0");
    assert_ne!(changed.token, token);
    assert!(get(&mut c, &changed.token, false).await.unchanged);
}

#[tokio::test]
async fn a_check_token_covers_the_report_and_the_question() {
    let agent = Agent::spawn(AgentSpec::pool_member(11255));
    let mut c = client(&agent).await;
    let want = sysctls(&[("user.max_user_namespaces", "11255")]);

    let first = check(&mut c, Some(want.clone()), "").await;
    assert_full(&first, "first");
    assert!(first.verdict.as_ref().unwrap().converged);
    let token = first.token.clone();

    let same = check(&mut c, Some(want.clone()), &token).await;
    assert!(
        same.unchanged && same.report.is_none() && same.verdict.is_none(),
        "{same:?}"
    );
    assert_eq!(same.token, token);

    // Another question with the same token: the full answer.
    let other = check(
        &mut c,
        Some(sysctls(&[("user.max_user_namespaces", "0")])),
        &token,
    )
    .await;
    assert_full(&other, "another value");
    assert!(!other.verdict.unwrap().converged);
    let more = check(
        &mut c,
        Some(sysctls(&[
            ("user.max_user_namespaces", "11255"),
            ("kernel.ostype", "Linux"),
        ])),
        &token,
    )
    .await;
    assert_full(&more, "one more sysctl");
    let stricter = DesiredState {
        require_userns: true,
        ..want.clone()
    };
    assert_full(
        &check(&mut c, Some(stricter), &token).await,
        "require_userns",
    );
    // The agent's defaults (none here) are another question too.
    assert_full(&check(&mut c, None, &token).await, "the defaults");
    // A GetReport token is not a Check token; nor is garbage.
    let report_token = get(&mut c, "", false).await.token;
    assert_full(
        &check(&mut c, Some(want.clone()), &report_token).await,
        "GetReport's token",
    );
    assert_full(
        &check(&mut c, Some(want.clone()), "garbage").await,
        "garbage",
    );

    // The node changes under the same question. (Asking about another
    // sysctl above made the agent track it: a new report, so a new token.)
    let token = check(&mut c, Some(want.clone()), "").await.token;
    assert!(check(&mut c, Some(want.clone()), &token).await.unchanged);
    agent.set_limit(0);
    let changed = until(FLIP, "Check to see the new limit", || {
        let (mut c, want, token) = (c.clone(), want.clone(), token.clone());
        async move { Some(check(&mut c, Some(want), &token).await).filter(|r| !r.unchanged) }
    })
    .await;
    assert_full(&changed, "after the flip");
    assert!(!changed.verdict.unwrap().converged);
    assert_ne!(changed.token, token);
}

#[tokio::test]
async fn watch_heartbeats_carry_no_report() {
    let agent = Agent::start(Some(11255), &["--heartbeat", "1s"]);
    let mut c = client(&agent).await;
    let mut stream = c
        .watch(WatchRequest {
            desired: Some(sysctls(&[("user.max_user_namespaces", "11255")])),
        })
        .await
        .expect("Watch")
        .into_inner();
    let first = stream.message().await.expect("first").expect("open");
    assert!(!first.heartbeat && first.report.is_some() && first.verdict.is_some());
    for _ in 0..2 {
        let beat = tokio::time::timeout(Duration::from_secs(5), stream.message())
            .await
            .expect("a heartbeat within 5 s")
            .expect("ok")
            .expect("open");
        assert!(beat.heartbeat, "{beat:?}");
        assert!(beat.report.is_none() && beat.verdict.is_none(), "{beat:?}");
    }
}

#[tokio::test]
async fn the_poller_reuses_the_last_answer_while_it_holds() {
    let agent = Agent::spawn(AgentSpec::pool_member(11255));
    let node = parse_entry(&agent.addr.to_string(), 1).unwrap();
    let mut p = Poller::new(
        Client::new(ClientOptions::default()),
        sysctls(&[("user.max_user_namespaces", "11255")]),
    );
    let first = p.poll(std::slice::from_ref(&node)).await;
    assert!(first[0].converged(), "{first:?}");
    assert_eq!(p.unchanged(), 0);
    let again = p.poll(std::slice::from_ref(&node)).await;
    assert_eq!(p.unchanged(), 1, "the second poll sent the token");
    assert_eq!(again[0].outcome, first[0].outcome);

    agent.set_limit(0);
    let deadline = Instant::now() + FLIP;
    loop {
        let r = p.poll(std::slice::from_ref(&node)).await;
        if p.unchanged() == 0 {
            assert!(
                r[0].outcome.as_ref().is_ok_and(|a| !a.verdict.converged),
                "{r:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the poller missed the flip");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p.poll(std::slice::from_ref(&node)).await;
    assert_eq!(p.unchanged(), 1);
}
