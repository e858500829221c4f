//! The documentation is held to the code: every fenced `yaml` block under
//! docs/ parses (all its documents), every relative link in the Markdown
//! files resolves to a file inside the repository, the finding-code table
//! lists every code the library knows with its Node reason and kind, and the
//! module graph in docs/developer/architecture.md is what
//! scripts/modgraph.py prints. `SR_REGENERATE_DOCS=1` rewrites the graph.
//! Every TalosConfigTemplate shown is read by the desired-state library as
//! `check --desired-from` reads it: it sets a sysctl and its
//! ExtensionServiceConfig asks the agent for every sysctl it sets. Every
//! `SANDBOX_READINESS_*` variable the docs name is one a binary reads.
//! Every `check` command shown names its nodes; every `skopeo copy` pushes
//! both platforms; no page ends mid-sentence; no YAML block offers a
//! `SysctlConfig` (CABPT cannot render it); the metrics page has a row per
//! agent family, the Machine condition table every controller reason; the
//! quick start's step-7 patches set the limit and ask the agent for it, and
//! the setup pages name the Rust release rust-toolchain.toml pins.
//! (The CLI references are checked by the binaries' own tests.)

use sandbox_readiness::{
    clidoc,
    desired::{findings, pool},
    evaluate::FindingCode,
    nodestatus::condition::{camel_case, could_not_tell},
    proto::v1::DesiredState,
};
use serde::Deserialize;

use crate::markdown::{docs_pages, fenced, rel, root};

