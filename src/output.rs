//! Printing for people: the report and the verdict as aligned text with
//! ✓/✗ marks, one fact per line. (`-o json` prints the proto3 JSON mapping.)

use std::fmt::Write as _;

use crate::{
    proto::v1::{
        Gvisor, GvisorReadiness, Probe, ProbeOutcome, Report, Sysctl, SysctlState, Verdict,
    },
    report::{names::cri_socket_absent, outcome_word, readiness_word, sysctl_display},
    text::report_line,
};

const OK: &str = "✓";
const BAD: &str = "✗";
const INFO: &str = "·";

fn mark(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => OK,
        Some(false) => BAD,
        None => INFO,
    }
}

fn duration(d: Option<&pbjson_types::Duration>) -> String {
    d.map(|d| {
        let ms = d.seconds as f64 * 1e3 + f64::from(d.nanos) / 1e6;
        if ms >= 1000.0 {
            format!("{:.2}s", ms / 1e3)
        } else {
            format!("{ms:.1}ms")
        }
    })
    .unwrap_or_default()
}

fn sysctl_mark(s: &Sysctl) -> Option<bool> {
    let state = s.state();
    match state {
        SysctlState::Unreadable => Some(false),
        SysctlState::Present if s.name.starts_with("user.max_") => Some(s.value.trim() != "0"),
        _ => None,
    }
}

fn sysctl_line(out: &mut String, s: &Sysctl) {
    let _ = writeln!(
        out,
        "  {} {:<45} {}",
        mark(sysctl_mark(s)),
        s.name,
        sysctl_display(s)
    );
}

fn probe_line(out: &mut String, name: &str, p: Option<&Probe>) {
    let outcome = p.map(|p| p.outcome());
    let m = match outcome {
        Some(ProbeOutcome::Passed) => Some(true),
        Some(ProbeOutcome::Failed | ProbeOutcome::Error) => Some(false),
        _ => None,
    };
    let _ = writeln!(
        out,
        "  {} {:<34} {:<8} {:>8}  {}",
        mark(m),
        name,
        outcome_word(p),
        duration(p.and_then(|p| p.duration.as_ref())),
        p.map(|p| p.message.as_str()).unwrap_or("")
    );
}

/// The report as text.
pub fn report_table(r: &Report) -> String {
    let mut out = String::new();
    if let Some(n) = &r.node {
        let _ = writeln!(
            out,
            "Node {} (hostname from {}), {} {}, kernel {}",
            or_dash(&n.hostname),
            or_dash(&n.hostname_source),
            or_dash(&n.os_name),
            n.os_version_id,
            or_dash(&n.kernel_release)
        );
        // The raw id is served only with --expose-machine-id; the
        // app-specific hash always identifies the machine across reboots.
        let machine = if !n.machine_id.is_empty() {
            n.machine_id.clone()
        } else if !n.app_specific_machine_id.is_empty() {
            format!("{} (app-specific)", n.app_specific_machine_id)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "  boot id {}, machine id {machine}",
            or_dash(&n.boot_id)
        );
    }
    let agent = r.agent.as_ref();
    let incomplete = agent.map(|a| a.incomplete.as_slice()).unwrap_or_default();
    let _ = writeln!(
        out,
        "  agent {}, observed {}, generation {}, fingerprint {}",
        agent.map(|a| a.version.as_str()).unwrap_or("-"),
        r.observed_at
            .as_ref()
            .map(rfc3339)
            .unwrap_or_else(|| "-".into()),
        r.generation,
        or_dash(&r.fingerprint)
    );
    for note in incomplete {
        let _ = writeln!(
            out,
            "  ! observation incomplete (the agent's own resources, last good value kept): {}",
            report_line(note)
        );
    }

    if let Some(u) = &r.user_namespaces {
        let _ = writeln!(
            out,
            "\nUser namespaces ({} initial user namespace)",
            if u.initial_user_namespace {
                "in the"
            } else {
                "NOT in the"
            }
        );
        if !u.namespace_note.is_empty() {
            let _ = writeln!(out, "  ! {}", u.namespace_note);
        }
        for s in &u.sysctls {
            sysctl_line(&mut out, s);
        }
        probe_line(
            &mut out,
            "user namespace creation",
            u.userns_create.as_ref(),
        );
        probe_line(&mut out, "idmapped mount (tmpfs)", u.idmap_mount.as_ref());
        probe_line(
            &mut out,
            "idmapped mount (runtime root)",
            u.runtime_state_idmap.as_ref(),
        );
    }
    if !r.sysctls.is_empty() {
        let _ = writeln!(out, "\nOther sysctls");
        for s in &r.sysctls {
            sysctl_line(&mut out, s);
        }
    }
    if let Some(g) = &r.gvisor {
        gvisor_table(&mut out, g);
    }
    if !r.canaries.is_empty() {
        let _ = writeln!(
            out,
            "\nCRI canaries (a host-network pod sandbox started, stopped and removed)"
        );
        for c in &r.canaries {
            probe_line(
                &mut out,
                &format!("handler {}", c.handler),
                c.result.as_ref(),
            );
            let ran = c.result.as_ref().and_then(|p| p.ran_at.as_ref());
            let _ = writeln!(
                out,
                "      sandbox image {}, ran {}",
                or_dash(&c.image),
                ran.map(rfc3339).unwrap_or_else(|| "-".into())
            );
        }
    }
    out
}

