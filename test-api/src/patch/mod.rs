//! The three PATCH flavours kube-apiserver accepts, applied to a stored object
//! as a pure function of `(original, patch bytes, patch metadata)`.
//!
//! * [`PatchKind::Merge`] — JSON merge patch (RFC 7386) as
//!   `gopkg.in/evanphx/json-patch.v4` `MergePatch` does it, which is what
//!   kube-apiserver and kubectl v1.32 link.
//! * [`PatchKind::Json`] — JSON patch (RFC 6902), again as evanphx/json-patch v4
//!   applies it, quirks included (they are what a real server answers).
//! * [`PatchKind::Strategic`] — strategic merge patch as
//!   `k8s.io/apimachinery/pkg/util/strategicpatch` (v0.32) applies it for
//!   built-in kinds, driven by [`PatchMeta`] (which list merges by which key).
//!
//! The oracle for all three is `kubectl patch --local` (tests/patch_oracle.rs).
//! No I/O happens here: the patch metadata is embedded with `include_str!`.

mod gofmt;
mod json;
mod merge;
mod meta;
mod strategic;

pub use meta::{patch_meta_for, PatchMeta};

use serde_json::Value;

/// Which `Content-Type` a PATCH request carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchKind {
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
}

impl PatchKind {
    /// The kind a PATCH `Content-Type` header names (parameters such as
    /// `; charset=utf-8` are ignored), or `None` for anything else (kube-apiserver
    /// answers those with 415).
    pub fn from_content_type(content_type: &str) -> Option<PatchKind> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media.to_ascii_lowercase().as_str() {
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            _ => None,
        }
    }

    /// The media type of this kind.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchKind::Strategic => "application/strategic-merge-patch+json",
            PatchKind::Merge => "application/merge-patch+json",
            PatchKind::Json => "application/json-patch+json",
        }
    }
}

