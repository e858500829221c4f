//! Identities, against the real binary over real sockets: `tls init --node`
//! issues one server certificate per node and writes each node's
//! ExtensionServiceConfig to its own 0600 file (nothing secret on stdout);
//! `check --tls-server-name-from-node` holds each agent to its node's name,
//! so one node's key cannot answer for another; reports carry the machine
//! id only as its app-specific hash unless `serve --expose-machine-id`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    net::SocketAddr, os::unix::fs::PermissionsExt, path::Path, process::Command, time::Duration,
};

use common::{args, check, tls_init, Agent, AgentSpec, BIN};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The second line of a PEM block: a piece of its body, to look for.
fn body(pem: &str) -> String {
    pem.lines().nth(1).unwrap().to_string()
}

#[test]
fn tls_init_writes_one_private_config_per_node() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let list = tmp.path().join("nodes.txt");
    std::fs::write(&list, "# workers\nnode-b=127.0.0.3  # the second\n\n").unwrap();
    let printed = tls_init(
        &dir,
        &[
            "--node",
            "node-a=127.0.0.2,a.pool.example",
            "--nodes-file",
            list.to_str().unwrap(),
        ],
    );
    assert!(!printed.contains("-----BEGIN"), "PEM on stdout:\n{printed}");
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");

    let nodes = dir.join("nodes");
    assert_eq!(mode(&nodes), 0o700);
    let file = |node: &str, suffix: &str| nodes.join(format!("{node}.{suffix}"));
    let keys: Vec<String> = ["node-a", "node-b"]
        .iter()
        .map(|n| std::fs::read_to_string(file(n, "key.pem")).unwrap())
        .collect();
    let ca = std::fs::read_to_string(dir.join("ca.pem")).unwrap();
    for (i, node) in ["node-a", "node-b"].iter().enumerate() {
        let config = file(node, "yaml");
        assert!(printed.contains(&format!("nodes/{node}.yaml")), "{printed}");
        let text = std::fs::read_to_string(&config).unwrap();
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(doc["kind"].as_str(), Some("ExtensionServiceConfig"));
        assert_eq!(doc["name"].as_str(), Some("sandbox-readiness"));
        let files = doc["configFiles"].as_sequence().unwrap();
        let content = |at: usize| files[at]["content"].as_str().unwrap().to_string();
        assert_eq!(files.len(), 3);
        assert_eq!(
            content(0),
            std::fs::read_to_string(file(node, "cert.pem")).unwrap()
        );
        assert_eq!(content(1), keys[i], "{node}: not its own key");
        assert_eq!(content(2), ca);
        let other = &keys[1 - i];
        assert!(!text.contains(&body(other)), "{node} holds the other key");
        assert_eq!(doc["environment"].as_sequence().unwrap().len(), 3);
    }
    for d in [&dir, &nodes] {
        for entry in std::fs::read_dir(d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_file() {
                assert_eq!(mode(&p), 0o600, "{}", p.display());
            }
        }
    }
    // No shared server key was issued.
    assert!(!dir.join("server-key.pem").exists());

    // Nothing is replaced without --force.
    let again = Command::new(BIN)
        .args(["tls", "init"])
        .arg(&dir)
        .args(["--node", "node-a"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}

#[test]
fn tls_init_san_keeps_the_key_off_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let printed = tls_init(&dir, &["--san", "127.0.0.1"]);
    assert!(!printed.contains("-----BEGIN"), "PEM on stdout:\n{printed}");
    let config = dir.join("server.yaml");
    assert_eq!(mode(&config), 0o600);
    let key = std::fs::read_to_string(dir.join("server-key.pem")).unwrap();
    assert!(std::fs::read_to_string(&config)
        .unwrap()
        .contains(&body(&key)));
}

/// An agent serving `node`'s certificate from `pki`, on `listen`.
fn agent_as(pki: &Path, node: &str, listen: SocketAddr) -> Agent {
    let f = |suffix: &str| {
        pki.join("nodes")
            .join(format!("{node}.{suffix}"))
            .to_str()
            .unwrap()
            .to_string()
    };
    let ca = pki.join("ca.pem").to_str().unwrap().to_string();
    Agent::spawn(
        AgentSpec::new(
            None,
            &[
                "--tls-cert",
                &f("cert.pem"),
                "--tls-key",
                &f("key.pem"),
                "--client-ca",
                &ca,
            ],
        )
        .listening_on(vec![listen]),
    )
}

