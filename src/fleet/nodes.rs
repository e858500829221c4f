//! Which nodes to ask: `-n/--nodes`, `--nodes-file`, `--kube-nodes` and the
//! output of `--nodes-cmd` (entries, a Kubernetes `NodeList`, or a Cluster
//! API `MachineList`).
//!
//! Everything here is pure (text in, nodes or a one-line error out), so it is
//! property-tested: no input panics, and a bad entry is refused with the
//! entry named before anything is sent.

use std::{
    cmp::Ordering,
    collections::HashSet,
    fmt,
    net::{IpAddr, Ipv6Addr},
};

use serde_json::Value;
use thiserror::Error;

/// The agent's default port: below the ephemeral range (32768–60999), so an
/// outgoing connection never holds it when the agent restarts, and used by
/// none of Talos, Kubernetes, Cilium, kube-ovn, LINSTOR/DRBD, KubeVirt or
/// node-exporter. Earlier builds listened on 50100 (see the README for
/// fleets that mix versions).
pub const DEFAULT_PORT: u16 = 10150;

/// Longer entries are refused: the longest DNS name (253) plus a port fits.
const MAX_ENTRY_CHARS: usize = 300;

/// Errors quote at most this much of the offending text.
const QUOTE_CHARS: usize = 80;

/// A host to dial: an IP literal or a DNS name (lowercased).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Ip(IpAddr),
    Name(String),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Name(n) => f.write_str(n),
        }
    }
}

/// Where an agent listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    pub host: Host,
    pub port: u16,
}

impl Address {
    /// True for loopback IPs (IPv4-mapped ones included) and `localhost`,
    /// the only places plaintext goes without `--insecure-plaintext`. A name
    /// is checked again when it is dialled: every address it resolves to
    /// must be loopback too (`dial::Reach::LoopbackOnly`).
    pub fn is_loopback(&self) -> bool {
        match &self.host {
            Host::Ip(ip) => ip.to_canonical().is_loopback(),
            Host::Name(n) => n == "localhost" || n == "localhost.",
        }
    }

    /// The URL tonic dials.
    pub fn uri(&self, tls: bool) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{self}")
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// One node to ask.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// The row label: the Kubernetes node name, or the entry as written
    /// (normalized: lowercase, IPv6 in brackets, `:port` only if given).
    pub name: String,
    /// `None` for a Kubernetes node that lists no usable InternalIP: it is
    /// part of the pool but cannot be asked, so it is a row of its own.
    pub address: Option<Address>,
    /// Set for a row from a Cluster API `MachineList`: `name` is then the
    /// Machine's name, which stays the same through a rollout.
    pub machine: Option<Machine>,
}

/// What a Cluster API Machine adds to a row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Machine {
    /// `status.nodeRef.name`, once the Machine's node joined the cluster.
    pub node_name: Option<String>,
    /// `metadata.deletionTimestamp` is set: the Machine is being replaced or
    /// removed, so its node no longer belongs to the pool.
    pub deleting: bool,
}

impl Node {
    /// A node with an address and a label.
    pub fn new(name: impl Into<String>, address: Address) -> Self {
        Node {
            name: name.into(),
            address: Some(address),
            machine: None,
        }
    }

    /// A Machine being deleted: shown, never asked, not counted.
    pub fn is_leaving(&self) -> bool {
        self.machine.as_ref().is_some_and(|m| m.deleting)
    }

    /// A Machine that has no address yet: part of the pool, not converged,
    /// and asked once a later listing gives it an address.
    pub fn is_pending(&self) -> bool {
        self.machine.is_some() && self.address.is_none() && !self.is_leaving()
    }

    /// The node name of a Machine row, once known.
    pub fn node_name(&self) -> Option<&str> {
        self.machine.as_ref().and_then(|m| m.node_name.as_deref())
    }

    /// Identity for dedupe and for following a changing node set: the
    /// address, or the name when there is none.
    pub fn key(&self) -> String {
        match &self.address {
            Some(a) => a.to_string(),
            None => format!("name:{}", self.name),
        }
    }

    /// The address as shown in rows, `-` when there is none.
    pub fn address_display(&self) -> String {
        self.address
            .as_ref()
            .map_or_else(|| "-".to_string(), ToString::to_string)
    }
}

