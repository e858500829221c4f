//! Tier 2: the CRI drop-ins that register runtime handlers, and the runsc
//! shim config files (`ConfigPath`) they name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::host::HostPaths;
use crate::hostio;
use crate::proto::v1::{ConfiguredHandler, DropIn};

/// The CRI runtime plugin key of containerd 2 (config version 3, Talos >= 1.8).
pub const PLUGIN_CRI_V1_RUNTIME: &str = "io.containerd.cri.v1.runtime";
/// The CRI plugin key of containerd 1.x (config version 2).
pub const PLUGIN_GRPC_V1_CRI: &str = "io.containerd.grpc.v1.cri";
const PLUGIN_KEYS: [&str; 2] = [PLUGIN_CRI_V1_RUNTIME, PLUGIN_GRPC_V1_CRI];

/// Drop-ins (and ConfigPath files) larger than this are refused: real ones
/// are a few hundred bytes, and the agent must not be made to buffer a disk.
pub const MAX_DROP_IN_BYTES: usize = 1 << 20;
/// At most this many drop-ins are read from the CRI config directory.
pub const MAX_DROP_IN_FILES: usize = 128;

/// What the I/O side knows about a handler's `ConfigPath` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigLookup {
    pub exists: bool,
    /// `[runsc_config] platform`, empty when unset (runsc then uses systrap).
    pub platform: String,
}

/// Reads every `*.part` and `*.toml` file in `conf_dir` (sorted by name) and
/// returns one [`DropIn`] per file plus the runtime handlers they register.
///
/// A handler declared again by a later file (Talos' merged `cri.toml` repeats
/// every part) is merged into the first declaration, later values winning
/// like containerd's own TOML merge. A missing directory yields nothing.
pub fn observe_drop_ins(
    conf_dir: &Path,
    host: &HostPaths,
) -> (Vec<DropIn>, Vec<ConfiguredHandler>) {
    let mut drop_ins = Vec::new();
    // Symlinks in a directory under the host root resolve inside it; one
    // the operator put elsewhere is read as the system would.
    let (root, rel_dir) = match conf_dir.strip_prefix(&host.host_root) {
        Ok(rel) => (host.host_root.as_path(), rel),
        Err(_) => (Path::new("/"), conf_dir),
    };
    let files = match list_drop_ins(root, rel_dir) {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return (drop_ins, Vec::new()),
        Err(e) => {
            drop_ins.push(DropIn {
                path: conf_dir.display().to_string(),
                parsed: false,
                error: format!("cannot list the CRI drop-in directory: {}", e.reason()),
            });
            return (drop_ins, Vec::new());
        }
    };
    let (files, skipped) = if files.len() > MAX_DROP_IN_FILES {
        let skipped = files.len() - MAX_DROP_IN_FILES;
        (files[..MAX_DROP_IN_FILES].to_vec(), skipped)
    } else {
        (files, 0)
    };

    // ConfigPath files are read once each, even when several handlers or a
    // merged cri.toml name the same one.
    let mut cache: HashMap<String, ConfigLookup> = HashMap::new();
    let mut config_errors: Vec<DropIn> = Vec::new();
    let mut lookup = |config_path: &str| -> ConfigLookup {
        if let Some(hit) = cache.get(config_path) {
            return hit.clone();
        }
        let resolved = host.host(config_path);
        let read = hostio::read_in_root(&host.host_root, Path::new(config_path), MAX_DROP_IN_BYTES);
        let found = match read {
            Ok(text) => match runsc_platform(&text) {
                Ok(platform) => ConfigLookup {
                    exists: true,
                    platform,
                },
                Err(e) => {
                    config_errors.push(DropIn {
                        path: resolved.display().to_string(),
                        parsed: false,
                        error: format!("ConfigPath {config_path} is malformed: {e}"),
                    });
                    ConfigLookup {
                        exists: true,
                        platform: String::new(),
                    }
                }
            },
            Err(e) if e.is_not_found() => ConfigLookup::default(),
            Err(e) => {
                config_errors.push(DropIn {
                    path: resolved.display().to_string(),
                    parsed: false,
                    error: format!("ConfigPath {config_path} cannot be read: {}", e.reason()),
                });
                ConfigLookup {
                    exists: true,
                    platform: String::new(),
                }
            }
        };
        cache.insert(config_path.to_string(), found.clone());
        found
    };

    let mut merged: Vec<ConfiguredHandler> = Vec::new();
    for name in &files {
        let path = conf_dir.join(name).display().to_string();
        let parsed = hostio::read_in_root(root, &rel_dir.join(name), MAX_DROP_IN_BYTES)
            .map_err(|e| format!("cannot read: {}", e.reason()))
            .and_then(|text| handlers_from_drop_in(&text, &path, &mut lookup));
        match parsed {
            Ok(handlers) => {
                drop_ins.push(DropIn {
                    path,
                    parsed: true,
                    error: String::new(),
                });
                for h in handlers {
                    merge_handler(&mut merged, h);
                }
            }
            Err(error) => drop_ins.push(DropIn {
                path,
                parsed: false,
                error,
            }),
        }
    }
    if skipped > 0 {
        drop_ins.push(DropIn {
            path: conf_dir.display().to_string(),
            parsed: false,
            error: format!(
                "{skipped} more drop-ins were not read (limit {MAX_DROP_IN_FILES} files)"
            ),
        });
    }
    // A malformed ConfigPath file inside the directory already has its entry.
    for e in config_errors {
        match drop_ins.iter_mut().find(|d| d.path == e.path) {
            Some(d) if !d.parsed => {}
            Some(d) => {
                d.parsed = false;
                d.error = e.error;
            }
            None => drop_ins.push(e),
        }
    }
    (drop_ins, merged)
}

