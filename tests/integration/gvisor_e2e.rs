//! Every gVisor tier at once against real parts: Debian's containerd on a
//! private socket with a CRI config registering runsc, Debian's runsc
//! starting a real sandbox, and Debian's missing shim as the reason the node
//! is not ready.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::support;

use std::process::Command;

use common::{run, BIN};
use serde_json::Value;
use support::containerd::{Containerd, Options};

fn probe(endpoint: &str, conf_dir: &std::path::Path, extra: &[&str]) -> (i32, Value, String) {
    let command = |json: bool| {
        let mut c = Command::new(BIN);
        c.args([
            "probe",
            "--cri-endpoint",
            endpoint,
            "--runsc-path",
            "/usr/bin/runsc",
        ])
        .arg("--cri-conf-dir")
        .arg(conf_dir)
        .args(["--require-runtime-handler", "runsc"])
        .args(extra);
        if json {
            c.args(["-o", "json"]);
        }
        c
    };
    let out = run(command(true));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let table = String::from_utf8_lossy(&run(command(false)).stdout).into_owned();
    (out.status.code().unwrap_or(-1), doc, table)
}

fn codes(doc: &Value) -> Vec<String> {
    doc["verdict"]["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["code"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn live_handler_real_sandbox_and_the_missing_shim_as_the_reason() {
    let ctd = Containerd::start(Options::with_runsc());
    let conf = tempfile::tempdir().unwrap();
    let (code, doc, table) = probe(&ctd.endpoint(), conf.path(), &["--sandbox-probe"]);
    let g = &doc["report"]["gvisor"];

    // Live CRI: containerd 1.6 answers, runsc found in info.config.
    let cri = &g["cri"];
    assert_eq!(cri["reachable"], Value::Bool(true), "{cri:#}");
    assert_eq!(cri["runtimeName"], "containerd");
    assert_eq!(cri["handlersSource"], "info.config");
    let runsc = cri["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "runsc")
        .expect("runsc handler live");
    assert_eq!(runsc["runtimeType"], "io.containerd.runsc.v1");

    // The real sandbox started.
    assert_eq!(
        g["sandbox"]["outcome"], "PROBE_OUTCOME_PASSED",
        "{:#}",
        g["sandbox"]
    );

    // runsc present, the shim absent (Debian ships none): NOT_READY because of it.
    let bins = g["binaries"].as_array().unwrap();
    assert!(bins
        .iter()
        .any(|b| b["name"] == "runsc" && b["present"] == Value::Bool(true)));
    assert!(bins
        .iter()
        .any(|b| b["name"] == "containerd-shim-runsc-v1" && b["present"] == Value::Bool(false)));
    assert_eq!(g["readiness"], "GVISOR_READINESS_NOT_READY");
    let reasons: Vec<&str> = g["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("containerd-shim-runsc-v1")),
        "{reasons:?}"
    );

    // --require-runtime-handler runsc: registered live, but its shim is missing.
    assert_eq!(code, 1);
    assert_eq!(codes(&doc), ["RUNTIME_SHIM_MISSING"]);

    // The table shows every tier to a person.
    for needle in [
        "gVisor: NOT_READY",
        "binaries",
        "CRI drop-ins",
        "live CRI",
        "containerd",
        "host preconditions",
        "sandbox smoke probe",
        "passed",
    ] {
        assert!(table.contains(needle), "missing {needle:?} in:\n{table}");
    }
    eprintln!("{table}");
}

#[test]
fn without_the_handler_the_requirement_fails_with_runtime_handler_missing() {
    let ctd = Containerd::start(Options::runc_only());
    let conf = tempfile::tempdir().unwrap();
    let (code, doc, _) = probe(&ctd.endpoint(), conf.path(), &[]);
    assert_eq!(code, 1);
    assert_eq!(codes(&doc), ["RUNTIME_HANDLER_MISSING"]);
    assert_eq!(
        doc["report"]["gvisor"]["cri"]["reachable"],
        Value::Bool(true)
    );
}