/// Why one entry was refused.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum EntryError {
    #[error("empty node entry")]
    Empty,
    #[error("node entry is {0} characters long (at most {MAX_ENTRY_CHARS})")]
    TooLong(usize),
    #[error("{0:?} contains whitespace or a control character")]
    Whitespace(String),
    #[error("{0:?} looks like a URL: give HOST or HOST:PORT")]
    Url(String),
    #[error("{0:?} has '[' without a closing ']'")]
    UnclosedBracket(String),
    #[error("{0:?}: the part in brackets is not an IPv6 address")]
    BadIpv6(String),
    #[error("{0:?}: IPv6 zone ids (%IFACE) are not supported")]
    Zone(String),
    #[error("{0:?}: write IPv6 addresses in brackets, e.g. [{1}] or [{1}]:10150")]
    BareIpv6(String, String),
    #[error("{0:?}: unexpected text after ']' (expected :PORT)")]
    AfterBracket(String),
    #[error("{0:?}: port {1:?} is not a number from 1 to 65535")]
    BadPort(String, String),
    #[error("{0:?}: {1}")]
    BadHost(String, &'static str),
    #[error("{0:?} is not a valid IPv4 address")]
    BadIpv4(String),
    #[error("{0:?}: the name before '=' is not valid: {1}")]
    BadName(String, &'static str),
}

/// Why a node source was refused; always names the source and position.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum NodesError {
    #[error("{origin}: {error}")]
    Entry { origin: String, error: EntryError },
    #[error("{origin}: {message}")]
    Document { origin: String, message: String },
}

fn quote(s: &str) -> String {
    s.chars().take(QUOTE_CHARS).collect()
}

/// Parses one entry: `host`, `host:port`, IPv4, `[IPv6]` or `[IPv6]:port`,
/// each optionally named: `NAME=host:port`.
pub fn parse_entry(raw: &str, default_port: u16) -> Result<Node, EntryError> {
    let s = raw.trim();
    if s.is_empty() {
        return Err(EntryError::Empty);
    }
    let len = s.chars().count();
    if len > MAX_ENTRY_CHARS {
        return Err(EntryError::TooLong(len));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(EntryError::Whitespace(quote(s)));
    }
    if s.contains("://") || s.contains('/') {
        return Err(EntryError::Url(quote(s)));
    }
    // NAME=ADDRESS: the row (and, under --tls-server-name-from-node, the
    // certificate) is the node's name, the agent is reached at ADDRESS.
    if let Some((name, rest)) = s.split_once('=') {
        if rest.contains('=') {
            return Err(EntryError::BadName(quote(s), "more than one '='"));
        }
        let name = parse_host(name).map_err(|e| match e {
            EntryError::BadHost(_, why) => EntryError::BadName(quote(s), why),
            _ => EntryError::BadName(quote(s), "not a DNS name or IPv4 address"),
        })?;
        let mut node = parse_entry(rest, default_port)?;
        node.name = name.to_string();
        return Ok(node);
    }
    let (host, port_text) = if let Some(rest) = s.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            return Err(EntryError::UnclosedBracket(quote(s)));
        };
        if inner.contains('%') {
            return Err(EntryError::Zone(quote(s)));
        }
        let ip: Ipv6Addr = inner.parse().map_err(|_| EntryError::BadIpv6(quote(s)))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| EntryError::AfterBracket(quote(s)))?,
            ),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else if s.matches(':').count() > 1 {
        // Two or more colons outside brackets can only be a bare IPv6
        // address, where a port would be ambiguous.
        let bare = s.split('%').next().unwrap_or(s);
        return Err(match bare.parse::<Ipv6Addr>() {
            Ok(ip) if !s.contains('%') => EntryError::BareIpv6(quote(s), ip.to_string()),
            Ok(_) => EntryError::Zone(quote(s)),
            Err(_) => EntryError::BadHost(quote(s), "too many ':' (IPv6 goes in brackets)"),
        });
    } else {
        let (h, p) = match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        (parse_host(h).map_err(|e| with_entry(e, s))?, p)
    };
    let port = match port_text {
        None => default_port,
        Some(p) => parse_port(p).ok_or_else(|| EntryError::BadPort(quote(s), quote(p)))?,
    };
    let address = Address { host, port };
    let name = match port_text {
        None => address.host.to_string(),
        Some(_) => address.to_string(),
    };
    Ok(Node {
        name,
        address: Some(address),
        machine: None,
    })
}

