//! Tests of node parsing (kept apart: they are as long as the parser).

#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use proptest::prelude::*;
use std::net::Ipv4Addr;

fn addr(n: &Node) -> String {
    n.address_display()
}

#[test]
fn entry_forms() {
    let cases = [
        ("node-1", "node-1", "node-1:10150"),
        (
            "Node-1.Example.COM",
            "node-1.example.com",
            "node-1.example.com:10150",
        ),
        ("node-1:7000", "node-1:7000", "node-1:7000"),
        ("10.0.0.1", "10.0.0.1", "10.0.0.1:10150"),
        ("10.0.0.1:1", "10.0.0.1:1", "10.0.0.1:1"),
        ("[::1]", "[::1]", "[::1]:10150"),
        ("[fd00::0001]:65535", "[fd00::1]:65535", "[fd00::1]:65535"),
        ("  localhost  ", "localhost", "localhost:10150"),
        ("host.", "host.", "host.:10150"),
        ("worker-1=10.0.0.21", "worker-1", "10.0.0.21:10150"),
        ("Worker-1=[fd00::1]:7000", "worker-1", "[fd00::1]:7000"),
        (
            "10.0.0.21=node-a.example:1",
            "10.0.0.21",
            "node-a.example:1",
        ),
    ];
    for (input, name, address) in cases {
        let n = parse_entry(input, DEFAULT_PORT).unwrap();
        assert_eq!(
            (n.name.as_str(), addr(&n).as_str()),
            (name, address),
            "{input}"
        );
    }
}

#[test]
fn hostile_entries_are_refused_clearly() {
    let cases: &[(&str, &str)] = &[
        ("", "empty node entry"),
        ("   ", "empty node entry"),
        (
            "host:99999",
            "port \"99999\" is not a number from 1 to 65535",
        ),
        ("host:0", "port \"0\""),
        ("host:", "port \"\""),
        ("host:+80", "port \"+80\""),
        ("[::1", "without a closing ']'"),
        ("[::1]x", "unexpected text after ']'"),
        ("[::1]:", "port \"\""),
        ("[nope]", "not an IPv6 address"),
        ("[fe80::1%eth0]", "zone ids"),
        ("fe80::1%eth0", "zone ids"),
        ("::1", "write IPv6 addresses in brackets, e.g. [::1]"),
        ("fd00::1:10150", "in brackets"),
        ("a b", "whitespace"),
        ("a\u{1b}[2J", "control character"),
        ("http://host:1", "looks like a URL"),
        ("1.2.3.999", "not a valid IPv4"),
        ("1.2.3", "not a valid IPv4"),
        ("-host", "may not start or end with '-'"),
        ("a..b", "empty label"),
        ("h\u{e9}te", "only letters"),
        (":80", "empty host"),
        ("a:b:c", "too many ':'"),
        ("=10.0.0.1", "the name before '=' is not valid: empty host"),
        ("w1=w2=10.0.0.1", "more than one '='"),
        ("-w=10.0.0.1", "the name before '=' is not valid"),
        ("w1=", "empty node entry"),
        ("w1=http://h", "looks like a URL"),
    ];
    for (input, want) in cases {
        let e = parse_entry(input, DEFAULT_PORT).unwrap_err().to_string();
        assert!(e.contains(want), "{input:?}: {e:?} lacks {want:?}");
        assert!(!e.contains('\n'), "{e:?}");
    }
    let long = "a".repeat(400);
    assert!(parse_entry(&long, DEFAULT_PORT)
        .unwrap_err()
        .to_string()
        .contains("400 characters"));
}