/// Why a patch was refused, classified as kube-apiserver classifies it
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`, v1.32).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400: the patch does not decode, or is malformed for its kind.
    #[error("{0}")]
    BadRequest(String),
    /// 422: the patch is well formed but cannot be applied to this object.
    /// `detail` is the library's own error text (kube-apiserver does not show
    /// it for JSON patch, see [`PatchError::message`]).
    #[error("{message}")]
    Unprocessable { message: String, detail: String },
    /// 415: strategic merge patch on a kind without patch metadata (a CRD).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 413: more JSON patch operations than kube-apiserver allows.
    #[error("{0}")]
    TooLarge(String),
    /// 500: an error kube-apiserver passes on unclassified (a `Status` of
    /// reason `Unknown` whose message is the library's text).
    #[error("{0}")]
    Internal(String),
    /// 500: input on which the Go library panics (kube-apiserver's panic
    /// recovery answers; kubectl crashes). The text is Go's runtime error.
    #[error("{0}")]
    Panic(String),
}

/// kube-apiserver's message for a 422 it builds with
/// `errors.NewGenericServerResponse(422, …)`, which drops the library's text
/// (JSON patch apply errors, and strategic merge's `ErrNoListOfLists`).
pub(crate) const GENERIC_422: &str =
    "the server rejected our request due to an error in our request";

/// What kube-apiserver's panic recovery writes (as plain text).
const PANIC_MESSAGE: &str = "This request caused apiserver to panic. Look in the logs for details.";

impl PatchError {
    /// The HTTP status kube-apiserver answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Unprocessable { .. } => 422,
            PatchError::UnsupportedMediaType(_) => 415,
            PatchError::TooLarge(_) => 413,
            PatchError::Internal(_) | PatchError::Panic(_) => 500,
        }
    }

    /// The `reason` of the `metav1.Status` kube-apiserver answers with.
    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::BadRequest(_) => "BadRequest",
            PatchError::Unprocessable { .. } => "Invalid",
            PatchError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            PatchError::TooLarge(_) => "RequestEntityTooLarge",
            PatchError::Internal(_) | PatchError::Panic(_) => "Unknown",
        }
    }

    /// The `message` of that `metav1.Status`, worded as kube-apiserver words it.
    pub fn message(&self) -> String {
        match self {
            PatchError::BadRequest(m)
            | PatchError::UnsupportedMediaType(m)
            | PatchError::TooLarge(m)
            | PatchError::Internal(m) => m.clone(),
            PatchError::Unprocessable { message, .. } => message.clone(),
            PatchError::Panic(_) => PANIC_MESSAGE.to_string(),
        }
    }

    /// The underlying library's error text (what `kubectl patch --local`
    /// prints); equal to [`PatchError::message`] except for 422 and panics.
    pub fn detail(&self) -> &str {
        match self {
            PatchError::BadRequest(m)
            | PatchError::UnsupportedMediaType(m)
            | PatchError::TooLarge(m)
            | PatchError::Internal(m)
            | PatchError::Panic(m) => m,
            PatchError::Unprocessable { detail, .. } => detail,
        }
    }
}

/// Applies `patch` (the request body) of `kind` to `original`.
///
/// `meta` is the patch metadata of the object's kind ([`patch_meta_for`]);
/// strategic merge without it is refused with 415, as kube-apiserver refuses it
/// for custom resources.
pub fn apply_patch(
    kind: PatchKind,
    original: &Value,
    patch: &[u8],
    meta: Option<&PatchMeta>,
) -> Result<Value, PatchError> {
    match kind {
        PatchKind::Merge => merge::apply(original, patch),
        PatchKind::Json => json::apply(original, patch),
        PatchKind::Strategic => match meta {
            Some(meta) => strategic::apply(original, patch, meta),
            None => Err(PatchError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                    .to_string(),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "finalizers": ["a"]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        })
    }

    fn node_meta() -> &'static PatchMeta {
        patch_meta_for("v1", "Node").expect("Node has patch metadata")
    }

    #[test]
    fn a_new_condition_is_merged_by_type_and_goes_first() {
        let patch = br#"{"status":{"conditions":[{"type":"X","status":"False"}]}}"#;
        let out =
            apply_patch(PatchKind::Strategic, &node(), patch, Some(node_meta())).expect("applies");
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "X", "status": "False"}, {"type": "Ready", "status": "True"}])
        );
        // A merge patch replaces the list instead.
        let out = apply_patch(PatchKind::Merge, &node(), patch, None).expect("applies");
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "X", "status": "False"}])
        );
    }

    #[test]
    fn statuses_are_kube_apiservers() {
        let n = node();
        let e = apply_patch(PatchKind::Strategic, &n, b"{}", None).expect_err("no metadata");
        assert_eq!((e.http_status(), e.reason()), (415, "UnsupportedMediaType"));
        let e =
            apply_patch(PatchKind::Strategic, &n, b"{", Some(node_meta())).expect_err("bad json");
        assert_eq!(e.http_status(), 400);
        let e = apply_patch(
            PatchKind::Strategic,
            &n,
            br#"{"metadata":{"$retainKeys":"x"}}"#,
            Some(node_meta()),
        )
        .expect_err("bad retainKeys");
        assert_eq!(
            (e.http_status(), e.message()),
            (400, "invalid patch format of retainKeys".to_string())
        );
        let mut empty = n.clone();
        empty["status"]["conditions"] = json!([]);
        let e = apply_patch(
            PatchKind::Strategic,
            &empty,
            br#"{"status":{"conditions":[[1]]}}"#,
            Some(node_meta()),
        )
        .expect_err("list of lists");
        assert_eq!(e.http_status(), 422);
        assert_eq!(e.detail(), "lists of lists are not supported");
        let e = apply_patch(
            PatchKind::Strategic,
            &n,
            br#"{"status":{"conditions":[{"status":"x"}]}}"#,
            Some(node_meta()),
        )
        .expect_err("no merge key");
        assert_eq!(e.http_status(), 500);
        assert_eq!(
            e.message(),
            "map: map[status:x] does not contain declared merge key: type"
        );

        let e = apply_patch(PatchKind::Merge, &n, b"null", None).expect_err("null merge patch");
        assert_eq!(
            (e.http_status(), e.message()),
            (400, "Invalid JSON Patch".to_string())
        );

        let e = apply_patch(PatchKind::Json, &n, b"{}", None).expect_err("not a list");
        assert_eq!(e.http_status(), 400);
        assert_eq!(
            e.message(),
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        );
        let e = apply_patch(
            PatchKind::Json,
            &n,
            br#"[{"op":"remove","path":"/nope"}]"#,
            None,
        )
        .expect_err("absent");
        assert_eq!(e.http_status(), 422);
        assert_eq!(e.message(), GENERIC_422);
        assert_eq!(
            e.detail(),
            "error in remove for path: '/nope': Unable to remove nonexistent key: nope: missing value"
        );
        let many = format!(
            "[{}]",
            vec![r#"{"op":"test","path":"/kind","value":"Node"}"#; 10_001].join(",")
        );
        let e = apply_patch(PatchKind::Json, &n, many.as_bytes(), None).expect_err("too many");
        assert_eq!(e.http_status(), 413);
    }

    #[test]
    fn an_item_both_added_and_deleted_is_deleted_first() {
        // Upstream takes the two keys in Go's random map order; we always
        // apply the deletion list first (kubectl's more frequent answer).
        let patch =
            br#"{"metadata":{"finalizers":["b"],"$deleteFromPrimitiveList/finalizers":["a","b"]}}"#;
        let out =
            apply_patch(PatchKind::Strategic, &node(), patch, Some(node_meta())).expect("applies");
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn content_types_map_to_kinds() {
        assert_eq!(
            PatchKind::from_content_type("application/strategic-merge-patch+json; charset=utf-8"),
            Some(PatchKind::Strategic)
        );
        assert_eq!(PatchKind::from_content_type("application/json"), None);
        for k in [PatchKind::Strategic, PatchKind::Merge, PatchKind::Json] {
            assert_eq!(PatchKind::from_content_type(k.content_type()), Some(k));
        }
    }
}
