//! Patch metadata of the built-in kinds: for each Go struct the test API
//! server's built-in kinds reach, its JSON fields with their Go type and their
//! `patchStrategy` / `patchMergeKey` tags.
//!
//! The data (`test-api/data/patch-meta.json`) is extracted by
//! `test-api/scripts/extract-patch-meta.py` from k8s.io/api and
//! k8s.io/apimachinery at v0.32.4 (the file records its sources). Go types
//! rather than just the two tags are kept because apimachinery's
//! `PatchMetaFromStruct` walks the Go types: a field it cannot find while
//! merging two objects or two lists is an error, and a Go map or opaque struct
//! (Time, Quantity) cannot be descended into. We walk the same way
//! (`third_party/forked/golang/json/fields.go` `LookupPatchMetadataForStruct`,
//! `strategicpatch/meta.go`).

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

use super::gofmt::go_quote;

const DATA: &str = include_str!("../../data/patch-meta.json");

/// Strategic-merge metadata of one built-in kind (its root Go struct).
#[derive(Debug)]
pub struct PatchMeta {
    root: usize,
}

/// A Go type as reflection sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GoTy {
    Struct(usize),
    Ptr(Box<GoTy>),
    Slice(Box<GoTy>),
    Map(Box<GoTy>),
    /// A basic kind: "string", "int32", "bool", "uint8", …
    Basic(String),
}