#[test]
fn list_and_file_errors_name_the_position() {
    let e = parse_list("a,,b", DEFAULT_PORT).unwrap_err().to_string();
    assert_eq!(e, "--nodes entry 2: empty node entry");
    let e = parse_list("a, b ,c:99999", DEFAULT_PORT)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--nodes entry 3: "), "{e}");
    let ok = parse_list("a, b ,[::1]:9", DEFAULT_PORT).unwrap();
    assert_eq!(ok.len(), 3);

    let text = "# pool gvisor\nnode-1\n\n  node-2:7000  # the odd one\nbad host\n";
    let e = parse_lines(text, DEFAULT_PORT, "nodes.txt")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("nodes.txt line 5: "), "{e}");
    let ok = parse_lines(&text.replace("bad host", ""), DEFAULT_PORT, "f").unwrap();
    let names: Vec<_> = ok.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["node-1", "node-2:7000"]);
}

#[test]
fn dedupe_keeps_first_label() {
    let mut nodes = parse_list("a,A,a:10150,b,a:1", DEFAULT_PORT).unwrap();
    nodes.insert(0, Node::new("worker-a", nodes[0].address.clone().unwrap()));
    let d = dedupe(nodes);
    let names: Vec<_> = d.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["worker-a", "b", "a:1"]);
}

const NODE_LIST: &str = r#"{
  "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
  "items": [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-2", "labels": {"pool": "gvisor"}},
     "status": {"addresses": [
        {"type": "Hostname", "address": "worker-2"},
        {"type": "InternalIP", "address": "10.0.0.2"},
        {"type": "InternalIP", "address": "fd00::2"},
        {"type": "ExternalIP", "address": "203.0.113.2"}]}},
    {"kind": "Node", "metadata": {"name": "worker-1"},
     "status": {"addresses": [{"type": "InternalIP", "address": "fd00::1"}]}},
    {"kind": "Node", "metadata": {"name": "worker-3"}, "status": {}}
  ]
}"#;

#[test]
fn node_list_uses_first_internal_ip_and_names() {
    let nodes = parse_node_list(NODE_LIST, 7000, "nodes.json").unwrap();
    let got: Vec<_> = nodes.iter().map(|n| (n.name.as_str(), addr(n))).collect();
    assert_eq!(
        got,
        [
            ("worker-2", "10.0.0.2:7000".to_string()),
            ("worker-1", "[fd00::1]:7000".to_string()),
            ("worker-3", "-".to_string()),
        ]
    );
    // The same text through --nodes-cmd output detection.
    assert_eq!(parse_cmd_output(NODE_LIST, 7000).unwrap(), nodes);
    let single = r#"{"kind":"Node","metadata":{"name":"n"},"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"}]}}"#;
    assert_eq!(parse_node_list(single, 1, "x").unwrap().len(), 1);
}

#[test]
fn node_list_errors() {
    let cases = [
        ("[]", "found kind"),
        ("{\"kind\":\"PodList\",\"items\":[]}", "found kind \"PodList\""),
        ("nope", "not JSON"),
        ("{\"kind\":\"NodeList\",\"items\":[{\"kind\":\"Pod\"}]}", "item 1: kind \"Pod\""),
        ("{\"kind\":\"NodeList\",\"items\":[{}]}", "item 1: no metadata.name"),
        (
            "{\"items\":[{\"metadata\":{\"name\":\"Bad Name\"}}]}",
            "node name \"Bad Name\"",
        ),
        (
            "{\"items\":[{\"metadata\":{\"name\":\"n\"},\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"x\"}]}}]}",
            "InternalIP \"x\": not an IP address",
        ),
    ];
    for (text, want) in cases {
        let e = parse_node_list(text, 1, "k.json").unwrap_err().to_string();
        assert!(e.starts_with("k.json: ") && e.contains(want), "{text}: {e}");
    }
}

/// (name, node name, address, leaving, pending) of each row.
fn machine_rows(text: &str) -> Vec<(String, String, String, bool, bool)> {
    parse_node_list(text, 7, "m.json")
        .unwrap()
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                n.node_name().unwrap_or("-").to_string(),
                addr(n),
                n.is_leaving(),
                n.is_pending(),
            )
        })
        .collect()
}

