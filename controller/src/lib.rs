//! sandbox-readiness-controller: mirrors each workload Node's
//! `sandbox-readiness.io/SandboxReady` condition onto its Cluster API
//! Machine in the management cluster, so a Machine readiness gate holds a
//! MachineDeployment rollout until the new worker is really ready.
//!
//! Shaped as kube-rs controllers are (controller-rs): [`run`] wires a
//! `kube::runtime::Controller` on Machines, [`reconcile`] is the reconciler
//! (one Machine at a time), [`context`] what it is given, [`error`] its one
//! error type.
//!
//! Pure: [`condition`] (what the Machine's condition should say, and when
//! to look again), [`patch`] (the write and its Event), [`kubeconfig`]
//! (which workload kubeconfigs are accepted), [`discovery`] (Cluster API ≥
//! 1.11), [`machine`] (which Machines, their fields, pausing), [`node`]
//! (what a Node says). I/O: [`workload`] (one connection per workload
//! cluster), [`proof`] (a real pod on each new node, where a pool asks),
//! [`desired`] (the pool's sysctls from CABPT's templates, no
//! Secret), [`leader`], [`http`] and [`metrics`] (the component), [`qps`]
//! (the client-side limit).

pub mod condition;
pub mod context;
pub mod desired;
pub mod discovery;
pub mod error;
pub mod http;
pub mod kubeconfig;
pub mod leader;
pub mod machine;
pub mod metrics;
pub mod node;
pub mod nodecache;
pub mod ops;
pub mod patch;
pub mod proof;
pub mod qps;
pub mod reconcile;
pub mod run;
pub mod workload;
