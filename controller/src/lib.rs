//! sandbox-readiness-controller: mirrors each workload Node's
//! `sandbox-readiness.io/SandboxReady` condition onto its Cluster API
//! Machine in the management cluster, so a Machine readiness gate holds a
//! MachineDeployment rollout until the new worker is really ready.
//!
//! Pure: [`condition`] (what the Machine's condition should say),
//! [`patch`] (the write and its Event), [`kubeconfig`] (which workload
//! kubeconfigs are accepted), [`discovery`] (Cluster API ≥ 1.11),
//! [`machine`] (which Machines, and their fields), [`node`] (what a Node
//! says). I/O: [`workload`] (one connection per workload cluster),
//! [`pool`] (the bootstrap-data Secrets), [`run`] (the loop).

pub mod condition;
pub mod discovery;
pub mod http;
pub mod kubeconfig;
pub mod leader;
pub mod machine;
pub mod metrics;
pub mod node;
pub mod ops;
pub mod patch;
pub mod pool;
pub mod qps;
pub mod run;
pub mod workload;
