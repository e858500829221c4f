//! `check` on Cluster API MachineLists against real agents: a one-shot
//! check of a pool mid-rollout (a Machine leaving, one pending), and
//! `check --wait` following a MachineDeployment rollout step by step while
//! the MachineList it reads (through `--nodes-cmd` or a re-read
//! `--kube-nodes` file) is rewritten.
//!
//! Every agent of one test listens on the same port on its own loopback
//! address, because a Machine lists addresses, not ports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    time::Duration,
};

use common::{args, check, write_atomic, Agent, AgentSpec, CheckProc};
use serde_json::{json, Value};

const SYSCTL: &str = "--sysctl=user.max_user_namespaces=11255";
const SHOWN: Duration = Duration::from_secs(20);
const V1BETA1_ROLLOUT: &str = include_str!("../fixtures/capi/machines-v1beta1-rollout.json");
const V1BETA2_ROLLOUT: &str = include_str!("../fixtures/capi/machines-v1beta2-rollout.json");
const OLD: &str = "kubernetes-tenant-a-md0-6c9b8f7d5x";
const NEW: &str = "kubernetes-tenant-a-md0-58f4d6c9b7";

fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, net, host))
}

/// An agent at `limit` on `ip`, on `port` (0: the kernel picks).
fn agent_at(limit: u32, ip: IpAddr, port: u16) -> Agent {
    Agent::spawn(AgentSpec::pool_member(limit).listening_on(vec![SocketAddr::new(ip, port)]))
}

