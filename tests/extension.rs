//! The Talos system extension: takes the real OCI image that
//! scripts/build-extension.sh built (umoci, skopeo) before the tests, in the
//! directory named by `SR_EXTENSION_OUT` (scripts/test.sh and
//! scripts/test-extension.sh build it and set it; nothing is compiled here),
//! pulls each platform out of the multi-platform index with skopeo, unpacks
//! it with umoci and checks the flattened filesystem against the rules Talos
//! and extensions-validator apply (reference/talos-extension.md §1.2-§1.4,
//! §2.2). The checker itself is shown to reject broken trees, specs,
//! manifests and dynamic binaries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::Read,
    os::unix::fs::{FileTypeExt, PermissionsExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use sandbox_readiness::{host::HostPaths, tls::NODE_TLS_DIR};
use serde::Deserialize;

const NAME: &str = "sandbox-readiness";
const ARCHES: [&str; 2] = ["amd64", "arm64"];

// ---------------------------------------------------------------------------
// Running tools with a deadline.

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `cmd`, killing it at `timeout`; output goes through files so a chatty
/// child cannot block on a full pipe while we wait.
fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > timeout {
            child.kill().ok();
            child.wait().ok();
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        ok: status.success(),
        stdout: fs::read_to_string(out_path).unwrap_or_default(),
        stderr: fs::read_to_string(err_path).unwrap_or_default(),
    }
}

fn run_ok(cmd: &mut Command, timeout: Duration) -> String {
    let shown = format!("{cmd:?}");
    let out = run(cmd, timeout);
    assert!(
        out.ok,
        "{shown} failed:\n{}\n{}",
        out.stdout.trim_end(),
        out.stderr.trim_end()
    );
    out.stdout
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------
// The image, built before the tests and unpacked per platform once per run.

struct Built {
    out: PathBuf,
    epoch: String,
    /// Kept alive for the unpacked platforms below; removed when the process exits.
    _scratch: tempfile::TempDir,
    /// Per architecture: the flattened image filesystem (umoci's bundle rootfs).
    unpacked: BTreeMap<&'static str, PathBuf>,
    /// Per architecture: the image config skopeo selected from the index.
    configs: BTreeMap<&'static str, serde_json::Value>,
}

/// Packages the binaries the image build left (EXTENSION_NO_CARGO=1, in
/// `EXTENSION_TARGET_DIR` as that build had it) once more into `out`.
fn package_again(out: &Path, epoch: &str) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/build-extension.sh"))
        .env("OUT", out)
        .env("SOURCE_DATE_EPOCH", epoch)
        .env("EXTENSION_NO_CARGO", "1");
    run(&mut cmd, Duration::from_secs(600))
}

/// Where scripts/build-extension.sh put the image; fails the test with what
/// to run when it is not there.
fn image_dir() -> PathBuf {
    let out = std::env::var_os("SR_EXTENSION_OUT")
        .filter(|o| !o.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "SR_EXTENSION_OUT is not set: build the image first and name its directory, e.g. \
                 `OUT=out scripts/build-extension.sh && SR_EXTENSION_OUT=out cargo test --test extension` \
                 (scripts/test-extension.sh does both)"
            )
        });
    assert!(
        out.join("oci/index.json").is_file() && out.join("extension").is_dir(),
        "SR_EXTENSION_OUT={} holds no image built by scripts/build-extension.sh (no oci/index.json or extension/)",
        out.display()
    );
    out
}

/// The SOURCE_DATE_EPOCH the image was built with: the build script's
/// default (the last commit's time) unless the environment set one.
fn build_epoch() -> String {
    if let Some(e) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .filter(|e| !e.is_empty())
    {
        return e;
    }
    let git = run(
        Command::new("git")
            .args(["log", "-1", "--format=%ct"])
            .current_dir(repo()),
        Duration::from_secs(30),
    );
    Some(git.stdout.trim().to_string())
        .filter(|e| git.ok && !e.is_empty())
        .unwrap_or_else(|| "0".into())
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = image_dir();
        let epoch = build_epoch();

        let scratch = tempfile::tempdir().unwrap();
        let mut unpacked = BTreeMap::new();
        let mut configs = BTreeMap::new();
        for arch in ARCHES {
            // What Talos' imager does: ask the index for linux/<arch>.
            let copy = scratch.path().join(format!("oci-{arch}"));
            run_ok(
                Command::new("skopeo")
                    .args([
                        "copy",
                        "--quiet",
                        "--override-os",
                        "linux",
                        "--override-arch",
                        arch,
                    ])
                    .arg(format!("oci:{}:{NAME}", out.join("oci").display()))
                    .arg(format!("oci:{}:{NAME}", copy.display())),
                Duration::from_secs(120),
            );
            let config = run_ok(
                Command::new("skopeo")
                    .args(["inspect", "--config"])
                    .arg(format!("oci:{}:{NAME}", copy.display())),
                Duration::from_secs(60),
            );
            configs.insert(arch, serde_json::from_str(&config).unwrap());
            let bundle = scratch.path().join(format!("bundle-{arch}"));
            run_ok(
                Command::new("umoci")
                    .args(["unpack", "--image"])
                    .arg(format!("{}:{NAME}", copy.display()))
                    .arg(&bundle),
                Duration::from_secs(120),
            );
            unpacked.insert(arch, bundle.join("rootfs"));
        }
        Built {
            out,
            epoch,
            _scratch: scratch,
            unpacked,
            configs,
        }
    })
}

// ---------------------------------------------------------------------------
// Talos' rules, as data and checks.

