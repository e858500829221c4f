//! Table tests of the evaluation.

use super::*;
use crate::proto::v1::{Binary, CriRuntime, RuntimeHandler, Sysctl, UserNamespaces};

fn sysctl(name: &str, state: SysctlState, value: &str) -> Sysctl {
    Sysctl {
        name: name.into(),
        state: state as i32,
        value: value.into(),
        error: if state == SysctlState::Unreadable {
            "EACCES".into()
        } else {
            String::new()
        },
    }
}

fn probe(outcome: ProbeOutcome, message: &str) -> Option<Probe> {
    Some(Probe {
        outcome: outcome as i32,
        message: message.into(),
        ..Probe::default()
    })
}

fn node(limit: &str, userns: ProbeOutcome) -> Report {
    Report {
        user_namespaces: Some(UserNamespaces {
            sysctls: vec![
                sysctl("user.max_user_namespaces", SysctlState::Present, limit),
                sysctl("kernel.unprivileged_userns_clone", SysctlState::Absent, ""),
                sysctl("kernel.yama.ptrace_scope", SysctlState::Unreadable, ""),
            ],
            initial_user_namespace: true,
            userns_create: probe(userns, "user.max_user_namespaces limit reached"),
            idmap_mount: probe(ProbeOutcome::Skipped, "needs a user namespace"),
            ..UserNamespaces::default()
        }),
        sysctls: vec![sysctl(
            "net.ipv4.ip_local_port_range",
            SysctlState::Present,
            "32768\t60999",
        )],
        ..Report::default()
    }
}

fn want(pairs: &[(&str, &str)]) -> DesiredState {
    DesiredState {
        sysctls: pairs
            .iter()
            .map(|(n, v)| SysctlExpectation {
                name: (*n).into(),
                value: (*v).into(),
            })
            .collect(),
        ..DesiredState::default()
    }
}

fn codes(v: &Verdict) -> Vec<&str> {
    v.findings.iter().map(|f| f.code.as_str()).collect()
}

#[test]
fn sysctl_table() {
    struct Case {
        limit: &'static str,
        desired: &'static [(&'static str, &'static str)],
        converged: bool,
        codes: &'static [&'static str],
    }
    let cases = [
        Case {
            limit: "11255",
            desired: &[("user.max_user_namespaces", "11255")],
            converged: true,
            codes: &[],
        },
        Case {
            limit: "11255\n",
            desired: &[("user.max_user_namespaces", " 11255 ")],
            converged: true,
            codes: &[],
        },
        Case {
            limit: "0",
            desired: &[("user.max_user_namespaces", "11255")],
            converged: false,
            codes: &["SYSCTL_MISMATCH"],
        },
        Case {
            limit: "0",
            desired: &[("kernel.unprivileged_userns_clone", "1")],
            converged: false,
            codes: &["SYSCTL_MISSING"],
        },
        Case {
            limit: "0",
            desired: &[("kernel.yama.ptrace_scope", "2")],
            converged: false,
            codes: &["SYSCTL_UNREADABLE"],
        },
        Case {
            limit: "0",
            desired: &[("vm.not_observed", "1")],
            converged: false,
            codes: &["SYSCTL_MISSING"],
        },
        Case {
            limit: "0",
            desired: &[("net.ipv4.ip_local_port_range", "32768 60999")],
            converged: true,
            codes: &[],
        },
        Case {
            limit: "0",
            desired: &[("net.ipv4.ip_local_port_range", "32768 61000")],
            converged: false,
            codes: &["SYSCTL_MISMATCH"],
        },
        Case {
            limit: "0",
            desired: &[("net.ipv4.ip_local_port_range", "32768")],
            converged: false,
            codes: &["SYSCTL_MISMATCH"],
        },
        Case {
            limit: "0",
            desired: &[("../../etc/shadow", "x")],
            converged: false,
            codes: &["SYSCTL_INVALID_NAME"],
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let v = evaluate(&node(c.limit, ProbeOutcome::Passed), &want(c.desired));
        assert_eq!(v.converged, c.converged, "case {i}: {:?}", v.findings);
        assert_eq!(codes(&v), c.codes, "case {i}");
    }
}

#[test]
fn mismatch_message_names_both_values() {
    let v = evaluate(
        &node("0", ProbeOutcome::Passed),
        &want(&[("user.max_user_namespaces", "11255")]),
    );
    assert_eq!(
        v.findings[0].message,
        "user.max_user_namespaces is 0, expected 11255"
    );
    assert_eq!(
        (
            v.findings[0].expected.as_str(),
            v.findings[0].actual.as_str()
        ),
        ("11255", "0")
    );
}

