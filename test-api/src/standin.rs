//! Temporary stand-in for the authz module (branch api-schema), with their interfaces from COMMON.md; removed
//! when those branches are merged.

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
