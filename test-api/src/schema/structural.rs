//! The openAPIV3Schema of one CRD version, as the subset of JSONSchemaProps
//! that kube-apiserver's structural schemas use
//! (kubernetes/apiextensions-apiserver `pkg/apis/apiextensions/v1/types_jsonschema.go`, v0.32).
//! Patterns are compiled once, at load time.

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Schema {
    #[serde(rename = "type")]
    pub ty: Option<String>,
    pub format: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, Schema>,
    pub additional_properties: Option<AdditionalProperties>,
    pub items: Option<Box<Schema>>,
    #[serde(default)]
    pub required: Vec<String>,
    #[serde(rename = "enum")]
    pub enum_values: Option<Vec<Value>>,
    pub default: Option<Value>,
    #[serde(default)]
    pub nullable: bool,
    pub max_length: Option<u64>,
    pub min_length: Option<u64>,
    pub pattern: Option<String>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    #[serde(default)]
    pub exclusive_minimum: bool,
    #[serde(default)]
    pub exclusive_maximum: bool,
    pub max_items: Option<u64>,
    pub min_items: Option<u64>,
    pub max_properties: Option<u64>,
    pub min_properties: Option<u64>,
    #[serde(rename = "x-kubernetes-preserve-unknown-fields")]
    pub preserve_unknown_fields: Option<bool>,
    #[serde(rename = "x-kubernetes-embedded-resource", default)]
    pub embedded_resource: bool,
    #[serde(rename = "x-kubernetes-int-or-string", default)]
    pub int_or_string: bool,
    #[serde(rename = "x-kubernetes-list-type")]
    pub list_type: Option<String>,
    #[serde(rename = "x-kubernetes-list-map-keys", default)]
    pub list_map_keys: Vec<String>,
    #[serde(rename = "x-kubernetes-validations", default)]
    pub validations: Vec<CelRule>,
    #[serde(skip)]
    pub pattern_re: Option<Regex>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum AdditionalProperties {
    // `true` or `false`: structural schemas give such values no schema, so
    // pruning empties them either way; the flag is read by nothing else.
    Bool(#[allow(dead_code)] bool),
    Schema(Box<Schema>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CelRule {
    pub rule: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
    pub field_path: Option<String>,
    pub reason: Option<String>,
}

impl CelRule {
    /// Rules with a messageExpression, fieldPath or reason are not evaluated
    /// (their error differs from a plain rule's); none of the stored CRDs has one.
    pub fn plain(&self) -> bool {
        self.message_expression.is_none() && self.field_path.is_none() && self.reason.is_none()
    }
}

impl Schema {
    /// Compiles every `pattern` below this node; the first bad one is returned
    /// with its path (Go's RE2 and the `regex` crate share the syntax the CRDs use).
    pub fn compile(&mut self, path: &str) -> Result<(), (String, regex::Error)> {
        if let Some(p) = &self.pattern {
            self.pattern_re = Some(Regex::new(p).map_err(|e| (path.to_string(), e))?);
        }
        for (k, s) in self.properties.iter_mut() {
            s.compile(&format!("{path}.properties.{k}"))?;
        }
        if let Some(AdditionalProperties::Schema(s)) = &mut self.additional_properties {
            s.compile(&format!("{path}.additionalProperties"))?;
        }
        if let Some(s) = &mut self.items {
            s.compile(&format!("{path}.items"))?;
        }
        Ok(())
    }

    pub fn additional_schema(&self) -> Option<&Schema> {
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Some(s),
            _ => None,
        }
    }

    pub fn preserves_unknown(&self) -> bool {
        self.preserve_unknown_fields == Some(true)
    }

    /// Every x-kubernetes-validations rule below this node, with the schema path.
    pub fn collect_rules(&self, path: &str, out: &mut Vec<(String, CelRule)>) {
        for r in &self.validations {
            out.push((path.to_string(), r.clone()));
        }
        for (k, s) in &self.properties {
            s.collect_rules(&join(path, k), out);
        }
        if let Some(s) = self.additional_schema() {
            s.collect_rules(&format!("{path}[*]"), out);
        }
        if let Some(s) = &self.items {
            s.collect_rules(&format!("{path}[*]"), out);
        }
    }
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}
