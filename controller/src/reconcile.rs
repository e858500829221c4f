//! The reconciler: one Machine at a time, as kube-runtime's `Controller`
//! calls it. Reads only caches (and, when due, the workload kubeconfig
//! Secret or a TalosConfig without a template), decides the Machine's
//! condition with the pure [`condition`] rules, writes it only if it
//! changed ([`patch::plan`]), and asks to be called again only when the
//! clock alone would change the answer ([`condition::recheck_in`]) or a
//! proof is due again.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use kube::{
    api::{DynamicObject, Patch, PatchParams},
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
    Api, Resource, ResourceExt,
};
use serde_json::Value;

use crate::{
    condition::{self, Decision, NodeSeen, Status, Verdict},
    context::{key, Context, Key},
    error::Error,
    machine::{self, MachineView},
    patch, proof,
    qps::timed,
    workload::Lookup,
};

/// The field manager of every write (the API server's managedFields and
/// audit log name it).
pub const FIELD_MANAGER: &str = "sandbox-readiness-controller";

/// How many 409s in a row one reconcile survives before it is retried.
const MAX_CONFLICTS: usize = 5;

/// A failed reconcile is tried again after this, doubled for each failure
/// of the same Machine in a row up to [`RETRY_MAX`] (controller-runtime's
/// per-item backoff, with a lower cap: a gate is a rollout waiting).
const RETRY: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// The delay before retry `failures` (1 for the first failure) of one
/// Machine. Pure.
pub fn retry_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY.saturating_mul(1 << doublings).min(RETRY_MAX)
}

pub async fn reconcile(m: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let r = reconcile_machine(&m, &ctx).await;
    ctx.metrics.reconciled(started.elapsed(), r.is_ok());
    if r.is_ok() {
        ctx.failed(&key(&m), false);
    }
    r
}

pub fn error_policy(m: Arc<DynamicObject>, e: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx.failed(&key(&m), true);
    let after = retry_after(failures);
    tracing::warn!(machine = %format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any()), error = %e, failures, retry_in = %humantime::format_duration(after), "retrying");
    Action::requeue(after)
}

async fn reconcile_machine(cached: &DynamicObject, ctx: &Context) -> Result<Action, Error> {
    // The caches must have listed once: a Machine judged against a Cluster
    // cache not yet filled would get a spurious Unknown.
    if !ctx.metrics.synced() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // A standby decides nothing (it would write nothing, and would hold a
    // watch on every workload cluster for it); it looks at every Machine
    // when its gate opens.
    if ctx.gate.elected() && !ctx.gate.may_write() {
        return Ok(Action::await_change());
    }
    let ty = &ctx.settings.condition_type;
    let k = key(cached);
    let current = ctx.current(&k, cached);
    let whole = serde_json::to_value(&current).unwrap_or(Value::Null);
    let v = machine::view(&whole, ty);
    let selected = machine::selected(&v, |d| ctx.deployment_mirrored(&k.0, d));
    let conds = machine::conditions(&whole);
    let old = patch::existing(&conds, ty);
    if !selected && old.is_none() {
        return Ok(Action::await_change());
    }
    if current.metadata.deletion_timestamp.is_some() {
        // A Machine going away is Cluster API's; nothing to hold.
        return Ok(Action::await_change());
    }
    // Paused as Cluster API pauses: the Machine's annotation or its
    // Cluster's. Unpausing is a change of the Machine or the Cluster, which
    // calls this again.
    let cluster = v.cluster.and_then(|c| ctx.cluster(&k.0, c));
    let cluster_paused = cluster.as_ref().is_some_and(|c| {
        machine::cluster_paused(&serde_json::to_value(c.as_ref()).unwrap_or(Value::Null))
    });
    if v.paused || cluster_paused {
        tracing::debug!(machine = %format!("{}/{}", k.0, k.1), "paused; left alone");
        return Ok(Action::await_change());
    }
    if !selected {
        // Deselected (its pool's mirror annotation or its gate removed): the
        // condition goes. Nobody vouches for it any more, and no gate reads
        // it; an Unknown left in its place would have a MachineHealthCheck
        // with an Unknown rule remediate the whole pool, and a frozen True
        // would say what nobody checks.
        write(ctx, &k, current, None).await?;
        return Ok(Action::await_change());
    }
    if v.gate == machine::Gate::Negative {
        write(ctx, &k, current, Some(&condition::negative_gate(ty))).await?;
        return Ok(Action::await_change());
    }
    let seen = seen(ctx, &k.0, &v, cluster.is_some()).await;
    let now = SystemTime::now();
    let stale_after = ctx.settings.stale_after;
    let decided = condition::decide(&seen, old.is_some(), now, stale_after);
    // The pod proof, where the pool asks for one, holds a True until a
    // real pod ran on the node (crate::proof); every other decision passes.
    let (decided, prove_again) =
        proof::gate(ctx, &k, &current, &v, &seen, old.as_ref(), decided).await;
    match decided {
        Decision::Keep => {}
        Decision::Write(verdict) => write(ctx, &k, current, Some(&verdict)).await?,
    }
    // A second past the moment, so the clock has surely passed it. Nothing
    // else: a rotated or edited workload kubeconfig Secret is read again by
    // the per-cluster tick (run.rs), and its new connection's first list
    // reconciles the cluster's Machines.
    let recheck = condition::recheck_in(&seen, old.is_some(), now, stale_after)
        .map(|d| d + Duration::from_secs(1));
    Ok([recheck, prove_again]
        .into_iter()
        .flatten()
        .min()
        .map_or_else(Action::await_change, Action::requeue))
}