#[test]
fn probes_and_the_namespace_note() {
    let mut d = DesiredState {
        require_userns: true,
        require_idmap_mounts: true,
        ..DesiredState::default()
    };
    let v = evaluate(&node("0", ProbeOutcome::Failed), &d);
    assert_eq!(codes(&v), ["USERNS_CREATE_FAILED", "IDMAP_MOUNT_FAILED"]);
    assert!(v.findings[0].message.contains("limit reached"));

    let mut r = node("11255", ProbeOutcome::Passed);
    if let Some(u) = r.user_namespaces.as_mut() {
        u.initial_user_namespace = false;
        u.idmap_mount = probe(ProbeOutcome::Passed, "ok");
    }
    let v = evaluate(&r, &d);
    assert!(v.converged, "{:?}", v.findings);
    assert_eq!(codes(&v), ["NOT_INITIAL_USER_NAMESPACE"]);
    assert!(!v.findings[0].blocking);

    d.require_userns = false;
    d.require_idmap_mounts = false;
    assert!(evaluate(&r, &d).findings.is_empty());
}

fn gvisor_node(handlers: &[&str], shim_present: bool, reachable: bool) -> Report {
    Report {
        gvisor: Some(Gvisor {
            readiness: GvisorReadiness::NotReady as i32,
            reasons: vec!["containerd-shim-runsc-v1 is missing".into()],
            binaries: vec![Binary {
                name: "containerd-shim-runsc-v1".into(),
                path: "/usr/local/bin/containerd-shim-runsc-v1".into(),
                present: shim_present,
                regular_file: shim_present,
                executable: shim_present,
                ..Binary::default()
            }],
            cri: Some(CriRuntime {
                endpoint: "unix:///run/containerd/containerd.sock".into(),
                reachable,
                error: if reachable {
                    String::new()
                } else {
                    "connection refused".into()
                },
                handlers: handlers
                    .iter()
                    .map(|h| RuntimeHandler {
                        name: (*h).into(),
                        runtime_type: if *h == "runsc" {
                            "io.containerd.runsc.v1".into()
                        } else {
                            "io.containerd.runc.v2".into()
                        },
                        ..RuntimeHandler::default()
                    })
                    .collect(),
                ..CriRuntime::default()
            }),
            sandbox: probe(
                ProbeOutcome::Failed,
                "fork/exec /proc/self/exe: no space left on device",
            ),
            ..Gvisor::default()
        }),
        ..Report::default()
    }
}

#[test]
fn gvisor_table() {
    let handler = |h: &str| DesiredState {
        require_runtime_handlers: vec![h.into()],
        ..DesiredState::default()
    };
    let v = evaluate(
        &gvisor_node(&["runc", "runsc"], true, true),
        &handler("runsc"),
    );
    assert!(v.converged, "{:?}", v.findings);
    assert_eq!(
        codes(&evaluate(
            &gvisor_node(&["runc"], true, true),
            &handler("runsc")
        )),
        ["RUNTIME_HANDLER_MISSING"]
    );
    assert_eq!(
        codes(&evaluate(
            &gvisor_node(&["runc", "runsc"], false, true),
            &handler("runsc")
        )),
        ["RUNTIME_SHIM_MISSING"]
    );
    assert_eq!(
        codes(&evaluate(
            &gvisor_node(&["runsc"], true, false),
            &handler("runsc")
        )),
        ["CRI_UNREACHABLE"]
    );
    // runc's shim is not among the observed binaries: not judged.
    assert!(evaluate(&gvisor_node(&["runc"], false, true), &handler("runc")).converged);

    let g = DesiredState {
        require_gvisor: true,
        require_sandbox_probe: true,
        ..DesiredState::default()
    };
    let v = evaluate(&gvisor_node(&["runsc"], true, true), &g);
    assert_eq!(codes(&v), ["GVISOR_NOT_READY", "SANDBOX_PROBE_FAILED"]);
    assert!(v.findings[0].message.contains("shim"));
    assert!(v.findings[1].message.contains("no space left on device"));
    assert_eq!(
        codes(&evaluate(&Report::default(), &g)),
        ["GVISOR_NOT_READY", "SANDBOX_PROBE_NOT_RUN"]
    );
}

