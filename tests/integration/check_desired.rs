//! `check --desired-from`/`--desired-cmd` against real agents in
//! `unshare -U -r` at limits 0 and 11255: the pool converges exactly when
//! the effective value equals the template's; a template swapped midway
//! through `--wait` (through `--desired-cmd`) is followed to exit 0; no
//! marker secret of the machine configs reaches any output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{args, check, refused_port, write_atomic, Agent, AgentSpec, CheckProc};

const COZY: &str = include_str!("../fixtures/desired/cozystack-tct.yaml");
const FIXTURES: [&str; 6] = [
    "fixtures/desired/talos-worker-v1.13.yaml",
    "fixtures/desired/talos-worker-v1.14-multidoc.yaml",
    "fixtures/desired/cozystack-tct.yaml",
    "fixtures/desired/cabpt-strategic.yaml",
    "fixtures/desired/cabpt-json6902.yaml",
    "fixtures/desired/talosconfigtemplates-list.json",
];
const LIMIT: Duration = Duration::from_secs(30);

/// The Cozystack template with `user.max_user_namespaces` at `v`.
fn template(v: u32) -> String {
    COZY.replace(
        "user.max_user_namespaces: \"11255\" # added",
        &format!("user.max_user_namespaces: \"{v}\" # added"),
    )
}

fn fixture(rel: &str) -> String {
    format!("{}/tests/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn no_marker(what: &str, text: &str) {
    assert!(
        !text.contains("MARKER-SECRET"),
        "{what}: a marker secret leaked:\n{text}"
    );
}

#[test]
fn converges_exactly_when_the_effective_value_equals_the_templates() {
    let low = Agent::spawn(AgentSpec::pool_member(0));
    let high = Agent::spawn(AgentSpec::pool_member(11255));
    let dir = tempfile::tempdir().unwrap();
    for (tv, agent, want) in [
        (11255, &high, 0),
        (11255, &low, 1),
        (0, &low, 0),
        (0, &high, 1),
    ] {
        let f = dir.path().join(format!("t{tv}.yaml"));
        std::fs::write(&f, template(tv)).unwrap();
        let r = check(
            &args(&[
                "-n",
                &agent.addr.to_string(),
                "--desired-from",
                f.to_str().unwrap(),
            ]),
            LIMIT,
        );
        assert_eq!(
            r.code(),
            want,
            "template {tv}, agent {}:\n{}\n{}",
            agent.addr,
            r.stdout,
            r.stderr
        );
        assert!(
            r.stdout.contains(
                "TalosConfigTemplate tenant-a/kubernetes-tenant-a-md0: data (machine.sysctls)"
            ),
            "{}",
            r.stdout
        );
        // The template's agent environment asks for 11255: at 0 it differs.
        assert_eq!(
            r.stdout.contains("AGENT_DESIRED_DIFFERS"),
            tv == 0,
            "{}",
            r.stdout
        );
        no_marker("stdout", &r.stdout);
        no_marker("stderr", &r.stderr);
    }

    // The intent wins, and the disagreement is named with its fix.
    let f = dir.path().join("t0.yaml");
    let r = check(
        &args(&[
            "-n",
            &high.addr.to_string(),
            "--desired-from",
            f.to_str().unwrap(),
            "--sysctl",
            "user.max_user_namespaces=11255",
            "-o",
            "json",
        ]),
        LIMIT,
    );
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json();
    let codes: Vec<&str> = doc["poolDesired"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["TEMPLATE_DISAGREES", "AGENT_DESIRED_DIFFERS"],
        "{doc}"
    );
    let msg = doc["poolDesired"]["findings"][0]["message"]
        .as_str()
        .unwrap();
    assert!(
        msg.contains("--sysctl says 11255")
            && msg.contains("sets 0")
            && msg.contains("create a new template and point the MachineDeployment at it"),
        "{msg}"
    );
    assert_eq!(
        doc["poolDesired"]["sysctls"][0]["source"],
        "TalosConfigTemplate tenant-a/kubernetes-tenant-a-md0: data (machine.sysctls)"
    );
    no_marker("-o json", &r.stdout);
}

#[test]
fn a_template_swapped_by_desired_cmd_midway_is_followed_to_exit_0() {
    let a = Agent::spawn(AgentSpec::pool_member(11255));
    let b = Agent::spawn(AgentSpec::pool_member(11255));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("tct.yaml");
    // The old template never got the new value (cozystack#3515).
    write_atomic(&f, &template(0));
    let nodes = format!("{},{}", a.addr, b.addr);
    let p = CheckProc::spawn(&args(&[
        "-n",
        &nodes,
        "--desired-cmd",
        &format!("cat '{}'", f.display()),
        "--nodes-cmd-interval",
        "300ms",
        "--wait",
        "60s",
    ]));
    p.stderr().wait_line(
        "not converged: user.max_user_namespaces is 11255, expected 0",
        LIMIT,
    );
    // A round that cannot be read keeps the last good state, said once.
    write_atomic(&f, "token: MARKER-SECRET-TOKEN\n  broken: [");
    p.stderr()
        .wait_line("(keeping the last desired state)", LIMIT);
    // The new template (a new name in a real pool; the same command here).
    write_atomic(&f, &template(11255));
    p.stderr()
        .wait_line("desired: user.max_user_namespaces 0 → 11255", LIMIT);
    let r = p.finish(LIMIT);
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr.matches("keeping the last desired state").count(),
        1,
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("2/2 converged"), "{}", r.stdout);
    no_marker("stdout", &r.stdout);
    no_marker("stderr", &r.stderr);
}