const OLD: &str = "kubernetes-tenant-a-md0-6c9b8f7d5x";
const NEW: &str = "kubernetes-tenant-a-md0-58f4d6c9b7";

#[test]
fn machine_lists_of_both_api_versions() {
    let steady = machine_rows(include_str!(
        "../../../tests/fixtures/capi/machines-v1beta1.json"
    ));
    assert_eq!(
        steady,
        [
            (
                format!("{OLD}-2kq8z"),
                format!("{OLD}-2kq8z"),
                "10.244.0.21:7".into(),
                false,
                false
            ),
            (
                format!("{OLD}-x7wtm"),
                format!("{OLD}-x7wtm"),
                "10.244.1.34:7".into(),
                false,
                false
            ),
        ]
    );
    let mid_rollout = [
        (
            format!("{OLD}-2kq8z"),
            format!("{OLD}-2kq8z"),
            "10.244.0.21:7".into(),
            true,
            false,
        ),
        (
            format!("{OLD}-x7wtm"),
            format!("{OLD}-x7wtm"),
            "10.244.1.34:7".into(),
            false,
            false,
        ),
        (
            format!("{NEW}-p4lzn"),
            format!("{NEW}-p4lzn"),
            "10.244.2.17:7".into(),
            false,
            false,
        ),
        (format!("{NEW}-vd9rq"), "-".into(), "-".into(), false, true),
    ];
    for text in [
        include_str!("../../../tests/fixtures/capi/machines-v1beta1-rollout.json"),
        include_str!("../../../tests/fixtures/capi/machines-v1beta2-rollout.json"),
    ] {
        assert_eq!(machine_rows(text), mid_rollout);
    }
}