fn merge_handler(into: &mut Vec<ConfiguredHandler>, h: ConfiguredHandler) {
    let Some(prev) = into
        .iter_mut()
        .find(|p| p.name == h.name && p.plugin_key == h.plugin_key)
    else {
        into.push(h);
        return;
    };
    if !h.runtime_type.is_empty() {
        prev.runtime_type = h.runtime_type;
    }
    if !h.config_path.is_empty() {
        prev.config_path = h.config_path;
        prev.config_path_exists = h.config_path_exists;
        prev.platform = h.platform;
    }
}

/// The names of the `*.part` and `*.toml` entries of `root`/`rel_dir`,
/// sorted. Whatever they are: a FIFO or a directory among them is reported
/// when it is read, not skipped silently.
fn list_drop_ins(root: &Path, rel_dir: &Path) -> Result<Vec<PathBuf>, hostio::ReadError> {
    let dir = hostio::resolve_in_root(root, rel_dir)?;
    let io_err = |source| hostio::ReadError::Io {
        path: dir.clone(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(io_err)? {
        let name = PathBuf::from(entry.map_err(io_err)?.file_name());
        let wanted = name
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "part" || e == "toml");
        if wanted {
            files.push(name);
        }
    }
    files.sort();
    Ok(files)
}

/// A TOML parse error as one line: `line N, column M: message`.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or("");
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("TOML error at line {line}, column {column}: {msg}")
        }
        None => format!("TOML error: {msg}"),
    }
}

/// The runtime handlers one drop-in declares, under both CRI plugin keys.
///
/// Pure: `lookup` answers for each non-empty `options.ConfigPath` (a host
/// path) whether the file exists and which platform it sets. Values of the
/// wrong TOML type are errors, as they would be for containerd.
pub fn handlers_from_drop_in(
    text: &str,
    source: &str,
    lookup: &mut dyn FnMut(&str) -> ConfigLookup,
) -> Result<Vec<ConfiguredHandler>, String> {
    let doc: toml::Table = text.parse().map_err(|e| toml_error(text, &e))?;
    let Some(plugins) = doc.get("plugins") else {
        return Ok(Vec::new());
    };
    let plugins = as_table(plugins, "plugins")?;
    let mut out = Vec::new();
    for key in PLUGIN_KEYS {
        let Some(plugin) = plugins.get(key) else {
            continue;
        };
        let at = format!("plugins.\"{key}\"");
        let plugin = as_table(plugin, &at)?;
        let Some(containerd) = plugin.get("containerd") else {
            continue;
        };
        let at = format!("{at}.containerd");
        let containerd = as_table(containerd, &at)?;
        let Some(runtimes) = containerd.get("runtimes") else {
            continue;
        };
        let at = format!("{at}.runtimes");
        for (name, runtime) in as_table(runtimes, &at)? {
            let at = format!("{at}.{name}");
            let runtime = as_table(runtime, &at)?;
            let runtime_type = opt_str(runtime, "runtime_type", &at)?;
            let config_path = match runtime.get("options") {
                Some(opts) => {
                    let at = format!("{at}.options");
                    opt_str(as_table(opts, &at)?, "ConfigPath", &at)?
                }
                None => String::new(),
            };
            let found = if config_path.is_empty() {
                ConfigLookup::default()
            } else {
                lookup(&config_path)
            };
            out.push(ConfiguredHandler {
                name: name.clone(),
                plugin_key: key.to_string(),
                runtime_type,
                config_path,
                config_path_exists: found.exists,
                platform: found.platform,
                source: source.to_string(),
            });
        }
    }
    Ok(out)
}

