//! `check` against real agents on loopback: a pool of twenty in their own
//! user namespaces, refusing and hung addresses, bad node entries, and a
//! kubectl NodeList.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use common::{args, check, node_list, refused_port, wait_until, Agent, AgentSpec, HungListener};

const SYSCTL: &str = "--sysctl=user.max_user_namespaces=11255";

#[test]
fn twenty_agents_the_check_names_exactly_those_at_zero_then_passes() {
    let at_zero: BTreeSet<usize> = [2, 7, 11, 19].into();
    let agents: Vec<Agent> = (0..20)
        .map(|i| {
            let limit = if at_zero.contains(&i) { 0 } else { 11255 };
            Agent::spawn(AgentSpec::pool_member(limit))
        })
        .collect();
    let refs: Vec<&Agent> = agents.iter().collect();
    let list = node_list(&refs);

    let run = check(
        &args(&["-n", &list, SYSCTL, "--require-userns", "-o", "json"]),
        Duration::from_secs(30),
    );
    assert_eq!(run.code(), 1, "{}\n{}", run.stdout, run.stderr);
    let doc = run.json();
    let off: BTreeSet<String> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["converged"] == false)
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    let want: BTreeSet<String> = at_zero
        .iter()
        .map(|&i| agents[i].addr.to_string())
        .collect();
    assert_eq!(off, want);
    for n in doc["nodes"].as_array().unwrap() {
        if n["converged"] == false {
            let codes: Vec<&str> = n["verdict"]["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["code"].as_str().unwrap())
                .collect();
            assert!(
                codes.contains(&"SYSCTL_MISMATCH") && codes.contains(&"USERNS_CREATE_FAILED"),
                "{codes:?}"
            );
            assert_eq!(
                n["reason"], "user.max_user_namespaces is 0, expected 11255",
                "{n}"
            );
            // The report travels in the proto3 JSON mapping.
            assert!(n["report"]["userNamespaces"]["sysctls"].is_array());
        }
    }
    assert_eq!(doc["nodesConverged"], 16);
    assert_eq!(doc["converged"], false);

    // The table: one row per node, sorted by name, and the summary line.
    let run = check(
        &args(&["-n", &list, SYSCTL, "--require-userns"]),
        Duration::from_secs(30),
    );
    assert_eq!(run.code(), 1);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 22, "{}", run.stdout);
    assert!(lines[0].starts_with("NODE") && lines[0].contains("USERNS LIMIT"));
    let mut sorted: Vec<&Agent> = refs.clone();
    sorted.sort_by_key(|a| a.addr.port());
    for (row, agent) in lines[1..21].iter().zip(&sorted) {
        assert!(row.starts_with(&agent.addr.to_string()), "{row}");
        let zero = agent.spec.limit == Some(0);
        assert_eq!(row.contains(" no "), zero, "{row}");
        assert_eq!(row.contains(" yes "), !zero, "{row}");
    }
    let summary = lines[21];
    assert!(
        summary.starts_with("16/20 converged; 127.0.0.1:")
            && summary.contains(": user.max_user_namespaces is 0, expected 11255")
            && summary.ends_with("; and 1 more"),
        "{summary}"
    );

    // Raise the limit where it was 0; --refresh makes every agent look again.
    // An agent answers a refresh from an observation at most its
    // --min-refresh-interval (1 s) old, so the first rounds may still see 0:
    // ask until every agent answers with the new value.
    for &i in &at_zero {
        agents[i].set_limit(11255);
    }
    let mut run = None;
    wait_until(
        Duration::from_secs(15),
        "20/20 converged after the raise",
        || {
            let r = check(
                &args(&["-n", &list, SYSCTL, "--require-userns", "--refresh"]),
                Duration::from_secs(30),
            );
            let done = r.code() == 0;
            run = Some(r);
            done
        },
    );
    let run = run.unwrap();
    assert!(run.stdout.ends_with("20/20 converged\n"), "{}", run.stdout);
}

