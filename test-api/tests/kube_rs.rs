//! kube-rs against the test API server (placeholder while the server grows).
use k8s_openapi::api::core::v1::Node;
#[test]
fn types_link() {
    let _ = std::mem::size_of::<kube::Api<Node>>();
}
