//! The workload cluster's kubeconfig, from the management cluster's
//! `<cluster>-kubeconfig` Secret (key `value`), as Cluster API writes it.
//! Pure: text in, a checked [`Kubeconfig`] or one line out.
//!
//! Only inline credentials are accepted (CA data, client certificate and key
//! data, a token, basic auth). `exec` and `auth-provider` are refused —
//! whoever can write that Secret could otherwise make the controller run a
//! command — and so are file paths (`certificate-authority`,
//! `client-certificate`, `client-key`, `tokenFile`): they would read the
//! controller's own files. Errors never quote the text: it carries
//! credentials.
//!
//! Transport: a server spoken to in plain `http://`, or with
//! `insecure-skip-tls-verify`, is refused too unless the operator allows it
//! (`--allow-insecure-workload-kubeconfig`): the controller would send the
//! Secret's credentials to, and take Node verdicts from, whoever answers on
//! the way. The refusal becomes the Machines' condition reason
//! (`WorkloadKubeconfigRefused`) and no request is made.

use kube::config::Kubeconfig;
use thiserror::Error;

/// The Secret key Cluster API stores the kubeconfig under
/// (`util/secret`'s `KubeconfigDataName`).
pub const SECRET_KEY: &str = "value";

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum KubeconfigError {
    #[error("Secret {0} has no data key \"value\"")]
    NoValue(String),
    #[error("Secret {0}: \"value\" is not UTF-8 text")]
    NotText(String),
    #[error("Secret {0}: \"value\" is not a kubeconfig")]
    NotKubeconfig(String),
    #[error(
        "Secret {secret}: user {user} uses {what}; only inline credentials are accepted \
         (whoever can write the Secret could otherwise make the controller run a command or read its files)"
    )]
    Refused {
        secret: String,
        user: String,
        what: &'static str,
    },
    #[error("Secret {secret}: cluster {cluster} uses {what}; only inline certificate-authority-data is accepted")]
    RefusedCluster {
        secret: String,
        cluster: String,
        what: &'static str,
    },
    #[error("Secret {0}: the kubeconfig names no cluster server")]
    NoServer(String),
    #[error(
        "Secret {secret}: cluster {cluster} {what}; refused unless the controller runs with \
         --allow-insecure-workload-kubeconfig"
    )]
    Insecure {
        secret: String,
        cluster: String,
        what: &'static str,
    },
}

/// What the operator allows of a workload kubeconfig's transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transport {
    /// `--allow-insecure-workload-kubeconfig`: plain HTTP and
    /// `insecure-skip-tls-verify` are accepted.
    pub allow_insecure: bool,
}

/// Parses and checks the Secret's `value`. `secret` is `namespace/name`
/// (for messages only).
pub fn parse(
    secret: &str,
    value: Option<&[u8]>,
    transport: Transport,
) -> Result<Kubeconfig, KubeconfigError> {
    let value = value.ok_or_else(|| KubeconfigError::NoValue(secret.into()))?;
    let text = std::str::from_utf8(value).map_err(|_| KubeconfigError::NotText(secret.into()))?;
    // kube's own YAML error could quote the text; it is not passed on.
    let kc =
        Kubeconfig::from_yaml(text).map_err(|_| KubeconfigError::NotKubeconfig(secret.into()))?;
    check(secret, &kc, transport)?;
    Ok(kc)
}