#[test]
fn validates_desired_states() {
    assert!(parse_sysctl_flag("user.max_user_namespaces=11255").is_ok());
    assert_eq!(
        parse_sysctl_flag("net.ipv4.ip_local_port_range=1 2").map(|e| e.value),
        Ok("1 2".to_string())
    );
    assert!(matches!(
        parse_sysctl_flag("novalue"),
        Err(DesiredError::NotAssignment(_))
    ));
    assert!(matches!(
        parse_sysctl_flag("../x=1"),
        Err(DesiredError::Name(_))
    ));
    let many = DesiredState {
        sysctls: (0..65)
            .map(|i| SysctlExpectation {
                name: format!("a.b{i}"),
                value: "1".into(),
            })
            .collect(),
        ..DesiredState::default()
    };
    assert_eq!(validate(&many), Err(DesiredError::TooManySysctls(65)));
    let bad_handler = DesiredState {
        require_runtime_handlers: vec!["../runsc".into()],
        ..DesiredState::default()
    };
    assert!(matches!(
        validate(&bad_handler),
        Err(DesiredError::HandlerName(_))
    ));
    assert_eq!(
        shim_binary("io.containerd.runsc.v1").as_deref(),
        Some("containerd-shim-runsc-v1")
    );
    assert_eq!(shim_binary("bogus"), None);
}

/// The codes are a wire promise: each string is unique and is exactly
/// the list in the proto's comment above `message Finding`.
#[test]
fn finding_codes_are_unique_and_match_the_proto() {
    let proto = include_str!("../../proto/sandbox_readiness/v1/readiness.proto");
    let start = proto.find("// Finding codes (stable):").unwrap();
    let end = start + proto[start..].find("message Finding").unwrap();
    let listed: Vec<&str> = proto[start..end]
        .trim_start_matches("// Finding codes (stable):")
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|w| w.len() > 1 && w.contains('_'))
        .collect();
    let ours: Vec<&str> = FindingCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(ours, listed);
    let unique: std::collections::BTreeSet<&str> = ours.iter().copied().collect();
    assert_eq!(unique.len(), ours.len(), "{ours:?}");
    assert!(ours
        .iter()
        .all(|c| c.chars().all(|ch| ch.is_ascii_uppercase() || ch == '_')));
}

/// A node whose own probes pass, with a CRI reporting `handlers`.
fn pod_userns_node(source: &str, handlers: Vec<RuntimeHandler>, state: ProbeOutcome) -> Report {
    let passed = || probe(ProbeOutcome::Passed, "ok");
    Report {
        user_namespaces: Some(UserNamespaces {
            initial_user_namespace: true,
            userns_create: passed(),
            idmap_mount: passed(),
            runtime_state_idmap: probe(state, "refused"),
            ..UserNamespaces::default()
        }),
        gvisor: Some(Gvisor {
            cri: Some(CriRuntime {
                reachable: true,
                runtime_name: "containerd".into(),
                handlers_source: source.into(),
                handlers,
                ..CriRuntime::default()
            }),
            ..Gvisor::default()
        }),
        ..Report::default()
    }
}

fn rh(name: &str, userns: Option<bool>) -> RuntimeHandler {
    RuntimeHandler {
        name: name.into(),
        user_namespaces: userns,
        ..RuntimeHandler::default()
    }
}

