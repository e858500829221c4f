//! A kubeconfig, parsed (pure): the current context's server, CA and
//! credential, each inline or as a file path (relative paths are relative
//! to the kubeconfig's directory, as client-go resolves them:
//! kubernetes/client-go `tools/clientcmd/loader.go` ResolveLocalPaths).
//! `exec` and `auth-provider` credentials run programs or talk to cloud
//! services; the agent refuses them with one line.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Where a piece of PEM comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Material {
    Inline(Vec<u8>),
    File(PathBuf),
}

/// The credential the agent presents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// A client certificate and its key (kubelet's: one PEM file for both).
    Certificate {
        cert: Material,
        key: Material,
    },
    /// A bearer token, inline or re-read from a file (`tokenFile`).
    Token(String),
    TokenFile(PathBuf),
    /// None: the API server must allow anonymous requests (tests only).
    Anonymous,
}

/// The current context, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubeconfig {
    /// `https://HOST[:PORT][/PREFIX]`, split.
    pub host: String,
    pub port: u16,
    /// Path prefix before `/api` (no trailing `/`; empty for none).
    pub prefix: String,
    /// `None`: no CA given. The agent refuses that (it would need the
    /// system roots, which a Talos extension container does not have).
    pub ca: Option<Material>,
    /// `tls-server-name`: the name to verify instead of the host.
    pub tls_server_name: Option<String>,
    pub auth: Auth,
}

/// Why a kubeconfig cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    #[error("the kubeconfig is not valid YAML: {0}")]
    Syntax(String),
    #[error("the kubeconfig names no current-context and has more than one context")]
    NoContext,
    #[error("the kubeconfig has no context {0:?}")]
    MissingContext(String),
    #[error("the kubeconfig has no cluster {0:?}")]
    MissingCluster(String),
    #[error("the kubeconfig has no user {0:?}")]
    MissingUser(String),
    #[error("the kubeconfig's server {0:?} is not an https:// URL")]
    Server(String),
    #[error("the kubeconfig's cluster gives no certificate-authority(-data); the agent verifies the API server against it")]
    NoCa,
    #[error("the kubeconfig's cluster sets insecure-skip-tls-verify; the agent always verifies the API server")]
    Insecure,
    #[error("the kubeconfig's user uses {0}, which the agent does not run: use a client certificate, token or tokenFile")]
    Unsupported(&'static str),
    #[error("the kubeconfig's user gives a client certificate without its key, or a key without its certificate")]
    HalfIdentity,
    #[error("the kubeconfig's {0} is not valid base64")]
    Base64(&'static str),
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Raw {
    #[serde(default)]
    current_context: String,
    #[serde(default)]
    clusters: Vec<Named<RawCluster>>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<Named<RawContext>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context")]
    value: T,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: RawUser,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct RawCluster {
    #[serde(default)]
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    tls_server_name: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
struct RawContext {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct RawUser {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(alias = "tokenFile")]
    token_file: Option<String>,
    exec: Option<serde_json::Value>,
    auth_provider: Option<serde_json::Value>,
    username: Option<String>,
}

fn decode(what: &'static str, b64: &str) -> Result<Vec<u8>, KubeconfigError> {
    base64_decode(b64).ok_or(KubeconfigError::Base64(what))
}

/// Standard base64 (whitespace ignored, as YAML folds long values), with
/// the crate already in the binary (rcgen's PEM encoder uses it).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let compact: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}

fn material(
    what: &'static str,
    data: Option<&str>,
    path: Option<&str>,
    dir: &Path,
) -> Result<Option<Material>, KubeconfigError> {
    if let Some(d) = data.filter(|d| !d.trim().is_empty()) {
        return Ok(Some(Material::Inline(decode(what, d)?)));
    }
    Ok(path
        .filter(|p| !p.is_empty())
        .map(|p| Material::File(dir.join(p))))
}

/// Splits `https://HOST[:PORT][/PREFIX]` (IPv6 hosts in brackets).
fn split_server(server: &str) -> Option<(String, u16, String)> {
    let rest = server.strip_prefix("https://")?;
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => 443,
            None => return None,
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), 443),
        }
    };
    (!host.is_empty() && !authority.contains('@')).then(|| (host, port, prefix.to_string()))
}