/// `[runsc_config] platform` of a runsc shim config file; empty when unset.
pub fn runsc_platform(text: &str) -> Result<String, String> {
    let doc: toml::Table = text.parse().map_err(|e| toml_error(text, &e))?;
    let Some(cfg) = doc.get("runsc_config") else {
        return Ok(String::new());
    };
    opt_str(as_table(cfg, "runsc_config")?, "platform", "runsc_config")
}

fn as_table<'a>(v: &'a toml::Value, at: &str) -> Result<&'a toml::Table, String> {
    v.as_table()
        .ok_or_else(|| format!("{at} is a {}, not a table", v.type_str()))
}

fn opt_str(t: &toml::Table, key: &str, at: &str) -> Result<String, String> {
    match t.get(key) {
        None => Ok(String::new()),
        Some(toml::Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(format!("{at}.{key} is a {}, not a string", v.type_str())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::report::names::RUNSC_RUNTIME_TYPE;
    use proptest::prelude::*;
    const TALOS_PART: &str = r#"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = "/etc/cri/conf.d/runsc.toml"
"#;

    fn no_lookup(_: &str) -> ConfigLookup {
        ConfigLookup::default()
    }

    #[test]
    fn talos_part_declares_runsc() {
        let mut asked = Vec::new();
        let mut lookup = |p: &str| {
            asked.push(p.to_string());
            ConfigLookup {
                exists: true,
                platform: "kvm".into(),
            }
        };
        let hs = handlers_from_drop_in(TALOS_PART, "/x/10-gvisor.part", &mut lookup).unwrap();
        assert_eq!(asked, ["/etc/cri/conf.d/runsc.toml"]);
        assert_eq!(
            hs,
            [ConfiguredHandler {
                name: "runsc".into(),
                plugin_key: PLUGIN_CRI_V1_RUNTIME.into(),
                runtime_type: RUNSC_RUNTIME_TYPE.into(),
                config_path: "/etc/cri/conf.d/runsc.toml".into(),
                config_path_exists: true,
                platform: "kvm".into(),
                source: "/x/10-gvisor.part".into(),
            }]
        );
    }

    #[test]
    fn containerd_1_key_and_no_options() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\nruntime_type = \"io.containerd.runsc.v1\"\n";
        let hs = handlers_from_drop_in(text, "s", &mut no_lookup).unwrap();
        assert_eq!(hs.len(), 1);
        assert_eq!(hs[0].plugin_key, PLUGIN_GRPC_V1_CRI);
        assert_eq!(hs[0].config_path, "");
        assert!(!hs[0].config_path_exists);
    }

    #[test]
    fn unrelated_toml_declares_nothing() {
        for text in [
            "",
            "[runsc_config]\n  platform = \"kvm\"\n",
            "[debug]\n level = \"debug\"\n[plugins.\"io.containerd.runtime.v1.linux\"]\n shim_debug = true\n",
            "[plugins.\"io.containerd.cri.v1.images\".registry]\nconfig_path = \"/etc/cri/conf.d/hosts\"\n",
        ] {
            assert_eq!(handlers_from_drop_in(text, "s", &mut no_lookup), Ok(vec![]), "{text}");
        }
    }

    #[test]
    fn malformed_and_mistyped_drop_ins_are_one_line_errors() {
        let cases = [
            ("[plugins.\"io.containerd.cri.v1.runtime\"\n", "line 1"),
            ("a = 1\nb = = 2\n", "line 2"),
            ("plugins = 3\n", "plugins is a integer, not a table"),
            (
                "[plugins.\"io.containerd.cri.v1.runtime\".containerd]\nruntimes = \"x\"\n",
                "runtimes is a string, not a table",
            ),
            (
                "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runsc]\nruntime_type = 1\n",
                "runsc.runtime_type is a integer, not a string",
            ),
            (
                "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc.options]\nConfigPath = [\"a\"]\n",
                "options.ConfigPath is a array, not a string",
            ),
        ];
        for (text, needle) in cases {
            let err = handlers_from_drop_in(text, "s", &mut no_lookup).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err:?}");
        }
    }

    #[test]
    fn runsc_config_platform() {
        assert_eq!(runsc_platform("[runsc_config]\n").unwrap(), "");
        assert_eq!(runsc_platform("").unwrap(), "");
        assert_eq!(
            runsc_platform("[runsc_config]\n  platform = \"kvm\"\n").unwrap(),
            "kvm"
        );
        assert_eq!(
            runsc_platform("log_level = \"debug\"\n[runsc_config]\n  debug = \"true\"\n").unwrap(),
            ""
        );
        assert!(runsc_platform("[runsc_config]\nplatform = 1\n").is_err());
        assert!(runsc_platform("runsc_config = 1\n").is_err());
        assert!(runsc_platform("[runsc_config\n").is_err());
    }

    /// A TOML basic string for printable ASCII.
    fn toml_quote(s: &str) -> String {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    }

    fn toml_key() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_-]{0,15}"
    }

    fn toml_str() -> impl Strategy<Value = String> {
        // Any printable text, including quotes and backslashes TOML must escape.
        "[ -~]{0,40}"
    }

    proptest! {
        #[test]
        fn walking_never_panics(text in "\\PC{0,400}") {
            let _ = handlers_from_drop_in(&text, "s", &mut no_lookup);
            let _ = runsc_platform(&text);
        }

        #[test]
        fn mutated_talos_part_never_panics(cut in 0usize..400, insert in "[\\[\\]\"=. a-z\n]{0,8}") {
            let mut text = TALOS_PART.to_string();
            let at = cut.min(text.len());
            text.insert_str(at, &insert);
            if let Err(e) = handlers_from_drop_in(&text, "s", &mut no_lookup) {
                prop_assert!(!e.contains('\n'));
            }
        }

        /// Every runtime written under either key is found with its fields,
        /// and ConfigPath is looked up exactly for the handlers that set one.
        #[test]
        fn written_handlers_are_found(
            runtimes in proptest::collection::btree_map(
                toml_key(),
                (0usize..2, toml_str(), proptest::option::of(toml_str())),
                0..6,
            )
        ) {
            let mut text = String::new();
            for (name, (key, rtype, config)) in &runtimes {
                let key = PLUGIN_KEYS[*key];
                text.push_str(&format!(
                    "[plugins.\"{key}\".containerd.runtimes.\"{name}\"]\nruntime_type = {}\n",
                    toml_quote(rtype)
                ));
                if let Some(c) = config {
                    text.push_str(&format!(
                        "[plugins.\"{key}\".containerd.runtimes.\"{name}\".options]\nConfigPath = {}\n",
                        toml_quote(c)
                    ));
                }
            }
            let mut asked = Vec::new();
            let mut lookup = |p: &str| {
                asked.push(p.to_string());
                ConfigLookup { exists: p.len().is_multiple_of(2), platform: format!("p{}", p.len()) }
            };
            let found = handlers_from_drop_in(&text, "src", &mut lookup).unwrap();
            prop_assert_eq!(found.len(), runtimes.len());
            for (name, (key, rtype, config)) in &runtimes {
                let h = found.iter().find(|h| &h.name == name).unwrap();
                prop_assert_eq!(&h.plugin_key, PLUGIN_KEYS[*key]);
                prop_assert_eq!(&h.runtime_type, rtype);
                prop_assert_eq!(&h.source, "src");
                let c = config.clone().unwrap_or_default();
                prop_assert_eq!(&h.config_path, &c);
                if c.is_empty() {
                    prop_assert!(!h.config_path_exists);
                    prop_assert_eq!(&h.platform, "");
                } else {
                    prop_assert_eq!(h.config_path_exists, c.len().is_multiple_of(2));
                    prop_assert_eq!(&h.platform, &format!("p{}", c.len()));
                }
            }
            let wanted = runtimes.values().filter(|(_, _, c)| c.as_ref().is_some_and(|c| !c.is_empty())).count();
            prop_assert_eq!(asked.len(), wanted);
        }
    }
}
