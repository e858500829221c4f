//! Temporary stand-ins for the schema and authz modules (branch
//! api-schema), with their interfaces from COMMON.md; removed
//! when those branches are merged.

pub mod schema {
    use crate::status::ApiError;
    use serde_json::Value;

    pub struct CrdKind {
        pub group: String,
        pub versions: Vec<String>,
        pub kind: String,
        pub plural: String,
        pub namespaced: bool,
        pub status_subresource: bool,
        pub short_names: Vec<String>,
    }

    pub struct CrdSet;

    #[derive(Debug)]
    pub struct SchemaError;

    pub struct Invalid(pub ApiError);

    impl CrdSet {
        pub fn upstream() -> Result<CrdSet, SchemaError> {
            Ok(CrdSet)
        }
        pub fn kinds(&self) -> impl Iterator<Item = CrdKind> {
            let k = |g: &str, vs: &[&str], kind: &str, plural: &str, status: bool| CrdKind {
                group: g.into(),
                versions: vs.iter().map(|v| v.to_string()).collect(),
                kind: kind.into(),
                plural: plural.into(),
                namespaced: true,
                status_subresource: status,
                short_names: Vec::new(),
            };
            vec![
                k("cluster.x-k8s.io", &["v1beta2", "v1beta1"], "Machine", "machines", true),
                k("cluster.x-k8s.io", &["v1beta2", "v1beta1"], "MachineSet", "machinesets", true),
                k("cluster.x-k8s.io", &["v1beta2", "v1beta1"], "MachineDeployment", "machinedeployments", true),
                k("cluster.x-k8s.io", &["v1beta2", "v1beta1"], "Cluster", "clusters", true),
                k("bootstrap.cluster.x-k8s.io", &["v1beta1", "v1alpha3"], "TalosConfig", "talosconfigs", true),
                k("bootstrap.cluster.x-k8s.io", &["v1beta1", "v1alpha3"], "TalosConfigTemplate", "talosconfigtemplates", false),
            ]
            .into_iter()
        }
        pub fn validate(&self, _group: &str, _version: &str, _kind: &str, _obj: &mut Value) -> Result<(), Invalid> {
            Ok(())
        }
    }
}

pub mod authz {
    use crate::identity::{Attributes, NodeAuthzMode, Op, User};
    use serde_json::Value;

    #[derive(Debug, Clone, Default)]
    pub struct Rbac;

    impl Rbac {
        pub fn from_yaml(_yaml: &str) -> Result<Rbac, String> {
            Ok(Rbac)
        }
    }

    pub enum Decision {
        Allow,
        Deny(String),
    }

    pub fn authorize(_attrs: &Attributes, _rbac: &Rbac, _node_mode: NodeAuthzMode) -> Decision {
        Decision::Allow
    }

    pub fn admit_node_restriction(
        _user: &User,
        _op: Op,
        _old: Option<&Value>,
        _new: &Value,
        _subresource: Option<&str>,
        _name: &str,
    ) -> Result<(), String> {
        Ok(())
    }
}
