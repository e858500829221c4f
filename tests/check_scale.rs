//! `check` over 200 listen addresses on loopback (four real agents with 50
//! `--listen` each), then with 10% of the addresses black-holed (listeners
//! that accept and never answer). Prints the wall times; asserts that every
//! real address converged, every black-holed one is reported as such, and
//! that the black holes cost one deadline, not one per address.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{net::SocketAddr, time::Duration};

use common::{args, check, Agent, AgentSpec, HungListener};

const PER_AGENT: usize = 50;

fn agents(n: usize) -> Vec<Agent> {
    (0..n)
        .map(|i| {
            // Each agent on its own loopback address, 50 ports there.
            let ip = format!("127.0.1.{}", i + 1);
            let listens: Vec<SocketAddr> = (0..PER_AGENT)
                .map(|_| format!("{ip}:0").parse().unwrap())
                .collect();
            Agent::spawn(AgentSpec::pool_member(11255).listening_on(listens))
        })
        .collect()
}

#[test]
fn two_hundred_addresses_with_and_without_black_holes() {
    let agents = agents(4);
    let addrs: Vec<String> = agents
        .iter()
        .flat_map(|a| a.addrs.iter().map(ToString::to_string))
        .collect();
    assert_eq!(addrs.len(), 200);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nodes.txt");
    std::fs::write(&file, addrs.join("\n")).unwrap();
    let desired = [
        "--sysctl=user.max_user_namespaces=11255",
        "--require-userns",
        "-o",
        "json",
    ];

    let mut a = args(&["--nodes-file", file.to_str().unwrap()]);
    a.extend(args(&desired));
    let run = check(&a, Duration::from_secs(60));
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(run.json()["nodesConverged"], 200);
    eprintln!("check over 200 addresses: {:?}", run.took);
    let all_ok = run.took;

    // 20 of the 200 replaced by listeners that accept and never answer.
    let holes: Vec<HungListener> = (0..20).map(|_| HungListener::start("127.0.0.1")).collect();
    let mut mixed: Vec<String> = addrs[..180].to_vec();
    mixed.extend(holes.iter().map(|h| h.addr.to_string()));
    std::fs::write(&file, mixed.join("\n")).unwrap();
    let mut a = args(&["--nodes-file", file.to_str().unwrap(), "--timeout", "2s"]);
    a.extend(args(&desired));
    let run = check(&a, Duration::from_secs(60));
    assert_eq!(run.code(), 1);
    let doc = run.json();
    assert_eq!(doc["nodesConverged"], 180);
    assert_eq!(doc["nodesUnreachable"], 20);
    let deadline_kinds = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["error"]["kind"] == "deadline")
        .count();
    assert_eq!(deadline_kinds, 20);
    eprintln!(
        "check over 200 addresses, 20 black-holed (--timeout 2s): {:?}",
        run.took
    );
    assert!(
        run.took < all_ok + Duration::from_millis(3000),
        "black holes cost more than one deadline: {:?}",
        run.took
    );
}