#[test]
fn pod_userns_reads_the_handler_features_as_kubelet_does() {
    use crate::report::names::{SOURCE_INFO_CONFIG, SOURCE_RUNTIME_HANDLERS};
    let d = |h: &[&str]| DesiredState {
        require_pod_userns: h.iter().map(|s| (*s).to_string()).collect(),
        ..DesiredState::default()
    };
    let handlers = || {
        vec![
            rh("", Some(true)),
            rh("runc", Some(true)),
            rh("old", Some(false)),
            rh("runsc", None),
        ]
    };
    let ok = pod_userns_node(SOURCE_RUNTIME_HANDLERS, handlers(), ProbeOutcome::Passed);
    let v = evaluate(&ok, &d(&["runc", "default"]));
    assert!(v.converged, "{v:?}");
    let v = evaluate(&ok, &d(&["old", "runsc", "missing"]));
    assert_eq!(codes(&v), ["POD_USERNS_UNSUPPORTED"; 3]);
    assert!(v.findings[0].message.contains("runc >= 1.2 or crun >= 1.9"));
    assert!(v.findings[1].message.contains("reports no features"));
    // containerd 1.x: no runtime_handlers, whatever info.config lists.
    let old = pod_userns_node(
        SOURCE_INFO_CONFIG,
        vec![rh("runc", None)],
        ProbeOutcome::Passed,
    );
    let v = evaluate(&old, &d(&["runc"]));
    assert_eq!(codes(&v), ["POD_USERNS_UNSUPPORTED"]);
    assert!(v.findings[0].message.contains("containerd >= 2.0"));
    // The runtime's filesystem refusing idmapped mounts blocks on its own.
    let fs = pod_userns_node(SOURCE_RUNTIME_HANDLERS, handlers(), ProbeOutcome::Failed);
    assert_eq!(
        codes(&evaluate(&fs, &d(&["runc"]))),
        ["RUNTIME_STATE_IDMAP_FAILED"]
    );
    // So does a failing user namespace, with its own code.
    let mut no_userns = ok.clone();
    if let Some(u) = no_userns.user_namespaces.as_mut() {
        u.userns_create = probe(ProbeOutcome::Failed, "ENOSPC");
    }
    assert_eq!(
        codes(&evaluate(&no_userns, &d(&["runc"]))),
        ["USERNS_CREATE_FAILED"]
    );
    // A CRI that cannot be asked is not "supported".
    let mut down = ok;
    if let Some(c) = down.gvisor.as_mut().and_then(|g| g.cri.as_mut()) {
        c.reachable = false;
    }
    assert_eq!(codes(&evaluate(&down, &d(&["runc"]))), ["CRI_UNREACHABLE"]);
    assert!(validate(&d(&["Bad"])).is_err());
    assert!(!is_empty(&d(&["runc"])));
}

fn canary(handler: &str, outcome: ProbeOutcome, message: &str) -> Canary {
    Canary {
        handler: handler.into(),
        result: probe(outcome, message),
        ..Canary::default()
    }
}

/// A node whose sandbox probe was skipped for `why`, with runsc (and a
/// runsc-kvm) registered, and these canaries.
fn skipped_sandbox_node(why: &str, canaries: Vec<Canary>) -> Report {
    use crate::proto::v1::ConfiguredHandler;
    let handler = |name: &str, runtime_type: &str| ConfiguredHandler {
        name: name.into(),
        runtime_type: runtime_type.into(),
        ..ConfiguredHandler::default()
    };
    Report {
        gvisor: Some(Gvisor {
            configured_handlers: vec![
                handler("runsc", RUNSC_RUNTIME_TYPE),
                handler("runsc-kvm", RUNSC_RUNTIME_TYPE),
                handler("runc", "io.containerd.runc.v2"),
            ],
            sandbox: probe(ProbeOutcome::Skipped, why),
            ..Gvisor::default()
        }),
        canaries,
        ..Report::default()
    }
}

fn sandbox_codes(r: &Report) -> Vec<(String, String)> {
    let d = DesiredState {
        require_sandbox_probe: true,
        ..DesiredState::default()
    };
    evaluate(r, &d)
        .findings
        .into_iter()
        .map(|f| (f.code, f.message))
        .collect()
}

#[test]
fn canaries_stand_in_for_the_sandbox_probe_only_where_runsc_cannot_run() {
    let here = format!("{CANNOT_RUN_HERE}, whatever the node can do: no cgroup filesystem");
    let pass = |h: &str| canary(h, ProbeOutcome::Passed, "ok");
    // Where runsc cannot run: the gVisor handlers' canaries, not runc's.
    let r = skipped_sandbox_node(&here, vec![]);
    assert_eq!(sandbox_probe_canaries(&r), ["runsc", "runsc-kvm"]);
    let found = sandbox_codes(&r);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "SANDBOX_PROBE_NOT_RUN");
    assert!(found[0].1.contains("--allow-canary"), "{}", found[0].1);
    assert!(found[0].1.contains("runsc, runsc-kvm"), "{}", found[0].1);
    // Every gVisor handler's canary passed: satisfied.
    assert!(sandbox_codes(&skipped_sandbox_node(
        &here,
        vec![pass("runsc"), pass("runsc-kvm")]
    ))
    .is_empty());
    // One passed, one missing: still not run.
    let found = sandbox_codes(&skipped_sandbox_node(&here, vec![pass("runsc")]));
    assert_eq!(found[0].0, "SANDBOX_PROBE_NOT_RUN", "{found:?}");
    // A failed canary is a failed sandbox, named.
    let broken = canary("runsc-kvm", ProbeOutcome::Failed, "no /dev/kvm");
    let found = sandbox_codes(&skipped_sandbox_node(&here, vec![pass("runsc"), broken]));
    assert_eq!(found[0].0, "SANDBOX_PROBE_FAILED", "{found:?}");
    assert!(
        found[0].1.contains("runsc-kvm: no /dev/kvm"),
        "{}",
        found[0].1
    );
    // Skipped for another reason (not asked): no stand-in.
    let r = skipped_sandbox_node(
        "not run (ask for it)",
        vec![pass("runsc"), pass("runsc-kvm")],
    );
    assert!(sandbox_probe_canaries(&r).is_empty());
    assert_eq!(sandbox_codes(&r)[0].0, "SANDBOX_PROBE_NOT_RUN");
}