impl GoTy {
    /// `reflect.Kind.String()`.
    pub(crate) fn kind_name(&self) -> &str {
        match self {
            GoTy::Struct(_) => "struct",
            GoTy::Ptr(_) => "ptr",
            GoTy::Slice(_) => "slice",
            GoTy::Map(_) => "map",
            GoTy::Basic(k) => k,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) json: String,
    pub(crate) ty: GoTy,
    /// `strings.Split(patchStrategy, ",")`, so `[""]` when untagged.
    pub(crate) strategies: Vec<String>,
    pub(crate) merge_key: String,
}

#[derive(Debug)]
pub(crate) struct Struct {
    pub(crate) name: String,
    pub(crate) fields: Vec<Field>,
}

#[derive(Debug)]
pub(crate) struct Registry {
    structs: Vec<Struct>,
    kinds: HashMap<String, PatchMeta>,
}

#[derive(Deserialize)]
struct RawData {
    kinds: HashMap<String, String>,
    types: HashMap<String, RawStruct>,
}

#[derive(Deserialize)]
struct RawStruct {
    name: String,
    fields: Vec<RawField>,
}

#[derive(Deserialize)]
struct RawField {
    json: String,
    #[serde(rename = "type")]
    ty: RawTy,
    strategy: String,
    #[serde(rename = "mergeKey")]
    merge_key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawTy {
    Struct(String),
    Ptr(Box<RawTy>),
    Slice(Box<RawTy>),
    Map(Box<RawTy>),
    Scalar(String),
}

fn convert(ty: &RawTy, index: &HashMap<&str, usize>) -> Result<GoTy, String> {
    Ok(match ty {
        RawTy::Struct(name) => GoTy::Struct(
            *index
                .get(name.as_str())
                .ok_or_else(|| format!("patch metadata names an unknown type {name}"))?,
        ),
        RawTy::Ptr(t) => GoTy::Ptr(Box::new(convert(t, index)?)),
        RawTy::Slice(t) => GoTy::Slice(Box::new(convert(t, index)?)),
        RawTy::Map(t) => GoTy::Map(Box::new(convert(t, index)?)),
        RawTy::Scalar(k) => GoTy::Basic(k.clone()),
    })
}

fn load() -> Result<Registry, String> {
    let raw: RawData = serde_json::from_str(DATA).map_err(|e| e.to_string())?;
    let mut names: Vec<&String> = raw.types.keys().collect();
    names.sort();
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut structs = Vec::with_capacity(names.len());
    for name in &names {
        let rs = &raw.types[name.as_str()];
        let fields = rs
            .fields
            .iter()
            .map(|f| {
                Ok(Field {
                    json: f.json.clone(),
                    ty: convert(&f.ty, &index)?,
                    strategies: f.strategy.split(',').map(str::to_string).collect(),
                    merge_key: f.merge_key.clone(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        structs.push(Struct {
            name: rs.name.clone(),
            fields,
        });
    }
    let mut kinds = HashMap::new();
    for (k, t) in &raw.kinds {
        let root = *index
            .get(t.as_str())
            .ok_or_else(|| format!("kind {k} names an unknown type {t}"))?;
        kinds.insert(k.clone(), PatchMeta { root });
    }
    Ok(Registry { structs, kinds })
}

pub(crate) fn registry() -> Result<&'static Registry, String> {
    static REGISTRY: OnceLock<Result<Registry, String>> = OnceLock::new();
    REGISTRY.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// The patch metadata of a built-in kind the test API server serves
/// (`v1` Node, Namespace, Secret, ConfigMap, Event; `coordination.k8s.io/v1`
/// Lease; `events.k8s.io/v1` Event), or `None` (custom resources: strategic
/// merge patch is then a 415).
pub fn patch_meta_for(api_version: &str, kind: &str) -> Option<&'static PatchMeta> {
    registry().ok()?.kinds.get(&format!("{api_version}/{kind}"))
}

impl PatchMeta {
    /// The patch strategy and merge key of the list at `path` (JSON field
    /// names from the object's root), e.g. `["status", "conditions"]` →
    /// `Some(("merge", "type"))`; `None` when the path does not name a list
    /// field. Untagged (atomic) lists give `("", "")`.
    pub fn list_strategy(&self, path: &[&str]) -> Option<(String, String)> {
        let reg = registry().ok()?;
        let mut schema = Schema::new(reg, GoTy::Struct(self.root));
        let (last, parents) = path.split_last()?;
        for p in parents {
            schema = schema.lookup_struct(p).ok()?.0;
        }
        let (_, field) = schema.lookup_slice(last).ok()?;
        Some((field.strategies.join(","), field.merge_key.clone()))
    }

    pub(crate) fn schema(&self) -> Result<Schema, String> {
        Ok(Schema::new(registry()?, GoTy::Struct(self.root)))
    }
}

/// A position in the Go type tree: apimachinery's `PatchMetaFromStruct{T}`.
#[derive(Debug, Clone)]
pub(crate) struct Schema {
    reg: &'static Registry,
    ty: GoTy,
}

impl Schema {
    fn new(reg: &'static Registry, ty: GoTy) -> Schema {
        Schema { reg, ty }
    }

    /// `Name()`: the kind of the type.
    pub(crate) fn name(&self) -> &str {
        self.ty.kind_name()
    }

    /// `LookupPatchMetadataForStruct(key)`: the field's own type and tags.
    pub(crate) fn lookup_struct(&self, key: &str) -> Result<(Schema, &'static Field), String> {
        let t = match &self.ty {
            GoTy::Ptr(inner) => inner.as_ref(),
            t => t,
        };
        let GoTy::Struct(idx) = t else {
            return Err(format!(
                "merging an object in json but data type is not struct, instead is: {}",
                t.kind_name()
            ));
        };
        let st = &self.reg.structs[*idx];
        // encoding/json's rule: an exact name wins, else the first
        // case-insensitive match.
        let field = st
            .fields
            .iter()
            .find(|f| f.json == key)
            .or_else(|| st.fields.iter().find(|f| equal_fold(&f.json, key)));
        match field {
            Some(f) => Ok((Schema::new(self.reg, f.ty.clone()), f)),
            None => Err(format!(
                "unable to find api field in struct {} for the json field {}",
                st.name,
                go_quote(key)
            )),
        }
    }

    /// `LookupPatchMetadataForSlice(key)`: the element type of the list field
    /// and the field's tags.
    pub(crate) fn lookup_slice(&self, key: &str) -> Result<(Schema, &'static Field), String> {
        let (sub, field) = self.lookup_struct(key)?;
        let elem = match &sub.ty {
            GoTy::Slice(elem) => {
                if matches!(elem.as_ref(), GoTy::Slice(_)) {
                    return Err("unexpected slice of slice".to_string());
                }
                elem.as_ref().clone()
            }
            GoTy::Ptr(inner) => match inner.as_ref() {
                GoTy::Slice(elem) => elem.as_ref().clone(),
                other => other.clone(),
            },
            _ => {
                return Err(format!(
                    "expected slice or array type, but got: {}",
                    self.ty.kind_name()
                ))
            }
        };
        Ok((Schema::new(self.reg, elem), field))
    }
}

/// Case-insensitive comparison as encoding/json's fold functions decide it
/// (simple Unicode case folding; enough for the ASCII field names here).
fn equal_fold(a: &str, b: &str) -> bool {
    a.chars().count() == b.chars().count()
        && a.chars()
            .zip(b.chars())
            .all(|(x, y)| x == y || x.to_lowercase().eq(y.to_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_data_loads_and_names_the_merge_keys() {
        let reg = registry().expect("patch metadata loads");
        assert!(reg.structs.len() > 20);
        let node = patch_meta_for("v1", "Node").expect("Node has metadata");
        assert_eq!(
            node.list_strategy(&["status", "conditions"]),
            Some(("merge".into(), "type".into()))
        );
        assert_eq!(
            node.list_strategy(&["status", "addresses"]),
            Some(("merge".into(), "type".into()))
        );
        assert_eq!(
            node.list_strategy(&["metadata", "ownerReferences"]),
            Some(("merge".into(), "uid".into()))
        );
        assert_eq!(
            node.list_strategy(&["metadata", "finalizers"]),
            Some(("merge".into(), "".into()))
        );
        // Taints are atomic upstream (no patchStrategy tag).
        assert_eq!(
            node.list_strategy(&["spec", "taints"]),
            Some(("".into(), "".into()))
        );
        let lease = patch_meta_for("coordination.k8s.io/v1", "Lease").expect("Lease");
        assert_eq!(
            lease.list_strategy(&["metadata", "ownerReferences"]),
            Some(("merge".into(), "uid".into()))
        );
        for (v, k) in [
            ("v1", "Secret"),
            ("v1", "Namespace"),
            ("v1", "Event"),
            ("v1", "ConfigMap"),
            ("events.k8s.io/v1", "Event"),
        ] {
            assert!(patch_meta_for(v, k).is_some(), "{v} {k}");
        }
        assert!(patch_meta_for("cluster.x-k8s.io/v1beta2", "Machine").is_none());
    }
}
