//! Strategic merge patch (first cut: not yet implemented).

use serde_json::Value;

use super::{PatchError, PatchMeta};

pub(super) fn apply(
    _original: &Value,
    _patch: &[u8],
    _meta: &PatchMeta,
) -> Result<Value, PatchError> {
    Err(PatchError::Internal(
        "strategic merge patch is not implemented yet".into(),
    ))
}
