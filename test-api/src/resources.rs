//! The kinds the test server serves: the built-ins the node agent and the
//! controller touch, and the CRD kinds of Cluster API and CABPT (from the
//! schema module's CRD set). One `ResourceType` per group + plural; an object
//! is stored once per resource and served at every version the resource is
//! served at (the CRDs here differ between versions only in fields the tests
//! do not exercise, so no conversion is done).

use crate::schema::{CrdSet, Scope};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// `""` for the core group.
    pub group: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    /// A custom resource: no strategic merge patch, validated by the CRD's
    /// schema, `metadata.generation` kept, status dropped on create.
    pub crd: bool,
    pub short_names: Vec<String>,
    /// `PUT` without `metadata.resourceVersion` is allowed (the built-ins'
    /// `AllowUnconditionalUpdate`); custom resources require it.
    pub unconditional_update: bool,
}

impl ResourceType {
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    pub fn preferred_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }
}

fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    status: bool,
    short: &[&str],
) -> ResourceType {
    ResourceType {
        group: group.to_string(),
        versions: vec![version.to_string()],
        kind: kind.to_string(),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        namespaced,
        status_subresource: status,
        crd: false,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        unconditional_update: true,
    }
}

/// Kubernetes version priority (`version.CompareKubeAwareVersionStrings`):
/// GA above beta above alpha, then the higher number.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, n) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stage, major, n)
}

/// All served resources.
#[derive(Debug, Clone)]
pub struct Registry {
    pub types: Vec<ResourceType>,
}

/// Splits `group/version` (or `v1`) into (group, version).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

impl Registry {
    /// `capi_versions`: the versions of `cluster.x-k8s.io` to serve (None =
    /// as the CRDs say), for testing a client's version check.
    pub fn new(crds: &CrdSet, capi_versions: Option<&[String]>) -> Registry {
        let mut types = vec![
            builtin("", "v1", "Node", "nodes", false, true, &["no"]),
            builtin("", "v1", "Namespace", "namespaces", false, true, &["ns"]),
            builtin("", "v1", "Event", "events", true, false, &["ev"]),
            builtin("", "v1", "Secret", "secrets", true, false, &[]),
            builtin("", "v1", "ConfigMap", "configmaps", true, false, &["cm"]),
            builtin(
                "coordination.k8s.io",
                "v1",
                "Lease",
                "leases",
                true,
                false,
                &[],
            ),
            builtin(
                "events.k8s.io",
                "v1",
                "Event",
                "events",
                true,
                false,
                &["ev"],
            ),
        ];
        for k in crds.kinds() {
            let mut versions: Vec<String> = k.served_versions().map(|v| v.name.clone()).collect();
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
            let status_subresource = k.served_versions().any(|v| v.status_subresource);
            if k.group == "cluster.x-k8s.io" {
                if let Some(only) = capi_versions {
                    versions = only.to_vec();
                }
            }
            types.push(ResourceType {
                singular: k.kind.to_lowercase(),
                group: k.group,
                versions,
                kind: k.kind,
                plural: k.plural,
                namespaced: k.scope == Scope::Namespaced,
                status_subresource,
                crd: true,
                short_names: k.short_names,
                unconditional_update: false,
            });
        }
        Registry { types }
    }

    pub fn by_plural(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.plural == plural && t.serves(version))
    }

    /// By `apiVersion` + `kind` of an object (any served version).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceType> {
        let (group, version) = split_api_version(api_version);
        self.types
            .iter()
            .find(|t| t.group == group && t.kind == kind && t.serves(version))
    }

    /// Groups in discovery order (core first, then as registered).
    pub fn groups(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in &self.types {
            if !t.group.is_empty() && !out.contains(&t.group) {
                out.push(t.group.clone());
            }
        }
        out
    }

    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.serves(version))
    }

    /// Versions of a group, preferred first (the first resource's order).
    pub fn group_versions(&self, group: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.types.iter().filter(|t| t.group == group) {
            for v in &t.versions {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
        }
        out
    }
}
