//! mTLS end to end: `tls init` material, `serve` with it, `check` with the
//! client side; plaintext refused outside loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::{run, Agent, AgentSpec, BIN};

#[test]
fn check_with_tls_init_material_succeeds_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    let printed = common::tls_init(
        &tls,
        &["--san", "127.0.0.1", "--san", "node-1.pool.example"],
    );
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");
    let config = std::fs::read_to_string(tls.join("server.yaml")).unwrap();
    assert!(config.contains("kind: ExtensionServiceConfig"), "{config}");
    assert!(printed.contains("--tls-ca"), "{printed}");

    let path = |name: &str| tls.join(name).to_str().unwrap().to_string();
    let (cert, key, ca) = (path("server.pem"), path("server-key.pem"), path("ca.pem"));
    let agent = Agent::spawn(AgentSpec::new(
        None,
        &["--tls-cert", &cert, "--tls-key", &key, "--client-ca", &ca],
    ));
    let listen = agent.addr.to_string();

    let check = |with_cert: bool| {
        let mut c = Command::new(BIN);
        c.args([
            "check",
            "-n",
            &listen,
            "--timeout",
            "3s",
            "--require-userns",
            "--tls-ca",
        ])
        .arg(tls.join("ca.pem"));
        if with_cert {
            c.arg("--tls-cert")
                .arg(tls.join("client.pem"))
                .arg("--tls-key")
                .arg(tls.join("client-key.pem"));
        }
        run(c)
    };
    let ok = check(true);
    let text = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(text.contains("1/1 converged"), "{text}");

    // Without a client certificate the handshake is refused: the node is unreachable.
    let refused = check(false);
    assert_eq!(
        refused.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&refused.stdout)
    );

    // Plaintext against the TLS port fails too.
    let plain = run({
        let mut c = Command::new(BIN);
        c.args([
            "check",
            "-n",
            &listen,
            "--timeout",
            "2s",
            "--insecure-plaintext",
        ]);
        c
    });
    assert_eq!(plain.status.code(), Some(1));
}

#[test]
fn plaintext_outside_loopback_is_refused_at_startup() {
    for (args, needle) in [
        (
            vec!["serve", "--listen", "0.0.0.0:0"],
            "refusing plaintext on 0.0.0.0:0",
        ),
        (vec!["serve"], "refusing plaintext on [::]:10150"),
    ] {
        let start = Instant::now();
        let out = run({
            let mut c = Command::new(BIN);
            // As the extension runs it: the refusal is plain text all the
            // same (docs/usage/troubleshooting.md).
            c.args(&args).env("SANDBOX_READINESS_LOG_FORMAT", "json");
            c
        });
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(needle), "{err}");
        assert!(lines[0].starts_with("sandbox-readiness serve: "), "{err}");
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}

/// A variable clap cannot parse is clap's own error: several lines naming
/// the flag, exit 2 (docs/usage/troubleshooting.md quotes it).
#[test]
fn a_value_clap_cannot_parse_is_claps_error_naming_the_flag() {
    let out = run({
        let mut c = Command::new(BIN);
        c.args(["serve", "--listen", "127.0.0.1:0"])
            .env("SANDBOX_READINESS_LOG_FORMAT", "json")
            .env("SANDBOX_READINESS_POLL_INTERVAL", "fast");
        c
    });
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: invalid value 'fast' for '--poll-interval <POLL_INTERVAL>': ")
            && err
                .trim_end()
                .ends_with("For more information, try '--help'.")
            && err.lines().count() > 1,
        "{err}"
    );
}

#[test]
fn insecure_plaintext_outside_loopback_starts_with_a_warning() {
    let agent = Agent::spawn(
        AgentSpec::new(None, &["--insecure-plaintext"])
            .listening_on(vec!["0.0.0.0:0".parse().unwrap()]),
    );
    let warning = agent
        .log()
        .wait_line("without mTLS", Duration::from_secs(10));
    assert!(warning.contains("WARN"), "{warning}");
}
