//! `probe`: observe this machine once, stamp the report, judge it against a
//! desired state (when one asks for anything) and render the result.

use crate::{
    evaluate,
    observe::{self, canary, ObserveConfig, Scope},
    output,
    proto::v1::{DesiredState, Report, Verdict},
    report::Generations,
};

/// One observation and, when a desired state asked for anything, its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Probed {
    pub report: Report,
    pub verdict: Option<Verdict>,
}

/// Observes once. The desired state's sysctls are read besides the usual
/// ones, and asking for the sandbox smoke probe turns it on. Never fails:
/// every problem is data in the report.
pub async fn probe(cfg: &ObserveConfig, desired: &DesiredState, sandbox_probe: bool) -> Probed {
    let mut cfg = cfg.clone();
    cfg.extra_sysctls
        .extend(desired.sysctls.iter().map(|s| s.name.clone()));
    cfg.require_runtime_root |= !desired.require_pod_userns.is_empty();
    let scope = Scope {
        sandbox: sandbox_probe || desired.require_sandbox_probe,
    };
    let mut report = observe::observe(&cfg, scope).await;
    // `probe` is run by the operator, so every canary asked for runs (one
    // at a time: each sweeps the canary label first).
    for handler in evaluate::canaries_needed(&report, desired) {
        let c = canary::run(&cfg.gvisor.cri_endpoint, &cfg.canary, &handler).await;
        report.canaries.push(c.canary);
    }
    Generations::default().stamp(&mut report);
    let verdict = (!evaluate::is_empty(desired)).then(|| evaluate::evaluate(&report, desired));
    Probed { report, verdict }
}

impl Probed {
    /// `false` only when a verdict was asked for and did not converge.
    pub fn converged(&self) -> bool {
        self.verdict.as_ref().is_none_or(|v| v.converged)
    }

    /// The report table, then the verdict table if there is one.
    pub fn table(&self) -> String {
        let mut out = output::report_table(&self.report);
        if let Some(v) = &self.verdict {
            out.push_str(&output::verdict_table(v));
        }
        out
    }

    /// `{"report": …, "verdict": …}` (proto3 JSON mapping), pretty-printed.
    pub fn json(&self) -> Result<String, serde_json::Error> {
        let doc = serde_json::json!({ "report": self.report, "verdict": self.verdict });
        serde_json::to_string_pretty(&doc)
    }
}
