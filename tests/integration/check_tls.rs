//! `check` against a real agent serving mTLS with certificates from
//! `tls init`: the right client identity converges; a missing client
//! certificate, a wrong server name, a foreign CA and plaintext are each a
//! row with a reason a person can act on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{path::Path, time::Duration};

use common::{args, check, Agent, AgentSpec};

/// `tls init` material for agent.example and 127.0.0.1 in `dir`.
fn certs_for_agent(dir: &Path) {
    common::tls_init(dir, &["--san", "agent.example", "--san", "127.0.0.1"]);
}

/// An agent at limit 11255 serving mTLS with the material in `certs`.
fn mtls_agent(certs: &Path) -> Agent {
    let f = |name: &str| certs.join(name).to_str().unwrap().to_string();
    let mut spec = AgentSpec::pool_member(11255);
    spec.extra.extend(args(&[
        "--tls-cert",
        &f("server.pem"),
        "--tls-key",
        &f("server-key.pem"),
        "--client-ca",
        &f("ca.pem"),
    ]));
    Agent::spawn(spec)
}

#[test]
fn mtls_agent_is_asked_with_the_client_identity_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let other = dir.path().join("other");
    certs_for_agent(&certs);
    certs_for_agent(&other);
    let f = |name: &str| certs.join(name).to_str().unwrap().to_string();

    let agent = mtls_agent(&certs);
    let node = agent.addr.to_string();
    let base = |extra: &[&str]| {
        let mut a = args(&[
            "-n",
            &node,
            "--sysctl=user.max_user_namespaces=11255",
            "--timeout",
            "3s",
        ]);
        a.extend(args(extra));
        a
    };
    let ca = f("ca.pem");
    let (cert, key) = (f("client.pem"), f("client-key.pem"));
    let identity = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];

    let run = check(&base(&identity), Duration::from_secs(20));
    assert_eq!(run.code(), 0, "{}{}", run.stdout, run.stderr);

    let mut named = identity.to_vec();
    named.extend(["--tls-server-name", "agent.example"]);
    let run = check(&base(&named), Duration::from_secs(20));
    assert_eq!(run.code(), 0, "{}{}", run.stdout, run.stderr);

    let foreign = other.join("ca.pem");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--tls-ca", &ca],
            // Either the alert arrived during the handshake, or (TLS 1.3)
            // only the closed connection did; both end in this advice.
            "client certificate",
        ),
        (
            vec![
                "--tls-ca",
                &ca,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-server-name",
                "other.example",
            ],
            "certificate not valid for name \"other.example\"",
        ),
        (
            vec![
                "--tls-ca",
                foreign.to_str().unwrap(),
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
            ],
            "TLS: invalid peer certificate: UnknownIssuer",
        ),
        (vec![], "does the agent serve TLS? give --tls-ca"),
    ];
    for (extra, want) in cases {
        let run = check(&base(&extra), Duration::from_secs(20));
        assert_eq!(run.code(), 1, "{extra:?}: {}", run.stderr);
        let last = run.stdout.lines().last().unwrap_or("");
        assert!(
            last.starts_with("0/1 converged; ") && last.contains(want),
            "{extra:?}: {}",
            run.stdout
        );
    }

    // Unusable TLS files are bad configuration: exit 2, one line, nothing sent.
    let run = check(
        &base(&["--tls-ca", "/nonexistent/ca.pem"]),
        Duration::from_secs(20),
    );
    assert_eq!(run.code(), 2);
    assert!(run.stderr.contains("/nonexistent/ca.pem"), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    let run = check(
        &base(&[
            "--tls-ca",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &f("server-key.pem"),
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(run.code(), 2, "{}", run.stderr);
}

/// `-n NAME=ADDRESS`: the row is the node's name, and under
/// `--tls-server-name-from-node` the agent's certificate must hold that
/// name, not the address it is reached at.
#[test]
fn a_named_node_is_verified_by_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    certs_for_agent(&certs);
    let f = |name: &str| certs.join(name).to_str().unwrap().to_string();
    let agent = mtls_agent(&certs);
    let ask = |name: &str| {
        check(
            &args(&[
                "-n",
                &format!("{name}={}", agent.addr),
                "--tls-server-name-from-node",
                "--tls-ca",
                &f("ca.pem"),
                "--tls-cert",
                &f("client.pem"),
                "--tls-key",
                &f("client-key.pem"),
                "--timeout",
                "3s",
                "-o",
                "json",
            ]),
            Duration::from_secs(20),
        )
    };
    let run = ask("agent.example");
    assert_eq!(run.code(), 0, "{}{}", run.stdout, run.stderr);
    let node = &run.json()["nodes"][0];
    assert_eq!(node["name"], "agent.example", "{node:#}");

    let run = ask("other.example");
    assert_eq!(run.code(), 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("certificate not valid for name \\\"other.example\\\""),
        "{}",
        run.stdout
    );
}
