//! Property tests for the public parsers that read the host or the network,
//! where their own modules do not already cover the property:
//! sysctl names (never a path outside `/proc/sys`) and values, `--sysctl`
//! flags, os-release, `runsc --version`, the uid_map check, and the nesting
//! depth and shape of CRI `info` JSON, CRI drop-in TOML and kubectl node
//! lists and MachineDeployments. Each block runs a bounded number of cases
//! so CI stays fast.
//!
//! Covered in the modules themselves (not repeated here): arbitrary text and
//! round trips for `observe::gvisor::handlers_from_drop_in` and
//! `runsc_platform`, `observe::cri::handlers_from_info_config`, and every
//! `fleet::nodes` parser (entries, lists, files, `--nodes-cmd` output,
//! dedupe, natural order).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Component, Path};

use proptest::prelude::*;
use sandbox_readiness::{
    desired::{from_annotation, parse_pool},
    evaluate::{parse_sysctl_flag, shim_binary, values_equal, DesiredError},
    fleet::{
        expect::parse_replicas,
        nodes::{parse_cmd_output, parse_node_list, Host},
    },
    observe::{
        cri::handlers_from_info_config,
        gvisor::{handlers_from_drop_in, parse_runsc_version, ConfigLookup},
        node::parse_os_release,
        sysctl,
        userns::parse_is_initial,
    },
    proto::v1::SysctlState,
    sysctl_name::{name_parts, validate_name, MAX_VALUE_BYTES},
};

/// Text that is mostly the characters a sysctl name or a traversal uses.
fn name_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_./-]{0,40}",
        "(\\.|\\.\\.|/|[a-z]{1,4}|%2e|\\\\|\\x00|~){0,12}",
        any::<String>(),
    ]
}

fn part() -> impl Strategy<Value = String> {
    "[a-z0-9_][a-z0-9_-]{0,15}"
}

/// Any mix of the whitespace a kernel or a person puts between fields.
fn blanks(min: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(prop_oneof![Just(' '), Just('\t'), Just('\n')], min..4)
        .prop_map(|v| v.into_iter().collect())
}

/// A bounded run; no regression files (an integration test has no lib.rs
/// beside it for proptest to put them next to).
fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn one_line(e: &impl std::fmt::Display) -> bool {
    !e.to_string().contains('\n')
}

