//! Polling a pool instead of watching it: one `Check` per node per round,
//! each carrying the token of the node's last full answer, so an agent
//! whose answer still holds replies "unchanged" in a few bytes and the last
//! answer is reused. For controllers that poll on their own schedule;
//! `check --wait` watches instead ([`super::wait`]).

use std::{collections::HashMap, sync::Arc};

use super::{
    client::{Client, Seen},
    nodes::Node,
    result::NodeResult,
};
use crate::proto::v1::DesiredState;

/// Polls nodes for one desired state, remembering each node's last answer.
///
/// ```no_run
/// # async fn f(nodes: Vec<sandbox_readiness::fleet::nodes::Node>, desired: sandbox_readiness::proto::v1::DesiredState) {
/// use sandbox_readiness::fleet::{client::{Client, ClientOptions}, poll::Poller};
/// let mut p = Poller::new(Client::new(ClientOptions::default()), desired);
/// loop {
///     let results = p.poll(&nodes).await;
///     if results.iter().all(|r| r.converged()) {
///         break;
///     }
///     tokio::time::sleep(std::time::Duration::from_secs(5)).await;
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Poller {
    client: Client,
    desired: DesiredState,
    seen: HashMap<Node, Arc<Seen>>,
    unchanged: usize,
}

impl Poller {
    pub fn new(client: Client, desired: DesiredState) -> Self {
        Poller {
            client,
            desired,
            seen: HashMap::new(),
            unchanged: 0,
        }
    }

    /// Asks every node once; results in the order given. A node that could
    /// not be asked keeps its last answer for the next round (its token may
    /// still hold); nodes no longer given are forgotten.
    pub async fn poll(&mut self, nodes: &[Node]) -> Vec<NodeResult> {
        let polled = self
            .client
            .check_nodes_since(nodes, &self.desired, false, &self.seen)
            .await;
        self.seen.retain(|n, _| nodes.contains(n));
        self.unchanged = 0;
        let mut out = Vec::with_capacity(polled.len());
        for p in polled {
            if p.unchanged {
                self.unchanged += 1;
            } else if let (Ok(answer), false) = (&p.result.outcome, p.token.is_empty()) {
                let seen = Seen {
                    token: p.token,
                    answer: answer.clone(),
                };
                self.seen.insert(p.result.node.clone(), Arc::new(seen));
            }
            out.push(p.result);
        }
        out
    }

    /// How many nodes answered "unchanged" in the last round.
    pub fn unchanged(&self) -> usize {
        self.unchanged
    }
}