/// What the controller sees of the Machine's Node.
async fn seen(ctx: &Context, ns: &str, v: &MachineView<'_>, cluster_exists: bool) -> NodeSeen {
    let Some(node_name) = v.node else {
        return NodeSeen::NoNodeRef;
    };
    let Some(cluster) = v.cluster else {
        return NodeSeen::NotRead {
            since: ctx.started,
            why: "the Machine names no cluster (spec.clusterName)".into(),
            pending: false,
        };
    };
    if !cluster_exists {
        return NodeSeen::NotRead {
            since: ctx.started,
            why: format!("Cluster {ns}/{cluster} does not exist"),
            pending: false,
        };
    }
    let w = ctx.workload(ns, cluster);
    let lookup = {
        let mut w = w.lock().await;
        w.maintain(
            &ctx.mgmt,
            ctx.settings.secret_resync,
            &ctx.reporting,
            || ctx.expected_nodes(ns, cluster),
        )
        .await;
        w.lookup(node_name, &ctx.settings.condition_type)
    };
    let n = match lookup {
        Lookup::NotRead {
            since,
            why,
            pending,
        } => {
            return NodeSeen::NotRead {
                since,
                why,
                pending,
            }
        }
        Lookup::Refused(why) => return NodeSeen::Refused { why },
        Lookup::TooMany(cap) => {
            return NodeSeen::TooMany {
                node: node_name.into(),
                cap,
            }
        }
        Lookup::NoNode => {
            return NodeSeen::NoNode {
                node: node_name.into(),
            }
        }
        Lookup::Node(n) => n,
    };
    // One incarnation: Cluster API matches a Node to its Machine by
    // providerID. A Node left under a reused name by another machine
    // carries another one, and its verdict is not this Machine's.
    let node_provider = n.provider_id.as_deref();
    if let (Some(mine), Some(theirs)) = (v.provider_id, node_provider) {
        if !theirs.is_empty() && mine != theirs {
            return NodeSeen::OtherMachine {
                node: node_name.into(),
                node_provider: theirs.into(),
                machine_provider: mine.into(),
            };
        }
    }
    let reading = n.reading.clone();
    // The pool is read only when it matters: the Node says True.
    let says_true = reading
        .condition
        .as_ref()
        .is_some_and(|c| c.status == Status::True);
    let pool = if says_true {
        ctx.desired.pool(&ctx.mgmt, ns, v.config_ref.as_ref()).await
    } else {
        condition::Pool::Own
    };
    NodeSeen::Node {
        node: node_name.into(),
        reading,
        pool,
    }
}