/// The server URL for a message, without any `user:password@` in it.
fn redact_userinfo(server: &str) -> String {
    let shown = match server.rfind('@') {
        Some(i) => format!("…{}", &server[i..]),
        None => server.to_string(),
    };
    crate::text::clean_capped(&shown, 120)
}

/// Parses a kubeconfig's text; `dir` is its directory (for relative
/// paths). Nothing is read here: files are the loader's.
pub fn parse(text: &str, dir: &Path) -> Result<Kubeconfig, KubeconfigError> {
    // The binary's one YAML parser: the desired-state library's, into JSON
    // values (its errors quote nothing of the input, which holds tokens),
    // then serde_json maps the value onto the raw types. Deserializing
    // them straight from YAML instantiated serde_yaml_ng's deserializer a
    // second time, for these types (docs/developer/binary.md).
    let mut docs = crate::desired::yaml::documents(text).map_err(KubeconfigError::Syntax)?;
    let doc = match docs.len() {
        0 => serde_json::Value::Null,
        1 => docs.remove(0),
        _ => {
            return Err(KubeconfigError::Syntax(
                "more than one YAML document".into(),
            ))
        }
    };
    // serde_json's message may quote a value: say only that it is no kubeconfig.
    let raw: Raw = if doc.is_null() {
        Raw::default()
    } else {
        serde_json::from_value(doc)
            .map_err(|_| KubeconfigError::Syntax("not a kubeconfig".into()))?
    };
    let context = if raw.current_context.is_empty() {
        match raw.contexts.as_slice() {
            [only] => &only.value,
            _ => return Err(KubeconfigError::NoContext),
        }
    } else {
        &raw.contexts
            .iter()
            .find(|c| c.name == raw.current_context)
            .ok_or_else(|| KubeconfigError::MissingContext(raw.current_context.clone()))?
            .value
    };
    let cluster = &raw
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .ok_or_else(|| KubeconfigError::MissingCluster(context.cluster.clone()))?
        .value;
    let user = raw.users.iter().find(|u| u.name == context.user);
    let user = match (user, context.user.is_empty()) {
        (Some(u), _) => &u.user,
        (None, true) => &RawUser::default(),
        (None, false) => return Err(KubeconfigError::MissingUser(context.user.clone())),
    };
    let (host, port, prefix) = split_server(&cluster.server)
        .ok_or_else(|| KubeconfigError::Server(redact_userinfo(&cluster.server)))?;
    if cluster.insecure_skip_tls_verify {
        return Err(KubeconfigError::Insecure);
    }
    let ca = material(
        "certificate-authority-data",
        cluster.certificate_authority_data.as_deref(),
        cluster.certificate_authority.as_deref(),
        dir,
    )?;
    if ca.is_none() {
        return Err(KubeconfigError::NoCa);
    }
    if user.exec.is_some() {
        return Err(KubeconfigError::Unsupported("an exec plugin"));
    }
    if user.auth_provider.is_some() {
        return Err(KubeconfigError::Unsupported("an auth-provider"));
    }
    if user.username.is_some() {
        return Err(KubeconfigError::Unsupported("basic authentication"));
    }
    let cert = material(
        "client-certificate-data",
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
        dir,
    )?;
    let key = material(
        "client-key-data",
        user.client_key_data.as_deref(),
        user.client_key.as_deref(),
        dir,
    )?;
    let auth = match (cert, key) {
        (Some(cert), Some(key)) => Auth::Certificate { cert, key },
        (Some(_), None) | (None, Some(_)) => return Err(KubeconfigError::HalfIdentity),
        (None, None) => match (&user.token, &user.token_file) {
            (Some(t), _) if !t.is_empty() => Auth::Token(t.clone()),
            (_, Some(f)) if !f.is_empty() => Auth::TokenFile(dir.join(f)),
            _ => Auth::Anonymous,
        },
    };
    Ok(Kubeconfig {
        host,
        port,
        prefix,
        ca,
        tls_server_name: cluster.tls_server_name.clone().filter(|n| !n.is_empty()),
        auth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "/etc/kubernetes";

    /// Talos's kubelet kubeconfig, as machined writes it (the key and the
    /// certificate in one rotated PEM).
    const KUBELET: &str = "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: aGVsbG8=
    server: https://127.0.0.1:7445
  name: local
contexts:
- context:
    cluster: local
    namespace: default
    user: kubelet
  name: kubelet@local
current-context: kubelet@local
users:
- name: kubelet
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
";

    fn parsed(t: &str) -> Result<Kubeconfig, KubeconfigError> {
        parse(t, Path::new(DIR))
    }

    #[test]
    fn the_kubelet_kubeconfig() {
        let k = parsed(KUBELET).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (k.host.as_str(), k.port, k.prefix.as_str()),
            ("127.0.0.1", 7445, "")
        );
        assert_eq!(k.ca, Some(Material::Inline(b"hello".to_vec())));
        let pem = Material::File("/var/lib/kubelet/pki/kubelet-client-current.pem".into());
        assert_eq!(
            k.auth,
            Auth::Certificate {
                cert: pem.clone(),
                key: pem
            }
        );
    }

    fn replace(from: &str, to: &str) -> String {
        KUBELET.replace(from, to)
    }

    #[test]
    fn credentials_and_paths() {
        let token = replace(
            "    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n",
            "    token: abc\n",
        );
        assert_eq!(
            parsed(&token).map(|k| k.auth),
            Ok(Auth::Token("abc".into()))
        );
        let file = replace(
            "    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n",
            "    tokenFile: token\n",
        );
        assert_eq!(
            parsed(&file).map(|k| k.auth),
            Ok(Auth::TokenFile("/etc/kubernetes/token".into()))
        );
        let rel_ca = replace(
            "certificate-authority-data: aGVsbG8=",
            "certificate-authority: pki/ca.crt",
        );
        assert_eq!(
            parsed(&rel_ca).map(|k| k.ca),
            Ok(Some(Material::File("/etc/kubernetes/pki/ca.crt".into())))
        );
        let inline = replace(
            "    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n",
            "    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n",
        );
        assert_eq!(
            parsed(&inline).map(|k| k.auth),
            Ok(Auth::Certificate {
                cert: Material::Inline(b"cert".to_vec()),
                key: Material::Inline(b"key".to_vec())
            })
        );
        let v6 = replace("https://127.0.0.1:7445", "https://[::1]:6443/prefix/");
        let k = parsed(&v6).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (k.host.as_str(), k.port, k.prefix.as_str()),
            ("::1", 6443, "/prefix")
        );
        let default_port = replace("https://127.0.0.1:7445", "https://api.example.com");
        assert_eq!(parsed(&default_port).map(|k| k.port), Ok(443));
    }

    #[test]
    fn refusals_are_one_line() {
        let user_block = "    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n";
        let cases: Vec<(String, &str)> = vec![
            (replace(user_block, "    exec:\n      command: aws\n"), "exec plugin"),
            (replace(user_block, "    auth-provider:\n      name: gcp\n"), "auth-provider"),
            (replace(user_block, "    client-certificate: /x.pem\n"), "without its key"),
            (replace("https://127.0.0.1:7445", "http://127.0.0.1:7445"), "not an https"),
            (replace("https://127.0.0.1:7445", "https://u:secret@h:1"), "not an https"),
            (replace("    certificate-authority-data: aGVsbG8=\n", ""), "certificate-authority"),
            (replace("    certificate-authority-data: aGVsbG8=\n", "    insecure-skip-tls-verify: true\n    certificate-authority-data: aGVsbG8=\n"), "insecure-skip-tls-verify"),
            (replace("current-context: kubelet@local", "current-context: other"), "no context"),
            (replace("certificate-authority-data: aGVsbG8=", "certificate-authority-data: '***'"), "base64"),
            ("token: [secret-token\n".to_string(), "not valid YAML"),
            ("clusters: 3\n".to_string(), "not a kubeconfig"),
            ("users:\n- name: u\n  user:\n    token: [secret]\n".to_string(), "not a kubeconfig"),
            ("a: 1\n---\nb: 2\n".to_string(), "more than one YAML document"),
        ];
        for (text, want) in cases {
            let e = parsed(&text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "{want}: {e}");
            assert!(!e.contains('\n') && !e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn base64_matches_known_values() {
        for (enc, dec) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYmFy", "foobar"),
            ("Zm9v\nYmFy", "foobar"),
        ] {
            assert_eq!(base64_decode(enc).as_deref(), Some(dec.as_bytes()), "{enc}");
        }
        assert_eq!(base64_decode("Zm9v!"), None);
        assert_eq!(base64_decode("Zm8"), None);
    }
}