#[test]
fn required_canaries_by_outcome() {
    let d = DesiredState {
        require_canary: vec!["runc".into()],
        ..DesiredState::default()
    };
    let judge = |c: Vec<Canary>| {
        let r = Report {
            canaries: c,
            ..Report::default()
        };
        evaluate(&r, &d)
    };
    assert!(judge(vec![canary("runc", ProbeOutcome::Passed, "ok")]).converged);
    let cases = [
        (None, "CANARY_NOT_RUN"),
        (Some(ProbeOutcome::Skipped), "CANARY_NOT_RUN"),
        (Some(ProbeOutcome::Failed), "CANARY_FAILED"),
        (Some(ProbeOutcome::Error), "CANARY_FAILED"),
        (Some(ProbeOutcome::Inconclusive), "CANARY_INCONCLUSIVE"),
    ];
    for (outcome, code) in cases {
        let c = outcome
            .map(|o| canary("runc", o, "why"))
            .into_iter()
            .collect();
        let v = judge(c);
        assert!(!v.converged, "{outcome:?}");
        assert_eq!(v.findings.len(), 1, "{outcome:?}");
        assert_eq!(v.findings[0].code, code, "{outcome:?}");
        assert!(v.findings[0].blocking);
        assert!(v.findings[0].message.contains("handler runc"));
    }
    // Another handler's canary does not count.
    assert!(!judge(vec![canary("runsc", ProbeOutcome::Passed, "ok")]).converged);
    // Bad names are refused like the other handler lists.
    let bad = DesiredState {
        require_canary: vec!["Runc!".into()],
        ..DesiredState::default()
    };
    assert!(validate(&bad).is_err());
    assert!(!is_empty(&d));
}

#[test]
fn no_runtime_root_is_not_applicable_until_pod_userns_asks_for_it() {
    use crate::report::names::SOURCE_RUNTIME_HANDLERS;
    let root = std::path::Path::new("/fixture/var/lib/containerd");
    let failed = Probe {
        errno: libc::ENOENT,
        ..probe(ProbeOutcome::Failed, "does not exist here").unwrap()
    };
    let na = crate::observe::runtime_root_not_applicable(failed.clone(), root);
    assert_eq!(na.outcome(), ProbeOutcome::Skipped);
    assert!(na.message.starts_with("not applicable"), "{}", na.message);
    assert!(
        na.message.contains("/fixture/var/lib/containerd"),
        "{}",
        na.message
    );
    // Any other failure stands.
    let einval = Probe {
        errno: libc::EINVAL,
        ..failed.clone()
    };
    assert_eq!(
        crate::observe::runtime_root_not_applicable(einval.clone(), root),
        einval
    );

    let mut node = pod_userns_node(
        SOURCE_RUNTIME_HANDLERS,
        vec![rh("runc", Some(true))],
        ProbeOutcome::Passed,
    );
    if let Some(u) = node.user_namespaces.as_mut() {
        u.runtime_state_idmap = Some(na);
    }
    // Nothing asks for it: no finding.
    let userns = DesiredState {
        require_userns: true,
        require_idmap_mounts: true,
        ..DesiredState::default()
    };
    assert!(evaluate(&node, &userns).findings.is_empty());
    // --require-pod-userns needs the directory: a blocking failure.
    let pod = DesiredState {
        require_pod_userns: vec!["runc".into()],
        ..DesiredState::default()
    };
    let v = evaluate(&node, &pod);
    assert_eq!(codes(&v), ["RUNTIME_STATE_IDMAP_FAILED"]);
    assert!(!v.converged);
    assert_eq!(v.findings[0].actual, "failed");
}
