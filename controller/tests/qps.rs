//! The client-side limit per API server on a running controller: with
//! `--kube-qps 5 --kube-burst 5` and 40 Machines to write, the requests the
//! management server sees never exceed burst + qps × elapsed, and they come
//! close to it (the limit, not the work, sets the pace); then, at rest, no
//! write at all.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Env, MACHINE_AV, NS, TY};

fn writes(env: &Env) -> usize {
    env.mgmt
        .requests()
        .iter()
        .filter(|r| !matches!(r.method.as_str(), "GET" | "HEAD"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_follow_the_token_bucket_and_nothing_is_written_at_rest() {
    let env = Env::start().await;
    env.deployment("md-a", false, true, 0);
    const N: usize = 40;
    for i in 0..N {
        // No nodeRef: each gets Unknown / NodeNotYetAssigned.
        env.machine("md-a", &format!("m{i}"), true, &[], None);
    }
    env.mgmt.clear_requests();
    let (qps, burst) = (5.0, 5.0);
    let ctl = env.controller(&["--kube-qps", "5", "--kube-burst", "5"]);
    let start = Instant::now();
    let mut most = 0.0f64;
    let done = loop {
        let n = env.mgmt.requests().len() as f64;
        let allowed = burst + qps * start.elapsed().as_secs_f64();
        // +1: the request in flight when the clock was read.
        assert!(
            n <= allowed + 1.0,
            "{n} requests after {:?} (allowed {allowed:.1})\n{}",
            start.elapsed(),
            ctl.log()
        );
        most = most.max(n / allowed);
        let written = (0..N)
            .filter(|i| {
                env.mgmt
                    .get(MACHINE_AV, "Machine", NS, &format!("m{i}"))
                    .and_then(|m| common::condition_of(&m, TY))
                    .is_some()
            })
            .count();
        if written == N {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{written}/{N} written\n{}",
            ctl.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let total = env.mgmt.requests().len();
    eprintln!("{N} Machines written in {done:?} with {total} requests at qps 5 / burst 5 (peak {most:.2} of the allowance)");
    // 40 status writes alone need (40 - 5) / 5 = 7 s at this limit.
    assert!(
        done >= Duration::from_secs(6),
        "written in {done:?}: the limit did not hold"
    );
    assert!(
        most > 0.8,
        "the requests never came near the limit ({most:.2})"
    );
    let before = writes(&env);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(writes(&env), before, "writes at rest\n{}", ctl.log());
}