proptest! {
    #![proptest_config(cases(512))]

    /// An accepted name is a path of plain parts below /proc/sys: no `..`,
    /// no `.`, no empty part, no leading `/`, no separator or NUL in a part.
    #[test]
    fn sysctl_names_never_escape_proc_sys(name in name_like()) {
        match name_parts(&name) {
            Ok(parts) => {
                prop_assert!(validate_name(&name).is_ok());
                prop_assert!(!parts.is_empty());
                prop_assert!(!name.starts_with('/'));
                for p in &parts {
                    prop_assert!(!p.is_empty() && *p != "." && *p != "..", "{:?}", parts);
                    prop_assert!(!p.contains('/') && !p.contains('\0'), "{:?}", parts);
                }
                let root = Path::new("/proc/sys");
                let path = parts.iter().fold(root.to_path_buf(), |p, part| p.join(part));
                let below: Vec<Component> = path.strip_prefix(root).unwrap().components().collect();
                prop_assert_eq!(below.len(), parts.len());
                prop_assert!(below.iter().all(|c| matches!(c, Component::Normal(_))));
            }
            Err(e) => {
                prop_assert!(validate_name(&name).is_err());
                prop_assert!(one_line(&e), "{}", e);
            }
        }
    }

    /// Real-shaped names are accepted, dotted and slashed alike.
    #[test]
    fn real_shaped_sysctl_names_are_accepted(
        parts in proptest::collection::vec(part(), 1..7),
        dotted_part in "[a-z0-9]{1,8}\\.[0-9]{1,4}",
    ) {
        let dotted = parts.join(".");
        prop_assert_eq!(name_parts(&dotted).unwrap(), parts.iter().map(String::as_str).collect::<Vec<_>>());
        // A part with a dot (a VLAN interface) needs the slashed form.
        let mut with_dot = parts.clone();
        with_dot.insert(parts.len() / 2, dotted_part);
        let slashed = with_dot.join("/");
        prop_assert_eq!(name_parts(&slashed).unwrap(), with_dot.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// Whatever the name, `read` never shows a file outside the proc_sys
    /// root it was given (a real directory tree with a file beside it).
    #[test]
    fn reading_any_name_stays_below_the_root(name in name_like()) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sys");
        std::fs::create_dir_all(root.join("user")).unwrap();
        std::fs::write(root.join("user/max_user_namespaces"), "7\n").unwrap();
        std::fs::write(dir.path().join("secret"), "SECRET\n").unwrap();
        std::fs::create_dir_all(dir.path().join("user")).unwrap();
        std::fs::write(dir.path().join("user/secret"), "SECRET\n").unwrap();
        let s = sysctl::read(&root, &name);
        prop_assert_ne!(s.value.as_str(), "SECRET");
        if validate_name(&name).is_err() {
            prop_assert_eq!(s.state, SysctlState::Unreadable as i32);
            prop_assert!(s.value.is_empty());
        }
        prop_assert!(one_line(&s.error), "{}", s.error);
    }

    #[test]
    fn values_equal_is_reflexive_and_symmetric(a in any::<String>(), b in any::<String>()) {
        prop_assert!(values_equal(&a, &a));
        prop_assert_eq!(values_equal(&a, &b), values_equal(&b, &a));
    }

    /// Only the fields count, not the blanks around and between them.
    #[test]
    fn values_equal_ignores_whitespace(
        fields in proptest::collection::vec("[!-~]{1,8}", 0..5),
        seps_a in proptest::collection::vec(blanks(1), 6),
        seps_b in proptest::collection::vec(blanks(1), 6),
        edge in (blanks(0), blanks(0)),
    ) {
        let join = |seps: &[String]| {
            let mut s = String::new();
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    s.push_str(&seps[i]);
                }
                s.push_str(f);
            }
            s
        };
        let a = format!("{}{}{}", edge.0, join(&seps_a), edge.1);
        let b = join(&seps_b);
        prop_assert!(values_equal(&a, &b), "{:?} vs {:?}", a, b);
    }

    #[test]
    fn values_equal_sees_different_fields(
        a in proptest::collection::vec("[!-~]{1,6}", 0..4),
        b in proptest::collection::vec("[!-~]{1,6}", 0..4),
    ) {
        prop_assert_eq!(values_equal(&a.join(" "), &b.join("\t")), a == b);
    }

    /// `--sysctl` never panics and says what is wrong on one line.
    #[test]
    fn sysctl_flags_never_panic(s in prop_oneof!["[a-z._/ =\\-]{0,40}", any::<String>()]) {
        match parse_sysctl_flag(&s) {
            Ok(e) => {
                prop_assert!(validate_name(&e.name).is_ok());
                prop_assert!(e.value.len() <= MAX_VALUE_BYTES);
                prop_assert!(s.contains('='));
            }
            Err(e) => prop_assert!(one_line(&e), "{}", e),
        }
    }

    /// NAME=VALUE with a valid name gives the name (trimmed) and the value
    /// exactly, `=` and blanks in it included.
    #[test]
    fn sysctl_flags_round_trip(
        parts in proptest::collection::vec(part(), 1..5),
        pad in (" {0,2}", " {0,2}"),
        value in "[ -~\t]{0,64}",
    ) {
        let name = parts.join(".");
        let flag = format!("{}{name}{}={value}", pad.0, pad.1);
        let e = parse_sysctl_flag(&flag).unwrap();
        prop_assert_eq!(e.name, name);
        prop_assert_eq!(e.value, value);
    }

    #[test]
    fn oversized_sysctl_values_are_refused(extra in 1usize..100) {
        let flag = format!("kernel.x={}", "1".repeat(MAX_VALUE_BYTES + extra));
        prop_assert!(matches!(parse_sysctl_flag(&flag), Err(DesiredError::ValueTooLong(_))));
    }

    #[test]
    fn os_release_never_panics_and_caps_values(text in prop_oneof![
        any::<String>(),
        "((NAME|VERSION_ID|ID)=[\"'\\\\a-z ]{0,10}\n){0,6}",
        "NAME=\"[ -~]{200,400}\"",
    ]) {
        let (name, version) = parse_os_release(&text);
        prop_assert!(name.chars().count() <= 256 && version.chars().count() <= 256);
    }

    /// A quoted NAME (escapes as os-release(5) writes them) and VERSION_ID
    /// among other assignments come back as written.
    #[test]
    fn os_release_round_trips(
        name in "[ -~]{0,60}",
        version in "[a-zA-Z0-9._-]{1,20}",
        others in proptest::collection::vec(("[A-Z_]{1,10}", "[ -~]{0,20}"), 0..5),
    ) {
        let quoted: String = name
            .chars()
            .flat_map(|c| {
                let esc = matches!(c, '"' | '\\' | '$' | '`');
                esc.then_some('\\').into_iter().chain(std::iter::once(c))
            })
            .collect();
        let mut text = String::new();
        for (k, v) in &others {
            if k != "NAME" && k != "VERSION_ID" {
                text.push_str(&format!("{k}={v}\n"));
            }
        }
        text.push_str(&format!("NAME=\"{quoted}\"\nVERSION_ID={version}\n# comment\n"));
        prop_assert_eq!(parse_os_release(&text), (name, version));
    }

    /// Whatever runsc prints, the version is empty or one printable word,
    /// and the raw line is one line of bounded length.
    #[test]
    fn runsc_version_never_panics(out in prop_oneof![
        any::<String>(),
        "(runsc version|VERSION_MISSING|spec:|\n| |\t|\u{1b}\\[31m|[a-z0-9.-]{1,12}){0,10}",
        "runsc version [!-~]{100,200}",
    ]) {
        let (version, raw) = parse_runsc_version(&out);
        prop_assert!(version.len() <= 128);
        prop_assert!(version.chars().all(|c| c.is_ascii_graphic()));
        prop_assert!(!raw.chars().any(char::is_control), "{:?}", raw);
        prop_assert!(raw.chars().count() <= 257);
    }

    #[test]
    fn runsc_version_round_trips(
        v in "[!-~]{1,128}",
        before in "\n{0,3}",
        spaces in blanks(0).prop_map(|s| s.replace('\n', " ")),
    ) {
        let out = format!("{before}{spaces}runsc version {v}{spaces}\nspec: 1.1.0-rc.1\n");
        prop_assert_eq!(parse_runsc_version(&out).0, v.clone());
        // Not what runsc prints: no version.
        let other = format!("runscversion {v}\n");
        prop_assert_eq!(parse_runsc_version(&other).0, "");
    }

    /// Only the identity map over the whole range is the initial namespace,
    /// however it is spaced.
    #[test]
    fn uid_map_identity_is_recognised(
        pads in proptest::collection::vec(" {1,12}|\t", 4),
        blank_lines in "\n{0,3}",
    ) {
        let map = format!(
            "{}0{}0{}4294967295{}\n{blank_lines}",
            pads[0], pads[1], pads[2], pads[3]
        );
        prop_assert!(parse_is_initial(&map), "{:?}", map);
    }

    #[test]
    fn any_other_uid_map_is_not_initial(
        lines in proptest::collection::vec((0u64..5_000_000_000, 0u64..5_000_000_000, 0u64..5_000_000_000), 1..4),
        text in any::<String>(),
    ) {
        let map: String = lines.iter().map(|(a, b, c)| format!("{a:>10} {b:>10} {c:>10}\n")).collect();
        let identity = lines.len() == 1 && lines[0] == (0, 0, 4_294_967_295);
        prop_assert_eq!(parse_is_initial(&map), identity);
        let _ = parse_is_initial(&text);
    }

    #[test]
    fn shim_names_never_panic(t in prop_oneof!["[a-z.]{0,30}", any::<String>()]) {
        if let Some(shim) = shim_binary(&t) {
            prop_assert!(shim.starts_with("containerd-shim-"));
            prop_assert!(t.split('.').count() >= 2);
        }
    }
}

