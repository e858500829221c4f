//! metav1.Status bodies with kube-apiserver's own messages and reasons, so a
//! client's error handling (kubectl's output, kube-rs's `ErrorResponse`, a
//! controller's retry-on-conflict) sees what a real server sends. Texts follow
//! k8s.io/apimachinery `pkg/api/errors/errors.go` (kubernetes v1.32).

use serde_json::{json, Value};

/// An HTTP error answer: the status code and the Status object as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub body: Value,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let msg = self
            .body
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("");
        write!(f, "{} {}", self.code, msg)
    }
}

impl std::error::Error for ApiError {}

/// `resource` is the plural, `group` the API group ("" for core): messages name
/// `nodes` or `machines.cluster.x-k8s.io` as `schema.GroupResource.String()` does.
pub fn group_resource(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(group: &str, resource: &str, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": resource});
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

pub fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> ApiError {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    ApiError { code, body }
}

pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
    status(
        404,
        "NotFound",
        &format!("{} \"{name}\" not found", group_resource(group, resource)),
        Some(details(group, resource, name)),
    )
}

pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
    status(
        409,
        "AlreadyExists",
        &format!(
            "{} \"{name}\" already exists",
            group_resource(group, resource)
        ),
        Some(details(group, resource, name)),
    )
}

/// The optimistic-concurrency conflict (`errors.NewConflict` with
/// `registry.OptimisticLockErrorMsg`).
pub fn conflict(group: &str, resource: &str, name: &str) -> ApiError {
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            group_resource(group, resource)
        ),
        Some(details(group, resource, name)),
    )
}

/// A conflict with another cause (e.g. a delete precondition on uid).
pub fn conflict_with(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            group_resource(group, resource)
        ),
        Some(details(group, resource, name)),
    )
}

pub fn bad_request(message: &str) -> ApiError {
    status(400, "BadRequest", message, None)
}

pub fn unauthorized() -> ApiError {
    status(401, "Unauthorized", "Unauthorized", None)
}

/// A 422 with one field cause (`errors.NewInvalid`).
pub fn invalid(
    group: &str,
    kind: &str,
    name: &str,
    field: &str,
    value: &str,
    detail: &str,
) -> ApiError {
    let gk = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut d = json!({
        "name": name,
        "kind": kind,
        "causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: {value}: {detail}"), "field": field}],
    });
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    status(
        422,
        "Invalid",
        &format!("{gk} \"{name}\" is invalid: {field}: Invalid value: {value}: {detail}"),
        Some(d),
    )
}

pub fn method_not_allowed(message: &str) -> ApiError {
    status(405, "MethodNotAllowed", message, None)
}

pub fn unsupported_media_type(accepted: &[&str]) -> ApiError {
    status(
        415,
        "UnsupportedMediaType",
        &format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
        None,
    )
}

/// The watch cache's answer to a resourceVersion older than the compaction
/// point (`storage.NewTooLargeResourceVersionError` / etcd3 `errors.NewResourceExpired`).
pub fn expired(requested: u64, oldest: u64) -> ApiError {
    status(
        410,
        "Expired",
        &format!("too old resource version: {requested} ({oldest})"),
        None,
    )
}

pub fn success(group: &str, resource: &str, name: &str, uid: &str) -> Value {
    let mut d = details(group, resource, name);
    d["uid"] = json!(uid);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

pub fn internal(message: &str) -> ApiError {
    status(
        500,
        "InternalError",
        &format!("Internal error occurred: {message}"),
        None,
    )
}