/// A protobuf timestamp as RFC 3339 (seconds).
pub fn rfc3339(t: &pbjson_types::Timestamp) -> String {
    let secs = u64::try_from(t.seconds).unwrap_or(0);
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(at).to_string()
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

fn gvisor_table(out: &mut String, g: &Gvisor) {
    let _ = writeln!(out, "\ngVisor: {}", readiness_word(Some(g)));
    for reason in &g.reasons {
        let _ = writeln!(out, "  - {reason}");
    }
    let _ = writeln!(out, "  binaries");
    // Where gVisor is not installed at all, its absent binaries are
    // information (a verdict that requires gVisor says so), not failures.
    let not_installed = g.readiness() == GvisorReadiness::NotInstalled;
    for b in &g.binaries {
        let ok = b.present && b.regular_file && b.executable;
        let m = (b.present || !not_installed).then_some(ok);
        let mut detail = if !b.present {
            "absent".to_string()
        } else if !ok {
            "not an executable file".to_string()
        } else if !b.world_executable {
            "not world-executable".to_string()
        } else {
            "executable".to_string()
        };
        if !b.version.is_empty() {
            let _ = write!(detail, ", version {}", b.version);
        }
        if !b.error.is_empty() {
            let _ = write!(detail, " ({})", b.error);
        }
        let _ = writeln!(out, "    {} {:<26} {} {}", mark(m), b.name, b.path, detail);
    }
    let _ = writeln!(out, "  CRI drop-ins");
    if g.drop_ins.is_empty() {
        let _ = writeln!(out, "    {INFO} none found");
    }
    for d in &g.drop_ins {
        let _ = writeln!(
            out,
            "    {} {}{}",
            mark(Some(d.parsed)),
            d.path,
            if d.error.is_empty() {
                String::new()
            } else {
                format!(": {}", d.error)
            }
        );
    }
    for h in &g.configured_handlers {
        let _ = writeln!(
            out,
            "    {} handler {:<12} {} ConfigPath {} ({}){}",
            mark(Some(h.config_path.is_empty() || h.config_path_exists)),
            h.name,
            or_dash(&h.runtime_type),
            or_dash(&h.config_path),
            if h.config_path.is_empty() {
                "none"
            } else if h.config_path_exists {
                "exists"
            } else {
                "MISSING"
            },
            if h.platform.is_empty() {
                String::new()
            } else {
                format!(", platform {}", h.platform)
            }
        );
    }
    if let Some(c) = &g.cri {
        let _ = writeln!(
            out,
            "  live CRI {} {}",
            c.endpoint,
            duration(c.duration.as_ref())
        );
        if c.reachable {
            let _ = writeln!(
                out,
                "    {OK} {} {} (CRI {})",
                c.runtime_name, c.runtime_version, c.runtime_api_version
            );
            let conds: Vec<String> = c
                .conditions
                .iter()
                .map(|k| {
                    let mut s = format!("{}={}", k.r#type, k.status);
                    if !k.reason.is_empty() {
                        let _ = write!(s, " ({})", k.reason);
                    }
                    s
                })
                .collect();
            let _ = writeln!(out, "    {INFO} conditions: {}", conds.join(", "));
            let handlers: Vec<String> = c
                .handlers
                .iter()
                .map(|h| {
                    let name = if h.name.is_empty() {
                        "(default)"
                    } else {
                        &h.name
                    };
                    match h.user_namespaces {
                        Some(u) => format!("{name} (userns {u})"),
                        None => name.to_string(),
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "    {INFO} handlers ({}): {}",
                or_dash(&c.handlers_source),
                handlers.join(", ")
            );
            if !c.root_dir.is_empty() {
                let _ = writeln!(out, "    {INFO} root directory: {}", c.root_dir);
            }
        } else if cri_socket_absent(&c.error) {
            // No runtime here at all: nothing failed.
            let _ = writeln!(out, "    {INFO} no CRI runtime: {}", c.error);
        } else {
            let _ = writeln!(out, "    {BAD} unreachable: {}", c.error);
        }
    }
    let _ = writeln!(out, "  host preconditions");
    for p in &g.preconditions {
        let m = if p.known { Some(p.satisfied) } else { None };
        let _ = writeln!(out, "    {} {:<40} {}", mark(m), p.name, p.detail);
    }
    probe_line(
        out,
        "sandbox smoke probe (runsc do true)",
        g.sandbox.as_ref(),
    );
}

/// The verdict as text.
pub fn verdict_table(v: &Verdict) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nVerdict: {}",
        if v.converged {
            "CONVERGED"
        } else {
            "NOT CONVERGED"
        }
    );
    for f in &v.findings {
        let _ = writeln!(
            out,
            "  {} {:<26} {}",
            if f.blocking { BAD } else { INFO },
            f.code,
            f.message
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::report_table;
    use crate::proto::v1::{NodeIdentity, Report};

    fn header(machine_id: &str, app_specific: &str) -> String {
        let r = Report {
            node: Some(NodeIdentity {
                machine_id: machine_id.into(),
                app_specific_machine_id: app_specific.into(),
                ..NodeIdentity::default()
            }),
            ..Report::default()
        };
        report_table(&r)
            .lines()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn names_the_machine_by_its_app_specific_id_unless_the_raw_one_is_served() {
        assert!(header("", "79c5").ends_with("machine id 79c5 (app-specific)"));
        assert!(header("0a1b", "79c5").ends_with("machine id 0a1b"));
        assert!(header("", "").ends_with("machine id -"));
    }
}
