//! CRD openAPIV3Schema validation of custom-resource writes, as kube-apiserver
//! does it, against the released CRDs of Cluster API and CABPT stored verbatim
//! in `test-api/data/crds/` (each file's header names repository, tag and path).
//!
//! `validate` = prune unknown fields → defaults → drop non-nullable nulls →
//! apiVersion/kind check → ObjectMeta (as on create) → OpenAPI checks → list-type uniqueness → CEL rules
//! (those `cel` knows; skipped, with upstream's extra cause, after a blocking
//! error). Not done here: the ObjectMeta update rules (immutable fields: the store's),
//! validation ratcheting on update (1.30+ lets unchanged invalid fields pass),
//! `anyOf`/`allOf`/`oneOf`/`not`, string formats other than `date-time`,
//! `multipleOf`, `uniqueItems`, and `metadata` inside embedded resources.

mod cel;
mod errors;
mod metadata;
mod prune;
mod structural;
mod validate;

use serde::Deserialize;
use serde_json::Value;

pub(crate) use errors::go_quote;
pub use errors::{BadValue, ErrorType, FieldError, Invalid};
pub use metadata::validate_object_meta;
use structural::Schema;

/// The stored CRDs; `CrdSet::upstream` loads them.
const UPSTREAM: &[(&str, &str)] = &[
    (
        "cluster.x-k8s.io_machines.yaml",
        include_str!("../../data/crds/cluster.x-k8s.io_machines.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinesets.yaml",
        include_str!("../../data/crds/cluster.x-k8s.io_machinesets.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinedeployments.yaml",
        include_str!("../../data/crds/cluster.x-k8s.io_machinedeployments.yaml"),
    ),
    (
        "cluster.x-k8s.io_clusters.yaml",
        include_str!("../../data/crds/cluster.x-k8s.io_clusters.yaml"),
    ),
    (
        "bootstrap.cluster.x-k8s.io_talosconfigs.yaml",
        include_str!("../../data/crds/bootstrap.cluster.x-k8s.io_talosconfigs.yaml"),
    ),
    (
        "bootstrap.cluster.x-k8s.io_talosconfigtemplates.yaml",
        include_str!("../../data/crds/bootstrap.cluster.x-k8s.io_talosconfigtemplates.yaml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("{file}: not a YAML CustomResourceDefinition: {reason}")]
    Parse { file: String, reason: String },
    #[error("{file}: version {version}: pattern at {path} does not compile: {reason}")]
    Pattern {
        file: String,
        version: String,
        path: String,
        reason: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

/// One `additionalPrinterColumns` entry (for Table output to `kubectl get`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrinterColumn {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub json_path: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub format: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdVersion {
    pub name: String,
    pub served: bool,
    pub storage: bool,
    pub status_subresource: bool,
    pub printer_columns: Vec<PrinterColumn>,
}

/// What discovery and routing need to know of one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdKind {
    pub group: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub scope: Scope,
    /// In the CRD's order (Cluster API lists the oldest first).
    pub versions: Vec<CrdVersion>,
}

impl CrdKind {
    pub fn served_versions(&self) -> impl Iterator<Item = &CrdVersion> {
        self.versions.iter().filter(|v| v.served)
    }

    pub fn storage_version(&self) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.storage)
    }

    pub fn version(&self, name: &str) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.name == name)
    }
}

/// An `x-kubernetes-validations` rule this crate does not evaluate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnevaluatedRule {
    pub group: String,
    pub kind: String,
    pub version: String,
    /// Schema path, `[*]` for items and map values.
    pub path: String,
    pub rule: String,
}

struct Crd {
    kind: CrdKind,
    schemas: Vec<(String, Schema)>,
}

pub struct CrdSet {
    crds: Vec<Crd>,
}