/// Writes `verdict` onto the Machine unless it already says it (`None`:
/// removes the condition, if there); re-reads and plans again on 409, so a
/// concurrent write by Cluster API is never overwritten (the merge patch
/// carries the resourceVersion it was planned on).
async fn write(
    ctx: &Context,
    k: &Key,
    mut current: DynamicObject,
    verdict: Option<&Verdict>,
) -> Result<(), Error> {
    let ty = &ctx.settings.condition_type;
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.mgmt.clone(), &k.0, &ctx.machine_ar);
    let name = format!("{}/{}", k.0, k.1);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    for _ in 0..MAX_CONFLICTS {
        let whole = serde_json::to_value(&current).unwrap_or(Value::Null);
        let conds = machine::conditions(&whole);
        let old = patch::existing(&conds, ty);
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let planned = match verdict {
            Some(v) => {
                patch::plan(&conds, ty, v, current.metadata.generation, &now).map(|p| p.conditions)
            }
            None => patch::without(&conds, ty),
        };
        let Some(planned) = planned else {
            tracing::debug!(machine = %name, "condition unchanged; nothing to write");
            return Ok(());
        };
        let Some(rv) = current.resource_version() else {
            tracing::warn!(machine = %name, "the Machine has no resourceVersion; not written");
            return Ok(());
        };
        // Leader election: asked right before each write, so a leader that
        // lost its Lease stops at once. A standby decides but never writes;
        // it looks at every Machine again when it becomes the leader.
        if !ctx.gate.may_write() {
            return Ok(());
        }
        let body = patch::body(&rv, &planned);
        match timed(api.patch_status(&k.1, &params, &Patch::Merge(&body))).await {
            Ok(mut after) => {
                machine::slim(&mut after);
                ctx.metrics.write_ok();
                match verdict {
                    Some(verdict) => {
                        tracing::info!(
                            machine = %name,
                            status = verdict.status.as_str(),
                            reason = %verdict.reason,
                            "condition written"
                        );
                        if let Some((t, reason)) = patch::event_for_write(old.as_ref(), verdict) {
                            event(
                                ctx,
                                &after,
                                t,
                                reason,
                                &verdict.message,
                                "MirrorNodeCondition",
                            )
                            .await;
                        }
                    }
                    None => tracing::info!(
                        machine = %name,
                        "no longer mirrored (no gate on the condition, its pool not mirrored): condition removed"
                    ),
                }
                ctx.wrote(k.clone(), rv, after);
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                ctx.metrics.conflict();
                tracing::debug!(machine = %name, "409: the Machine changed since it was read; reading it again");
                current = timed(api.get_status(&k.1))
                    .await
                    .map_err(|source| Error::Reread {
                        machine: name.clone(),
                        source,
                    })?;
                machine::slim(&mut current);
            }
            // Deleted meanwhile: nothing to write.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            // Deposed while the write waited for its token: not sent.
            Err(e) if crate::qps::not_leader(&e) => return Ok(()),
            Err(source) => {
                ctx.metrics.write_failed();
                return Err(Error::Write {
                    machine: name,
                    source,
                });
            }
        }
    }
    Err(Error::Conflicts(name, MAX_CONFLICTS))
}

/// Records an Event on Machine `m` (`action`: what the controller did).
pub(crate) async fn event(
    ctx: &Context,
    m: &DynamicObject,
    ty: &str,
    reason: &str,
    note: &str,
    action: &str,
) {
    let ev = Event {
        type_: if ty == "Normal" {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: reason.into(),
        note: Some(condition::bound(note.to_string())),
        action: action.into(),
        secondary: None,
    };
    let r = m.object_ref(&ctx.machine_ar);
    match timed(ctx.recorder.publish(&ev, &r)).await {
        Ok(()) => ctx.metrics.event(),
        Err(kube::Error::Service(e)) if e.is::<crate::qps::NotLeader>() => {}
        Err(e) => {
            tracing::warn!(machine = %m.name_any(), error = %e, "recording an Event failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_that_keeps_failing_backs_off_to_five_minutes() {
        let got: Vec<u64> = (1..=9).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(got, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(retry_after(u32::MAX), RETRY_MAX);
        assert_eq!(retry_after(0), RETRY);
    }
}
