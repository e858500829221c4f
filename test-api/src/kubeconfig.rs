//! Kubeconfig files for tests, in the shapes real clients meet: everything
//! inline, certificate and key in files, kubelet style (certificate and key
//! in one PEM behind an absolute symlink, as kubelet's certificate manager
//! keeps `kubelet-client-current.pem`), and a bearer token. The text holds
//! credentials: tests write it to a private temporary directory and never log it.

use std::io;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use crate::proxy::ClientCert;

fn b64(s: &str) -> String {
    STANDARD.encode(s.as_bytes())
}

fn doc(server: &str, cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test-api\n  cluster:\n    server: {server}\n{cluster}users:\n- name: test-user\n  user:\n{user}contexts:\n- name: test\n  context:\n    cluster: test-api\n    user: test-user\ncurrent-context: test\npreferences: {{}}\n"
    )
}

pub fn inline(server: &str, ca_pem: &str, cred: &ClientCert) -> String {
    doc(
        server,
        &format!("    certificate-authority-data: {}\n", b64(ca_pem)),
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&cred.cert_pem),
            b64(&cred.key_pem)
        ),
    )
}

pub fn token(server: &str, ca_pem: &str, token: &str) -> String {
    doc(
        server,
        &format!("    certificate-authority-data: {}\n", b64(ca_pem)),
        &format!("    token: {token}\n"),
    )
}

fn write_private(path: &Path, contents: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents.as_bytes())
}

fn absolute(dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    std::fs::canonicalize(dir)
}

/// `dir/ca.crt`, `dir/client.crt`, `dir/client.key` and `dir/kubeconfig`
/// naming them; returns the kubeconfig's path.
pub fn files(dir: &Path, server: &str, ca_pem: &str, cred: &ClientCert) -> io::Result<PathBuf> {
    let dir = absolute(dir)?;
    let (ca, crt, key) = (
        dir.join("ca.crt"),
        dir.join("client.crt"),
        dir.join("client.key"),
    );
    write_private(&ca, ca_pem)?;
    write_private(&crt, &cred.cert_pem)?;
    write_private(&key, &cred.key_pem)?;
    let text = doc(
        server,
        &format!("    certificate-authority: {}\n", ca.display()),
        &format!(
            "    client-certificate: {}\n    client-key: {}\n",
            crt.display(),
            key.display()
        ),
    );
    let path = dir.join("kubeconfig");
    write_private(&path, &text)?;
    Ok(path)
}

/// Talos/kubelet layout: `dir/pki/kubelet-client-<serial>.pem` holds
/// certificate and key, `dir/pki/kubelet-client-current.pem` is an absolute
/// symlink to it, and `dir/kubeconfig-kubelet` names the symlink for both.
/// Called again with a new certificate, it rotates: a new PEM, the symlink
/// replaced. Returns the kubeconfig's path.
pub fn kubelet_style(
    dir: &Path,
    server: &str,
    ca_pem: &str,
    cred: &ClientCert,
) -> io::Result<PathBuf> {
    let dir = absolute(dir)?;
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki)?;
    let pem = pki.join(format!("kubelet-client-{}.pem", cred.serial));
    write_private(&pem, &format!("{}{}", cred.cert_pem, cred.key_pem))?;
    let current = pki.join("kubelet-client-current.pem");
    let tmp = pki.join(format!(".kubelet-client-current.{}.tmp", cred.serial));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&pem, &tmp)?;
    std::fs::rename(&tmp, &current)?;
    let ca = dir.join("ca.crt");
    write_private(&ca, ca_pem)?;
    let text = doc(
        server,
        &format!("    certificate-authority: {}\n", ca.display()),
        &format!(
            "    client-certificate: {}\n    client-key: {}\n",
            current.display(),
            current.display()
        ),
    );
    let path = dir.join("kubeconfig-kubelet");
    write_private(&path, &text)?;
    Ok(path)
}