#[test]
fn every_yaml_block_in_the_docs_parses() {
    let mut failures = Vec::new();
    let mut count = 0;
    for page in docs_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (start, body) in fenced(&text, "yaml") {
            count += 1;
            for doc in serde_yaml_ng::Deserializer::from_str(&body) {
                if let Err(e) = serde_yaml_ng::Value::deserialize(doc) {
                    let line = start + e.location().map_or(0, |l| l.line());
                    failures.push(format!("{}:{line}: {e}", rel(&page)));
                    break;
                }
            }
        }
    }
    assert!(count >= 20, "only {count} yaml blocks under docs/");
    assert!(
        failures.is_empty(),
        "YAML that does not parse:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_relative_link_resolves_inside_the_repository() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut pages = docs_pages();
    for top in [
        "README.md",
        "CHANGELOG.md",
        "extension/README.md",
        "benches/README.md",
    ] {
        pages.push(root().join(top));
    }
    let repo = root().canonicalize().unwrap();
    let mut broken = Vec::new();
    for page in pages {
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for (n, line) in text.lines().enumerate() {
            // The design record is docs/developer/design.md, in the repository.
            if line.contains("shared/DESIGN") {
                broken.push(format!(
                    "{}:{}: names a design document outside the repository",
                    rel(&page),
                    n + 1
                ));
            }
            for m in link.captures_iter(line) {
                let target = &m[1];
                if target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with('#')
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let file = target.split('#').next().unwrap_or(target);
                let path = page.parent().unwrap().join(file);
                match path.canonicalize() {
                    Ok(p) if p.starts_with(&repo) => {}
                    Ok(_) => broken.push(format!(
                        "{}:{}: {target} is outside the repository",
                        rel(&page),
                        n + 1
                    )),
                    Err(_) => {
                        broken.push(format!("{}:{}: {target} does not exist", rel(&page), n + 1))
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_finding_table_lists_every_code_with_its_reason_and_kind() {
    let text = std::fs::read_to_string(root().join("docs/reference/findings.md")).unwrap();
    for code in FindingCode::ALL {
        let code = code.as_str();
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| `{code}` |")))
            .unwrap_or_else(|| panic!("docs/reference/findings.md has no row for {code}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(
            cells[2],
            format!("`{}`", camel_case(code)),
            "{code}'s Node reason"
        );
        let kind = if code == FindingCode::NotInitialUserNamespace.as_str() {
            "informational"
        } else if could_not_tell(code) {
            "could not tell"
        } else {
            "blocking"
        };
        assert_eq!(cells[3], kind, "{code}'s kind");
    }
}

const GRAPH_BEGIN: &str = "<!-- modgraph:begin -->\n";
const GRAPH_END: &str = "<!-- modgraph:end -->";

#[test]
fn the_module_graph_in_the_architecture_page_is_the_code() {
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/modgraph.py"))
        .arg("--markdown")
        .arg(root().join("src"))
        .output()
        .expect("python3 runs scripts/modgraph.py");
    assert!(
        out.status.success(),
        "modgraph.py: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let graph = String::from_utf8(out.stdout).unwrap();
    let page_path = root().join("docs/developer/architecture.md");
    let page = std::fs::read_to_string(&page_path).unwrap();
    let begin = page.find(GRAPH_BEGIN).expect("the modgraph:begin marker") + GRAPH_BEGIN.len();
    let end = page.find(GRAPH_END).expect("the modgraph:end marker");
    let wanted = format!("{}{graph}{}", &page[..begin], &page[end..]);
    clidoc::check_or_write(&page_path, &wanted).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_talosconfigtemplate_shown_sets_a_sysctl_its_agent_checks() {
    let mut seen = 0;
    for page in docs_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (start, body) in fenced(&text, "yaml") {
            if !body.contains("kind: TalosConfigTemplate") {
                continue;
            }
            seen += 1;
            let origin = format!("{}:{start}", rel(&page));
            let pool = pool::parse(&body, &origin, None).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                !pool.sysctls.is_empty(),
                "{origin}: the template sets no sysctl"
            );
            assert!(
                pool.agent.is_some(),
                "{origin}: no ExtensionServiceConfig sandbox-readiness"
            );
            let combined = findings::combine(&DesiredState::default(), &pool);
            assert!(
                combined.findings.is_empty(),
                "{origin}: {:?}",
                combined.findings
            );
        }
    }
    assert!(seen >= 2, "only {seen} TalosConfigTemplates under docs/");
}

#[test]
fn every_environment_variable_named_is_one_a_binary_reads() {
    let var = regex::Regex::new(r"SANDBOX_READINESS_[A-Z_]*[A-Z]").unwrap();
    let reference = ["docs/reference/cli.md", "docs/reference/controller-cli.md"]
        .map(|p| std::fs::read_to_string(root().join(p)).unwrap())
        .join("\n");
    let mut pages = docs_pages();
    pages.push(root().join("extension/README.md"));
    let mut unknown = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in text.lines().enumerate() {
            for m in var.find_iter(line) {
                let name = m.as_str();
                // Read by the controller outside clap (its log level).
                let known =
                    name == "SANDBOX_READINESS_LOG" || reference.contains(&format!("`{name}`"));
                if !known {
                    unknown.push(format!("{}:{}: {name}", rel(&page), n + 1));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "variables no binary reads:\n{}",
        unknown.join("\n")
    );
}

/// The flags that give `check` its nodes: without one it stops before
/// asking anything (`no nodes`, exit 2; under `--from-node-conditions` one
/// line naming `--kube-nodes` and `--nodes-cmd`).
const NODE_SOURCES: [&str; 5] = [
    "-n",
    "--nodes",
    "--nodes-file",
    "--kube-nodes",
    "--nodes-cmd",
];

/// The `sandbox-readiness check …` commands a page shows: in its `sh` and
/// unlabelled fenced blocks (continuation lines joined, a `$ ` prompt
/// dropped) and in the code spans of its prose, whitespace collapsed.
fn check_commands(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    for lang in ["sh", ""] {
        for (_, body) in fenced(text, lang) {
            let mut cur = String::new();
            for line in body.lines() {
                let line = line.trim_end();
                if let Some(head) = line.strip_suffix('\\') {
                    cur.push_str(head);
                    cur.push(' ');
                    continue;
                }
                cur.push_str(line);
                commands.push(std::mem::take(&mut cur));
            }
        }
    }
    let mut in_block = false;
    let prose: Vec<&str> = text
        .lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                in_block = !in_block;
                return false;
            }
            !in_block
        })
        .collect();
    let span = regex::Regex::new(r"`(sandbox-readiness check [^`]*)`").unwrap();
    let prose = prose.join(" ");
    commands.extend(span.captures_iter(&prose).map(|m| m[1].to_string()));
    commands
        .into_iter()
        .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
        .map(|c| c.strip_prefix("$ ").map_or(c.clone(), str::to_string))
        .filter(|c| c.starts_with("sandbox-readiness check "))
        .collect()
}

#[test]
fn every_check_command_shown_names_a_node_source() {
    let mut seen = 0;
    let mut sourceless = Vec::new();
    for page in docs_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for command in check_commands(&text) {
            seen += 1;
            if !command
                .split_whitespace()
                .any(|w| NODE_SOURCES.contains(&w))
            {
                sourceless.push(format!("{}: {command}", rel(&page)));
            }
        }
    }
    assert!(seen >= 10, "only {seen} check commands under docs/");
    assert!(
        sourceless.is_empty(),
        "check commands that name no nodes (they stop at once, exit 2):\n{}",
        sourceless.join("\n")
    );
}

/// No page stops mid-sentence: its last line closes a sentence, a table
/// row, a parenthesis or a code block.
#[test]
fn every_page_ends_with_a_finished_line() {
    let mut cut = Vec::new();
    for page in docs_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let last = last.trim_end();
        if !(last.ends_with(['.', '|', ')']) || last.trim_start().starts_with("```")) {
            cut.push(format!("{}: …{last}", rel(&page)));
        }
    }
    assert!(
        cut.is_empty(),
        "pages that end mid-sentence:\n{}",
        cut.join("\n")
    );
}

/// No YAML block offers a `SysctlConfig` document to copy: CABPT v0.6.11
/// renders with machinery v1.12.0, which does not register the kind, so a
/// template carrying one gives its Machine no bootstrap data
/// (tests/talos_oracle.rs counts that refusal; the pool's page says so
/// once, under "Not a `SysctlConfig` document").
#[test]
fn no_yaml_block_offers_a_sysctlconfig_document() {
    let mut offered = Vec::new();
    for page in docs_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (start, body) in fenced(&text, "yaml") {
            if body.lines().any(|l| l.trim() == "kind: SysctlConfig") {
                offered.push(format!("{}:{start}", rel(&page)));
            }
        }
    }
    assert!(
        offered.is_empty(),
        "SysctlConfig documents CABPT cannot render:\n{}",
        offered.join("\n")
    );
}

/// Every family the agent's `/metrics` renders (the Node writer's among
/// them) has its row in docs/reference/metrics.md, named without the
/// `sandbox_readiness_` prefix.
#[test]
fn every_agent_metric_has_a_row_in_the_metrics_page() {
    use sandbox_readiness::metrics::{render, AgentStats, NodeWriterStats, PREFIX};
    let stats = AgentStats {
        node_writer: Some(NodeWriterStats {
            writes: 1,
            failures: vec![("forbidden", 1)],
            last_success: Some(1.0),
        }),
        ..AgentStats::default()
    };
    let text = render(
        &sandbox_readiness::proto::v1::Report::default(),
        &DesiredState::default(),
        &stats,
    );
    let page = std::fs::read_to_string(root().join("docs/reference/metrics.md")).unwrap();
    let mut families = 0;
    let mut missing = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let name = rest.split(' ').next().unwrap_or_default();
        let short = name.strip_prefix(PREFIX).unwrap_or(name);
        families += 1;
        if !page.contains(&format!("| `{short}` |")) {
            missing.push(name.to_string());
        }
    }
    assert!(families > 15, "only {families} families rendered:\n{text}");
    assert!(
        missing.is_empty(),
        "docs/reference/metrics.md has no row for:\n{}",
        missing.join("\n")
    );
}

/// Every reason the controller writes on a Machine (its `&str` constants
/// in controller/src/condition.rs and the pod proof's) is in the Machine condition table of
/// docs/reference/kubernetes-objects.md.
#[test]
fn every_machine_reason_is_in_the_machine_condition_table() {
    let source = ["condition.rs", "proof/mod.rs", "proof/pod.rs"]
        .iter()
        .map(|f| std::fs::read_to_string(root().join("controller/src").join(f)).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let page =
        std::fs::read_to_string(root().join("docs/reference/kubernetes-objects.md")).unwrap();
    let table = &page[page
        .find("## Machine condition")
        .expect("a Machine condition section")..];
    let reason = regex::Regex::new(r#"pub const [A-Z_]+: &str = "([A-Za-z]+)";"#).unwrap();
    let reasons: Vec<&str> = reason
        .captures_iter(&source)
        .map(|m| m.get(1).unwrap().as_str())
        .collect();
    assert!(
        reasons.len() >= 19,
        "only {reasons:?} in condition.rs and proof/"
    );
    let missing: Vec<&&str> = reasons
        .iter()
        .filter(|r| !table.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "Machine reasons the table leaves out: {missing:?}"
    );
}

/// Both images are two-platform indexes (scripts/build-extension.sh,
/// scripts/build-controller-image.sh): every `skopeo copy` a page shows
/// copies the whole index (`--all`), not the build machine's platform alone.
#[test]
fn every_skopeo_copy_shown_pushes_every_platform() {
    let mut seen = 0;
    let mut one_platform = Vec::new();
    for page in docs_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (start, body) in fenced(&text, "sh") {
            for line in body.lines().map(str::trim) {
                if line.starts_with("skopeo copy ") {
                    seen += 1;
                    if !line.split_whitespace().any(|w| w == "--all") {
                        one_platform.push(format!("{}:{start}: {line}", rel(&page)));
                    }
                }
            }
        }
    }
    assert!(seen >= 4, "only {seen} skopeo copy commands under docs/");
    assert!(
        one_platform.is_empty(),
        "skopeo copy without --all (one platform only):\n{}",
        one_platform.join("\n")
    );
}

/// The quick start's step 7 shows the `strategicPatches` of `$MD-userns`
/// as two documents, not as a template: in a TalosConfigTemplate they set
/// the limit and ask the agent for it (one `ExtensionServiceConfig`,
/// covering every sysctl), as `check --desired-from` reads it.
#[test]
fn the_quick_starts_step_7_patches_set_the_limit_and_ask_the_agent() {
    let page = std::fs::read_to_string(root().join("docs/get-started/quick-start.md")).unwrap();
    let block = fenced(&page, "yaml")
        .into_iter()
        .map(|(_, body)| body)
        .find(|b| b.contains("strategicPatches of $MD-userns"))
        .expect("step 7's patches");
    let mut template = String::from(
        "apiVersion: bootstrap.cluster.x-k8s.io/v1alpha3\nkind: TalosConfigTemplate\n\
         metadata:\n  name: pool-userns\n  namespace: ns\n\
         spec:\n  template:\n    spec:\n      generateType: worker\n      talosVersion: v1.11\n\
         \x20     strategicPatches:\n",
    );
    let docs: Vec<&str> = block.split("\n---\n").collect();
    assert_eq!(docs.len(), 2, "step 7 shows two documents:\n{block}");
    for doc in docs {
        template.push_str("        - |\n");
        for line in doc.lines() {
            template.push_str("          ");
            template.push_str(line);
            template.push('\n');
        }
    }
    let pool = pool::parse(&template, "quick-start step 7", None).unwrap_or_else(|e| panic!("{e}"));
    assert!(!pool.sysctls.is_empty(), "step 7 sets no sysctl");
    assert!(pool.agent.is_some(), "step 7 has no ExtensionServiceConfig");
    let combined = findings::combine(&DesiredState::default(), &pool);
    assert!(combined.findings.is_empty(), "{:?}", combined.findings);
}

/// The pages that say what a build machine needs name the Rust release
/// rust-toolchain.toml pins (rustup builds with it in the checkout), not
/// "stable" or `rust-version`, the packages' declared minimum.
#[test]
fn the_setup_pages_name_the_pinned_rust_release() {
    let toolchain = std::fs::read_to_string(root().join("rust-toolchain.toml")).unwrap();
    let channel = toolchain
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("a channel in rust-toolchain.toml");
    for page in [
        "docs/get-started/quick-start.md",
        "docs/developer/testing.md",
    ] {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        assert!(
            text.contains(&channel) && !text.contains("Rust stable"),
            "{page} does not name Rust {channel} (rust-toolchain.toml)"
        );
    }
}

/// Every reason the agent writes on a Node that is not a finding code (the
/// `REASON_*` constants of src/nodestatus/condition.rs) is in the Node
/// condition table of docs/reference/kubernetes-objects.md and in the
/// reasons table of docs/reference/findings.md.
#[test]
fn every_node_reason_is_in_both_reason_tables() {
    let source = std::fs::read_to_string(root().join("src/nodestatus/condition.rs")).unwrap();
    let reason = regex::Regex::new(r#"pub const REASON_[A-Z_]+: &str = "([A-Za-z]+)";"#).unwrap();
    let reasons: Vec<&str> = reason
        .captures_iter(&source)
        .map(|m| m.get(1).unwrap().as_str())
        .collect();
    assert!(reasons.len() >= 4, "only {reasons:?} in condition.rs");
    let objects =
        std::fs::read_to_string(root().join("docs/reference/kubernetes-objects.md")).unwrap();
    let start = objects
        .find("## Node condition")
        .expect("a Node condition section");
    let end = objects
        .find("## Machine condition")
        .expect("a Machine condition section");
    let node_table = &objects[start..end];
    let findings = std::fs::read_to_string(root().join("docs/reference/findings.md")).unwrap();
    for r in reasons {
        let cell = format!("| `{r}` |");
        assert!(
            node_table.contains(&format!("`{r}`")),
            "docs/reference/kubernetes-objects.md's Node condition table has no {r}"
        );
        assert!(
            findings.lines().any(|l| l.starts_with(&cell)),
            "docs/reference/findings.md has no row for {r}"
        );
    }
}
