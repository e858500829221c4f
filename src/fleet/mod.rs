//! The controller's side: ask many agents at once.

pub mod client;
pub mod nodes;