#[test]
fn bad_input_is_one_line_and_exit_2_before_any_node_is_asked_and_no_marker_reaches_any_output() {
    let port = refused_port();
    let dir = tempfile::tempdir().unwrap();
    let node = format!("127.0.0.1:{port}");
    let bad = [
        (
            "secret.yaml",
            "apiVersion: v1\nkind: Secret\ndata:\n  token: MARKER-SECRET-A\n",
        ),
        ("broken.yaml", "machine:\n  token: MARKER-SECRET-B\n   x: ["),
        (
            "data.yaml",
            &COZY.replace(
                "version: v1alpha1\n        persist: true",
                "persist: MARKER-SECRET-C",
            ),
        ),
        (
            "scalar.yaml",
            &COZY.replace("\"11255\" # added", "[MARKER-SECRET-D]"),
        ),
    ];
    for (name, text) in bad {
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        for out in ["table", "json"] {
            let r = check(
                &args(&[
                    "-n",
                    &node,
                    "--desired-from",
                    f.to_str().unwrap(),
                    "-o",
                    out,
                ]),
                LIMIT,
            );
            assert_eq!(r.code(), 2, "{name}: {}\n{}", r.stdout, r.stderr);
            assert_eq!(r.stderr.trim().lines().count(), 1, "{name}: {}", r.stderr);
            assert!(r.stdout.is_empty(), "{name}: {}", r.stdout);
            assert!(!r.stderr.contains("connection refused"), "{}", r.stderr);
            no_marker(name, &r.stderr);
        }
    }
    let r = check(
        &args(&[
            "-n",
            &node,
            "--desired-cmd",
            "echo 'no such template' >&2; exit 1",
        ]),
        LIMIT,
    );
    assert_eq!(r.code(), 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--desired-cmd failed (exit status: 1): no such template"),
        "{}",
        r.stderr
    );

    // Every upstream form, with its markers, against a real agent: no
    // marker in the table, -o json or stderr.
    let agent = Agent::spawn(AgentSpec::pool_member(11255));
    for rel in FIXTURES {
        let mut a = args(&[
            "-n",
            &agent.addr.to_string(),
            "--desired-from",
            &fixture(rel),
        ]);
        if rel.ends_with("list.json") {
            a.extend(args(&["--desired-name", "tenant-b/pool-b-md0-7d1e0c"]));
        }
        for out in ["table", "json"] {
            let mut a = a.clone();
            a.extend(args(&["-o", out]));
            let r = check(&a, LIMIT);
            assert!(
                matches!(r.code(), 0 | 1),
                "{rel}: {}\n{}",
                r.stdout,
                r.stderr
            );
            assert!(!r.stdout.is_empty(), "{rel}");
            no_marker(rel, &r.stdout);
            no_marker(rel, &r.stderr);
        }
    }
}