#[test]
fn machine_addresses_and_kinds() {
    let one = |status: &str, extra: &str| {
        format!(
            r#"{{"kind":"MachineList","items":[{{"metadata":{{"name":"m-1"{extra}}},"status":{status}}}]}}"#
        )
    };
    // InternalIP first wherever it is listed; an ExternalIP when it is the only IP.
    let rows = machine_rows(&one(
        r#"{"addresses":[{"type":"Hostname","address":"m-1"},{"type":"ExternalIP","address":"192.0.2.1"},{"type":"InternalIP","address":"fd00::1"}]}"#,
        "",
    ));
    assert_eq!(rows[0].2, "[fd00::1]:7");
    let rows = machine_rows(&one(
        r#"{"addresses":[{"type":"ExternalIP","address":"192.0.2.1"}]}"#,
        "",
    ));
    assert_eq!(rows[0].2, "192.0.2.1:7");
    // Deleting without an address is leaving, not pending.
    let rows = machine_rows(&one("{}", r#","deletionTimestamp":"2026-11-30T08:06:02Z""#));
    assert_eq!((rows[0].3, rows[0].4), (true, false));
    // A single Machine, as `kubectl get machine m-1 -o json` prints it.
    let single = r#"{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Machine","metadata":{"name":"m-1"},"status":{"nodeRef":{"name":"w-1"}}}"#;
    assert_eq!(machine_rows(single)[0].1, "w-1");
    let e = parse_node_list(&one(r#"{"nodeRef":{"name":"W\u001b"}}"#, ""), 7, "m.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("machine m-1: nodeRef.name"), "{e}");
    let e = parse_node_list(
        r#"{"kind":"MachineDeploymentList","items":[]}"#,
        7,
        "m.json",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("or a MachineList"), "{e}");
    // NodeList rows carry no Machine.
    let n = parse_node_list(
        r#"{"kind":"NodeList","items":[{"metadata":{"name":"w"}}]}"#,
        7,
        "n",
    )
    .unwrap();
    assert!(n[0].machine.is_none() && !n[0].is_pending());
}

#[test]
fn loopback_detection() {
    let lo = |s: &str| parse_entry(s, 1).unwrap().address.unwrap().is_loopback();
    assert!(lo("127.0.0.1") && lo("127.8.9.1:5") && lo("[::1]") && lo("localhost"));
    assert!(lo("[::ffff:127.0.0.1]"));
    assert!(!lo("10.0.0.1") && !lo("node-1") && !lo("[fd00::1]") && !lo("localhost.evil"));
}

#[test]
fn natural_order() {
    let mut v = vec!["node-10", "node-2", "node-1", "a", "node-02", "node-2a"];
    v.sort_by(|a, b| natural_cmp(a, b));
    assert_eq!(
        v,
        ["a", "node-1", "node-02", "node-2", "node-2a", "node-10"]
    );
}

fn arb_host() -> impl Strategy<Value = Host> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| Host::Ip(IpAddr::V4(Ipv4Addr::from(o)))),
        any::<[u16; 8]>().prop_map(|s| Host::Ip(IpAddr::V6(Ipv6Addr::from(s)))),
        "[a-z][a-z0-9-]{0,10}[a-z0-9](\\.[a-z][a-z0-9]{0,8}){0,3}".prop_map(Host::Name),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,40}|[\\[\\]:0-9a-f.%, #\\n{}\"-]{0,40}") {
        let _ = parse_entry(&s, DEFAULT_PORT);
        let _ = parse_list(&s, DEFAULT_PORT);
        let _ = parse_lines(&s, DEFAULT_PORT, "f");
        let _ = parse_node_list(&s, DEFAULT_PORT, "f");
        let _ = parse_cmd_output(&s, DEFAULT_PORT);
    }

    #[test]
    fn errors_are_one_line(s in any::<String>()) {
        if let Err(e) = parse_list(&s, DEFAULT_PORT) {
            let msg = e.to_string();
            prop_assert!(!msg.contains('\n'));
            prop_assert!(msg.chars().count() < 400);
        }
    }

    #[test]
    fn formatted_addresses_round_trip(host in arb_host(), port in 1u16..) {
        let a = Address { host, port };
        let n = parse_entry(&a.to_string(), 9).unwrap();
        prop_assert_eq!(n.address.as_ref(), Some(&a));
        prop_assert_eq!(n.name, a.to_string());
        let bare = parse_entry(&a.host.to_string(), 9).unwrap();
        prop_assert_eq!(bare.address, Some(Address { port: 9, ..a }));
    }

    #[test]
    fn ports_out_of_range_are_refused(host in arb_host(), port in 65536u64..10_000_000) {
        let s = format!("{host}:{port}");
        let e = parse_entry(&s, 9).unwrap_err();
        prop_assert!(matches!(e, EntryError::BadPort(..)), "{:?}", e);
    }

    #[test]
    fn dedupe_is_idempotent_and_unique(
        hosts in proptest::collection::vec((arb_host(), 1u16..4), 0..30)
    ) {
        let nodes: Vec<Node> = hosts
            .into_iter()
            .map(|(host, port)| Node::new("x", Address { host, port }))
            .collect();
        let once = dedupe(nodes.clone());
        prop_assert_eq!(dedupe(once.clone()), once.clone());
        let keys: HashSet<_> = once.iter().map(Node::key).collect();
        prop_assert_eq!(keys.len(), once.len());
        let all: HashSet<_> = nodes.iter().map(Node::key).collect();
        prop_assert_eq!(all, keys);
    }

    #[test]
    fn natural_cmp_is_a_total_order(a in "[a-c0-2]{0,6}", b in "[a-c0-2]{0,6}", c in "[a-c0-2]{0,6}") {
        prop_assert_eq!(natural_cmp(&a, &b), natural_cmp(&b, &a).reverse());
        prop_assert_eq!(natural_cmp(&a, &b) == Ordering::Equal, a == b);
        if natural_cmp(&a, &b) != Ordering::Greater && natural_cmp(&b, &c) != Ordering::Greater {
            prop_assert_ne!(natural_cmp(&a, &c), Ordering::Greater);
        }
    }
}
