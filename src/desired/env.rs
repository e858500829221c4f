//! The agent's desired state from its environment, as `serve` reads its
//! `SANDBOX_READINESS_*` variables: the same names, the same per-value
//! parsers ([`evaluate::parse_sysctl_flag`], [`evaluate::validate_handler_name`]),
//! the same comma delimiter, and clap's rule for a flag from the
//! environment (`true` or `false`, nothing else). The binary's flag
//! definitions are tested against this table (`cli/args.rs`), so the two
//! cannot drift. Used for an `ExtensionServiceConfig`'s `environment`.
//! Pure.

use crate::{
    evaluate::{self, DesiredError},
    proto::v1::DesiredState,
};

/// How a variable's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A switch: `true` or `false`.
    Flag,
    /// A comma-separated list.
    List,
}

/// Every desired-state variable, its kind and the field it sets.
pub const VARS: [(&str, Kind); 8] = [
    ("SANDBOX_READINESS_SYSCTL", Kind::List),
    ("SANDBOX_READINESS_REQUIRE_USERNS", Kind::Flag),
    ("SANDBOX_READINESS_REQUIRE_IDMAP_MOUNTS", Kind::Flag),
    ("SANDBOX_READINESS_REQUIRE_RUNTIME_HANDLER", Kind::List),
    ("SANDBOX_READINESS_REQUIRE_GVISOR", Kind::Flag),
    ("SANDBOX_READINESS_REQUIRE_SANDBOX_PROBE", Kind::Flag),
    ("SANDBOX_READINESS_REQUIRE_POD_USERNS", Kind::List),
    ("SANDBOX_READINESS_REQUIRE_CANARY", Kind::List),
];

/// A switch's value from the environment, as clap's `BoolValueParser`
/// reads it (exactly `true` or `false`).
pub fn parse_flag(var: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!(
            "{var}={}: expected true or false",
            crate::text::clean_line(&value.chars().take(40).collect::<String>())
        )),
    }
}

/// Why an environment gives no desired state.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("{0}")]
    Flag(String),
    #[error("{var}: {error}")]
    Value {
        var: &'static str,
        error: DesiredError,
    },
    #[error("{0} is set twice")]
    Twice(String),
}

/// The desired state `KEY=VALUE` entries (an ExtensionServiceConfig's
/// `environment`) give `serve`. Variables that are not desired-state ones
/// are ignored (they configure other things, and may be secret). An empty
/// value is as good as unset, as clap treats it.
pub fn desired_from_env<'a>(
    entries: impl IntoIterator<Item = &'a str>,
) -> Result<DesiredState, EnvError> {
    let mut d = DesiredState::default();
    let mut seen = Vec::new();
    for entry in entries {
        let (key, value) = entry.split_once('=').unwrap_or((entry, ""));
        let Some(&(var, kind)) = VARS.iter().find(|(v, _)| *v == key) else {
            continue;
        };
        if seen.contains(&var) {
            return Err(EnvError::Twice(var.to_string()));
        }
        seen.push(var);
        if value.is_empty() {
            continue;
        }
        let items = || value.split(',');
        let err = |error| EnvError::Value { var, error };
        match (var, kind) {
            (_, Kind::Flag) => {
                let on = parse_flag(var, value).map_err(EnvError::Flag)?;
                match var {
                    "SANDBOX_READINESS_REQUIRE_USERNS" => d.require_userns = on,
                    "SANDBOX_READINESS_REQUIRE_IDMAP_MOUNTS" => d.require_idmap_mounts = on,
                    "SANDBOX_READINESS_REQUIRE_GVISOR" => d.require_gvisor = on,
                    _ => d.require_sandbox_probe = on,
                }
            }
            ("SANDBOX_READINESS_SYSCTL", _) => {
                for s in items() {
                    d.sysctls.push(evaluate::parse_sysctl_flag(s).map_err(err)?);
                }
            }
            (_, Kind::List) => {
                let list = match var {
                    "SANDBOX_READINESS_REQUIRE_RUNTIME_HANDLER" => &mut d.require_runtime_handlers,
                    "SANDBOX_READINESS_REQUIRE_POD_USERNS" => &mut d.require_pod_userns,
                    _ => &mut d.require_canary,
                };
                for h in items() {
                    evaluate::validate_handler_name(h).map_err(err)?;
                    list.push(h.to_string());
                }
            }
        }
    }
    evaluate::validate(&d).map_err(|error| EnvError::Value {
        var: "environment",
        error,
    })?;
    Ok(d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn environment_as_serve_reads_it() {
        let d = desired_from_env([
            "SANDBOX_READINESS_SYSCTL=user.max_user_namespaces=11255,vm.swappiness=1",
            "SANDBOX_READINESS_REQUIRE_USERNS=true",
            "SANDBOX_READINESS_REQUIRE_GVISOR=false",
            "SANDBOX_READINESS_REQUIRE_CANARY=runsc,default",
            "SANDBOX_READINESS_LISTEN=[::]:10150",
            "SOME_TOKEN=do-not-read",
            "SANDBOX_READINESS_REQUIRE_POD_USERNS=",
        ])
        .unwrap();
        assert_eq!(d.sysctls.len(), 2);
        assert_eq!(d.sysctls[0].value, "11255");
        assert!(d.require_userns && !d.require_gvisor);
        assert_eq!(d.require_canary, ["runsc", "default"]);
        assert!(d.require_pod_userns.is_empty());
    }

    #[test]
    fn refusals_are_one_line() {
        for (env, want) in [
            (
                "SANDBOX_READINESS_REQUIRE_USERNS=1",
                "expected true or false",
            ),
            (
                "SANDBOX_READINESS_SYSCTL=user.max_user_namespaces",
                "is not NAME=VALUE",
            ),
            (
                "SANDBOX_READINESS_REQUIRE_CANARY=Run sc",
                "runtime handler name",
            ),
        ] {
            let e = desired_from_env([env]).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{env}: {e}");
        }
        let e = desired_from_env([
            "SANDBOX_READINESS_REQUIRE_USERNS=true",
            "SANDBOX_READINESS_REQUIRE_USERNS=false",
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "SANDBOX_READINESS_REQUIRE_USERNS is set twice"
        );
    }
}