#[test]
fn one_shot_mid_rollout_shows_leaving_and_pending_and_exits_1() {
    // The old Machine still running is at the old limit; the new one that
    // joined has the new one; the Machine being deleted has no agent left.
    let old = agent_at(0, ip(1, 2), 0);
    let port = old.port;
    let new = agent_at(11255, ip(1, 3), port);
    let dir = tempfile::tempdir().unwrap();
    for (version, fixture) in [("v1beta1", V1BETA1_ROLLOUT), ("v1beta2", V1BETA2_ROLLOUT)] {
        let file = dir.path().join(format!("{version}.json"));
        let text = fixture
            .replace("10.244.0.21", &ip(1, 4).to_string())
            .replace("10.244.1.34", &old.addr.ip().to_string())
            .replace("10.244.2.17", &new.addr.ip().to_string());
        std::fs::write(&file, text).unwrap();
        let run = check(
            &args(&[
                "--kube-nodes",
                file.to_str().unwrap(),
                "--port",
                &port.to_string(),
                SYSCTL,
            ]),
            Duration::from_secs(30),
        );
        assert_eq!(run.code(), 1, "{version}:\n{}\n{}", run.stdout, run.stderr);
        let out = &run.stdout;
        let row = |machine: &str| {
            out.lines()
                .find(|l| l.starts_with(machine))
                .unwrap_or_else(|| panic!("{version}: no row for {machine}:\n{out}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert!(out.starts_with("MACHINE "), "{version}:\n{out}");
        // MACHINE, NODE, ADDRESS, CONVERGED.
        let leaving = row(&format!("{OLD}-2kq8z"));
        assert_eq!(leaving[1], format!("{OLD}-2kq8z"), "{out}");
        assert_eq!(leaving[3], "leaving", "{out}");
        assert_eq!(row(&format!("{OLD}-x7wtm"))[3], "no", "{out}");
        assert_eq!(row(&format!("{NEW}-p4lzn"))[3], "yes", "{out}");
        let pending = row(&format!("{NEW}-vd9rq"));
        assert_eq!(&pending[1..4], ["-", "-", "pending"], "{out}");
        let summary = out.lines().last().unwrap();
        assert!(
            summary.starts_with("1/3 converged; ")
                && summary.contains(&format!("{NEW}-vd9rq: pending"))
                && summary.ends_with(&format!("; leaving: {OLD}-2kq8z")),
            "{version}: {summary}"
        );
    }
}

/// A Machine as Cluster API v1beta2 writes it, from the fixture's pending
/// Machine: with an address (and its node) once `ip` is given, being
/// deleted when `deleting`.
fn machine(name: &str, ip: Option<IpAddr>, deleting: bool) -> Value {
    let list: Value = serde_json::from_str(V1BETA2_ROLLOUT).unwrap();
    let mut m = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["status"]["phase"] == "Provisioning")
        .unwrap()
        .clone();
    m["metadata"]["name"] = json!(name);
    if let Some(ip) = ip {
        m["status"]["addresses"] = json!([
            {"address": ip.to_string(), "type": "InternalIP"},
            {"address": name, "type": "Hostname"},
        ]);
        m["status"]["nodeRef"] = json!({ "name": name });
        m["status"]["phase"] = json!("Running");
    }
    if deleting {
        m["metadata"]["deletionTimestamp"] = json!("2026-11-30T08:06:02Z");
        m["status"]["phase"] = json!("Deleting");
    }
    m
}

fn write_machines(path: &Path, machines: &[Value]) {
    let list = json!({
        "apiVersion": "v1",
        "items": machines,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    });
    write_atomic(path, &serde_json::to_string_pretty(&list).unwrap());
}

enum Source {
    NodesCmd,
    KubeNodesFile,
}

/// Two replicas replaced one by one (max surge 1): each new Machine is
/// first pending, then gets an address where a new agent (already at the
/// new limit) listens, then the old one it replaces is deleted and goes.
fn follows_a_rollout(source: Source, net: u8) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("machines.json");
    let (old1, old2) = (format!("{OLD}-2kq8z"), format!("{OLD}-x7wtm"));
    let (new1, new2) = (format!("{NEW}-p4lzn"), format!("{NEW}-vd9rq"));

    let mut agent_old1 = agent_at(0, ip(net, 2), 0);
    let port = agent_old1.port;
    let _agent_old2 = agent_at(0, ip(net, 3), port);
    write_machines(
        &file,
        &[
            machine(&old1, Some(ip(net, 2)), false),
            machine(&old2, Some(ip(net, 3)), false),
        ],
    );
    let cat = format!("cat '{}'", file.display());
    let path = file.to_str().unwrap();
    let from = match source {
        Source::NodesCmd => ["--nodes-cmd", &cat],
        Source::KubeNodesFile => ["--kube-nodes", path],
    };
    let port_arg = port.to_string();
    let mut proc = CheckProc::spawn(&args(&[
        from[0],
        from[1],
        "--nodes-cmd-interval",
        "300ms",
        "--port",
        &port_arg,
        "--expect-nodes",
        "2",
        SYSCTL,
        "--wait",
        "90s",
    ]));
    proc.stderr().wait_lines(
        &[
            &format!("{old1}: not converged"),
            &format!("{old2}: not converged"),
        ],
        SHOWN,
    );

    // The first new Machine is created: no address yet.
    write_machines(
        &file,
        &[
            machine(&old1, Some(ip(net, 2)), false),
            machine(&old2, Some(ip(net, 3)), false),
            machine(&new1, None, false),
        ],
    );
    proc.stderr().wait_line(&format!("{new1}: pending"), SHOWN);

    // It boots with the new configuration; the Machine it replaces is deleted.
    let _agent_new1 = agent_at(11255, ip(net, 4), port);
    write_machines(
        &file,
        &[
            machine(&old1, Some(ip(net, 2)), true),
            machine(&old2, Some(ip(net, 3)), false),
            machine(&new1, Some(ip(net, 4)), false),
        ],
    );
    proc.stderr().wait_lines(
        &[&format!("{new1}: converged"), &format!("{old1}: leaving")],
        SHOWN,
    );
    assert!(
        proc.running(),
        "converged with an old Machine still a member"
    );

    // The old Machine is gone; the second new one is created.
    agent_old1.kill();
    write_machines(
        &file,
        &[
            machine(&old2, Some(ip(net, 3)), false),
            machine(&new1, Some(ip(net, 4)), false),
            machine(&new2, None, false),
        ],
    );
    proc.stderr().wait_line(&format!("{new2}: pending"), SHOWN);
    assert!(proc.running(), "converged with a Machine pending");

    // The second new Machine joins and the last old one is deleted: every
    // member converged, two of two.
    let _agent_new2 = agent_at(11255, ip(net, 5), port);
    write_machines(
        &file,
        &[
            machine(&old2, Some(ip(net, 3)), true),
            machine(&new1, Some(ip(net, 4)), false),
            machine(&new2, Some(ip(net, 5)), false),
        ],
    );
    let run = proc.finish(Duration::from_secs(90));
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let err = &run.stderr;
    for want in [
        format!("{new2}: converged"),
        format!("{old2}: leaving"),
        format!("{old1}: removed"),
    ] {
        assert!(err.contains(&want), "missing {want:?} in:\n{err}");
    }
    let out = &run.stdout;
    assert!(
        out.ends_with(&format!("2/2 converged; leaving: {old2}\n")),
        "{out}"
    );
    let new2_row = out.lines().find(|l| l.starts_with(&new2)).unwrap();
    assert!(
        new2_row.split_whitespace().nth(1) == Some(new2.as_str())
            && new2_row.contains(&format!("{}:{port}", ip(net, 5))),
        "{out}"
    );
}

#[test]
fn wait_follows_a_rollout_through_nodes_cmd() {
    follows_a_rollout(Source::NodesCmd, 2);
}

#[test]
fn wait_follows_a_rollout_through_a_reread_kube_nodes_file() {
    follows_a_rollout(Source::KubeNodesFile, 3);
}

const MD_V1BETA1: &str = include_str!("../fixtures/capi/machinedeployment-v1beta1.json");
const MD_V1BETA2: &str = include_str!("../fixtures/capi/machinedeployment-v1beta2.json");

/// A MachineDeployment as `kubectl get machinedeployment -o json` prints it,
/// scaled to `replicas`.
fn write_md(path: &Path, fixture: &str, replicas: u32) {
    let mut md: Value = serde_json::from_str(fixture).unwrap();
    md["spec"]["replicas"] = json!(replicas);
    write_atomic(path, &serde_json::to_string_pretty(&md).unwrap());
}

enum Expect {
    FromFile,
    Cmd,
}

/// A rollout during which the pool is scaled from 2 to 3: the expected
/// count follows the MachineDeployment's `spec.replicas` (re-read every
/// round), and `check --wait` exits 0 only once three Machines converged,
/// although two converged and none was pending before the third appeared.
fn follows_a_scale_up(expect: Expect, net: u8) {
    let dir = tempfile::tempdir().unwrap();
    let machines = dir.path().join("machines.json");
    let md = dir.path().join("md.json");
    let (old1, new1) = (format!("{OLD}-2kq8z"), format!("{NEW}-p4lzn"));
    let (new2, new3) = (format!("{NEW}-vd9rq"), format!("{NEW}-t6xbn"));
    let fixture = match expect {
        Expect::FromFile => MD_V1BETA1,
        Expect::Cmd => MD_V1BETA2,
    };

    let mut agent_old1 = agent_at(0, ip(net, 2), 0);
    let port = agent_old1.port;
    let _agent_new1 = agent_at(11255, ip(net, 3), port);
    write_machines(
        &machines,
        &[
            machine(&old1, Some(ip(net, 2)), false),
            machine(&new1, Some(ip(net, 3)), false),
        ],
    );
    write_md(&md, fixture, 2);
    let cat = format!("cat '{}'", md.display());
    let md_path = md.to_str().unwrap();
    let from = match expect {
        Expect::FromFile => ["--expect-from", md_path],
        Expect::Cmd => ["--expect-cmd", &cat],
    };
    let port_arg = port.to_string();
    let proc = CheckProc::spawn(&args(&[
        "--kube-nodes",
        machines.to_str().unwrap(),
        from[0],
        from[1],
        "--nodes-cmd-interval",
        "300ms",
        "--port",
        &port_arg,
        SYSCTL,
        "--wait",
        "90s",
    ]));
    proc.stderr().wait_lines(
        &[
            &format!("{old1}: not converged"),
            &format!("{new1}: converged"),
        ],
        SHOWN,
    );

    // The pool is scaled up mid-rollout.
    write_md(&md, fixture, 3);
    proc.stderr().wait_line("expected nodes: 2 → 3", SHOWN);

    // The old Machine is replaced: two members, both converged, none
    // pending, but three expected.
    let _agent_new2 = agent_at(11255, ip(net, 4), port);
    write_machines(
        &machines,
        &[
            machine(&old1, Some(ip(net, 2)), true),
            machine(&new1, Some(ip(net, 3)), false),
            machine(&new2, Some(ip(net, 4)), false),
        ],
    );
    proc.stderr().wait_lines(
        &[&format!("{new2}: converged"), &format!("{old1}: leaving")],
        SHOWN,
    );
    // Still running: it notices the third Machine.
    agent_old1.kill();
    write_machines(
        &machines,
        &[
            machine(&new1, Some(ip(net, 3)), false),
            machine(&new2, Some(ip(net, 4)), false),
            machine(&new3, None, false),
        ],
    );
    proc.stderr().wait_line(&format!("{new3}: pending"), SHOWN);

    let _agent_new3 = agent_at(11255, ip(net, 5), port);
    write_machines(
        &machines,
        &[
            machine(&new1, Some(ip(net, 3)), false),
            machine(&new2, Some(ip(net, 4)), false),
            machine(&new3, Some(ip(net, 5)), false),
        ],
    );
    let run = proc.finish(Duration::from_secs(90));
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains(&format!("{new3}: converged")),
        "{}",
        run.stderr
    );
    assert!(run.stdout.ends_with("3/3 converged\n"), "{}", run.stdout);
}

