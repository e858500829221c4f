//! Talos's own code judges the desired-state library and the extension.
//!
//! The oracle (`talos-oracle/`, built by `scripts/build-talos-oracle.sh`)
//! is Talos's `pkg/machinery` behind JSON lines, in two builds:
//! `SR_TALOS_ORACLE_CABPT` (the machinery Cluster API Bootstrap Provider
//! Talos v0.6.11 renders and patches with, v1.12.0) and
//! `SR_TALOS_ORACLE_NODE` (the node's release, v1.13.9, which loads what
//! CABPT wrote). Unset, every test here fails with one line saying how to
//! build them: a differential test that cannot ask Talos must not pass.
//!
//! - `differential_fixtures` and `differential_generated`: every
//!   desired-state fixture and 600 generated cases (seeded, so a failure
//!   repeats) through `sandbox_readiness::desired::parse_pool` and through
//!   Talos (a TalosConfig/TalosConfigTemplate: CABPT's rendering and patch
//!   order in the CABPT build, then the node build loads the result; a
//!   machine config: the node build loads it). Both refuse, or both give
//!   the same sysctls with the same place (`machine.sysctls` or a
//!   `SysctlConfig`). Every other outcome is a failure unless it is one of
//!   the documented cases in [`Deliberate`].
//! - `extension_*`: the extension manifest and service spec through
//!   machinery's extension validator (and a built tree from
//!   `SR_EXTENSION_TREE`), every `ExtensionServiceConfig` the repository
//!   shows through machinery's config loader and the document's own
//!   validation.
//! - `imager_profiles_*`: every imager profile `extension/imager/profile.sh`
//!   prints (nocloud, openstack, metal, aws and gcp disk images and the
//!   installer, amd64 and arm64) through Talos's own `pkg/imager/profile` (Talos's main
//!   module at the node's release: `SR_TALOS_ORACLE_IMAGER`, built from
//!   `talos-oracle/imager/`), as `imager -` decodes, defaults and validates
//!   it, and broken ones Talos refuses or silently takes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use sandbox_readiness::desired::parse_pool;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// The oracle processes.

struct Oracle {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Requests machinery panicked on.
    panics: Vec<String>,
}

impl Oracle {
    fn start(name: &'static str, var: &str) -> Oracle {
        let path = std::env::var_os(var).unwrap_or_else(|| {
            panic!(
                "{var} is not set: run scripts/build-talos-oracle.sh (it builds Talos's pkg/machinery oracles) and export the SR_TALOS_ORACLE_CABPT and SR_TALOS_ORACLE_NODE lines it prints"
            )
        });
        let mut child = Command::new(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{var}={}: {e}", Path::new(&path).display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Oracle {
            name,
            child,
            stdin,
            stdout,
            panics: Vec::new(),
        }
    }

    fn ask(&mut self, req: &Value) -> Value {
        let mut line = serde_json::to_string(req).unwrap();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        let n = self.stdout.read_line(&mut answer).unwrap();
        assert!(n > 0, "the {} oracle exited", self.name);
        let v: Value = serde_json::from_str(&answer).unwrap();
        if v.get("panic").is_some() {
            // machinery panicked: CABPT's reconcile (controller-runtime
            // recovers it) or the node's load fails, so Talos refuses.
            self.panics.push(req.to_string());
        }
        v
    }

    fn machinery(&mut self) -> String {
        self.ask(&json!({"op": "version"}))["machinery"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Oracles {
    cabpt: Oracle,
    node: Oracle,
}

fn oracles() -> Oracles {
    Oracles {
        cabpt: Oracle::start("CABPT", "SR_TALOS_ORACLE_CABPT"),
        node: Oracle::start("node", "SR_TALOS_ORACLE_NODE"),
    }
}

// ---------------------------------------------------------------------------
// Outcomes.

/// sysctl → (value, place).
type Sysctls = BTreeMap<String, (String, String)>;

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Refused(String),
    Set(Sysctls),
}

impl Outcome {
    fn text(&self) -> String {
        match self {
            Outcome::Refused(e) => format!("refused: {e}"),
            Outcome::Set(s) => format!("{s:?}"),
        }
    }
}

/// Ours: `parse_pool`, the place from the source's last `(…)` or the
/// source itself.
fn ours(text: &str, pick: Option<&str>) -> Outcome {
    match parse_pool(text, "case", pick) {
        Err(e) => Outcome::Refused(e.to_string()),
        Ok(p) => Outcome::Set(
            p.sysctls
                .iter()
                .map(|(k, s)| {
                    let place =
                        if s.source.ends_with("(SysctlConfig)") || s.source == "SysctlConfig" {
                            "SysctlConfig"
                        } else {
                            "machine.sysctls"
                        };
                    (k.clone(), (s.value.clone(), place.to_string()))
                })
                .collect(),
        ),
    }
}

fn from_answer(a: &Value) -> Outcome {
    if let Some(e) = a.get("error").and_then(Value::as_str) {
        return Outcome::Refused(e.to_string());
    }
    Outcome::Set(
        a["sysctls"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    (
                        v["value"].as_str().unwrap().to_string(),
                        v["source"].as_str().unwrap().to_string(),
                    ),
                )
            })
            .collect(),
    )
}