#[test]
fn refusing_and_hung_addresses_are_reported_within_the_deadline() {
    let good = Agent::spawn(AgentSpec::pool_member(11255));
    let hung: Vec<HungListener> = (0..30).map(|_| HungListener::start("127.0.0.1")).collect();
    let refused: Vec<u16> = (0..10).map(|_| refused_port()).collect();
    let mut nodes = vec![good.addr.to_string()];
    nodes.extend(hung.iter().map(|h| h.addr.to_string()));
    nodes.extend(refused.iter().map(|p| format!("127.0.0.1:{p}")));
    let list = nodes.join(",");

    let run = check(
        &args(&[
            "-n",
            &list,
            SYSCTL,
            "--timeout",
            "2s",
            "--connect-timeout",
            "1s",
            "--parallel",
            "64",
            "-o",
            "json",
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(run.code(), 1, "{}", run.stderr);
    // 40 bad nodes, asked in parallel: one deadline, not forty.
    assert!(
        run.took < Duration::from_millis(3500),
        "took {:?}",
        run.took
    );
    let doc = run.json();
    let by_name = |name: &str| {
        doc["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("no row for {name}"))
            .clone()
    };
    assert_eq!(by_name(&good.addr.to_string())["converged"], true);
    for h in &hung {
        let n = by_name(&h.addr.to_string());
        assert_eq!(n["error"]["kind"], "deadline", "{n}");
        assert!(n["reason"]
            .as_str()
            .unwrap()
            .contains("no answer within 2s"));
        let ms = n["elapsedMs"].as_u64().unwrap();
        assert!((1900..3000).contains(&ms), "hung node took {ms} ms");
    }
    for p in &refused {
        let n = by_name(&format!("127.0.0.1:{p}"));
        assert_eq!(n["error"]["kind"], "refused", "{n}");
        assert!(n["elapsedMs"].as_u64().unwrap() < 1000);
    }
    assert_eq!(doc["nodesUnreachable"], 40);
    assert!(doc["summary"]
        .as_str()
        .unwrap()
        .starts_with("1/41 converged; "));

    // --parallel 4 over 8 hung nodes: two rounds of the deadline, no more.
    let few: Vec<String> = hung[..8].iter().map(|h| h.addr.to_string()).collect();
    let run = check(
        &args(&["-n", &few.join(","), "--timeout", "1s", "--parallel", "4"]),
        Duration::from_secs(20),
    );
    assert_eq!(run.code(), 1);
    assert!(
        run.took >= Duration::from_millis(1900) && run.took < Duration::from_millis(3000),
        "{:?}",
        run.took
    );
}

#[test]
fn bad_node_entries_and_flags_are_refused_before_anything_is_sent() {
    // A listener that would notice any connection.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let good = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nodes.txt");
    std::fs::write(&file, format!("# pool\n{good}\nbad host\n")).unwrap();
    let file = file.to_str().unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            args(&["-n", &format!("{good},host:99999")]),
            "--nodes entry 2: \"host:99999\": port \"99999\" is not a number from 1 to 65535",
        ),
        (
            args(&["-n", &format!("{good},[::1")]),
            "--nodes entry 2: \"[::1\" has '[' without a closing ']'",
        ),
        (
            args(&["-n", &format!("{good},,x")]),
            "--nodes entry 2: empty node entry",
        ),
        (args(&["-n", "::1"]), "write IPv6 addresses in brackets"),
        (
            args(&["--nodes-file", file]),
            "nodes.txt line 3: \"bad host\" contains whitespace",
        ),
        (
            args(&["-n", "10.0.0.1"]),
            "node 10.0.0.1 (10.0.0.1:10150) is not a loopback address",
        ),
        (args(&[]), "no nodes: give -n/--nodes"),
        (
            args(&["-n", &good, "--sysctl", "user.max_user_namespaces"]),
            "is not NAME=VALUE",
        ),
        (
            args(&["-n", &good, "--timeout", "0s"]),
            "--timeout must be more than 0",
        ),
        (
            args(&["--kube-nodes", "/nonexistent.json"]),
            "--kube-nodes /nonexistent.json: ",
        ),
        (
            args(&["--nodes-cmd", "exit 4"]),
            "--nodes-cmd failed (exit status: 4)",
        ),
    ];
    for (a, want) in cases {
        let run = check(&a, Duration::from_secs(20));
        assert_eq!(run.code(), 2, "{a:?}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{a:?}: {:?}", run.stderr);
        assert!(run.stdout.is_empty(), "{a:?}: {}", run.stdout);
        // Exactly one line (clap's usage errors aside).
        if !run.stderr.starts_with("error:") {
            assert_eq!(run.stderr.lines().count(), 1, "{a:?}: {}", run.stderr);
        }
    }
    assert!(
        l.accept().is_err(),
        "a connection was made despite the bad entry"
    );
}

#[test]
fn kube_node_list_rows_are_labelled_by_node_name() {
    // Every node on the same port, on different loopback addresses, the way
    // a cluster has one port and many InternalIPs.
    // Agent a picks the port; b takes the same one on two other addresses.
    let a = Agent::spawn(
        AgentSpec::pool_member(11255).listening_on(vec!["127.0.0.2:0".parse().unwrap()]),
    );
    let port = a.port;
    let b = Agent::spawn(AgentSpec::pool_member(0).listening_on(vec![
        format!("127.0.0.3:{port}").parse().unwrap(),
        format!("[::1]:{port}").parse().unwrap(),
    ]));
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [
            {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "worker-b", "labels": {"pool": "gvisor"}},
             "status": {"addresses": [
                {"type": "Hostname", "address": "worker-b"},
                {"type": "ExternalIP", "address": "203.0.113.9"},
                {"type": "InternalIP", "address": "127.0.0.3"},
                {"type": "InternalIP", "address": "::1"}]}},
            {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "worker-a"},
             "status": {"addresses": [
                {"type": "InternalIP", "address": "127.0.0.2"},
                {"type": "Hostname", "address": "worker-a"}]}},
            {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "worker-c"},
             "status": {"addresses": [{"type": "Hostname", "address": "worker-c"}]}},
            {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "worker-d"},
             "status": {"addresses": [{"type": "InternalIP", "address": "::1"}]}}
        ]
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodes.json");
    std::fs::write(&path, serde_json::to_string_pretty(&list).unwrap()).unwrap();
    let run = check(
        &args(&[
            "--kube-nodes",
            path.to_str().unwrap(),
            "--port",
            &port.to_string(),
            SYSCTL,
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(run.code(), 1, "{}", run.stderr);
    let rows: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .skip(1)
        .take(4)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let p = port.to_string();
    assert_eq!(
        rows[0][..4],
        ["worker-a", &format!("127.0.0.2:{p}"), "yes", "11255"]
    );
    assert_eq!(
        rows[1][..4],
        ["worker-b", &format!("127.0.0.3:{p}"), "no", "0"]
    );
    assert_eq!(rows[2][..3], ["worker-c", "-", "unreachable"]);
    assert!(run
        .stdout
        .lines()
        .nth(3)
        .unwrap()
        .ends_with("no address: the node lists no InternalIP"));
    // worker-d is dialled over IPv6 and reaches agent b's second listener.
    assert_eq!(rows[3][..4], ["worker-d", &format!("[::1]:{p}"), "no", "0"]);
    assert!(run
        .stdout
        .ends_with("1/4 converged; worker-b: user.max_user_namespaces is 0, expected 11255; worker-c: no address: the node lists no InternalIP; worker-d: user.max_user_namespaces is 0, expected 11255\n"),
        "{}", run.stdout);

    // The same document from stdin.
    let mut child = std::process::Command::new(common::BIN)
        .args([
            "check",
            "--kube-nodes",
            "-",
            "--port",
            &p,
            SYSCTL,
            "-o",
            "json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(list.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["nodesTotal"], 4);
    assert_eq!(doc["nodesConverged"], 1);
    drop((a, b));
}

#[test]
fn show_reports_prints_each_full_report() {
    let a = Agent::spawn(AgentSpec::pool_member(11255));
    let started = Instant::now();
    let run = check(
        &args(&["-n", &a.addr.to_string(), SYSCTL, "--show-reports"]),
        Duration::from_secs(20),
    );
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        run.stdout
            .contains(&format!("== {} ({}) ==", a.addr, a.addr)),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Verdict: CONVERGED"), "{}", run.stdout);
    assert!(run.stdout.ends_with("1/1 converged\n"));
}

/// `localhost` counts as loopback for plaintext only when it resolves to
/// loopback: with a hosts file that maps it to a documentation address (in a
/// private mount namespace, so the host's /etc/hosts is untouched, and a
/// private network namespace, so even a regression sends nothing out),
/// `check` refuses before dialling; with the real one it asks the agent.
#[test]
fn localhost_is_loopback_only_when_it_resolves_to_loopback() {
    let agent = Agent::start(None, &[]);
    let port = agent.addr.port();
    let ok = check(
        &args(&["-n", &format!("localhost:{port}"), "-o", "json"]),
        Duration::from_secs(20),
    );
    assert_eq!(ok.code(), 0, "{}{}", ok.stdout, ok.stderr);

    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "192.0.2.7 localhost\n").unwrap();
    let script = format!(
        "mount --bind {} /etc/hosts && exec \"$0\" check -n localhost:{port}",
        hosts.display()
    );
    let out = common::run({
        let mut c = std::process::Command::new("unshare");
        c.args([
            "-m",
            "-n",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            common::BIN,
        ]);
        c
    });
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("localhost resolves to 192.0.2.7:"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A sysctl only root may read (`tcp_fastopen_key` is 0600 and holds the TCP
/// Fast Open key) is withheld: a client that names it learns it cannot be
/// confirmed, and its value appears nowhere in what the agent sends; names of
/// side-effecting sysctls are refused before anything is read.
#[test]
fn root_only_sysctls_are_withheld_and_side_effecting_names_refused() {
    let key_path = "/proc/sys/net/ipv4/tcp_fastopen_key";
    let key = std::fs::read_to_string(key_path).unwrap();
    let key = key.trim();
    assert!(!key.is_empty());
    let agent = Agent::start(None, &[]);
    let run = check(
        &args(&[
            "-n",
            &agent.addr.to_string(),
            "--sysctl",
            "net.ipv4.tcp_fastopen_key=x",
            "-o",
            "json",
            "--show-reports",
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(run.code(), 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("SYSCTL_WITHHELD"), "{}", run.stdout);
    // Neither the whole key nor any of its dash-separated parts (an unset key
    // is all zeros: then only the whole, which nothing else looks like).
    let parts = key
        .split(['-', ','])
        .filter(|p| p.chars().any(|c| c != '0'));
    for part in std::iter::once(key).chain(parts) {
        assert!(
            !run.stdout.contains(part) && !run.stderr.contains(part),
            "the key (or part {part}) leaked"
        );
    }
    assert!(!agent.log().text().contains(key));

    let refused = check(
        &args(&[
            "-n",
            &agent.addr.to_string(),
            "--sysctl",
            "vm.drop_caches=3",
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("write-only or reading it has side effects"),
        "{}",
        refused.stderr
    );
}