/// `AllowedPaths` of `siderolabs/talos:pkg/machinery/extensions/extensions.go`
/// (main; the same since v1.10.0). Matched with a plain string prefix test,
/// as Talos does.
const ALLOWED_PATHS: &[&str] = &[
    "/etc/cri/conf.d",
    "/usr/lib/firmware",
    "/usr/lib/modules",
    "/usr/lib/ld-linux-x86-64.so.2",
    "/usr/lib/ld-linux-aarch64.so.1",
    "/usr/bin/ldconfig",
    "/etc/ld.so.conf",
    "/etc/ld.so.cache",
    "/usr/bin/nvidia-modprobe",
    "/usr/bin/nvidia-pcc",
    "/usr/bin/nvidia-smi",
    "/usr/bin/nvidia-ctk",
    "/usr/bin/nvidia-cdi-hook",
    "/usr/bin/nvme",
    "/usr/lib/udev/rules.d",
    "/usr/local",
    "/usr/share/glvnd",
    "/usr/share/egl",
    "/etc/vulkan",
];

/// extensions-validator's accepted `metadata.version` formats.
const VERSION_PATTERNS: &[&str] = &[
    r"^v?(\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?)$",
    r"^\d{8}(\.\d)?$",
    r"^(\d+\.\d+\.\d+)-v(\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?)(-(\d+)-g([0-9a-f]+)(-dirty)?)?$",
    r"^([0-9a-f]+)-v(\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?)(-(\d+)-g([0-9a-f]+)(-dirty)?)?$",
    r"^v?(\d+\.\d+)$",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    version: String,
    metadata: Metadata,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Metadata {
    name: String,
    version: String,
    author: String,
    description: String,
    compatibility: Compatibility,
    #[serde(default)]
    extra_info: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Compatibility {
    talos: Constraint,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Constraint {
    version: String,
}

/// Mirrors `services.Spec`. Talos decodes leniently and drops unknown keys
/// without a word; this check refuses them, so a misspelt key (`mount:`) fails
/// here instead of silently doing nothing on a node.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    name: String,
    #[serde(default)]
    container: Container,
    #[serde(default)]
    depends: Vec<Dependency>,
    #[serde(default)]
    restart: String,
    #[serde(default)]
    #[allow(dead_code)]
    log_to_console: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Container {
    #[serde(default)]
    entrypoint: String,
    #[serde(default)]
    environment: Vec<String>,
    #[serde(default)]
    environment_file: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    mounts: Vec<Mount>,
    #[serde(default)]
    security: Security,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Security {
    #[serde(default)]
    writeable_sysfs: bool,
    #[serde(default)]
    masked_paths: Option<Vec<String>>,
    #[serde(default)]
    readonly_paths: Option<Vec<String>>,
    #[serde(default)]
    writeable_rootfs: bool,
    #[serde(default)]
    rootfs_propagation: String,
}

/// The OCI runtime-spec mount; go-yaml matches its untagged fields by the
/// lower-cased Go name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Mount {
    destination: String,
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    options: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Dependency {
    #[serde(default)]
    service: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    network: Vec<String>,
    #[serde(default)]
    time: bool,
    #[serde(default)]
    configuration: bool,
}

/// `Spec.Validate()` of `pkg/machinery/extensions/services/services.go`, rule
/// for rule, with its messages; plus the decoding failures go-yaml would
/// report (an unknown restart kind fails `UnmarshalText`).
fn validate_spec(spec: &Spec) -> Vec<String> {
    let mut errs = Vec::new();
    let name_re = regex::Regex::new(r"^[-_a-z0-9]{1,}$").unwrap();
    if !name_re.is_match(&spec.name) {
        errs.push(format!("name {:?} is invalid", spec.name));
    }
    // enumer -text: the exact names, then their lower-case forms.
    let kinds = ["always", "never", "untilSuccess"];
    let restart_ok = kinds.contains(&spec.restart.as_str())
        || kinds
            .iter()
            .any(|k| k.to_lowercase() == spec.restart.to_lowercase() && !spec.restart.is_empty());
    if !restart_ok {
        errs.push(format!("restart kind is invalid: {:?}", spec.restart));
    }
    if spec.container.entrypoint.is_empty() {
        errs.push("container endpoint can't be empty".into());
    }
    for dep in &spec.depends {
        let set = [
            !dep.service.is_empty(),
            !dep.path.is_empty(),
            !dep.network.is_empty(),
            dep.time,
            dep.configuration,
        ]
        .iter()
        .filter(|s| **s)
        .count();
        match set {
            0 => errs.push("no dependency specified".into()),
            1 => {}
            _ => errs.push("more than a single dependency is set".into()),
        }
        if !dep.path.is_empty() && !dep.path.starts_with('/') {
            errs.push(format!("path is not absolute: {:?}", dep.path));
        }
        for st in &dep.network {
            if !["addresses", "connectivity", "hostname", "etcfiles"].contains(&st.as_str()) {
                errs.push(format!("invalid network dependency: {st}"));
            }
        }
    }
    errs
}

/// `metadata` as extensions-validator and Talos' Load/Validate see it.
fn validate_manifest(m: &Manifest) -> Vec<String> {
    let mut errs = Vec::new();
    if m.version != "v1alpha1" {
        errs.push(format!("unsupported manifest version: {:?}", m.version));
    }
    if m.metadata.name.is_empty() {
        errs.push("metadata.name is empty".into());
    }
    if !VERSION_PATTERNS
        .iter()
        .any(|p| regex::Regex::new(p).unwrap().is_match(&m.metadata.version))
    {
        errs.push(format!(
            "invalid version format {} for extension: {}",
            m.metadata.version, m.metadata.name
        ));
    }
    if m.metadata.author.trim().is_empty() || m.metadata.description.trim().is_empty() {
        errs.push("author and description must be set".into());
    }
    if let Err(e) = parse_constraint(&m.metadata.compatibility.talos.version) {
        errs.push(format!("error parsing Talos version constraint: {e}"));
    }
    errs
}

type Version = (u64, u64, u64);

/// A blang/semver range after Talos' `trim` (a `v` before a digit dropped):
/// comparators `>=`, `<=`, `>`, `<`, `=`, `==`, `!=` or none, each with a full
/// `X.Y.Z[-pre]`, joined by spaces (and) or `||` (or). Returns the ranges as
/// (operator, version) lists.
fn parse_constraint(s: &str) -> Result<Vec<Vec<(String, Version)>>, String> {
    let trimmed = regex::Regex::new(r"v(\d)").unwrap().replace_all(s, "$1");
    // blang glues an operator to the version after it.
    let operator_space = regex::Regex::new(r"([<>=!]+)\s+").unwrap();
    let mut ors = Vec::new();
    for part in trimmed.split("||") {
        let glued = operator_space.replace_all(part.trim(), "$1");
        let mut ands = Vec::new();
        for term in glued.split_whitespace() {
            let split = term
                .find(|c: char| c.is_ascii_digit())
                .ok_or_else(|| format!("no version in {term:?}"))?;
            let (op, ver) = term.split_at(split);
            if !["", ">=", "<=", ">", "<", "=", "==", "!=", "!"].contains(&op) {
                return Err(format!("unknown operator {op:?}"));
            }
            let core = ver.split('-').next().unwrap_or_default();
            let nums: Vec<u64> = core
                .split('.')
                .map(|n| n.parse::<u64>().map_err(|e| format!("{ver:?}: {e}")))
                .collect::<Result<_, _>>()?;
            let [a, b, c] = nums[..] else {
                return Err(format!("{ver:?} is not MAJOR.MINOR.PATCH"));
            };
            ands.push((op.to_string(), (a, b, c)));
        }
        if ands.is_empty() {
            return Err(format!("empty range in {s:?}"));
        }
        ors.push(ands);
    }
    Ok(ors)
}

fn satisfies(ranges: &[Vec<(String, Version)>], v: Version) -> bool {
    ranges.iter().any(|ands| {
        ands.iter().all(|(op, w)| match op.as_str() {
            ">=" => v >= *w,
            "<=" => v <= *w,
            ">" => v > *w,
            "<" => v < *w,
            "!=" | "!" => v != *w,
            _ => v == *w,
        })
    })
}

/// `p` as a path inside the extension or container root (`/usr/local/...`).
fn rooted(base: &Path, p: &Path) -> String {
    format!("/{}", p.strip_prefix(base).unwrap().display())
}

fn walk(dir: &Path, visit: &mut dyn FnMut(&Path, &fs::Metadata)) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let meta = fs::symlink_metadata(&p).unwrap();
        visit(&p, &meta);
        if meta.is_dir() {
            walk(&p, visit);
        }
    }
}

/// Everything Talos' `Load` + `Validate(WithValidateContents)` and
/// extensions-validator check on an unpacked extension, and what the service
/// needs at run time: its entrypoint and mount points in the container root.
fn check_extension(root: &Path) -> Vec<String> {
    let mut errs = Vec::new();
    let top: BTreeSet<String> = match fs::read_dir(root) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => return vec![format!("cannot read {}: {e}", root.display())],
    };
    for item in &top {
        if item != "manifest.yaml" && item != "rootfs" {
            errs.push(format!("unexpected file {item:?}"));
        }
    }
    let rootfs = root.join("rootfs");
    if !rootfs.is_dir() {
        errs.push("extension rootfs is missing".into());
        return errs;
    }
    match fs::read_to_string(root.join("manifest.yaml")) {
        Err(_) => errs.push("extension manifest is missing".into()),
        Ok(text) => match serde_yaml_ng::from_str::<Manifest>(&text) {
            Err(e) => errs.push(format!("manifest.yaml: {e}")),
            Ok(m) => errs.extend(validate_manifest(&m)),
        },
    }
    walk(&rootfs, &mut |p, meta| {
        let path = rooted(&rootfs, p);
        let ft = meta.file_type();
        if meta.permissions().mode() & 0o002 != 0 && !ft.is_symlink() {
            errs.push(format!("world-writeable files are not allowed: {path:?}"));
        }
        if ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device() {
            errs.push(format!("special files are not allowed: {path:?}"));
        }
        if !ft.is_dir() && !ALLOWED_PATHS.iter().any(|a| path.starts_with(a)) {
            errs.push(format!("path {path:?} is not allowed in extensions"));
        }
    });
    let specs_dir = rootfs.join("usr/local/etc/containers");
    let mut specs: Vec<_> = fs::read_dir(&specs_dir)
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    specs.sort();
    for file in specs
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        let shown = rooted(&rootfs, file);
        let spec: Spec = match serde_yaml_ng::from_str(&fs::read_to_string(file).unwrap()) {
            Ok(s) => s,
            Err(e) => {
                errs.push(format!(
                    "error unmarshalling service spec file {shown}: {e}"
                ));
                continue;
            }
        };
        for e in validate_spec(&spec) {
            errs.push(format!("error validating service spec file {shown}: {e}"));
        }
        let croot = rootfs.join("usr/local/lib/containers").join(&spec.name);
        let entry = croot.join(&spec.container.entrypoint);
        match fs::metadata(&entry) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
            _ => errs.push(format!(
                "{shown}: entrypoint {} is not an executable file in the container root",
                spec.container.entrypoint
            )),
        }
        for m in &spec.container.mounts {
            if !m.destination.starts_with('/') {
                errs.push(format!(
                    "{shown}: mount destination {} is not absolute",
                    m.destination
                ));
            } else if fs::symlink_metadata(croot.join(&m.destination[1..])).is_err() {
                errs.push(format!(
                    "{shown}: mount point {} does not exist in the read-only container root",
                    m.destination
                ));
            }
        }
    }
    errs
}