/// What Talos makes of the input: a bootstrap object is rendered and
/// patched by the CABPT build, and what it wrote is loaded by the node
/// build; a machine config is loaded by the node build.
fn talos(o: &mut Oracles, obj: &Value, text: &str) -> Outcome {
    let spec = match obj.get("kind").and_then(Value::as_str) {
        Some("TalosConfig") => obj.get("spec"),
        Some("TalosConfigTemplate") => obj.pointer("/spec/template/spec"),
        _ => None,
    };
    match spec {
        Some(spec) => {
            let a = o.cabpt.ask(&json!({"op": "template", "spec": spec}));
            if a.get("error").is_some() {
                return from_answer(&a);
            }
            let rendered = a["config"].as_str().unwrap();
            from_answer(&o.node.ask(&json!({"op": "sysctls", "config": rendered})))
        }
        None => from_answer(&o.node.ask(&json!({"op": "sysctls", "config": text}))),
    }
}

// ---------------------------------------------------------------------------
// The documented differences.

/// A difference between ours and Talos that is deliberate, with its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Deliberate {
    /// The `SysctlConfig` document is Talos 1.14's; no served machinery
    /// (the newest is v1.13.9) registers it.
    SysctlConfig114,
    /// A document kind the release does not register.
    UnknownKind,
    /// A name that is no sysctl or writes a side effect.
    NotASysctlName,
    /// A field ours does not read is wrongly typed or unknown.
    Schema,
}

impl Deliberate {
    fn reason(self) -> &'static str {
        match self {
            Deliberate::SysctlConfig114 => {
                "a SysctlConfig document is read as Talos 1.14 reads it (siderolabs/talos v1.14.0-rc.1, src/desired/talos.rs); machinery v1.12.0 (CABPT v0.6.11) and v1.13.9 refuse it (and the other 1.14 documents) as not registered, and no served machinery is 1.14"
            }
            Deliberate::UnknownKind => {
                "ours takes any apiVersion v1alpha1 kind (it holds no registry of Talos's kinds, which grows every release: 1.14 adds a dozen); Talos refuses a kind its release does not register, so the node refuses the whole config"
            }
            Deliberate::NotASysctlName => {
                "ours refuses a key that is no sysctl name or writes a side effect (sysctl_name::validate_name: vm.drop_caches, ../x, a b); Talos's config layer takes any key and only the node's write fails"
            }
            Deliberate::Schema => {
                "ours reads the sysctl-bearing paths, the document identities and the patch mechanics, not Talos's whole schema: Talos refuses an unknown key or a wrongly typed value in a field ours does not read"
            }
        }
    }
}

/// Is the difference one of the documented ones? `tags` are what the
/// generator put in the case.
fn deliberate(tags: &[&str], ours: &Outcome, talos: &Outcome) -> Option<Deliberate> {
    match (ours, talos) {
        (Outcome::Set(_), Outcome::Refused(e))
            if tags.contains(&"sysctlconfig") && e.contains("\": not registered") =>
        {
            Some(Deliberate::SysctlConfig114)
        }
        (Outcome::Set(_), Outcome::Refused(e))
            if tags.contains(&"unknown-kind") && e.contains("\": not registered") =>
        {
            Some(Deliberate::UnknownKind)
        }
        (Outcome::Refused(e), Outcome::Set(_))
            if tags.contains(&"bad-name") && e.contains("sysctl") =>
        {
            Some(Deliberate::NotASysctlName)
        }
        (Outcome::Set(_), Outcome::Refused(e))
            if tags.contains(&"schema")
                && (e.contains("unknown keys found during decoding")
                    || e.contains("cannot unmarshal")
                    || e.contains("cannot construct")) =>
        {
            Some(Deliberate::Schema)
        }
        _ => None,
    }
}

#[derive(Default)]
struct Tally {
    cases: usize,
    agreed_set: usize,
    agreed_refused: usize,
    deliberate: BTreeMap<Deliberate, usize>,
    differences: Vec<String>,
}

