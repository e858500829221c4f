//! The desired state: the agent's own (the Node annotation
//! `sandbox-readiness.io/desired`, [`annotation`]), the pool's (read from
//! its Talos machine configuration and Cluster API bootstrap template),
//! and the one rule comparing them ([`covers()`]). Pure: text in, values or
//! one-line errors out; `check`, the agent and the controller use the same
//! code.

pub mod annotation;
pub mod covers;

pub use annotation::{from_annotation, to_annotation, AnnotationError, ANNOTATION};
pub use covers::{covers, Uncovered};