#[test]
fn wait_follows_a_scale_up_through_a_reread_expect_from_file() {
    follows_a_scale_up(Expect::FromFile, 4);
}

#[test]
fn wait_follows_a_scale_up_through_expect_cmd() {
    follows_a_scale_up(Expect::Cmd, 5);
}

#[test]
fn expected_count_from_a_machinedeployment_in_one_shot() {
    // Two converged agents; the MachineDeployment wants three.
    let a = agent_at(11255, ip(6, 2), 0);
    let port = a.port;
    let b = agent_at(11255, ip(6, 3), port);
    let dir = tempfile::tempdir().unwrap();
    let machines = dir.path().join("machines.json");
    write_machines(
        &machines,
        &[
            machine(&format!("{NEW}-p4lzn"), Some(a.addr.ip()), false),
            machine(&format!("{NEW}-vd9rq"), Some(b.addr.ip()), false),
        ],
    );
    let md = dir.path().join("md.json");
    let port_arg = port.to_string();
    for (fixture, replicas, code) in [(MD_V1BETA2, 3, 1), (MD_V1BETA1, 2, 0)] {
        write_md(&md, fixture, replicas);
        let run = check(
            &args(&[
                "--kube-nodes",
                machines.to_str().unwrap(),
                "--expect-from",
                md.to_str().unwrap(),
                "--port",
                &port_arg,
                SYSCTL,
            ]),
            Duration::from_secs(30),
        );
        assert_eq!(
            run.code(),
            code,
            "{replicas}:\n{}\n{}",
            run.stdout,
            run.stderr
        );
    }
}