/// The program headers of a 64-bit little-endian ELF file: (e_machine, p_types).
fn elf_program_headers(bytes: &[u8]) -> Result<(u16, Vec<u32>), String> {
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF file".into());
    }
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let machine = u16_at(0x12).ok_or("truncated header")?;
    let phoff = usize::try_from(u64_at(0x20).ok_or("truncated header")?).unwrap();
    let phentsize = usize::from(u16_at(0x36).ok_or("truncated header")?);
    let phnum = usize::from(u16_at(0x38).ok_or("truncated header")?);
    let types = (0..phnum)
        .map(|i| u32_at(phoff + i * phentsize).ok_or("truncated program header"))
        .collect::<Result<_, _>>()?;
    Ok((machine, types))
}

const PT_INTERP: u32 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

fn assert_static(path: &Path, machine: u16) {
    let (m, types) = elf_program_headers(&fs::read(path).unwrap()).unwrap();
    assert_eq!(m, machine, "{} is built for machine {m}", path.display());
    assert!(
        !types.contains(&PT_INTERP),
        "{} has a PT_INTERP program header: it is dynamically linked",
        path.display()
    );
}

fn load_spec() -> Spec {
    let text = fs::read_to_string(repo().join("extension/sandbox-readiness.yaml")).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

fn container_root(rootfs: &Path) -> PathBuf {
    rootfs.join("usr/local/lib/containers").join(NAME)
}

// ---------------------------------------------------------------------------
// The shipped image.

#[test]
fn every_platform_of_the_image_passes_the_talos_rules() {
    let b = built();
    for (arch, root) in &b.unpacked {
        let errs = check_extension(root);
        assert!(errs.is_empty(), "{arch}: {errs:#?}");
        let manifest: Manifest =
            serde_yaml_ng::from_str(&fs::read_to_string(root.join("manifest.yaml")).unwrap())
                .unwrap();
        assert_eq!(manifest.metadata.name, NAME);
        assert_eq!(
            manifest.metadata.version,
            env!("CARGO_PKG_VERSION"),
            "the manifest version must come from Cargo.toml"
        );
        // configFiles of the ExtensionServiceConfig land here; the mount point
        // exists even though machined could create it in its setup overlay.
        let tls_dir = container_root(&root.join("rootfs")).join(&NODE_TLS_DIR[1..]);
        assert!(tls_dir.is_dir(), "{arch}: {} missing", tls_dir.display());
        // The image's files are exactly those of the tree the script laid out.
        let mut image = Vec::new();
        walk(root, &mut |p, m| {
            image.push((rooted(root, p), m.permissions().mode() & 0o7777))
        });
        let tree = b.out.join("extension").join(arch);
        let mut laid_out = Vec::new();
        walk(&tree, &mut |p, m| {
            laid_out.push((rooted(&tree, p), m.permissions().mode() & 0o7777))
        });
        assert_eq!(image, laid_out, "{arch}: image and tree differ");
    }
}

#[test]
fn the_index_selects_one_image_per_platform_with_its_architecture() {
    let b = built();
    for (arch, config) in &b.configs {
        assert_eq!(config["architecture"], *arch, "{config}");
        assert_eq!(config["os"], "linux");
    }
    // `skopeo copy --all` (what pushing to a registry does) takes both.
    let dir = tempfile::tempdir().unwrap();
    run_ok(
        Command::new("skopeo")
            .args(["copy", "--quiet", "--all"])
            .arg(format!("oci:{}:{NAME}", b.out.join("oci").display()))
            .arg(format!("oci:{}:{NAME}", dir.path().display())),
        Duration::from_secs(120),
    );
    let raw = run_ok(
        Command::new("skopeo")
            .args(["inspect", "--raw"])
            .arg(format!("oci:{}:{NAME}", dir.path().display())),
        Duration::from_secs(60),
    );
    let index: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let platforms: BTreeSet<String> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let p = &m["platform"];
            format!(
                "{}/{}",
                p["os"].as_str().unwrap(),
                p["architecture"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        platforms,
        BTreeSet::from(["linux/amd64".to_string(), "linux/arm64".to_string()])
    );
}

#[test]
fn packaging_is_deterministic() {
    let b = built();
    let again = tempfile::tempdir().unwrap();
    let out = package_again(again.path(), &b.epoch);
    assert!(
        out.ok,
        "second build failed:\n{}\n{}",
        out.stdout, out.stderr
    );
    let digest_of_index = |out: &Path| {
        let index: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(out.join("oci/index.json")).unwrap()).unwrap();
        index.to_string()
    };
    assert_eq!(digest_of_index(&b.out), digest_of_index(again.path()));
}

#[test]
fn both_binaries_are_static_and_report_their_version() {
    let b = built();
    let amd64 = container_root(&b.unpacked["amd64"].join("rootfs")).join(NAME);
    let arm64 = container_root(&b.unpacked["arm64"].join("rootfs")).join(NAME);
    assert_static(&amd64, EM_X86_64);
    assert_static(&arm64, EM_AARCH64);
    let want = env!("CARGO_PKG_VERSION");
    let native = run_ok(
        Command::new(&amd64).arg("--version"),
        Duration::from_secs(20),
    );
    assert!(native.contains(want), "amd64 --version said {native:?}");
    let emulated = run_ok(
        Command::new("qemu-aarch64-static")
            .arg(&arm64)
            .arg("--version"),
        Duration::from_secs(60),
    );
    assert!(emulated.contains(want), "arm64 --version said {emulated:?}");
}

/// The extension carries the node build (`--no-default-features`): `serve`
/// and `probe`. The operator commands are not in it, and their names get
/// one line that says so and where they are (exit 2), not clap's
/// "unrecognized subcommand"; their flags, `--help` included, change nothing.
#[test]
fn both_binaries_leave_out_the_operator_commands_and_say_so() {
    let b = built();
    for arch in ARCHES {
        let bin = container_root(&b.unpacked[arch].join("rootfs")).join(NAME);
        for (args, command) in [
            (&["check", "-n", "127.0.0.1", "-o", "json"][..], "`check`"),
            (&["check", "--help"][..], "`check`"),
            (
                &["--log-format", "json", "tls", "init", "pki", "--san", "x"][..],
                "`tls init`",
            ),
        ] {
            let mut cmd = if arch == "arm64" {
                let mut c = Command::new("qemu-aarch64-static");
                c.arg(&bin);
                c
            } else {
                Command::new(&bin)
            };
            let out = cmd.args(args).stdin(Stdio::null()).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{arch} {args:?}: {stderr}");
            assert!(
                out.stdout.is_empty(),
                "{arch} {args:?}: stdout {:?}",
                out.stdout
            );
            assert_eq!(stderr.lines().count(), 1, "{arch} {args:?}: {stderr}");
            assert!(
                stderr.contains(command)
                    && stderr.contains("node build")
                    && stderr.contains("operator build of the same crate"),
                "{arch} {args:?}: {stderr}"
            );
        }
        // The node's own commands are all the help lists.
        let mut cmd = if arch == "arm64" {
            let mut c = Command::new("qemu-aarch64-static");
            c.arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        let help = run_ok(cmd.arg("--help"), Duration::from_secs(60));
        assert!(
            help.contains("probe") && help.contains("serve"),
            "{arch}: {help}"
        );
        assert!(
            !help.contains("check") && !help.contains("tls"),
            "{arch}: {help}"
        );
    }
}

/// Both shipped binaries are built without unwind tables (`--profile ship`,
/// link/discard-eh-frame.ld), yet a panic still prints its message and
/// aborts: `probe` whose stdout is /dev/full panics in `print!`. The
/// arm64 binary runs under qemu-aarch64-static, which dies of the same
/// signal.
#[test]
fn both_binaries_lack_unwind_tables_and_a_panic_still_prints_and_aborts() {
    use std::os::unix::process::ExitStatusExt;
    let b = built();
    for arch in ARCHES {
        let bin = container_root(&b.unpacked[arch].join("rootfs")).join(NAME);
        let sections = run_ok(
            Command::new("readelf").arg("-SW").arg(&bin),
            Duration::from_secs(20),
        );
        assert!(
            !sections.contains(".eh_frame_hdr"),
            "{arch}: a .eh_frame_hdr is back:\n{sections}"
        );
        // crtbegin/crtend keep their few bytes (x86_64: 0x50), nothing more.
        for line in sections.lines().filter(|l| l.contains(" .eh_frame ")) {
            let size = line
                .split_whitespace()
                .skip_while(|w| *w != "PROGBITS")
                .nth(3)
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or(u64::MAX);
            assert!(size <= 256, "{arch}: .eh_frame of {size} bytes: {line}");
        }

        let dir = tempfile::tempdir().unwrap();
        let mut cmd = if arch == "arm64" {
            let mut c = Command::new("qemu-aarch64-static");
            c.arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        let err_path = dir.path().join("err");
        let mut child = cmd
            .env_remove("RUST_BACKTRACE")
            .args(["probe", "-o", "json", "--timeout", "60s"])
            .stdin(Stdio::null())
            .stdout(
                fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .stderr(fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                panic!("{arch}: probe did not finish within 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = fs::read_to_string(&err_path).unwrap_or_default();
        assert_eq!(
            status.signal(),
            Some(libc::SIGABRT),
            "{arch}: a panic must abort (panic=abort); it ended {status:?}:\n{stderr}"
        );
        assert!(
            stderr.contains("panicked at") && stderr.contains("failed printing to stdout"),
            "{arch}: the panic message is missing:\n{stderr}"
        );
    }
}

/// Exit code of the shipped amd64 binary's `probe` under `env` alone.
fn probe_exit_code(env: &[String]) -> Option<i32> {
    let bin = container_root(&built().unpacked["amd64"].join("rootfs")).join(NAME);
    let mut cmd = Command::new(bin);
    cmd.env_clear().args(["probe", "-o", "json"]);
    for entry in env {
        let (k, v) = entry.split_once('=').unwrap();
        cmd.env(k, v);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.path().join("out")).unwrap())
        .stderr(fs::File::create(dir.path().join("err")).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            child.wait().ok();
            panic!("probe did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_binary_accepts_the_spec_environment() {
    let spec = load_spec();
    // 0 converged / 1 not converged are both fine here; 2 is bad configuration.
    let code = probe_exit_code(&spec.container.environment);
    assert!(
        matches!(code, Some(0 | 1)),
        "exit {code:?} under {:?}",
        spec.container.environment
    );
    let bogus = ["SANDBOX_READINESS_LOG_FORMAT=bogus".to_string()];
    assert_eq!(
        probe_exit_code(&bogus),
        Some(2),
        "a bad value must be refused"
    );
}

/// Files kubelet creates only once it has bootstrapped, after the
/// extension service starts (and the directory it rotates its client
/// certificate in, which machined may remove and recreate): a bind of any of
/// them would be created by machined as an empty directory (MkdirAll) or
/// pinned stale.
const KUBELET_CREATES: [&str; 4] = [
    "/etc/kubernetes/kubeconfig-kubelet",
    "/etc/kubernetes/bootstrap-kubeconfig",
    "/var/lib/kubelet/pki",
    "/var/lib/kubelet/pki/kubelet-client-current.pem",
];

#[test]
fn spec_binds_no_path_kubelet_has_yet_to_create() {
    let spec = load_spec();
    for m in &spec.container.mounts {
        for created in KUBELET_CREATES {
            assert!(
                !Path::new(&m.source).starts_with(created),
                "{m:?} binds {created}, which kubelet creates later"
            );
        }
    }
    // What `serve --kubeconfig` reads is inside the directories bound.
    for read in [
        "/etc/kubernetes/kubeconfig-kubelet",
        "/var/lib/kubelet/pki/kubelet-client-current.pem",
    ] {
        let m = spec
            .container
            .mounts
            .iter()
            .find(|m| Path::new(read).starts_with(&m.destination))
            .unwrap_or_else(|| panic!("{read} is not under any mount"));
        assert!(m.options.iter().any(|o| o == "ro"), "{m:?}");
    }
    // A volume mounted there after the service starts must reach it.
    let kubelet = spec
        .container
        .mounts
        .iter()
        .find(|m| m.destination == "/var/lib/kubelet")
        .unwrap();
    assert!(kubelet.options.iter().any(|o| o == "rslave"), "{kubelet:?}");
}

#[test]
fn spec_mounts_are_the_host_paths_defaults_read_only() {
    let spec = load_spec();
    let dests: Vec<&str> = spec
        .container
        .mounts
        .iter()
        .map(|m| m.destination.as_str())
        .collect();
    let mut want = HostPaths::talos_bind_mounts().to_vec();
    let mut got = dests.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(
        got, want,
        "service spec mounts vs HostPaths::talos_bind_mounts()"
    );
    for m in &spec.container.mounts {
        assert_eq!(m.kind, "bind", "{m:?}");
        assert_eq!(m.source, m.destination, "same path inside and out: {m:?}");
        assert!(m.options.iter().any(|o| o == "ro"), "not read-only: {m:?}");
        assert!(
            m.options.iter().any(|o| o == "bind" || o == "rbind"),
            "no bind option: {m:?}"
        );
        assert!(
            !m.options
                .iter()
                .any(|o| o == "rw" || o.starts_with("rshared")),
            "{m:?}"
        );
    }
    // Each default HostPaths location resolves inside one of those mounts.
    let p = HostPaths::default();
    for used in [
        p.os_release()[0].clone(),
        p.machine_id(),
        p.default_bin_dir(),
        p.default_cri_conf_dir(),
        PathBuf::from(p.default_cri_endpoint().trim_start_matches("unix://")),
    ] {
        assert!(
            dests.iter().any(|d| used.starts_with(d)),
            "{} is read by the agent but not mounted",
            used.display()
        );
    }
}

#[test]
fn spec_asks_for_nothing_it_does_not_need() {
    let spec = load_spec();
    assert!(
        validate_spec(&spec).is_empty(),
        "{:?}",
        validate_spec(&spec)
    );
    assert_eq!(spec.name, NAME);
    assert_eq!(spec.container.entrypoint, format!("./{NAME}"));
    assert_eq!(spec.container.args, ["serve"]);
    assert_eq!(spec.restart, "always");
    let sec = &spec.container.security;
    assert!(!sec.writeable_rootfs && !sec.writeable_sysfs);
    assert!(sec.masked_paths.is_none() && sec.readonly_paths.is_none());
    assert!(sec.rootfs_propagation.is_empty());
    assert!(
        spec.container.environment_file.is_empty(),
        "deprecated since Talos 1.7"
    );
    for env in &spec.container.environment {
        assert!(
            (env.starts_with("SANDBOX_READINESS_") || env == "TMPDIR=/run") && env.contains('='),
            "unexpected environment entry {env:?}"
        );
    }
    assert!(
        !spec.container.mounts.iter().any(|m| m.destination == "/dev"
            || m.destination == "/proc"
            || m.destination == "/sys"),
        "host /dev, /proc or /sys is not needed"
    );
    let deps: Vec<String> = spec
        .depends
        .iter()
        .map(|d| {
            if !d.service.is_empty() {
                format!("service:{}", d.service)
            } else if !d.network.is_empty() {
                format!("network:{}", d.network.join(","))
            } else if d.configuration {
                "configuration".into()
            } else {
                format!("{d:?}")
            }
        })
        .collect();
    assert!(deps.contains(&"service:cri".to_string()), "{deps:?}");
    assert!(deps
        .iter()
        .any(|d| d.starts_with("network:") && d.contains("addresses")));
    assert!(deps.contains(&"configuration".to_string()), "{deps:?}");
}

#[test]
fn manifest_template_compatibility_names_the_oldest_talos_the_spec_needs() {
    let text = fs::read_to_string(repo().join("extension/manifest.yaml.in"))
        .unwrap()
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"));
    let m: Manifest = serde_yaml_ng::from_str(&text).unwrap();
    assert!(
        validate_manifest(&m).is_empty(),
        "{:?}",
        validate_manifest(&m)
    );
    assert!(m.metadata.extra_info.is_empty());
    let ranges = parse_constraint(&m.metadata.compatibility.talos.version).unwrap();
    // `configuration: true` and ExtensionServiceConfig exist from v1.7.0 on.
    assert!(satisfies(&ranges, (1, 7, 0)));
    assert!(!satisfies(&ranges, (1, 6, 99)));
    // extensions-validator's machinery pin is v1.13.0-alpha.2 (core 1.13.0).
    assert!(satisfies(&ranges, (1, 13, 0)));
}

// ---------------------------------------------------------------------------
// pkg.yaml and the local build lay out the same tree.

/// (path, is_dir, mode) for every `install` into /rootfs in pkg.yaml's
/// install instructions.
fn pkg_installs(pkg: &serde_yaml_ng::Value) -> Vec<(String, bool, u32)> {
    let mut found = Vec::new();
    for step in pkg["steps"].as_sequence().unwrap() {
        let Some(install) = step["install"].as_sequence() else {
            continue;
        };
        for instr in install {
            for line in instr.as_str().unwrap().lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                if words.first() != Some(&"install") {
                    continue;
                }
                let (mut dir, mut mode, mut args) = (false, 0o755, Vec::new());
                let mut it = words[1..].iter();
                while let Some(w) = it.next() {
                    match *w {
                        "-d" => dir = true,
                        "-m" => mode = u32::from_str_radix(it.next().unwrap(), 8).unwrap(),
                        w => args.push(w),
                    }
                }
                let targets = if dir {
                    &args[..]
                } else {
                    &args[args.len() - 1..]
                };
                for t in targets {
                    let rel = t
                        .strip_prefix("/rootfs")
                        .unwrap_or_else(|| panic!("pkg.yaml installs {t} outside /rootfs: {line}"));
                    found.push((rel.to_string(), dir, mode));
                }
            }
        }
    }
    found
}

#[test]
fn pkg_yaml_builds_the_same_tree_as_the_local_build() {
    let text = fs::read_to_string(repo().join("pkg.yaml")).unwrap();
    let pkg: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(
        pkg["name"].as_str(),
        Some(NAME),
        "bldr name = metadata.name"
    );
    assert_eq!(pkg["variant"].as_str(), Some("alpine"));
    assert!(pkg["dependencies"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|d| d["stage"].as_str() == Some("base")));
    let finalize: Vec<(String, String)> = pkg["finalize"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["from"].as_str().unwrap().to_string(),
                f["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        finalize,
        [
            ("/rootfs".to_string(), "/rootfs".to_string()),
            ("/pkg/manifest.yaml".to_string(), "/".to_string())
        ]
    );
    // Downloads happen only in a networked step before the offline build.
    let steps = pkg["steps"].as_sequence().unwrap();
    let fetch = steps
        .iter()
        .position(|s| {
            serde_yaml_ng::to_string(&s["prepare"])
                .unwrap()
                .contains("cargo fetch")
        })
        .expect("a prepare step runs cargo fetch");
    let build = steps
        .iter()
        .position(|s| {
            serde_yaml_ng::to_string(&s["build"])
                .unwrap()
                .contains("cargo build")
        })
        .expect("a build step runs cargo build");
    assert_eq!(steps[fetch]["network"].as_str(), Some("default"));
    assert_eq!(steps[build]["network"].as_str(), Some("none"));
    assert!(fetch < build);
    let build_text = serde_yaml_ng::to_string(&steps[build]).unwrap();
    assert!(build_text.contains("--offline") && build_text.contains("--locked"));
    // The shipped binaries' profile, as scripts/build-extension.sh builds them.
    assert!(
        build_text.contains("--profile ship")
            && text.contains("-unknown-linux-musl/ship/sandbox-readiness"),
        "pkg.yaml must build and install the `ship` profile's binary"
    );
    let script = fs::read_to_string(repo().join("scripts/build-extension.sh")).unwrap();
    assert!(
        script.contains("profile=ship"),
        "build-extension.sh builds --profile ship"
    );
    // Both build the node build: `serve` and `probe`, no operator commands.
    assert!(
        build_text.contains("--no-default-features"),
        "pkg.yaml must build the node build (--no-default-features)"
    );
    assert!(
        script.contains("--no-default-features"),
        "build-extension.sh must build the node build (--no-default-features)"
    );
    assert!(
        build_text.contains("extensions-validator validate") && build_text.contains("${PKG_NAME}"),
        "the standard extensions-validator test step"
    );
    for src in [
        "/pkg/extension/sandbox-readiness.yaml",
        "/pkg/extension/manifest.yaml.in",
    ] {
        assert!(text.contains(src), "pkg.yaml does not use {src}");
        assert!(repo().join(src.trim_start_matches("/pkg/")).is_file());
    }

    // The same paths, kinds and modes as out/extension/amd64 holds.
    let installs = pkg_installs(&pkg);
    let tree = built().out.join("extension/amd64/rootfs");
    for (path, dir, mode) in &installs {
        let meta = fs::symlink_metadata(tree.join(&path[1..]))
            .unwrap_or_else(|_| panic!("pkg.yaml installs {path}, the local tree lacks it"));
        assert_eq!(meta.is_dir(), *dir, "{path}");
        assert_eq!(meta.permissions().mode() & 0o7777, *mode, "{path}");
    }
    // Every file and every leaf directory of the local tree comes from pkg.yaml.
    let named: BTreeSet<&str> = installs.iter().map(|(p, _, _)| p.as_str()).collect();
    walk(&tree, &mut |p, meta| {
        let path = rooted(&tree, p);
        let leaf = !meta.is_dir() || fs::read_dir(p).unwrap().next().is_none();
        if leaf {
            assert!(
                named.contains(path.as_str()),
                "pkg.yaml does not install {path}"
            );
        }
    });
}

// ---------------------------------------------------------------------------
// The checker can fail.

/// A minimal extension that passes, to be broken one way per case.
fn good_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let text = fs::read_to_string(repo().join("extension/manifest.yaml.in"))
        .unwrap()
        .replace("@VERSION@", "1.2.3");
    fs::write(r.join("manifest.yaml"), text).unwrap();
    let croot = r.join("rootfs/usr/local/lib/containers/x");
    fs::create_dir_all(&croot).unwrap();
    fs::create_dir_all(croot.join("data")).unwrap();
    fs::write(croot.join("x"), b"#!/bin/true\n").unwrap();
    fs::set_permissions(croot.join("x"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(r.join("rootfs/usr/local/etc/containers")).unwrap();
    fs::write(
        r.join("rootfs/usr/local/etc/containers/x.yaml"),
        "name: x\ncontainer:\n  entrypoint: ./x\n  mounts:\n    - {source: /data, destination: /data, type: bind, options: [bind, ro]}\nrestart: always\n",
    )
    .unwrap();
    fs::create_dir_all(r.join("rootfs/etc/cri/conf.d")).unwrap();
    fs::write(r.join("rootfs/etc/cri/conf.d/10-x.part"), "").unwrap();
    dir
}

#[test]
fn checker_accepts_the_good_fixture() {
    let f = good_fixture();
    assert_eq!(check_extension(f.path()), Vec::<String>::new());
}

#[test]
fn checker_rejects_broken_trees() {
    type Break = fn(&Path);
    let cases: [(&str, Break, &str); 7] = [
        (
            "file outside the allowed paths",
            |r| {
                fs::create_dir_all(r.join("rootfs/usr/bin")).unwrap();
                fs::write(r.join("rootfs/usr/bin/foo"), "").unwrap();
            },
            r#"path "/usr/bin/foo" is not allowed"#,
        ),
        (
            "extra top-level entry",
            |r| fs::write(r.join("README"), "").unwrap(),
            r#"unexpected file "README""#,
        ),
        (
            "world-writable directory",
            |r| {
                fs::set_permissions(
                    r.join("rootfs/usr/local/lib/containers/x/data"),
                    fs::Permissions::from_mode(0o777),
                )
                .unwrap()
            },
            "world-writeable files are not allowed",
        ),
        (
            "FIFO",
            |r| {
                let fifo = r.join("rootfs/usr/local/fifo");
                let ok = Command::new("mkfifo")
                    .arg(&fifo)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok);
            },
            "special files are not allowed",
        ),
        (
            "no rootfs",
            |r| fs::remove_dir_all(r.join("rootfs")).unwrap(),
            "extension rootfs is missing",
        ),
        (
            "missing mount point in the container root",
            |r| fs::remove_dir(r.join("rootfs/usr/local/lib/containers/x/data")).unwrap(),
            "mount point /data does not exist",
        ),
        (
            "entrypoint not executable",
            |r| {
                fs::set_permissions(
                    r.join("rootfs/usr/local/lib/containers/x/x"),
                    fs::Permissions::from_mode(0o644),
                )
                .unwrap()
            },
            "entrypoint ./x is not an executable file",
        ),
    ];
    for (what, break_it, want) in cases {
        let f = good_fixture();
        break_it(f.path());
        let errs = check_extension(f.path());
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{what}: expected an error containing {want:?}, got {errs:?}"
        );
    }
}

#[test]
fn spec_validation_rejects_what_talos_rejects() {
    let cases = [
        ("name: Bad Name\ncontainer: {entrypoint: ./x}\nrestart: always\n", "name \"Bad Name\" is invalid"),
        ("name: x\ncontainer: {entrypoint: ./x}\n", "restart kind is invalid"),
        ("name: x\ncontainer: {entrypoint: ./x}\nrestart: sometimes\n", "restart kind is invalid"),
        ("name: x\nrestart: always\n", "container endpoint can't be empty"),
        (
            "name: x\ncontainer: {entrypoint: ./x}\nrestart: always\ndepends: [{service: cri, configuration: true}]\n",
            "more than a single dependency is set",
        ),
        (
            "name: x\ncontainer: {entrypoint: ./x}\nrestart: always\ndepends: [{}]\n",
            "no dependency specified",
        ),
        (
            "name: x\ncontainer: {entrypoint: ./x}\nrestart: always\ndepends: [{path: run/x.sock}]\n",
            "path is not absolute",
        ),
        (
            "name: x\ncontainer: {entrypoint: ./x}\nrestart: always\ndepends: [{network: [addresses, online]}]\n",
            "invalid network dependency: online",
        ),
    ];
    for (yaml, want) in cases {
        let spec: Spec = serde_yaml_ng::from_str(yaml).unwrap();
        let errs = validate_spec(&spec);
        assert!(errs.iter().any(|e| e.contains(want)), "{yaml}: {errs:?}");
    }
    // Case-insensitive restart kinds are accepted, as enumer does.
    let spec: Spec =
        serde_yaml_ng::from_str("name: x\ncontainer: {entrypoint: ./x}\nrestart: untilsuccess\n")
            .unwrap();
    assert!(validate_spec(&spec).is_empty());
    // A misspelt key is refused here (Talos would silently drop it).
    assert!(serde_yaml_ng::from_str::<Spec>(
        "name: x\ncontainer: {entrypoint: ./x, mount: []}\nrestart: always\n"
    )
    .is_err());
}

#[test]
fn manifest_validation_rejects_bad_versions_and_constraints() {
    let make = |version: &str, constraint: &str| Manifest {
        version: "v1alpha1".into(),
        metadata: Metadata {
            name: "x".into(),
            version: version.into(),
            author: "a".into(),
            description: "d".into(),
            compatibility: Compatibility {
                talos: Constraint {
                    version: constraint.into(),
                },
            },
            extra_info: String::new(),
        },
    };
    for ok in [
        "0.1.0",
        "v1.2.3-rc.1",
        "20260810.0",
        "535.129.03-v1.8.0-alpha.0-10-g336fa0f",
        "1.2",
    ] {
        assert!(validate_manifest(&make(ok, ">= v1.7.0")).is_empty(), "{ok}");
    }
    for bad in ["0.1.0+build.5", "latest", "1", ""] {
        let errs = validate_manifest(&make(bad, ">= v1.7.0"));
        assert!(
            errs.iter().any(|e| e.contains("invalid version format")),
            "{bad}: {errs:?}"
        );
    }
    for bad in ["banana", ">= v1.7", "~> 1.7.0", "=> 1.7.0"] {
        assert!(parse_constraint(bad).is_err(), "{bad}");
    }
    let r = parse_constraint(">= v1.7.0 < v2.0.0 || 3.0.0").unwrap();
    assert!(satisfies(&r, (1, 9, 2)) && !satisfies(&r, (2, 1, 0)) && satisfies(&r, (3, 0, 0)));
    let mut m = make("0.1.0", ">= v1.7.0");
    m.version = "v1alpha2".into();
    assert!(validate_manifest(&m)[0].contains("unsupported manifest version"));
}

#[test]
fn elf_check_tells_static_from_dynamic() {
    // Debian's /bin/sh is dynamically linked: it must be caught.
    let mut sh = Vec::new();
    fs::File::open("/bin/sh")
        .unwrap()
        .read_to_end(&mut sh)
        .unwrap();
    let (_, types) = elf_program_headers(&sh).unwrap();
    assert!(types.contains(&PT_INTERP), "/bin/sh without PT_INTERP?");
    assert!(elf_program_headers(b"#!/bin/sh\n").is_err());
    assert!(elf_program_headers(&sh[..0x30]).is_err());
}
