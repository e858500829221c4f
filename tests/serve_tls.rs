//! mTLS end to end: `tls init` material, `serve` with it, `check` with the
//! client side; plaintext refused outside loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{free_port, run, BIN};

struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_port(port: u16) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "agent did not start"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn check_with_tls_init_material_succeeds_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    let out = run({
        let mut c = Command::new(BIN);
        c.args(["tls", "init"]).arg(&tls).args([
            "--san",
            "127.0.0.1",
            "--san",
            "node-1.pool.example",
        ]);
        c
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("kind: ExtensionServiceConfig"),
        "{printed}"
    );
    assert!(printed.contains("--tls-ca"), "{printed}");

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = Killed(
        Command::new(BIN)
            .args(["serve", "--listen", &listen])
            .arg("--tls-cert")
            .arg(tls.join("server.pem"))
            .arg("--tls-key")
            .arg(tls.join("server-key.pem"))
            .arg("--client-ca")
            .arg(tls.join("ca.pem"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(port);

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
            c.args(&args);
            c
        });
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(needle), "{err}");
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}

#[test]
fn insecure_plaintext_outside_loopback_starts_with_a_warning() {
    let port = free_port();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--insecure-plaintext",
            "--listen",
            &format!("0.0.0.0:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_port(port);
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARN") && err.contains("without mTLS"),
        "{err}"
    );
}