fn with_entry(e: EntryError, entry: &str) -> EntryError {
    match e {
        EntryError::BadHost(_, why) => EntryError::BadHost(quote(entry), why),
        other => other,
    }
}

fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse::<u16>().ok().filter(|&n| n != 0)
}

/// An IPv4 literal or a DNS name (RFC 1123 labels; `_` allowed because
/// some resolvers' names carry it; trailing dot allowed).
fn parse_host(h: &str) -> Result<Host, EntryError> {
    if h.is_empty() {
        return Err(EntryError::BadHost(String::new(), "empty host"));
    }
    let labels: Vec<&str> = h.strip_suffix('.').unwrap_or(h).split('.').collect();
    if labels
        .iter()
        .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
    {
        return h
            .parse::<std::net::Ipv4Addr>()
            .map(|ip| Host::Ip(IpAddr::V4(ip)))
            .map_err(|_| EntryError::BadIpv4(quote(h)));
    }
    if h.len() > 253 {
        return Err(EntryError::BadHost(
            String::new(),
            "host name longer than 253",
        ));
    }
    for l in &labels {
        if l.is_empty() {
            return Err(EntryError::BadHost(
                String::new(),
                "empty label in host name",
            ));
        }
        if l.len() > 63 {
            return Err(EntryError::BadHost(
                String::new(),
                "label longer than 63 in host name",
            ));
        }
        if !l
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(EntryError::BadHost(
                String::new(),
                "host names may hold only letters, digits, '-', '_' and '.'",
            ));
        }
        if l.starts_with('-') || l.ends_with('-') {
            return Err(EntryError::BadHost(
                String::new(),
                "a host name label may not start or end with '-'",
            ));
        }
    }
    Ok(Host::Name(h.to_ascii_lowercase()))
}

/// Parses `-n a,b,c`.
pub fn parse_list(s: &str, default_port: u16) -> Result<Vec<Node>, NodesError> {
    s.split(',')
        .enumerate()
        .map(|(i, e)| {
            parse_entry(e, default_port).map_err(|error| NodesError::Entry {
                origin: format!("--nodes entry {}", i + 1),
                error,
            })
        })
        .collect()
}

/// Parses a file of one entry per line; `#` starts a comment, blank lines
/// are skipped. `origin` names the file in errors.
pub fn parse_lines(text: &str, default_port: u16, origin: &str) -> Result<Vec<Node>, NodesError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let node = parse_entry(content, default_port).map_err(|error| NodesError::Entry {
            origin: format!("{origin} line {}", i + 1),
            error,
        })?;
        out.push(node);
    }
    Ok(out)
}

