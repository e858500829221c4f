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