/// Refuses every way a kubeconfig can run a command or read a file, in any
/// of its users and clusters (not only the current context's: a context
/// switch must not be a way in).
pub fn check(secret: &str, kc: &Kubeconfig, transport: Transport) -> Result<(), KubeconfigError> {
    for u in &kc.auth_infos {
        let Some(a) = &u.auth_info else { continue };
        let what = if a.exec.is_some() {
            Some("exec")
        } else if a.auth_provider.is_some() {
            Some("auth-provider")
        } else if a.client_certificate.is_some() {
            Some("a client-certificate file path")
        } else if a.client_key.is_some() {
            Some("a client-key file path")
        } else if a.token_file.is_some() {
            Some("a tokenFile path")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(KubeconfigError::Refused {
                secret: secret.into(),
                user: u.name.clone(),
                what,
            });
        }
    }
    let mut any_server = false;
    for c in &kc.clusters {
        let Some(cl) = &c.cluster else { continue };
        if cl.certificate_authority.is_some() {
            return Err(KubeconfigError::RefusedCluster {
                secret: secret.into(),
                cluster: c.name.clone(),
                what: "a certificate-authority file path",
            });
        }
        if cl.proxy_url.is_some() {
            return Err(KubeconfigError::RefusedCluster {
                secret: secret.into(),
                cluster: c.name.clone(),
                what: "a proxy-url",
            });
        }
        if !transport.allow_insecure {
            let plain = cl
                .server
                .as_deref()
                .is_some_and(|s| !s.trim_start().to_ascii_lowercase().starts_with("https://"));
            let what = if plain {
                Some("is not spoken to over https://")
            } else if cl.insecure_skip_tls_verify == Some(true) {
                Some("sets insecure-skip-tls-verify")
            } else {
                None
            };
            if let Some(what) = what {
                return Err(KubeconfigError::Insecure {
                    secret: secret.into(),
                    cluster: c.name.clone(),
                    what,
                });
            }
        }
        any_server |= cl.server.as_deref().is_some_and(|s| !s.is_empty());
    }
    if !any_server {
        return Err(KubeconfigError::NoServer(secret.into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kc(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: w, user: u}}\n\
             clusters:\n- name: w\n  cluster:\n    server: https://127.0.0.1:6443\n{cluster}\
             users:\n- name: u\n  user:\n{user}"
        )
    }

    #[test]
    fn table() {
        let ca = "    certificate-authority-data: Zm9v\n";
        let cases: Vec<(&str, String, Result<(), &str>)> = vec![
            ("token", kc(ca, "    token: s3cr3t\n"), Ok(())),
            ("cert data", kc(ca, "    client-certificate-data: Zm9v\n    client-key-data: YmFy\n"), Ok(())),
            ("exec", kc(ca, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, id]\n"), Err("exec")),
            ("auth-provider", kc(ca, "    auth-provider:\n      name: oidc\n      config: {}\n"), Err("auth-provider")),
            ("cert file", kc(ca, "    client-certificate: /etc/passwd\n    client-key-data: YmFy\n"), Err("client-certificate file")),
            ("key file", kc(ca, "    client-certificate-data: Zm9v\n    client-key: /root/key\n"), Err("client-key file")),
            ("token file", kc(ca, "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"), Err("tokenFile")),
            ("ca file", kc("    certificate-authority: /etc/ssl/ca.pem\n", "    token: t\n"), Err("certificate-authority file")),
            ("proxy", kc("    proxy-url: http://127.0.0.1:3128\n", "    token: t\n"), Err("proxy-url")),
            ("insecure", kc("    insecure-skip-tls-verify: true\n", "    token: s3cr3t\n"), Err("insecure-skip-tls-verify")),
            ("plain http", kc(ca, "    token: s3cr3t\n").replace("https://", "http://"), Err("over https://")),
        ];
        for (name, text, want) in cases {
            let got = parse(
                "ns/w-kubeconfig",
                Some(text.as_bytes()),
                Transport::default(),
            );
            match (got, want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(w)) => {
                    let line = e.to_string();
                    assert!(line.contains(w), "{name}: {line}");
                    assert!(!line.contains('\n'), "{name}: {line}");
                    assert!(
                        !line.contains("s3cr3t") && !line.contains("YmFy"),
                        "{name}: {line}"
                    );
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// The operator's leave accepts the transport, never the rest.
    #[test]
    fn allowed_insecure_transport() {
        let allow = Transport {
            allow_insecure: true,
        };
        let insecure = kc("    insecure-skip-tls-verify: true\n", "    token: t\n");
        assert!(parse("a/b", Some(insecure.as_bytes()), allow).is_ok());
        let plain = kc("    certificate-authority-data: Zm9v\n", "    token: t\n")
            .replace("https://", "http://");
        assert!(parse("a/b", Some(plain.as_bytes()), allow).is_ok());
        let exec = kc(
            "",
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: id\n",
        );
        assert!(parse("a/b", Some(exec.as_bytes()), allow).is_err());
    }

    #[test]
    fn bad_values() {
        assert_eq!(
            parse("a/b", None, Transport::default()).err(),
            Some(KubeconfigError::NoValue("a/b".into()))
        );
        assert_eq!(
            parse("a/b", Some(&[0xff, 0xfe]), Transport::default()).err(),
            Some(KubeconfigError::NotText("a/b".into()))
        );
        let e = parse("a/b", Some(b"token: s3cr3t: ["), Transport::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("not a kubeconfig") && !e.contains("s3cr3t"),
            "{e}"
        );
        let no_server = "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n";
        assert_eq!(
            parse("a/b", Some(no_server.as_bytes()), Transport::default()).err(),
            Some(KubeconfigError::NoServer("a/b".into()))
        );
    }
}