/// Parses the JSON of `kubectl get nodes -o json` (a `NodeList`, a `List`
/// of nodes, or a single `Node`): one node per item, labelled by
/// `metadata.name`, dialled at its first `InternalIP` (the kubelet lists its
/// primary address first). A node without an InternalIP is kept without an
/// address, so it shows as a node that cannot be asked instead of vanishing.
///
/// `kubectl get machines -o json` (a Cluster API `MachineList`, v1beta1 or
/// v1beta2, or a single `Machine`) is read the same way, one row per
/// Machine: see [`Machine`].
pub fn parse_node_list(
    text: &str,
    default_port: u16,
    origin: &str,
) -> Result<Vec<Node>, NodesError> {
    let doc_err = |message: String| NodesError::Document {
        origin: origin.to_string(),
        message,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| {
        doc_err(format!(
            "not JSON (expected `kubectl get nodes -o json` or `kubectl get machines -o json`): {e}"
        ))
    })?;
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    // Items without a kind take the list's; a plain `List` may hold either.
    let (items, item_default): (Vec<&Value>, &str) = match (kind, v.get("items")) {
        ("Node" | "Machine", _) => (vec![&v], kind),
        (_, Some(Value::Array(items))) if matches!(kind, "NodeList" | "List" | "") => {
            (items.iter().collect(), "Node")
        }
        ("MachineList", Some(Value::Array(items))) => (items.iter().collect(), "Machine"),
        _ => {
            return Err(doc_err(format!(
                "expected a NodeList (kubectl get nodes -o json) or a MachineList (kubectl get machines -o json), found kind {:?}",
                quote(kind)
            )))
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |m: String| doc_err(format!("item {}: {m}", i + 1));
        let item_kind = item
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or(item_default);
        let is_machine = match item_kind {
            "Node" => false,
            "Machine" => true,
            other => {
                return Err(at(format!(
                    "kind {:?} is not Node or Machine",
                    quote(other)
                )))
            }
        };
        let (what, label) = if is_machine {
            ("machine", "address")
        } else {
            ("node", "InternalIP")
        };
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| at("no metadata.name".into()))?;
        validate_node_name(name)
            .map_err(|why| at(format!("{what} name {:?}: {why}", quote(name))))?;
        let addresses = item
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let of_type = |t: &str| {
            addresses.iter().find_map(|a| {
                (a.get("type").and_then(Value::as_str) == Some(t))
                    .then(|| a.get("address").and_then(Value::as_str))
                    .flatten()
            })
        };
        // A Machine's infrastructure may list only an ExternalIP.
        let ip = match of_type("InternalIP") {
            None if is_machine => of_type("ExternalIP"),
            found => found,
        };
        let address = match ip {
            None => None,
            Some(ip) => Some(Address {
                host: parse_internal_ip(ip)
                    .map_err(|e| at(format!("{what} {name}: {label} {:?}: {e}", quote(ip))))?,
                port: default_port,
            }),
        };
        let machine = if is_machine {
            let node_name = match item.pointer("/status/nodeRef/name").and_then(Value::as_str) {
                None | Some("") => None,
                Some(n) => {
                    validate_node_name(n).map_err(|why| {
                        at(format!(
                            "machine {name}: nodeRef.name {:?}: {why}",
                            quote(n)
                        ))
                    })?;
                    Some(n.to_string())
                }
            };
            let deleting = item
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|t| !t.is_null());
            Some(Machine {
                node_name,
                deleting,
            })
        } else {
            None
        };
        out.push(Node {
            name: name.to_string(),
            address,
            machine,
        });
    }
    Ok(out)
}

/// An InternalIP is a bare IP (IPv6 without brackets, as Kubernetes writes it).
fn parse_internal_ip(ip: &str) -> Result<Host, &'static str> {
    let ip = ip.trim();
    let inner = ip
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(ip);
    inner
        .parse::<IpAddr>()
        .map(Host::Ip)
        .map_err(|_| "not an IP address")
}

/// Kubernetes node names are DNS subdomains; anything else would also be
/// unsafe to print on a terminal.
fn validate_node_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 253 {
        return Err("must be 1 to 253 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err("must hold only lowercase letters, digits, '-' and '.'");
    }
    Ok(())
}

/// Parses what `--nodes-cmd` printed: NodeList or MachineList JSON when it starts with
/// `{`, else one entry per line like `--nodes-file`.
pub fn parse_cmd_output(text: &str, default_port: u16) -> Result<Vec<Node>, NodesError> {
    if text.trim_start().starts_with('{') {
        parse_node_list(text, default_port, "--nodes-cmd output")
    } else {
        parse_lines(text, default_port, "--nodes-cmd output")
    }
}

/// Removes later entries with an address (or, without one, a name) seen
/// before, keeping the first label; order is otherwise kept.
pub fn dedupe(nodes: Vec<Node>) -> Vec<Node> {
    let mut seen = HashSet::new();
    nodes.into_iter().filter(|n| seen.insert(n.key())).collect()
}

/// Orders names as people expect: digit runs by value, so `node-2` comes
/// before `node-10`. Ties fall back to the plain string order, so the
/// order is total and `Equal` only for equal strings.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let (n, rx) = split_digits(x);
                let (m, ry) = split_digits(y);
                let (nt, mt) = (trim_zeros(n), trim_zeros(m));
                let ord = nt.len().cmp(&mt.len()).then_with(|| nt.cmp(mt));
                if ord != Ordering::Equal {
                    return ord;
                }
                x = rx;
                y = ry;
            }
            (Some(c), Some(d)) => {
                if c != d {
                    return c.cmp(d);
                }
                x = &x[1..];
                y = &y[1..];
            }
        }
    }
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    s.split_at(n)
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b'0').count();
    &s[n..]
}

#[cfg(test)]
mod tests;