// ------------------------------------------------------------ structure

/// Arbitrary JSON values, a few levels deep.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("containerd".to_string()),
                    Just("runtimes".to_string()),
                    Just("runtimeType".to_string()),
                    Just("kind".to_string()),
                    Just("items".to_string()),
                    Just("metadata".to_string()),
                    Just("name".to_string()),
                    Just("status".to_string()),
                    Just("addresses".to_string()),
                    Just("type".to_string()),
                    Just("address".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn nested(depth: usize, open: &str, close: &str, core: &str) -> String {
    format!("{}{core}{}", open.repeat(depth), close.repeat(depth))
}

fn no_lookup(_: &str) -> ConfigLookup {
    ConfigLookup::default()
}

proptest! {
    #![proptest_config(cases(256))]

    /// CRI `info` JSON of any shape, in the places the parser looks.
    #[test]
    fn cri_info_of_any_shape_never_panics(v in json_value()) {
        for doc in [
            v.clone(),
            serde_json::json!({ "containerd": v.clone() }),
            serde_json::json!({ "containerd": { "runtimes": v.clone() } }),
            serde_json::json!({ "containerd": { "runtimes": { "runsc": v.clone() } } }),
        ] {
            if let Err(e) = handlers_from_info_config(&doc.to_string()) {
                prop_assert!(one_line(&e), "{}", e);
            }
        }
    }

    /// A MachineDeployment of any shape: a count of at least one, or one
    /// line naming the source.
    #[test]
    fn machinedeployments_of_any_shape_never_panic(v in json_value()) {
        for doc in [
            v.clone(),
            serde_json::json!({ "kind": "MachineDeployment", "spec": v.clone() }),
            serde_json::json!({ "kind": "MachineDeployment", "metadata": { "name": v.clone() }, "spec": { "replicas": v.clone() } }),
            serde_json::json!({ "kind": "List", "items": [{ "kind": "MachineDeployment", "spec": { "replicas": v.clone() } }] }),
            serde_json::json!({ "kind": "MachineDeploymentList", "items": v.clone() }),
        ] {
            match parse_replicas(&doc.to_string(), "--expect-from f") {
                Ok(n) => prop_assert!(n >= 1),
                Err(e) => prop_assert!(one_line(&e) && e.to_string().starts_with("--expect-from f: "), "{}", e),
            }
        }
    }

    /// A bootstrap template or machine config of any shape, in the places
    /// the pool's desired state is read from: a result, or one line naming
    /// the source.
    #[test]
    fn pool_configs_of_any_shape_never_panic(v in json_value()) {
        let tct = |spec: serde_json::Value| serde_json::json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "TalosConfigTemplate",
            "metadata": {"name": "t"}, "spec": {"template": {"spec": spec}}});
        for doc in [
            v.clone(),
            serde_json::json!({"version": "v1alpha1", "machine": {"sysctls": v.clone()}}),
            tct(v.clone()),
            tct(serde_json::json!({"generateType": "worker", "configPatches": v.clone()})),
            tct(serde_json::json!({"generateType": "worker", "configPatches": [v.clone()]})),
            tct(serde_json::json!({"generateType": "none", "data": v.to_string()})),
            tct(serde_json::json!({"generateType": "worker", "strategicPatches": [v.to_string()]})),
            serde_json::json!({"kind": "List", "items": [v.clone()]}),
        ] {
            if let Err(e) = parse_pool(&doc.to_string(), "--desired-from f", None) {
                prop_assert!(one_line(&e) && e.to_string().starts_with("--desired-from f: "), "{}", e);
            }
            if let Err(e) = from_annotation(&doc.to_string()) {
                prop_assert!(one_line(&e), "{}", e);
            }
        }
    }

    /// kubectl output of any shape, in the places the parser looks.
    #[test]
    fn node_lists_of_any_shape_never_panic(v in json_value()) {
        for doc in [
            v.clone(),
            serde_json::json!({ "kind": "NodeList", "items": [v.clone()] }),
            serde_json::json!({ "kind": "NodeList", "items": [{ "metadata": { "name": "n1" }, "status": v.clone() }] }),
            serde_json::json!({ "kind": "Node", "metadata": { "name": "n1" }, "status": { "addresses": [v.clone()] } }),
        ] {
            let text = doc.to_string();
            if let Err(e) = parse_node_list(&text, 50100, "f") {
                prop_assert!(one_line(&e), "{}", e);
            }
            let _ = parse_cmd_output(&text, 50100);
        }
    }

    /// A generated NodeList: every node by name, at its first InternalIP
    /// (whatever addresses come before it), or without an address.
    #[test]
    fn node_lists_round_trip(
        nodes in proptest::collection::btree_map(
            "[a-z][a-z0-9-]{0,10}(\\.[a-z0-9]{1,5}){0,2}",
            (proptest::collection::vec(any::<[u8; 4]>(), 0..3), proptest::option::of(any::<[u8; 4]>()), any::<bool>()),
            0..8,
        ),
    ) {
        let items: Vec<serde_json::Value> = nodes
            .iter()
            .map(|(name, (external, internal, v6))| {
                let mut addrs: Vec<serde_json::Value> = external
                    .iter()
                    .map(|o| serde_json::json!({"type": "ExternalIP", "address": std::net::Ipv4Addr::from(*o).to_string()}))
                    .collect();
                addrs.push(serde_json::json!({"type": "Hostname", "address": name}));
                if let Some(o) = internal {
                    let ip = if *v6 {
                        std::net::IpAddr::V6(std::net::Ipv4Addr::from(*o).to_ipv6_mapped())
                    } else {
                        std::net::IpAddr::V4(std::net::Ipv4Addr::from(*o))
                    };
                    addrs.push(serde_json::json!({"type": "InternalIP", "address": ip.to_string()}));
                    addrs.push(serde_json::json!({"type": "InternalIP", "address": "192.0.2.1"}));
                }
                serde_json::json!({"kind": "Node", "metadata": {"name": name}, "status": {"addresses": addrs}})
            })
            .collect();
        let text = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
        let got = parse_node_list(&text, 50100, "f").unwrap();
        prop_assert_eq!(got.len(), nodes.len());
        for (n, (name, (_, internal, v6))) in got.iter().zip(&nodes) {
            prop_assert_eq!(&n.name, name);
            match internal {
                None => prop_assert!(n.address.is_none()),
                Some(o) => {
                    let a = n.address.as_ref().unwrap();
                    prop_assert_eq!(a.port, 50100);
                    let want = if *v6 {
                        std::net::IpAddr::V6(std::net::Ipv4Addr::from(*o).to_ipv6_mapped())
                    } else {
                        std::net::IpAddr::V4(std::net::Ipv4Addr::from(*o))
                    };
                    prop_assert_eq!(&a.host, &Host::Ip(want));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(16))]

    /// Deep nesting (from a hostile or broken CRI, kubectl or drop-in) is an
    /// error or a result, never a stack overflow, which would abort the
    /// whole agent rather than panic.
    #[test]
    fn deep_nesting_neither_panics_nor_overflows(depth in prop_oneof![Just(100_000usize), 1usize..5_000]) {
        let arrays = nested(depth, "[", "]", "1");
        let objects = nested(depth, "{\"a\":", "}", "1");
        let _ = handlers_from_info_config(&arrays);
        let _ = handlers_from_info_config(&format!("{{\"containerd\":{{\"runtimes\":{objects}}}}}"));
        let _ = parse_node_list(&arrays, 50100, "f");
        let _ = parse_cmd_output(&objects, 50100);
        let _ = parse_pool(&arrays, "f", None);
        let _ = parse_pool(&objects, "f", None);
        let _ = parse_pool(&nested(depth, "- ", "", "1"), "f", None);
        let _ = from_annotation(&objects);
        let toml_arrays = format!("x = {}\n", nested(depth, "[", "]", "1"));
        let toml_tables = format!("x = {}\n", nested(depth, "{a = ", "}", "1"));
        let _ = handlers_from_drop_in(&toml_arrays, "s", &mut no_lookup);
        let _ = handlers_from_drop_in(&toml_tables, "s", &mut no_lookup);
        let dotted = format!("[{}]\n", vec!["a"; depth.min(20_000)].join("."));
        let _ = handlers_from_drop_in(&dotted, "s", &mut no_lookup);
    }
}