#[test]
fn bad_expected_counts_are_one_line_and_exit_2_before_asking() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let mut no_replicas: Value = serde_json::from_str(MD_V1BETA2).unwrap();
    no_replicas["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let mut negative: Value = serde_json::from_str(MD_V1BETA1).unwrap();
    negative["spec"]["replicas"] = json!(-1);
    let missing = dir.path().join("absent.json");
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            args(&["--expect-from", missing.to_str().unwrap()]),
            format!("--expect-from {}: ", missing.display()),
        ),
        (
            args(&[
                "--expect-from",
                &write("nodes.json", r#"{"kind":"NodeList","items":[]}"#),
            ]),
            "expected a MachineDeployment".into(),
        ),
        (
            args(&["--expect-from", &write("text.json", "replicas: 3")]),
            ": not JSON".into(),
        ),
        (
            args(&[
                "--expect-from",
                &write("none.json", &no_replicas.to_string()),
            ]),
            "has no spec.replicas".into(),
        ),
        (
            args(&["--expect-from", &write("neg.json", &negative.to_string())]),
            "spec.replicas -1 is not a count".into(),
        ),
        (
            args(&[
                "--expect-cmd",
                "echo 'machinedeployment not found' >&2; exit 1",
            ]),
            "--expect-cmd failed (exit status: 1): machinedeployment not found".into(),
        ),
        (
            args(&["--expect-cmd", "echo '{}'"]),
            "--expect-cmd output: expected a MachineDeployment".into(),
        ),
        (
            args(&["--kube-nodes", "-", "--expect-from", "-"]),
            "--kube-nodes and --expect-from cannot both read stdin".into(),
        ),
    ];
    // A node that refuses: nothing is printed for it when nothing is asked.
    let node = format!("127.0.0.1:{}", common::refused_port());
    for (extra, want) in cases {
        let mut a = args(&["-n", &node, SYSCTL]);
        a.extend(extra.iter().cloned());
        let run = check(&a, Duration::from_secs(30));
        assert_eq!(run.code(), 2, "{extra:?}:\n{}\n{}", run.stdout, run.stderr);
        assert!(run.stdout.is_empty(), "{extra:?} asked:\n{}", run.stdout);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert!(
            lines.len() == 1
                && lines[0].starts_with("sandbox-readiness check: ")
                && lines[0].contains(&want),
            "{extra:?}: want {want:?} in:\n{}",
            run.stderr
        );
    }
    // Exclusive with --expect-nodes and with each other (clap's usage error).
    let md = write("md.json", MD_V1BETA1);
    for extra in [
        args(&["--expect-from", &md, "--expect-nodes", "3"]),
        args(&["--expect-cmd", "true", "--expect-nodes", "3"]),
        args(&["--expect-from", &md, "--expect-cmd", "true"]),
    ] {
        let mut a = args(&["-n", &node]);
        a.extend(extra.iter().cloned());
        let run = check(&a, Duration::from_secs(30));
        assert_eq!(run.code(), 2, "{extra:?}:\n{}", run.stderr);
        assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
    }
}