// What is read of a CustomResourceDefinition.
#[derive(Deserialize)]
struct CrdDoc {
    kind: String,
    spec: CrdSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CrdSpec {
    group: String,
    names: CrdNames,
    scope: String,
    versions: Vec<CrdVersionDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CrdNames {
    kind: String,
    #[serde(default)]
    list_kind: String,
    plural: String,
    #[serde(default)]
    singular: String,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CrdVersionDoc {
    name: String,
    served: bool,
    storage: bool,
    schema: Option<SchemaDoc>,
    subresources: Option<Subresources>,
    #[serde(default)]
    additional_printer_columns: Vec<PrinterColumn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchemaDoc {
    #[serde(rename = "openAPIV3Schema")]
    open_apiv3_schema: Schema,
}

#[derive(Deserialize)]
struct Subresources {
    status: Option<Value>,
}

impl CrdSet {
    /// The released CRDs stored in `test-api/data/crds/`.
    pub fn upstream() -> Result<CrdSet, SchemaError> {
        CrdSet::from_yaml(UPSTREAM.iter().copied())
    }

    /// `upstream()`, parsed once per process (about 0.3 s in a debug build:
    /// test servers started many times in one test binary share it).
    pub fn upstream_shared() -> Result<&'static CrdSet, &'static SchemaError> {
        static SET: std::sync::OnceLock<Result<CrdSet, SchemaError>> = std::sync::OnceLock::new();
        SET.get_or_init(CrdSet::upstream).as_ref()
    }

    /// CRDs from YAML texts `(file name, text)`; several documents per text allowed.
    pub fn from_yaml<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<CrdSet, SchemaError> {
        let mut crds = Vec::new();
        for (file, text) in files {
            for doc in serde_yaml_ng::Deserializer::from_str(text) {
                let parse_err = |reason: String| SchemaError::Parse {
                    file: file.to_string(),
                    reason,
                };
                let v = Value::deserialize(doc).map_err(|e| parse_err(e.to_string()))?;
                if v.is_null() {
                    continue;
                }
                let d: CrdDoc = serde_json::from_value(v).map_err(|e| parse_err(e.to_string()))?;
                if d.kind != "CustomResourceDefinition" {
                    return Err(parse_err(format!("kind is {}", d.kind)));
                }
                crds.push(Crd::new(file, d)?);
            }
        }
        Ok(CrdSet { crds })
    }

    pub fn kinds(&self) -> impl Iterator<Item = CrdKind> + '_ {
        self.crds.iter().map(|c| c.kind.clone())
    }

    /// The CRD of a group and kind.
    pub fn kind(&self, group: &str, kind: &str) -> Option<&CrdKind> {
        self.crds
            .iter()
            .map(|c| &c.kind)
            .find(|k| k.group == group && k.kind == kind)
    }

    /// The CRD of a group and plural resource name (for routing URLs).
    pub fn by_plural(&self, group: &str, plural: &str) -> Option<&CrdKind> {
        self.crds
            .iter()
            .map(|c| &c.kind)
            .find(|k| k.group == group && k.plural == plural)
    }

    /// The x-kubernetes-validations rules `validate` does not evaluate.
    pub fn unevaluated_rules(&self) -> Vec<UnevaluatedRule> {
        let mut out = Vec::new();
        for c in &self.crds {
            for (version, s) in &c.schemas {
                let mut rules = Vec::new();
                s.collect_rules("", &mut rules);
                for (path, r) in rules {
                    if !(r.plain() && cel::is_supported(&r.rule)) {
                        out.push(UnevaluatedRule {
                            group: c.kind.group.clone(),
                            kind: c.kind.kind.clone(),
                            version: version.clone(),
                            path,
                            rule: r.rule,
                        });
                    }
                }
            }
        }
        out
    }

    /// What kube-apiserver does to a write of a custom resource: prunes
    /// unknown fields and applies defaults in `obj`, then validates it.
    pub fn validate(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        obj: &mut Value,
    ) -> Result<(), Invalid> {
        self.validate_with_warnings(group, version, kind, obj)
            .map(|_| ())
    }

    /// As `validate`, returning the warnings kube-apiserver sends for pruned
    /// fields (`unknown field "spec.foo"`; kubectl prints them as `Warning: …`).
    pub fn validate_with_warnings(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        obj: &mut Value,
    ) -> Result<Vec<String>, Invalid> {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let fail = |causes: Vec<FieldError>| Invalid {
            group: group.to_string(),
            kind: kind.to_string(),
            name: name.clone(),
            causes,
        };
        let crd = self
            .crds
            .iter()
            .find(|c| c.kind.group == group && c.kind.kind == kind);
        let schema = crd.and_then(|c| c.schemas.iter().find(|(v, _)| v == version));
        let (Some(crd), Some((_, schema))) = (crd, schema) else {
            return Err(fail(vec![FieldError::new(
                ErrorType::Invalid,
                "apiVersion",
                BadValue::Json(Value::String(format!("{group}/{version}"))),
                format!("no CustomResourceDefinition serves {kind} in this version"),
            )]));
        };
        if !obj.is_object() {
            return Err(fail(vec![FieldError::new(
                ErrorType::TypeInvalid,
                "<nil>",
                BadValue::Omitted,
                "the object must be a JSON object".into(),
            )]));
        }
        // customResourceValidator.ValidateTypeMeta: these alone, if wrong.
        let mut type_errs = Vec::new();
        let body_kind = obj
            .get("kind")
            .cloned()
            .unwrap_or(Value::String(String::new()));
        if body_kind.as_str() != Some(crd.kind.kind.as_str()) {
            type_errs.push(FieldError::new(
                ErrorType::Invalid,
                "kind",
                BadValue::Json(body_kind),
                format!("must be {}", crd.kind.kind),
            ));
        }
        let want_av = format!("{group}/{version}");
        let body_av = obj
            .get("apiVersion")
            .cloned()
            .unwrap_or(Value::String(String::new()));
        if body_av.as_str() != Some(want_av.as_str()) {
            type_errs.push(FieldError::new(
                ErrorType::Invalid,
                "apiVersion",
                BadValue::Json(body_av),
                format!("must be {want_av}"),
            ));
        }
        if !type_errs.is_empty() {
            return Err(fail(type_errs));
        }

        let warnings: Vec<String> = prune::prune(obj, schema)
            .into_iter()
            .map(|p| format!("unknown field {}", errors::go_quote(&p)))
            .collect();
        prune::apply_defaults(obj, schema);
        prune::drop_nulls(obj, schema);

        // customResourceValidator.Validate: ObjectMeta first, then the schema.
        let mut errs = metadata::validate_object_meta(
            obj.get("metadata"),
            crd.kind.scope == Scope::Namespaced,
        );
        validate::openapi(obj, schema, "", &mut errs);
        validate::list_types(obj, schema, "", &mut errs);
        let mut rules = Vec::new();
        schema.collect_rules("", &mut rules);
        if !rules.is_empty() {
            // strategy.go hasBlockingErr: these error types stop the CEL pass.
            let blocking = errs.iter().any(|e| {
                matches!(
                    e.kind,
                    ErrorType::NotSupported
                        | ErrorType::Required
                        | ErrorType::TooLong
                        | ErrorType::TooMany
                        | ErrorType::TypeInvalid
                )
            });
            if blocking {
                errs.push(FieldError::new(
                    ErrorType::Invalid,
                    "<nil>",
                    BadValue::Json(Value::Null),
                    "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
                ));
            } else {
                validate::cel_rules(obj, schema, "", &mut errs);
            }
        }
        if errs.is_empty() {
            Ok(warnings)
        } else {
            Err(fail(errs))
        }
    }
}

impl Crd {
    fn new(file: &str, d: CrdDoc) -> Result<Crd, SchemaError> {
        let mut versions = Vec::new();
        let mut schemas = Vec::new();
        for v in d.spec.versions {
            versions.push(CrdVersion {
                name: v.name.clone(),
                served: v.served,
                storage: v.storage,
                status_subresource: v.subresources.as_ref().is_some_and(|s| s.status.is_some()),
                printer_columns: v.additional_printer_columns,
            });
            let mut s = v.schema.map(|s| s.open_apiv3_schema).unwrap_or_default();
            s.compile("openAPIV3Schema")
                .map_err(|(path, e)| SchemaError::Pattern {
                    file: file.to_string(),
                    version: v.name.clone(),
                    path,
                    reason: e.to_string(),
                })?;
            schemas.push((v.name, s));
        }
        let names = d.spec.names;
        Ok(Crd {
            kind: CrdKind {
                group: d.spec.group,
                list_kind: if names.list_kind.is_empty() {
                    format!("{}List", names.kind)
                } else {
                    names.list_kind
                },
                singular: if names.singular.is_empty() {
                    names.kind.to_lowercase()
                } else {
                    names.singular
                },
                kind: names.kind,
                plural: names.plural,
                short_names: names.short_names,
                categories: names.categories,
                scope: if d.spec.scope == "Cluster" {
                    Scope::Cluster
                } else {
                    Scope::Namespaced
                },
                versions,
            },
            schemas,
        })
    }
}

#[cfg(test)]
mod tests;