impl Tally {
    fn judge(&mut self, name: &str, tags: &[&str], text: &str, ours: Outcome, talos: Outcome) {
        self.cases += 1;
        let same = match (&ours, &talos) {
            (Outcome::Refused(_), Outcome::Refused(_)) => {
                self.agreed_refused += 1;
                true
            }
            (Outcome::Set(a), Outcome::Set(b)) if a == b => {
                self.agreed_set += 1;
                true
            }
            _ => false,
        };
        if same {
            return;
        }
        if let Some(d) = deliberate(tags, &ours, &talos) {
            *self.deliberate.entry(d).or_default() += 1;
            return;
        }
        self.differences.push(format!(
            "{name} {tags:?}\n  ours:  {}\n  talos: {}\n  input:\n{}",
            ours.text(),
            talos.text(),
            text.lines()
                .take(60)
                .map(|l| format!("    | {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }

    fn finish(self, what: &str, started: Instant, versions: &str) {
        eprintln!(
            "{what}: {} cases against {versions} in {:.1}s: {} agreed on sysctls, {} refused by both, {} documented differences, {} undocumented",
            self.cases,
            started.elapsed().as_secs_f64(),
            self.agreed_set,
            self.agreed_refused,
            self.deliberate.values().sum::<usize>(),
            self.differences.len()
        );
        for (d, n) in &self.deliberate {
            eprintln!("  documented {d:?} ×{n}: {}", d.reason());
        }
        if let Some(path) = std::env::var_os("SR_TALOS_ORACLE_REPORT") {
            std::fs::write(path, self.differences.join("\n\n")).unwrap();
        }
        assert!(
            self.differences.is_empty(),
            "{} undocumented differences between ours and Talos (first 15):\n{}",
            self.differences.len(),
            self.differences
                .iter()
                .take(15)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n\n")
        );
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The one document of `text`, or null for a multi-document stream.
fn yaml_value(text: &str) -> Value {
    match sandbox_readiness::desired::yaml::documents(text) {
        Ok(mut d) if d.len() == 1 => d.remove(0),
        _ => Value::Null,
    }
}

/// The fixtures stand `MARKER-SECRET-*` markers where a config holds its
/// keys and certificates (tests/check_desired.rs greps outputs for them);
/// Talos decodes `crt:`/`key:` as base64, so Talos is shown the markers
/// base64-encoded, as a real config holds its PEM.
fn markers_as_base64(text: &str) -> String {
    let re = regex::Regex::new(r"\b(crt|key): (MARKER-SECRET-[A-Z0-9-]+)").unwrap();
    re.replace_all(text, |c: &regex::Captures| {
        format!("{}: {}", &c[1], base64(&c[2]))
    })
    .into_owned()
}

fn base64(s: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | u32::from(x) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Every fixture.

#[test]
fn differential_fixtures() {
    let mut o = oracles();
    let versions = format!(
        "machinery {} (CABPT) / {} (node)",
        o.cabpt.machinery(),
        o.node.machinery()
    );
    let started = Instant::now();
    let mut t = Tally::default();
    let dir = repo().join("tests/fixtures/desired");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let tags: Vec<&str> =
            if text.contains("kind: SysctlConfig") || text.contains("kind: SysctlConfig\\n") {
                vec!["sysctlconfig"]
            } else {
                vec![]
            };
        let obj = yaml_value(&text);
        if obj.get("kind").and_then(Value::as_str) == Some("List") {
            for item in obj["items"].as_array().unwrap() {
                let pick = format!(
                    "{}/{}",
                    item["metadata"]["namespace"].as_str().unwrap(),
                    item["metadata"]["name"].as_str().unwrap()
                );
                let tags: Vec<&str> = if item.to_string().contains("kind: SysctlConfig") {
                    vec!["sysctlconfig"]
                } else {
                    vec![]
                };
                let mine = ours(&text, Some(&pick));
                let shown = yaml_value(&markers_as_base64(&item.to_string()));
                let theirs = talos(&mut o, &shown, &text);
                t.judge(&format!("{name} {pick}"), &tags, &text, mine, theirs);
            }
            continue;
        }
        let mine = ours(&text, None);
        let shown = markers_as_base64(&text);
        let theirs = talos(&mut o, &yaml_value(&shown), &shown);
        t.judge(&name, &tags, &text, mine, theirs);
    }
    // The Cluster API fixtures are no pool configuration: both refuse.
    for f in std::fs::read_dir(repo().join("tests/fixtures/capi")).unwrap() {
        let f = f.unwrap().path();
        let text = std::fs::read_to_string(&f).unwrap();
        let mine = ours(&text, None);
        let theirs = talos(&mut o, &yaml_value(&text), &text);
        t.judge(&f.display().to_string(), &[], &text, mine, theirs);
    }
    t.finish("talos-oracle fixtures", started, &versions);
}

// ---------------------------------------------------------------------------
// Generated cases.

/// xorshift64*: the cases repeat for a seed (`SR_TALOS_ORACLE_SEED`).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const KEYS: [&str; 6] = [
    "user.max_user_namespaces",
    "vm.max_map_count",
    "kernel.yama.ptrace_scope",
    "net.ipv4.ip_forward",
    "net.core.somaxconn",
    "fs.inotify.max_user_watches",
];
/// Names ours refuses on purpose (tagged `bad-name`).
const BAD_KEYS: [&str; 3] = ["vm.drop_caches", "a b", "user..max"];
/// YAML scalars as a config writes them: Talos's `map[string]string` keeps
/// the scalar's text.
const VALUES: [&str; 16] = [
    "\"11255\"",
    "11255",
    "0",
    "\"0\"",
    "262144",
    "0x10",
    "1.50",
    "True",
    "true",
    "yes",
    "~",
    "''",
    "012",
    "+1",
    "1e3",
    "'a b'",
];

/// Fields Talos refuses and ours does not read (tagged `schema`).
const SCHEMA_BAD: [&str; 2] = ["  sysctl:\n    a.b: \"1\"\n", "  wipe: maybe\n"];

struct Case {
    tags: Vec<&'static str>,
    text: String,
}

fn sysctl_block(r: &mut Rng, tags: &mut Vec<&'static str>, indent: &str) -> String {
    let mut s = String::new();
    for _ in 0..1 + r.below(3) {
        let key = if r.chance(4) {
            tags.push("bad-name");
            *r.pick(&BAD_KEYS)
        } else {
            *r.pick(&KEYS)
        };
        let key = if key.contains(' ') {
            format!("\"{key}\"")
        } else {
            key.to_string()
        };
        s.push_str(&format!("{indent}{key}: {}\n", r.pick(&VALUES)));
    }
    s
}

/// A v1alpha1 document, sometimes with sysctls, sometimes with the fields
/// patches address.
fn v1alpha1_doc(r: &mut Rng, tags: &mut Vec<&'static str>) -> String {
    let mut s = String::from("version: v1alpha1\nmachine:\n  type: worker\n");
    if r.chance(40) {
        s.push_str("  certSANs:\n    - a.example\n");
    }
    if r.chance(30) {
        s.push_str(
            "  network:\n    extraHostEntries:\n      - ip: 10.0.0.1\n        aliases: [one]\n",
        );
    }
    match r.below(10) {
        0 => s.push_str("  sysctls: {}\n"),
        1..=7 => {
            s.push_str("  sysctls:\n");
            s.push_str(&sysctl_block(r, tags, "    "));
        }
        _ => {}
    }
    if r.chance(5) {
        tags.push("schema");
        let bad: &&str = r.pick(&SCHEMA_BAD);
        s.push_str(bad);
    }
    if r.chance(4) {
        // A non-scalar sysctl value: both must refuse.
        s.push_str(if s.contains("  sysctls:\n") {
            ""
        } else {
            "  sysctls:\n"
        });
        s.push_str("    vm.swappiness: {x: 1}\n");
    }
    s.push_str("cluster:\n  network:\n    podSubnets: [10.244.0.0/16]\n");
    s
}

fn other_doc(r: &mut Rng, tags: &mut Vec<&'static str>) -> String {
    match r.below(5) {
        0 => "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n".into(),
        1 => "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: sandbox-readiness\nenvironment:\n  - SANDBOX_READINESS_SYSCTL=user.max_user_namespaces=11255\n".into(),
        2 => "apiVersion: v1alpha1\nkind: RegistryMirrorConfig\nname: ghcr.io\nendpoints:\n  - url: https://mirror.example\n".into(),
        3 => {
            tags.push("sysctlconfig");
            format!("apiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n{}", sysctl_block(r, tags, "  "))
        }
        _ => {
            tags.push("unknown-kind");
            "apiVersion: v1alpha1\nkind: BogusConfig\nname: x\n".into()
        }
    }
}

fn machine_config(r: &mut Rng, tags: &mut Vec<&'static str>, docs: usize) -> String {
    let mut parts = vec![v1alpha1_doc(r, tags)];
    for _ in 1..docs {
        parts.push(other_doc(r, tags));
    }
    if r.chance(3) {
        // The same document twice: both must refuse.
        parts.push(parts[parts.len() - 1].clone());
    }
    parts.join("---\n")
}

/// One strategic patch (a string of CABPT's strategicPatches).
fn strategic_patch(r: &mut Rng, tags: &mut Vec<&'static str>) -> String {
    match r.below(12) {
        0..=2 => format!("machine:\n  sysctls:\n{}", sysctl_block(r, tags, "    ")),
        3 => format!("machine:\n  sysctls:\n    {}:\n      $patch: delete\n", r.pick(&KEYS)),
        4 => "machine:\n  sysctls:\n    $patch: delete\n".into(),
        5 => format!("machine:\n  sysctls:\n    {}: \"\"\n", r.pick(&KEYS)),
        6 => "machine:\n  certSANs:\n    - b.example\n".into(),
        7 => "machine:\n  network:\n    extraHostEntries:\n      - ip: 10.0.0.1\n        $patch: delete\n".into(),
        8 => other_doc(r, tags),
        9 => "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n".into(),
        10 => format!(
            "- op: {}\n  path: /machine/sysctls/{}\n  value: \"7\"\n",
            r.pick(&["add", "replace"]),
            r.pick(&KEYS)
        ),
        _ => "cluster:\n  network:\n    podSubnets: [10.96.0.0/12]\n".into(),
    }
}

/// One RFC 6902 operation of CABPT's configPatches.
fn config_patch(r: &mut Rng) -> Value {
    let key = r.pick(&KEYS).to_string();
    let value = match r.below(4) {
        0 => json!("11255"),
        1 => json!(262_144),
        2 => json!(true),
        _ => json!("0"),
    };
    match r.below(9) {
        0 => json!({"op": "add", "path": "/machine/sysctls", "value": {key: value}}),
        1 => json!({"op": "add", "path": format!("/machine/sysctls/{key}"), "value": value}),
        2 => json!({"op": "replace", "path": format!("/machine/sysctls/{key}"), "value": value}),
        3 => json!({"op": "remove", "path": format!("/machine/sysctls/{key}")}),
        4 => json!({"op": "test", "path": format!("/machine/sysctls/{key}"), "value": value}),
        5 => json!({"op": "add", "path": "/machine/certSANs/-", "value": "c.example"}),
        6 => json!({"op": "remove", "path": "/machine/certSANs/0"}),
        7 => {
            json!({"op": "copy", "from": "/machine/type", "path": "/machine/sysctls/vm.max_map_count"})
        }
        _ => json!({"op": "add", "path": "/machine/kubelet/extraArgs", "value": {"v": "2"}}),
    }
}

fn generate(r: &mut Rng) -> Case {
    let mut tags = Vec::new();
    let text = match r.below(10) {
        // A machine config.
        0..=2 => {
            let docs = 1 + r.below(3);
            machine_config(r, &mut tags, docs)
        }
        // A TalosConfigTemplate (or TalosConfig) around data or a generated base.
        _ => {
            let none = r.chance(50);
            let version = *r.pick(&["v1.6", "v1.10", "v1.11", "v1.11.5", "v1.12", "v1.13", ""]);
            let mut spec = serde_json::Map::new();
            if none {
                spec.insert("generateType".into(), json!("none"));
                let docs = if r.chance(70) { 1 } else { 2 };
                spec.insert("data".into(), json!(machine_config(r, &mut tags, docs)));
            } else {
                spec.insert(
                    "generateType".into(),
                    json!(*r.pick(&["worker", "controlplane", "join"])),
                );
            }
            if !version.is_empty() {
                spec.insert("talosVersion".into(), json!(version));
            }
            if r.chance(35) {
                let ops: Vec<Value> = (0..1 + r.below(3)).map(|_| config_patch(r)).collect();
                spec.insert("configPatches".into(), Value::Array(ops));
            }
            if r.chance(75) {
                let ps: Vec<Value> = (0..1 + r.below(4))
                    .map(|_| json!(strategic_patch(r, &mut tags)))
                    .collect();
                spec.insert("strategicPatches".into(), Value::Array(ps));
            }
            let obj = if r.chance(50) {
                json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "TalosConfigTemplate",
                       "metadata": {"name": "pool", "namespace": "ns"},
                       "spec": {"template": {"spec": Value::Object(spec)}}})
            } else {
                json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfig",
                       "metadata": {"name": "m0", "namespace": "ns"}, "spec": Value::Object(spec)})
            };
            serde_json::to_string_pretty(&obj).unwrap()
        }
    };
    tags.sort_unstable();
    tags.dedup();
    Case { tags, text }
}

#[test]
fn differential_generated() {
    let seed: u64 = std::env::var("SR_TALOS_ORACLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_7a10_5000_0033);
    let count: usize = std::env::var("SR_TALOS_ORACLE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let mut o = oracles();
    let versions = format!(
        "machinery {} (CABPT) / {} (node)",
        o.cabpt.machinery(),
        o.node.machinery()
    );
    let started = Instant::now();
    let mut r = Rng(seed);
    let mut t = Tally::default();
    for i in 0..count {
        let c = generate(&mut r);
        let mine = ours(&c.text, None);
        let theirs = talos(&mut o, &yaml_value(&c.text), &c.text);
        t.judge(
            &format!("case {i} (seed {seed:#x})"),
            &c.tags,
            &c.text,
            mine,
            theirs,
        );
    }
    for (name, p) in [("CABPT", &o.cabpt.panics), ("node", &o.node.panics)] {
        if let Some(first) = p.first() {
            eprintln!("  machinery panicked ({name} build) on {} requests, counted as Talos refusing; the first: {first}", p.len());
        }
    }
    t.finish("talos-oracle generated", started, &versions);
}

// ---------------------------------------------------------------------------
// The extension judged by Talos.

fn write(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A minimal extension tree built here from the repository's manifest
/// template and service spec, laid out as scripts/build-extension.sh lays
/// it out (the entrypoint is a placeholder file, not the built binary).
fn minimal_tree(dir: &Path) {
    let manifest = std::fs::read_to_string(repo().join("extension/manifest.yaml.in"))
        .unwrap()
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"));
    write(&dir.join("manifest.yaml"), &manifest, 0o644);
    let spec = std::fs::read_to_string(repo().join("extension/sandbox-readiness.yaml")).unwrap();
    let rootfs = dir.join("rootfs");
    write(
        &rootfs.join("usr/local/etc/containers/sandbox-readiness.yaml"),
        &spec,
        0o644,
    );
    let root = rootfs.join("usr/local/lib/containers/sandbox-readiness");
    write(&root.join("sandbox-readiness"), "placeholder\n", 0o755);
    for d in ["etc/cri/conf.d", "usr/local/bin", "run/containerd"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::create_dir_all(rootfs.join("usr/local/bin")).unwrap();
}

fn validated(o: &mut Oracle, dir: &Path, talos_version: &str) -> Value {
    o.ask(&json!({"op": "validate-extension", "dir": dir, "talosVersion": talos_version}))
}

#[test]
fn extension_manifest_and_layout_pass_talos_validator() {
    let mut o = oracles();
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("sandbox-readiness");
    minimal_tree(&tree);
    let mut trees = vec![("a minimal tree built from extension/", tree.clone())];
    match std::env::var_os("SR_EXTENSION_TREE") {
        Some(t) => trees.push(("SR_EXTENSION_TREE", PathBuf::from(t))),
        None => eprintln!(
            "extension: SR_EXTENSION_TREE unset (e.g. out/extension/amd64 after scripts/build-extension.sh): only the minimal tree built from extension/manifest.yaml.in and extension/sandbox-readiness.yaml is validated"
        ),
    }
    for (what, dir) in &trees {
        for oracle in [&mut o.cabpt, &mut o.node] {
            // The oldest release the manifest claims, and the build's own.
            for v in ["v1.7.0", ""] {
                let a = validated(oracle, dir, v);
                assert!(
                    a.get("error").is_none(),
                    "{what}: machinery {} refuses the extension (Talos {v:?}): {a}",
                    oracle.name
                );
                assert_eq!(a["manifest"]["name"], "sandbox-readiness", "{a}");
                let services = a["services"].as_array().unwrap();
                assert_eq!(services.len(), 1, "{what}: {a}");
                assert_eq!(services[0]["name"], "sandbox-readiness");
                assert!(
                    services[0].get("strictError").is_none(),
                    "{what}: the service spec has keys Talos silently ignores: {}",
                    services[0]
                );
            }
            // Before v1.7.0 the manifest's constraint refuses.
            let a = validated(oracle, dir, "v1.6.7");
            assert!(
                a["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("can't be satisfied")),
                "{a}"
            );
        }
    }
    // The validator has teeth: a file outside /usr/local, a FIFO, a spec
    // without entrypoint are refused.
    let bad = tmp.path().join("bad");
    minimal_tree(&bad);
    write(&bad.join("rootfs/etc/stray"), "x\n", 0o644);
    let a = validated(&mut o.node, &bad, "");
    assert!(
        a["error"]
            .as_str()
            .is_some_and(|e| e.contains("is not allowed in extensions")),
        "{a}"
    );
    let fifo = tmp.path().join("fifo");
    minimal_tree(&fifo);
    let status = Command::new("mkfifo")
        .arg(fifo.join("rootfs/usr/local/bin/pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let a = validated(&mut o.node, &fifo, "");
    assert!(
        a["error"]
            .as_str()
            .is_some_and(|e| e.contains("special files")),
        "{a}"
    );
    let noentry = tmp.path().join("noentry");
    minimal_tree(&noentry);
    let spec = noentry.join("rootfs/usr/local/etc/containers/sandbox-readiness.yaml");
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("entrypoint: ./sandbox-readiness", "");
    write(&spec, &text, 0o644);
    let a = validated(&mut o.node, &noentry, "");
    assert!(
        a["error"]
            .as_str()
            .is_some_and(|e| e.contains("container endpoint can't be empty")),
        "{a}"
    );
}

/// Every fenced `yaml` block of a Markdown file holding an
/// ExtensionServiceConfig.
fn markdown_examples(rel: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join(rel)).unwrap();
    let mut out = Vec::new();
    let mut block: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut block {
            None if line.trim_start() == "```yaml" => block = Some((i + 1, String::new())),
            Some((start, b)) if line.trim_start() == "```" => {
                // A document of its own (a line of the block's top level),
                // not one quoted inside a template's patches.
                // Only the ExtensionServiceConfig documents of the block: a
                // block may open with a machine-config patch fragment
                // (`machine:` without `version`), which is no config alone.
                let docs: Vec<&str> = b
                    .split("\n---\n")
                    .filter(|d| d.lines().any(|l| l == "kind: ExtensionServiceConfig"))
                    .collect();
                if !docs.is_empty() {
                    out.push((format!("{rel}:{start}"), docs.join("\n---\n")));
                }
                block = None;
            }
            Some((_, b)) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn extension_service_spec_and_every_extension_service_config_load_in_talos() {
    let mut o = oracles();
    let spec = std::fs::read_to_string(repo().join("extension/sandbox-readiness.yaml")).unwrap();
    for oracle in [&mut o.cabpt, &mut o.node] {
        let a = oracle.ask(&json!({"op": "service-spec", "serviceSpec": spec}));
        assert!(a.get("error").is_none(), "machinery {}: {a}", oracle.name);
        assert_eq!(a["service"]["name"], "sandbox-readiness");
        assert!(a["service"].get("strictError").is_none(), "{a}");
    }

    let mut examples = markdown_examples("README.md");
    examples.extend(markdown_examples("extension/README.md"));
    // The operator docs hold the configuration examples now.
    let mut pages = vec![];
    let mut dirs = vec![repo().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    for page in pages {
        let rel = page
            .strip_prefix(repo())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        examples.extend(markdown_examples(&rel));
    }
    // What `tls init` writes for a node.
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox-readiness"))
        .args(["tls", "init"])
        .arg(tmp.path().join("pki"))
        .args(["--node", "worker-1=10.0.0.21"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node = std::fs::read_to_string(tmp.path().join("pki/nodes/worker-1.yaml")).unwrap();
    examples.push(("tls init's pki/nodes/worker-1.yaml".into(), node));
    assert!(
        examples.len() >= 4,
        "found only {} examples",
        examples.len()
    );
    for (where_, text) in &examples {
        for oracle in [&mut o.cabpt, &mut o.node] {
            let a = oracle.ask(&json!({"op": "load", "config": text}));
            assert!(
                a.get("error").is_none(),
                "{where_}: machinery {} refuses it: {}",
                oracle.name,
                a["error"]
            );
            let esc = a["documents"].as_array().unwrap().iter().find(|d| {
                d["kind"] == "ExtensionServiceConfig" && d["name"] == "sandbox-readiness"
            });
            assert!(esc.is_some(), "{where_}: {a}");
        }
        // And ours reads the agent's environment from it.
        let p = parse_pool(text, where_, None).unwrap_or_else(|e| panic!("{where_}: {e}"));
        assert!(p.agent.is_some(), "{where_}");
    }
    eprintln!(
        "extension: the service spec and {} ExtensionServiceConfig examples load in machinery {} and {}",
        examples.len(),
        o.cabpt.machinery(),
        o.node.machinery()
    );
}

// ---------------------------------------------------------------------------
// The imager profiles of extension/imager/ (docs/deployment/disk-images.md).

/// A reference pinned by a digest of one repeated hex digit: what the
/// profile script takes, and easy to find again in the oracle's answer.
fn pinned_ref(repo_tag: &str, digit: char) -> String {
    format!("{repo_tag}@sha256:{}", digit.to_string().repeat(64))
}

/// `extension/imager/profile.sh PLATFORM ARCH` with the given references:
/// its stdout, or its stderr when it refuses.
fn profile_sh(platform: &str, arch: &str, ext: &str, gvisor: &str) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(repo().join("extension/imager/profile.sh"))
        .args([platform, arch])
        .env("SR_EXTENSION_IMAGE", ext)
        .env("GVISOR_IMAGE", gvisor)
        .env_remove("TALOS_VERSION")
        .env_remove("SR_DISK_FORMAT_OUT")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn imager_profile(o: &mut Oracle, text: &str) -> Value {
    o.ask(&json!({"op": "imager-profile", "profile": text}))
}

#[test]
fn imager_profiles_pass_talos_imager_profile_code() {
    // Its own variable: the imager oracle is Talos's main module, built
    // beside the machinery oracles but able to fail on its own.
    assert!(
        std::env::var_os("SR_TALOS_ORACLE_IMAGER").is_some(),
        "SR_TALOS_ORACLE_IMAGER is not set: run scripts/build-talos-oracle.sh (it builds talos-oracle/imager, Talos's pkg/imager/profile; its stderr says why when it cannot) and export the lines it prints"
    );
    let mut imager = Oracle::start("imager", "SR_TALOS_ORACLE_IMAGER");
    let mut node = Oracle::start("node", "SR_TALOS_ORACLE_NODE");
    let v = imager.ask(&json!({"op": "version"}));
    // The profiles name the node's release; the profile code judging them
    // must be that release's, and its machinery the node oracle's.
    assert_eq!(v["talos"], "v1.13.9", "{v}");
    assert_eq!(
        v["modules"]["github.com/siderolabs/talos/pkg/machinery"],
        node.machinery(),
        "{v}"
    );

    let ext = pinned_ref(
        &format!(
            "registry.example.com/sandbox-readiness:{}",
            env!("CARGO_PKG_VERSION")
        ),
        'a',
    );
    let gvisor = pinned_ref("ghcr.io/siderolabs/gvisor:20250505.0", 'b');
    let mut checked = 0;
    for platform in ["nocloud", "openstack", "metal", "aws", "gcp", "installer"] {
        for arch in ["amd64", "arm64"] {
            let what = format!("profile.sh {platform} {arch}");
            let text = profile_sh(platform, arch, &ext, &gvisor)
                .unwrap_or_else(|e| panic!("{what} refused: {e}"));
            let a = imager_profile(&mut imager, &text);
            assert!(
                a.get("error").is_none(),
                "{what}: Talos's imager refuses it: {a}\n{text}"
            );
            assert_eq!(
                a["strictError"], "",
                "{what}: keys the imager silently ignores: {a}"
            );
            let p = &a["profile"];
            assert_eq!(p["arch"], arch, "{what}: {a}");
            assert_eq!(p["version"], "v1.13.9", "{what}: {a}");
            assert_eq!(p["secureboot"], false, "{what}: {a}");
            // Both extensions, in the profile's order, pinned by the digests
            // given (the imager pulls exactly these).
            let exts: Vec<(&str, &str)> = a["references"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| {
                    r["field"]
                        .as_str()
                        .unwrap()
                        .starts_with("input.systemExtensions")
                })
                .map(|r| {
                    assert!(r.get("error").is_none(), "{what}: {r}");
                    (
                        r["imageRef"].as_str().unwrap(),
                        r["digest"].as_str().unwrap_or(""),
                    )
                })
                .collect();
            assert_eq!(
                exts,
                [
                    (gvisor.as_str(), &gvisor[gvisor.len() - 71..]),
                    (ext.as_str(), &ext[ext.len() - 71..]),
                ],
                "{what}: {a}"
            );
            // The same output Talos's own default profile of that name
            // finalizes to (pkg/imager/profile/default.go), but for the
            // compression this project picks (.xz, what CDI imports; gcp
            // keeps Talos's .tar.gz, the form GCE imports).
            let base = if platform == "installer" {
                "installer"
            } else {
                platform
            };
            let d = imager_profile(
                &mut imager,
                &format!("baseProfileName: {base}\narch: {arch}\nversion: v1.13.9\n"),
            );
            assert!(d.get("error").is_none(), "{base}: {d}");
            let mut ours = p["output"].clone();
            let mut talos = d["profile"]["output"].clone();
            if platform == "installer" {
                assert_eq!(ours["kind"], "installer", "{what}: {a}");
                assert_eq!(a["outputPath"], format!("installer-{arch}.tar"));
                assert_eq!(p["platform"], "metal", "{what}: {a}");
            } else {
                assert_eq!(ours["kind"], "image", "{what}: {a}");
                if platform == "gcp" {
                    assert_eq!(ours["outFormat"], ".tar.gz", "{what}: {a}");
                } else {
                    assert_eq!(ours["outFormat"], ".xz", "{what}: {a}");
                    ours.as_object_mut().unwrap().remove("outFormat");
                    talos.as_object_mut().unwrap().remove("outFormat");
                }
                // The imager appends ".xz" when it compresses (post.go).
                assert_eq!(a["outputPath"], format!("{platform}-{arch}.raw"));
                assert_eq!(p["platform"], platform, "{what}: {a}");
            }
            assert_eq!(ours, talos, "{what}: output differs from Talos's {base}");
            checked += 1;
        }
    }
    assert_eq!(checked, 12);

    // The script refuses references it cannot pin, and placeholders.
    for (e, g) in [
        (
            "registry.example.com/sandbox-readiness:0.1.0",
            gvisor.as_str(),
        ),
        (ext.as_str(), "ghcr.io/siderolabs/gvisor:20250505.0"),
        (ext.as_str(), "ghcr.io/siderolabs/gvisor@sha256:<digest>"),
        (ext.as_str(), ""),
    ] {
        let r = profile_sh("nocloud", "amd64", e, g);
        assert!(
            r.as_ref()
                .is_err_and(|m| m.contains("GVISOR_IMAGE") || m.contains("SR_EXTENSION_IMAGE")),
            "profile.sh took {e:?} {g:?}: {r:?}"
        );
    }

    // Talos's code has teeth on these profiles: what it refuses, and what
    // it silently takes (the reason strictError is checked above).
    let good = profile_sh("nocloud", "amd64", &ext, &gvisor).unwrap();
    let a = imager_profile(&mut imager, &good.replace("arch: amd64", "arch: riscv64"));
    assert_eq!(a["stage"], "validate", "{a}");
    assert!(
        a["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid arch \"riscv64\"")),
        "{a}"
    );
    let a = imager_profile(&mut imager, &good.replace("kind: image", "kind: disk"));
    assert_eq!(a["stage"], "decode", "{a}");
    // A platform left empty (a template variable never filled in).
    let a = imager_profile(
        &mut imager,
        &good.replace("platform: nocloud", "platform: \"\""),
    );
    assert_eq!(a["stage"], "validate", "{a}");
    assert!(
        a["error"]
            .as_str()
            .is_some_and(|e| e.contains("platform is required")),
        "{a}"
    );
    let typo = good.replace("systemExtensions:", "systemExtension:");
    let a = imager_profile(&mut imager, &typo);
    assert!(a.get("error").is_none(), "{a}");
    assert!(
        a["strictError"]
            .as_str()
            .is_some_and(|e| e.contains("systemExtension")),
        "{a}"
    );
    assert!(
        a["profile"]["input"].get("systemExtensions").is_none(),
        "{a}"
    );
    let placeholder = good.replace(
        &ext,
        "registry.example.com/sandbox-readiness@sha256:<digest>",
    );
    let a = imager_profile(&mut imager, &placeholder);
    let r = a["references"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["field"] == "input.systemExtensions[1]")
        .unwrap();
    assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{a}");

    eprintln!(
        "imager: {checked} profiles from extension/imager/profile.sh pass Talos {}'s pkg/imager/profile",
        v["talos"].as_str().unwrap()
    );
}
