//! The desired state: the agent's own (the Node annotation
//! `sandbox-readiness.io/desired`, [`annotation`]), the pool's (read from
//! its Talos machine configuration and Cluster API bootstrap template,
//! [`pool`]), and the one rule comparing them ([`covers()`]). Pure: text
//! in, values or one-line errors out; `check`, the agent and the
//! controller use the same code.
//!
//! - [`annotation`]: `{"v":1,"sysctls":{…},"require":[…],"handlers":{…}}` ⇄ [`DesiredState`];
//! - [`covers`](mod@covers): does a node's desired state cover the pool's;
//! - [`pool`]: machine config / `TalosConfig` / `TalosConfigTemplate` /
//!   `List` → sysctls with their sources, and the agent's
//!   `ExtensionServiceConfig`;
//! - [`talos`]: Talos's documents, sysctl merge order and strategic merge;
//! - [`json6902`]: RFC 6902 for `configPatches` (hand-written: the
//!   `json-patch` crate cost 32 KiB of the node binary's budget for this);
//! - [`env`](mod@env): the agent's `SANDBOX_READINESS_*` environment as `serve` reads it;
//! - [`yaml`]: documents as JSON values, errors that quote nothing.
//!
//! [`DesiredState`]: crate::proto::v1::DesiredState

pub mod annotation;
pub mod covers;
pub mod env;
pub mod findings;
pub mod json6902;
pub mod pool;
pub mod talos;
pub mod yaml;

pub use annotation::{from_annotation, to_annotation, AnnotationError, ANNOTATION};
pub use covers::{covers, Uncovered};
pub use pool::{parse as parse_pool, PoolDesired, PoolError, Sourced};