#[test]
fn check_holds_each_agent_to_its_node_name() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    // Certificates for the names only: the addresses dialled are in none.
    tls_init(&pki, &["--node", "node-a", "--node", "node-b"]);

    // Two nodes on one port (as a fleet is), at two loopback addresses.
    let a = agent_as(&pki, "node-a", "127.0.0.2:0".parse().unwrap());
    let port = a.port;
    let b = agent_as(&pki, "node-b", SocketAddr::from(([127, 0, 0, 3], port)));
    let list = tmp.path().join("nodes.json");
    let item = |name: &str, ip: &str| {
        serde_json::json!({"kind": "Node", "metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}})
    };
    std::fs::write(
        &list,
        serde_json::json!({"kind": "NodeList", "items":
            [item("node-a", "127.0.0.2"), item("node-b", "127.0.0.3")]})
        .to_string(),
    )
    .unwrap();
    let p = |f: &str| pki.join(f).to_str().unwrap().to_string();
    let run = |extra: &[&str]| {
        let mut a = args(&[
            "--kube-nodes",
            list.to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--tls-ca",
            &p("ca.pem"),
            "--tls-cert",
            &p("client.pem"),
            "--tls-key",
            &p("client-key.pem"),
            "--timeout",
            "5s",
            "-o",
            "json",
        ]);
        a.extend(args(extra));
        check(&a, Duration::from_secs(30))
    };
    let error_of = |doc: &serde_json::Value, node: &str| {
        doc["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == node)
            .map(|n| n["error"]["message"].as_str().unwrap_or("").to_string())
            .unwrap()
    };

    let ok = run(&["--tls-server-name-from-node"]);
    assert_eq!(ok.code(), 0, "{}\n{}", ok.stdout, ok.stderr);
    assert_eq!(ok.json()["nodesConverged"], 2);

    // By address, neither certificate matches.
    let by_address = run(&[]);
    assert_eq!(by_address.code(), 1, "{}", by_address.stdout);

    // Node A's agent now holds node B's key (a compromised node B's key
    // copied to A's address): it cannot pass as node A.
    drop(a);
    let swapped = agent_as(&pki, "node-b", SocketAddr::from(([127, 0, 0, 2], port)));
    let bad = run(&["--tls-server-name-from-node"]);
    assert_eq!(bad.code(), 1, "{}\n{}", bad.stdout, bad.stderr);
    let doc = bad.json();
    assert_eq!(doc["nodesConverged"], 1, "{}", bad.stdout);
    let err = error_of(&doc, "node-a");
    assert!(
        err.starts_with("TLS: ") && err.contains("not valid for name \"node-a\""),
        "{err}"
    );
    assert_eq!(error_of(&doc, "node-b"), "");
    drop((swapped, b));
}

/// The id `systemd-id128` computes for our application id, when it is
/// installed; else the library's (held to systemd's vectors in its unit
/// test).
fn expected_app_id(machine_id: &str) -> String {
    const APP_ID: &str = "52b13416175a4430ab23dc9b46f98e23";
    if common::on_path("systemd-id128").is_some() {
        let out = Command::new("systemd-id128")
            .args(["machine-id", &format!("--app-specific={APP_ID}")])
            .output()
            .unwrap();
        if out.status.success() {
            return String::from_utf8(out.stdout).unwrap().trim().to_string();
        }
    }
    sandbox_readiness::observe::node::app_specific_machine_id(machine_id).unwrap()
}

#[test]
fn reports_carry_the_app_specific_machine_id_not_the_raw_one() {
    let Ok(raw) = std::fs::read_to_string("/etc/machine-id") else {
        common::skip("no /etc/machine-id on this machine");
        return;
    };
    let raw = raw.trim().to_string();
    let want = expected_app_id(&raw);
    assert_eq!(want.len(), 32);

    let ask = |agent: &Agent| {
        let run = check(
            &args(&[
                "-n",
                &agent.addr.to_string(),
                "-o",
                "json",
                "--show-reports",
            ]),
            Duration::from_secs(30),
        );
        assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
        run
    };
    let hidden = ask(&Agent::start(None, &[]));
    let node = &hidden.json()["nodes"][0]["report"]["node"];
    assert_eq!(node["appSpecificMachineId"], want.as_str(), "{node}");
    assert!(
        node["machineId"].as_str().unwrap_or("").is_empty(),
        "{node}"
    );
    assert!(
        !hidden.stdout.contains(&raw),
        "the raw id is out: {}",
        hidden.stdout
    );

    let shown = ask(&Agent::start(None, &["--expose-machine-id"]));
    let node = &shown.json()["nodes"][0]["report"]["node"];
    assert_eq!(node["machineId"], raw.as_str());
    assert_eq!(node["appSpecificMachineId"], want.as_str());
}
