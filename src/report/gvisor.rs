//! The gVisor readiness summary: one verdict over the observed tiers, with
//! the sentences that led to it. Pure; reads only the report. Called by
//! [`super::derive()`] only.
//!
//! - NOT_INSTALLED: no runsc binary, and no handler of type
//!   `io.containerd.runsc.v1` configured anywhere (drop-ins or the live CRI).
//! - NOT_READY: some tier failed; one reason per failure.
//! - UNKNOWN: nothing failed, but something could not be decided.
//! - READY: everything observed holds.
//!
//! A handler on the kvm platform without `/dev/kvm` fails the summary only
//! when every runsc handler is on kvm: the Talos extension always installs
//! `runsc-kvm` beside `runsc`, and a VM without nested virtualisation can
//! still run every `runsc` pod. Otherwise it is a note appended to the reasons.

use std::collections::BTreeSet;

use super::names::{PRECONDITION_KVM, RUNSC, RUNSC_RUNTIME_TYPE, RUNSC_SHIM};
use crate::proto::v1::{
    Binary, ConfiguredHandler, CriRuntime, Gvisor, GvisorReadiness, ProbeOutcome,
};

/// The summary of `g` and the reasons for it, in tier order.
pub fn gvisor_readiness(g: &Gvisor) -> (GvisorReadiness, Vec<String>) {
    let runsc = g.binaries.iter().find(|b| b.name == RUNSC);
    let shim = g.binaries.iter().find(|b| b.name == RUNSC_SHIM);
    let configured: Vec<&ConfiguredHandler> = g
        .configured_handlers
        .iter()
        .filter(|h| h.runtime_type == RUNSC_RUNTIME_TYPE)
        .collect();
    let configured_names: BTreeSet<&str> = configured.iter().map(|h| h.name.as_str()).collect();
    let live_cri = g.cri.as_ref().filter(|c| c.reachable);
    let live_runsc: BTreeSet<&str> = live_cri
        .map(|c| {
            c.handlers
                .iter()
                .filter(|h| {
                    h.runtime_type == RUNSC_RUNTIME_TYPE
                        || h.name == RUNSC
                        || configured_names.contains(h.name.as_str())
                })
                .map(|h| h.name.as_str())
                .collect()
        })
        .unwrap_or_default();

    let runsc_present = runsc.is_some_and(|b| b.present);
    if !runsc_present && configured.is_empty() && live_runsc.is_empty() {
        let at = runsc.map(|b| format!(" at {}", b.path)).unwrap_or_default();
        return (
            GvisorReadiness::NotInstalled,
            vec![format!(
                "runsc is not installed{at}, and no CRI drop-in or live CRI handler registers a runtime of type {RUNSC_RUNTIME_TYPE}"
            )],
        );
    }

    let mut failed = Vec::new();
    let mut unknown = Vec::new();
    let mut notes = Vec::new();

    // Tier 1: binaries.
    match runsc {
        Some(b) => binary_reasons(b, true, &mut failed, &mut unknown),
        None => unknown.push(format!("{RUNSC} was not checked")),
    }
    match shim {
        Some(b) => binary_reasons(b, false, &mut failed, &mut unknown),
        None => unknown.push(format!("{RUNSC_SHIM} was not checked")),
    }

    // Tier 2: drop-ins.
    for d in g.drop_ins.iter().filter(|d| !d.parsed) {
        failed.push(format!(
            "CRI drop-in {} cannot be used: {}",
            d.path, d.error
        ));
    }
    for h in &configured {
        if !h.config_path.is_empty() && !h.config_path_exists {
            failed.push(format!(
                "handler {} (declared in {}) names ConfigPath {}, which does not exist",
                h.name, h.source, h.config_path
            ));
        }
    }

    // Tier 3: the live CRI.
    match (&g.cri, live_cri) {
        (None, _) => unknown.push("the live CRI was not asked".to_string()),
        (Some(c), None) => unknown.push(cri_unreachable(c)),
        (Some(_), Some(c)) if c.handlers_source.is_empty() && c.handlers.is_empty() => unknown
            .push(format!(
                "{} does not list its runtime handlers, so whether it serves runsc is unknown",
                runtime_label(c)
            )),
        (Some(_), Some(c)) => {
            let live: BTreeSet<&str> = c.handlers.iter().map(|h| h.name.as_str()).collect();
            for name in configured_names.iter().filter(|n| !live.contains(*n)) {
                let sources: BTreeSet<&str> = configured
                    .iter()
                    .filter(|h| h.name == *name)
                    .map(|h| h.source.as_str())
                    .collect();
                failed.push(format!(
                    "{} does not report the {name} handler configured in {}; containerd reads drop-ins only when it starts",
                    runtime_label(c),
                    sources.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
            if configured.is_empty() && live_runsc.is_empty() {
                failed.push(format!(
                    "no CRI drop-in registers a {RUNSC_RUNTIME_TYPE} handler, and {} reports none",
                    runtime_label(c)
                ));
            }
        }
    }
    if configured.is_empty() && live_cri.is_none() {
        unknown.push(format!(
            "no CRI drop-in registers a {RUNSC_RUNTIME_TYPE} handler, and the live CRI could not confirm one"
        ));
    }

    // Tier 4: host preconditions.
    let all_kvm = !configured.is_empty() && configured.iter().all(|h| h.platform == "kvm");
    for p in &g.preconditions {
        let kvm_note = p.name == PRECONDITION_KVM && !all_kvm;
        match (p.known, p.satisfied, kvm_note) {
            (_, true, _) => {}
            (true, false, false) => failed.push(p.detail.clone()),
            (false, false, false) => {
                unknown.push(format!("could not decide {}: {}", p.name, p.detail))
            }
            (true, false, true) => notes.push(format!(
                "{}; only the handlers on other platforms can start sandboxes",
                p.detail
            )),
            (false, false, true) => notes.push(p.detail.clone()),
        }
    }

    // Tier 5: the sandbox smoke probe (optional).
    if let Some(p) = &g.sandbox {
        match p.outcome() {
            ProbeOutcome::Failed => {
                failed.push(format!("the sandbox smoke probe failed: {}", p.message))
            }
            ProbeOutcome::Error => failed.push(format!(
                "the sandbox smoke probe could not run: {}",
                p.message
            )),
            _ => {}
        }
    }

    let (readiness, mut reasons) = if !failed.is_empty() {
        (GvisorReadiness::NotReady, failed)
    } else if !unknown.is_empty() {
        (GvisorReadiness::Unknown, unknown)
    } else {
        (
            GvisorReadiness::Ready,
            vec![ready_reason(g, runsc, &live_runsc)],
        )
    };
    reasons.extend(notes);
    (readiness, reasons)
}

fn binary_reasons(b: &Binary, is_runsc: bool, failed: &mut Vec<String>, unknown: &mut Vec<String>) {
    let (name, path) = (&b.name, &b.path);
    if !b.present {
        if b.error.is_empty() {
            failed.push(format!("{name} is missing at {path}"));
        } else {
            unknown.push(format!(
                "{name} at {path} could not be checked: {}",
                b.error
            ));
        }
    } else if !b.regular_file {
        failed.push(format!("{name} at {path} is not a regular file"));
    } else if !b.executable {
        failed.push(format!("{name} at {path} is not executable"));
    } else if is_runsc && !b.world_executable {
        failed.push(format!(
            "{name} at {path} is not readable and executable by everyone; runsc needs mode a+rx"
        ));
    } else if is_runsc && !b.error.is_empty() {
        failed.push(format!("{name} at {path} does not run: {}", b.error));
    }
}

fn runtime_label(c: &CriRuntime) -> String {
    let name = if c.runtime_name.is_empty() {
        "the CRI runtime"
    } else {
        c.runtime_name.as_str()
    };
    let version = if c.runtime_version.is_empty() {
        String::new()
    } else {
        format!(" {}", c.runtime_version)
    };
    if c.endpoint.is_empty() {
        format!("{name}{version}")
    } else {
        format!("{name}{version} at {}", c.endpoint)
    }
}

fn cri_unreachable(c: &CriRuntime) -> String {
    let at = if c.endpoint.is_empty() {
        String::new()
    } else {
        format!(" at {}", c.endpoint)
    };
    if c.error.is_empty() {
        format!("the CRI{at} could not be asked")
    } else {
        format!("the CRI{at} could not be asked: {}", c.error)
    }
}

fn ready_reason(g: &Gvisor, runsc: Option<&Binary>, live: &BTreeSet<&str>) -> String {
    let runsc = runsc.map_or_else(String::new, |b| {
        if b.version.is_empty() {
            format!("runsc at {}", b.path)
        } else {
            format!("runsc {} at {}", b.version, b.path)
        }
    });
    let handlers = live.iter().copied().collect::<Vec<_>>().join(", ");
    let probe = match g.sandbox.as_ref().map(|p| p.outcome()) {
        Some(ProbeOutcome::Passed) => "and a sandbox smoke probe passed",
        _ => "(the sandbox smoke probe was not run)",
    };
    format!(
        "{runsc} and its shim are installed, the CRI serves the handler(s) {handlers}, runsc's host preconditions hold {probe}"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::proto::v1::{DropIn, Precondition, Probe, RuntimeHandler};

    fn bin(name: &str, path: &str) -> Binary {
        Binary {
            name: name.into(),
            path: path.into(),
            present: true,
            regular_file: true,
            executable: true,
            world_executable: true,
            ..Binary::default()
        }
    }

    fn handler(name: &str, platform: &str) -> ConfiguredHandler {
        ConfiguredHandler {
            name: name.into(),
            plugin_key: "io.containerd.cri.v1.runtime".into(),
            runtime_type: RUNSC_RUNTIME_TYPE.into(),
            config_path: format!("/etc/cri/conf.d/{name}.toml"),
            config_path_exists: true,
            platform: platform.into(),
            source: format!(
                "/etc/cri/conf.d/10-gvisor{}.part",
                if platform == "kvm" { "-kvm" } else { "" }
            ),
        }
    }

    fn pre(name: &str, satisfied: bool, known: bool) -> Precondition {
        Precondition {
            name: name.into(),
            satisfied,
            known,
            detail: format!("{name} detail"),
        }
    }

    fn probe(outcome: ProbeOutcome, message: &str) -> Probe {
        Probe {
            outcome: outcome as i32,
            message: message.into(),
            ..Probe::default()
        }
    }

    /// A Talos node with the gVisor extension where everything holds.
    fn ready() -> Gvisor {
        let mut runsc = bin("runsc", "/usr/local/bin/runsc");
        runsc.version = "release-20260810.0".into();
        Gvisor {
            binaries: vec![
                runsc,
                bin(
                    "containerd-shim-runsc-v1",
                    "/usr/local/bin/containerd-shim-runsc-v1",
                ),
            ],
            drop_ins: vec![DropIn {
                path: "/etc/cri/conf.d/10-gvisor.part".into(),
                parsed: true,
                error: String::new(),
            }],
            configured_handlers: vec![handler("runsc", ""), handler("runsc-kvm", "kvm")],
            cri: Some(CriRuntime {
                endpoint: "unix:///run/containerd/containerd.sock".into(),
                reachable: true,
                runtime_name: "containerd".into(),
                runtime_version: "v2.1.4".into(),
                handlers: ["runc", "runsc", "runsc-kvm"]
                    .iter()
                    .map(|n| RuntimeHandler {
                        name: (*n).into(),
                        ..RuntimeHandler::default()
                    })
                    .collect(),
                handlers_source: "runtime_handlers".into(),
                ..CriRuntime::default()
            }),
            preconditions: vec![
                pre("user.max_user_namespaces", true, true),
                pre("kernel.yama.ptrace_scope", true, true),
                pre(PRECONDITION_KVM, true, true),
            ],
            sandbox: Some(probe(ProbeOutcome::Passed, "passed")),
            ..Gvisor::default()
        }
    }

    fn not_installed() -> Gvisor {
        let mut g = Gvisor {
            binaries: vec![
                bin("runsc", "/usr/local/bin/runsc"),
                bin("containerd-shim-runsc-v1", "/s"),
            ],
            cri: Some(CriRuntime {
                reachable: true,
                handlers: vec![RuntimeHandler {
                    name: "runc".into(),
                    ..RuntimeHandler::default()
                }],
                handlers_source: "runtime_handlers".into(),
                ..CriRuntime::default()
            }),
            ..Gvisor::default()
        };
        for b in &mut g.binaries {
            b.present = false;
            b.regular_file = false;
            b.executable = false;
            b.world_executable = false;
        }
        g
    }

    type Case = (
        &'static str,
        fn(&mut Gvisor),
        GvisorReadiness,
        &'static [&'static str],
    );

    #[test]
    fn table() {
        use GvisorReadiness::*;
        let cases: &[Case] = &[
            ("all tiers hold", |_| {}, Ready, &["runsc release-20260810.0 at /usr/local/bin/runsc", "runsc, runsc-kvm", "smoke probe passed"]),
            ("smoke probe not run", |g| g.sandbox = None, Ready, &["was not run"]),
            ("smoke probe skipped", |g| g.sandbox = Some(probe(ProbeOutcome::Skipped, "off")), Ready, &["was not run"]),
            ("runsc missing, handler configured", |g| g.binaries[0].present = false, NotReady, &["runsc is missing at /usr/local/bin/runsc"]),
            ("runsc a directory", |g| g.binaries[0].regular_file = false, NotReady, &["runsc at /usr/local/bin/runsc is not a regular file"]),
            ("runsc not executable", |g| g.binaries[0].executable = false, NotReady, &["is not executable"]),
            ("runsc not world-executable", |g| g.binaries[0].world_executable = false, NotReady, &["a+rx"]),
            ("runsc --version hangs", |g| g.binaries[0].error = "runsc --version did not finish within 2s".into(), NotReady, &["does not run: runsc --version did not finish"]),
            ("runsc cannot be stat'ed", |g| { g.binaries[0].present = false; g.binaries[0].error = "EACCES".into() }, Unknown, &["could not be checked: EACCES"]),
            ("shim missing", |g| g.binaries[1].present = false, NotReady, &["containerd-shim-runsc-v1 is missing at /usr/local/bin/containerd-shim-runsc-v1"]),
            ("shim not executable", |g| g.binaries[1].executable = false, NotReady, &["containerd-shim-runsc-v1 at /usr/local/bin/containerd-shim-runsc-v1 is not executable"]),
            ("shim need not be world-executable", |g| g.binaries[1].world_executable = false, Ready, &[]),
            ("malformed drop-in", |g| g.drop_ins.push(DropIn { path: "/etc/cri/conf.d/20-x.part".into(), parsed: false, error: "TOML error at line 1".into() }), NotReady, &["CRI drop-in /etc/cri/conf.d/20-x.part cannot be used: TOML error at line 1"]),
            ("ConfigPath missing", |g| g.configured_handlers[0].config_path_exists = false, NotReady, &["names ConfigPath /etc/cri/conf.d/runsc.toml, which does not exist"]),
            ("ConfigPath unset is fine", |g| g.configured_handlers[0].config_path = String::new(), Ready, &[]),
            ("CRI misses a configured handler", |g| g.cri.as_mut().unwrap().handlers.retain(|h| h.name != "runsc-kvm"), NotReady, &["does not report the runsc-kvm handler configured in /etc/cri/conf.d/10-gvisor-kvm.part"]),
            ("CRI unreachable", |g| { let c = g.cri.as_mut().unwrap(); c.reachable = false; c.error = "connection refused".into() }, Unknown, &["could not be asked: connection refused"]),
            ("CRI not asked", |g| g.cri = None, Unknown, &["was not asked"]),
            ("CRI lists no handlers at all (CRI-O)", |g| { let c = g.cri.as_mut().unwrap(); c.handlers.clear(); c.handlers_source.clear() }, Unknown, &["does not list its runtime handlers"]),
            ("handler only in the live CRI (no Talos drop-in)", |g| { g.configured_handlers.clear(); g.preconditions.pop(); }, Ready, &["handler(s) runsc,"]),
            ("no handler anywhere, runsc installed", |g| { g.configured_handlers.clear(); g.cri.as_mut().unwrap().handlers.retain(|h| h.name == "runc"); g.preconditions.pop(); }, NotReady, &["no CRI drop-in registers a io.containerd.runsc.v1 handler, and containerd v2.1.4"]),
            ("no drop-in, CRI unreachable", |g| { g.configured_handlers.clear(); g.cri.as_mut().unwrap().reachable = false; g.preconditions.pop(); }, Unknown, &["could not confirm one"]),
            ("max_user_namespaces 0", |g| g.preconditions[0] = Precondition { name: "user.max_user_namespaces".into(), satisfied: false, known: true, detail: "user.max_user_namespaces is 0; runsc needs at least 2".into() }, NotReady, &["user.max_user_namespaces is 0; runsc needs at least 2"]),
            ("ptrace_scope unreadable", |g| g.preconditions[1] = pre("kernel.yama.ptrace_scope", false, false), Unknown, &["could not decide kernel.yama.ptrace_scope"]),
            ("no /dev/kvm but a systrap handler exists", |g| g.preconditions[2] = pre(PRECONDITION_KVM, false, true), Ready, &["smoke probe passed", "/dev/kvm detail; only the handlers on other platforms"]),
            ("/dev/kvm undecidable but a systrap handler exists", |g| g.preconditions[2] = pre(PRECONDITION_KVM, false, false), Ready, &["/dev/kvm detail"]),
            ("/dev/kvm undecidable and only kvm handlers", |g| { g.configured_handlers.remove(0); g.preconditions[2] = pre(PRECONDITION_KVM, false, false) }, Unknown, &["could not decide /dev/kvm"]),
            ("no /dev/kvm and only kvm handlers", |g| { g.configured_handlers.remove(0); g.preconditions[2] = pre(PRECONDITION_KVM, false, true) }, NotReady, &["/dev/kvm detail"]),
            ("smoke probe failed", |g| g.sandbox = Some(probe(ProbeOutcome::Failed, "fork/exec /proc/self/exe: no space left on device")), NotReady, &["the sandbox smoke probe failed: fork/exec /proc/self/exe: no space left on device"]),
            ("smoke probe timed out", |g| g.sandbox = Some(probe(ProbeOutcome::Error, "did not finish within 10s")), NotReady, &["could not run: did not finish within 10s"]),
            ("failures win over unknowns", |g| { g.binaries[1].present = false; g.cri = None }, NotReady, &["containerd-shim-runsc-v1 is missing"]),
        ];
        for (name, mutate, want, needles) in cases {
            let mut g = ready();
            mutate(&mut g);
            let (got, reasons) = gvisor_readiness(&g);
            assert_eq!(got, *want, "{name}: {reasons:?}");
            assert!(!reasons.is_empty(), "{name}: no reasons");
            for n in *needles {
                assert!(
                    reasons.iter().any(|r| r.contains(n)),
                    "{name}: no reason contains {n:?}: {reasons:?}"
                );
            }
        }
    }

    #[test]
    fn not_ready_lists_one_reason_per_failure_and_nothing_else() {
        let mut g = ready();
        g.binaries[1].present = false;
        g.sandbox = Some(probe(ProbeOutcome::Failed, "boom"));
        g.cri = None; // unknown, must not appear under NOT_READY
        let (r, reasons) = gvisor_readiness(&g);
        assert_eq!(r, GvisorReadiness::NotReady);
        assert_eq!(reasons.len(), 2, "{reasons:?}");
    }

    #[test]
    fn not_installed_only_when_nothing_is_there() {
        let (r, reasons) = gvisor_readiness(&not_installed());
        assert_eq!(r, GvisorReadiness::NotInstalled, "{reasons:?}");
        assert!(reasons[0].contains("runsc is not installed at /usr/local/bin/runsc"));

        // A live runsc handler alone means someone installed gVisor.
        let mut g = not_installed();
        g.cri.as_mut().unwrap().handlers.push(RuntimeHandler {
            name: "runsc".into(),
            ..RuntimeHandler::default()
        });
        let (r, reasons) = gvisor_readiness(&g);
        assert_eq!(r, GvisorReadiness::NotReady);
        assert!(
            reasons.iter().any(|r| r.contains("runsc is missing")),
            "{reasons:?}"
        );

        // So does a drop-in.
        let mut g = not_installed();
        g.configured_handlers.push(handler("runsc", ""));
        assert_eq!(gvisor_readiness(&g).0, GvisorReadiness::NotReady);

        // A drop-in for another runtime does not.
        let mut g = not_installed();
        let mut runc = handler("runc", "");
        runc.runtime_type = "io.containerd.runc.v2".into();
        g.configured_handlers.push(runc);
        assert_eq!(gvisor_readiness(&g).0, GvisorReadiness::NotInstalled);

        // Nothing observed at all.
        assert_eq!(
            gvisor_readiness(&Gvisor::default()).0,
            GvisorReadiness::NotInstalled
        );
    }
}
