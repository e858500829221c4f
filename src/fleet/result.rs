//! What asking a node gave: its answer judged here, or why it could not be
//! asked, and what a person reads about it. Pure: the client and the pool
//! watch produce these; the renderer prints them.

use std::time::Duration;

use thiserror::Error;

use super::nodes::{natural_cmp, Node};
use crate::{
    evaluate,
    proto::v1::{DesiredState, Finding, Report, Verdict},
    text::{clean_line, fmt_duration},
};

/// Why a node could not be asked. One line each; [`AskError::kind`] is a
/// stable word for programs.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum AskError {
    #[error("no address: the node lists no InternalIP")]
    NoAddress,
    #[error("pending: the Machine has no address yet")]
    Pending,
    #[error("leaving: the Machine is being deleted (not counted)")]
    Leaving,
    #[error("plaintext to a non-loopback address refused: give --tls-ca, or --insecure-plaintext")]
    PlaintextRefused,
    #[error("plaintext refused: {0}; give --tls-ca, or --insecure-plaintext")]
    NotLoopback(String),
    #[error("connection refused")]
    Refused,
    #[error("connect timed out after {}", fmt_duration(*.0))]
    ConnectTimeout(Duration),
    #[error("connected, but no answer within {} (agent hung, or not an HTTP/2 server)", fmt_duration(*.0))]
    NoAnswer(Duration),
    #[error("cannot resolve: {0}")]
    Resolve(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("the agent closed the connection{0}")]
    Closed(String),
    #[error("HTTP/2 protocol error{0}")]
    Protocol(String),
    #[error("agent answered {code}: {message}")]
    Rpc { code: String, message: String },
    #[error("bad answer: {0}")]
    BadAnswer(String),
    #[error("watch stream ended")]
    StreamEnded,
    #[error("no message for {} (heartbeats stopped)", fmt_duration(*.0))]
    Idle(Duration),
    #[error("no answer yet")]
    NoAnswerYet,
    #[error("internal error: {0}")]
    Internal(String),
}

impl AskError {
    /// A stable word for `-o json`.
    pub fn kind(&self) -> &'static str {
        match self {
            AskError::NoAddress => "no_address",
            AskError::Pending => "pending",
            AskError::Leaving => "leaving",
            AskError::PlaintextRefused | AskError::NotLoopback(_) => "plaintext_refused",
            AskError::Refused => "refused",
            AskError::ConnectTimeout(_) => "connect_timeout",
            AskError::NoAnswer(_) => "deadline",
            AskError::Resolve(_) => "resolve",
            AskError::Tls(_) => "tls",
            AskError::Connect(_) => "connect",
            AskError::Closed(_) => "closed",
            AskError::Protocol(_) => "protocol",
            AskError::Rpc { .. } => "rpc",
            AskError::BadAnswer(_) => "bad_answer",
            AskError::StreamEnded => "stream_ended",
            AskError::Idle(_) => "idle",
            AskError::NoAnswerYet => "no_answer_yet",
            AskError::Internal(_) => "internal",
        }
    }

    /// True when retrying cannot help (the same node set would give the
    /// same error), so a watcher reports it once and stops dialling.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            AskError::NoAddress
                | AskError::Pending
                | AskError::Leaving
                | AskError::PlaintextRefused
                | AskError::NotLoopback(_)
        )
    }
}

/// What a node answered, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub verdict: Verdict,
    pub report: Report,
}

impl Answer {
    /// Judges a report: locally against `desired` when it asks for anything
    /// (so every agent version is judged by this controller's rules), else
    /// the agent's own verdict against the defaults it was started with.
    pub fn judge(desired: &DesiredState, report: Report, server: Option<Verdict>) -> Answer {
        let verdict = if evaluate::is_empty(desired) {
            server.unwrap_or_else(|| evaluate::evaluate(&report, desired))
        } else {
            evaluate::evaluate(&report, desired)
        };
        Answer { verdict, report }
    }

    /// The node's boot id, empty when the agent could not read it.
    pub fn boot_id(&self) -> &str {
        self.report.node.as_ref().map_or("", |n| n.boot_id.as_str())
    }
}

/// One node's result.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeResult {
    pub node: Node,
    pub outcome: Result<Answer, AskError>,
    /// From the start of asking (or watching) to this result.
    pub elapsed: Duration,
    /// How often the node's boot id changed while it was watched.
    pub boot_id_changes: u32,
}

impl NodeResult {
    pub fn converged(&self) -> bool {
        self.outcome.as_ref().is_ok_and(|a| a.verdict.converged)
    }
}

/// The finding a person should read first: the first blocking one, else
/// the first informational one.
pub fn first_finding(v: &Verdict) -> Option<&Finding> {
    v.findings
        .iter()
        .find(|f| f.blocking)
        .or_else(|| v.findings.first())
}

/// Why a node is where it is, in plain words (empty when converged with
/// nothing to say).
pub fn node_reason(outcome: &Result<Answer, AskError>) -> String {
    match outcome {
        Ok(a) => match first_finding(&a.verdict) {
            Some(f) if !f.blocking => format!("(note) {}", clean_line(&f.message)),
            Some(f) => clean_line(&f.message),
            None if a.verdict.converged => String::new(),
            None => "not converged (the agent gave no finding)".into(),
        },
        Err(e) => clean_line(&e.to_string()),
    }
}

/// Sorts rows by node name (digit runs by value), then address.
pub fn sort_results(results: &mut [NodeResult]) {
    results.sort_by(|a, b| {
        natural_cmp(&a.node.name, &b.node.name)
            .then_with(|| natural_cmp(&a.node.address_display(), &b.node.address_display()))
    });
}

/// True when the pool converged: at least one member (a Machine being
/// deleted is not one), the expected count, every member converged.
pub fn pool_converged(results: &[NodeResult], expected: Option<usize>) -> bool {
    let members: Vec<&NodeResult> = results.iter().filter(|r| !r.node.is_leaving()).collect();
    let machines = members.iter().any(|r| r.node.machine.is_some());
    !members.is_empty()
        && count_matches(members.len(), expected, machines)
        && members.iter().all(|r| r.converged())
}

/// Whether `members` nodes satisfy `--expect-nodes`: at least that many
/// nodes, and for Machines exactly that many, since during a rollout a
/// surplus Machine means old ones are still to be replaced.
pub fn count_matches(members: usize, expected: Option<usize>, machines: bool) -> bool {
    match expected {
        None => true,
        Some(n) if machines => members == n,
        Some(n) => members >= n,
    }
}

/// Counts for the progress line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: usize,
    pub converged: usize,
    pub unreachable: usize,
    pub waiting: usize,
}
