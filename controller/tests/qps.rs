//! The client-side limit per API server on a running controller: with
//! `--kube-qps 5 --kube-burst 5` and 40 Machines to write on the real
//! management server (Cluster API running), the writes its audit log
//! records never exceed burst + qps × the time they span, in any window,
//! and they come at the limit's pace (the limit, not the work, sets it);
//! then, at rest, no write at all.
//!
//! The audit log records writes only (level Request; reads at None): the
//! bucket holds for every request, so it holds for the writes among them,
//! and the writes are what the limit protects the server from.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::{by_controller, condition_of, Env, CAPI};
use serde_json::Value;

fn received(e: &Value) -> SystemTime {
    humantime::parse_rfc3339(e["requestReceivedTimestamp"].as_str().unwrap()).unwrap()
}

#[test]
fn requests_follow_the_token_bucket_and_nothing_is_written_at_rest() {
    let env = Env::start();
    const N: usize = 40;
    for i in 0..N {
        // No node: each gets Unknown / NodeNotYetAssigned.
        env.machine("md-a", &format!("m{i}"), true, &[], None);
    }
    let (qps, burst) = (5.0, 5.0);
    let mark = env.mgmt.audit_mark();
    let mine = |e: &Value| {
        by_controller(e)
            && e["objectRef"]["namespace"] == env.ns.as_str()
            && e["objectRef"]["resource"] == "machines"
    };
    let ctl = env.controller(&["--kube-qps", "5", "--kube-burst", "5"]);
    let start = Instant::now();
    let list = format!("{CAPI}/namespaces/{}/machines", env.ns);
    let done = loop {
        let written = env
            .mgmt
            .get(&list)
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|m| condition_of(m, &env.ty).is_some())
            .count();
        if written == N {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{written}/{N} written\n{}",
            ctl.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // Each Machine's write in the audit log (it is logged a moment after
    // the Machine shows it).
    let writes = env
        .mgmt
        .audit_wait(Duration::from_secs(30), mark, mine, |w| w.len() >= N);
    let times: Vec<SystemTime> = writes.iter().map(received).collect();
    // Every window [i, j] of the writes: at most burst + qps × its span
    // (+1: the clocks are the server's, the bucket's the client's).
    let mut most = 0.0f64;
    for i in 0..times.len() {
        for j in i..times.len() {
            let span = times[j]
                .duration_since(times[i])
                .unwrap_or_default()
                .as_secs_f64();
            let n = (j - i + 1) as f64;
            let allowed = burst + qps * span;
            assert!(
                n <= allowed + 1.0,
                "{n} writes in {span:.2} s (allowed {allowed:.1})\n{}",
                ctl.log()
            );
            most = most.max(n / allowed);
        }
    }
    // The pace: past the burst, the writes come at the limit.
    let steady = &times[(burst as usize).min(times.len() - 1)..];
    let span = steady
        .last()
        .unwrap()
        .duration_since(steady[0])
        .unwrap_or_default()
        .as_secs_f64();
    let rate = (steady.len() - 1) as f64 / span.max(0.001);
    eprintln!(
        "{N} Machines written in {done:?} with {} writes at qps 5 / burst 5 (peak {most:.2} of the allowance, {rate:.2} writes/s past the burst)",
        writes.len()
    );
    // 40 status writes alone need (40 - 5) / 5 = 7 s at this limit.
    assert!(
        done >= Duration::from_secs(6),
        "written in {done:?}: the limit did not hold"
    );
    assert!(
        rate > 0.8 * qps,
        "the writes never came near the limit ({rate:.2}/s)"
    );
    // At rest: every write answered so far is logged (the barrier), then
    // nothing more over 5 s.
    env.mgmt.audit_barrier();
    let before = env.mgmt.audit_writes_since(mark, by_controller).len();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        env.mgmt.audit_writes_since(mark, by_controller).len(),
        before,
        "writes at rest\n{}",
        ctl.log()
    );
}
