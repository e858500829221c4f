//! x-kubernetes-validations: no CEL interpreter here. The released CRDs this
//! crate loads carry two rule shapes, and these are evaluated natively,
//! recognised by their exact text (whitespace ignored):
//! - `!(self in ['A','B',…])` (Cluster: MachineHealthCheck
//!   `unhealthyMachineConditions[].type` of the topology);
//! - the qualified-name key rule on Machine/MachineSet/MachineDeployment
//!   `taints[].key`: `self.contains('/') ? (self.split('/')[0].size() <= 253 &&
//!   self.split('/')[1].size() <= 63 && self.split('/').size() == 2) : self.size() <= 63`.
//!
//! Any other rule is reported by `CrdSet::unevaluated_rules` and not checked.

use serde_json::Value;

pub(crate) enum RuleOutcome {
    Passed,
    Failed,
    NotEvaluated,
}

const QUALIFIED_KEY: &str = "self.contains('/')?(self.split('/')[0].size()<=253&&self.split('/')[1].size()<=63&&self.split('/').size()==2):self.size()<=63";

fn squash(rule: &str) -> String {
    rule.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The values of a `!(self in [...])` rule, if it is one.
fn not_in_list(rule: &str) -> Option<Vec<String>> {
    let s = squash(rule);
    let inner = s.strip_prefix("!(selfin[")?.strip_suffix("])")?;
    inner
        .split(',')
        .map(|item| {
            item.strip_prefix('\'')
                .and_then(|i| i.strip_suffix('\''))
                .filter(|i| !i.contains('\''))
                .map(str::to_string)
        })
        .collect()
}

pub(crate) fn is_supported(rule: &str) -> bool {
    squash(rule) == QUALIFIED_KEY || not_in_list(rule).is_some()
}

pub(crate) fn evaluate(rule: &str, v: &Value) -> RuleOutcome {
    let Value::String(s) = v else {
        return RuleOutcome::NotEvaluated;
    };
    let ok = if squash(rule) == QUALIFIED_KEY {
        // CEL's size() of a string counts code points.
        let parts: Vec<&str> = s.split('/').collect();
        if s.contains('/') {
            parts.len() == 2 && parts[0].chars().count() <= 253 && parts[1].chars().count() <= 63
        } else {
            s.chars().count() <= 63
        }
    } else if let Some(list) = not_in_list(rule) {
        !list.iter().any(|x| x == s)
    } else {
        return RuleOutcome::NotEvaluated;
    };
    if ok {
        RuleOutcome::Passed
    } else {
        RuleOutcome::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_two_rule_shapes() {
        let not_in = "!(self in ['Ready','Available','HealthCheckSucceeded'])";
        assert!(is_supported(not_in));
        assert!(matches!(
            evaluate(not_in, &json!("Ready")),
            RuleOutcome::Failed
        ));
        assert!(matches!(
            evaluate(not_in, &json!("Mine")),
            RuleOutcome::Passed
        ));
        let key = "self.contains('/') ? ( self.split('/') [0].size() <= 253 && self.split('/') [1].size() <= 63 && self.split('/').size() == 2 ) : self.size() <= 63";
        assert!(matches!(evaluate(key, &json!("a/b")), RuleOutcome::Passed));
        assert!(matches!(
            evaluate(key, &json!("a/b/c")),
            RuleOutcome::Failed
        ));
        assert!(matches!(
            evaluate(key, &json!("x".repeat(64))),
            RuleOutcome::Failed
        ));
        assert!(!is_supported("self.size() > 1"));
        assert!(matches!(
            evaluate("self.size() > 1", &json!("x")),
            RuleOutcome::NotEvaluated
        ));
    }
}
