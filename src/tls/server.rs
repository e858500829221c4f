//! The server's TLS configuration, loaded from PEM files and swappable at
//! run time.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rustls_pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme,
};
use tokio_rustls::TlsAcceptor;

use super::error::TlsError;
use super::pem::{check_pair, parse_certs, parse_key, provider, read_pem_file, root_store};

/// The PEM files the server reads (the `--tls-cert`, `--tls-key` and
/// `--client-ca` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key of the leaf (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA bundle client certificates must chain to. `None` = no client
    /// authentication (TLS only, anyone may connect).
    pub client_ca: Option<PathBuf>,
}

/// The ALPN protocols offered: gRPC needs HTTP/2, and tonic's client refuses
/// a server that does not select it.
const ALPN: &[&[u8]] = &[b"h2"];

/// The metrics port speaks HTTP/1.1 only (Prometheus scrapes with it).
const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];

/// A reloadable rustls server configuration. Cheap to clone (shared).
///
/// Each new connection takes the configuration current at its accept, so a
/// reload affects new connections only; established ones keep theirs.
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<Inner>,
}

struct Inner {
    paths: TlsPaths,
    /// With a client CA: the DNS or URI SANs of which a client certificate
    /// must carry one (empty: any certificate from the CA).
    client_names: Arc<[String]>,
    /// The flag that gave `client_names`, for the refusal's log line.
    names_flag: &'static str,
    alpn: &'static [&'static [u8]],
    current: RwLock<Arc<ServerConfig>>,
    generation: AtomicU64,
    /// The files' identities as of the last load attempt (good or bad), so
    /// the poller retries only after something changed again and a broken
    /// file is reported once, not every poll.
    seen: Mutex<Stamps>,
    /// Serialises reloads so two racing ones cannot install an older read.
    reloading: Mutex<()>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("paths", &self.inner.paths)
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads and checks the files; fails with a one-line error naming the
    /// file at fault.
    pub fn load(paths: TlsPaths) -> Result<Self, TlsError> {
        Self::load_for_clients(paths, Vec::new())
    }

    /// [`ServerTls::load`], accepting only client certificates with one of
    /// `client_names` as a DNS or URI subject alternative name (the CN does
    /// not count); others are refused in the handshake with an
    /// `access_denied` alert. Empty: any certificate from the client CA.
    pub fn load_for_clients(paths: TlsPaths, client_names: Vec<String>) -> Result<Self, TlsError> {
        Self::load_with(paths, client_names, "--client-name", ALPN)
    }

    /// The metrics port's configuration: [`ServerTls::load_for_clients`]
    /// with the `--metrics-client-name` names, offering HTTP/1.1 instead
    /// of HTTP/2.
    pub fn load_for_scrapers(paths: TlsPaths, client_names: Vec<String>) -> Result<Self, TlsError> {
        Self::load_with(paths, client_names, "--metrics-client-name", ALPN_HTTP1)
    }

    fn load_with(
        paths: TlsPaths,
        client_names: Vec<String>,
        names_flag: &'static str,
        alpn: &'static [&'static [u8]],
    ) -> Result<Self, TlsError> {
        let client_names: Arc<[String]> = client_names.into();
        let stamps = Stamps::of(&paths);
        let config = build_config(&paths, &client_names, names_flag, alpn)?;
        Ok(Self {
            inner: Arc::new(Inner {
                paths,
                client_names,
                names_flag,
                alpn,
                current: RwLock::new(Arc::new(config)),
                generation: AtomicU64::new(1),
                seen: Mutex::new(stamps),
                reloading: Mutex::new(()),
            }),
        })
    }

    /// Re-reads the files and, if they are good, swaps the configuration in.
    /// On error the previous configuration stays in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        let _one_at_a_time = self
            .inner
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Stat before reading: a write landing in between then shows up as a
        // change on the next poll and is loaded again, never missed.
        let stamps = Stamps::of(&self.inner.paths);
        *self
            .inner
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = stamps;
        let config = build_config(
            &self.inner.paths,
            &self.inner.client_names,
            self.inner.names_flag,
            self.inner.alpn,
        )?;
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        let generation = self.inner.generation.fetch_add(1, Ordering::AcqRel) + 1;
        tracing::info!(
            cert = %self.inner.paths.cert.display(),
            generation,
            "TLS configuration reloaded"
        );
        Ok(())
    }

    /// Reloads if any of the files changed (identity, size, mtime or ctime)
    /// since the last attempt. `Ok(true)` = reloaded.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = Stamps::of(&self.inner.paths);
        let unchanged = *self
            .inner
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            == now;
        if unchanged {
            return Ok(false);
        }
        self.reload().map(|()| true)
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(
            &self
                .inner
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// An acceptor over the configuration in force now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config())
    }

    /// Whether clients must present a certificate (a client CA is set).
    pub fn requires_client_cert(&self) -> bool {
        self.inner.paths.client_ca.is_some()
    }

    /// 1 after `load`, +1 per successful reload.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Starts a task that reloads on SIGHUP and whenever the files change.
    ///
    /// Must be called inside a tokio runtime (an error otherwise). Reloading
    /// stops when the returned [`Reloader`] is dropped. Failed reloads are
    /// logged at warn and the previous configuration stays in force.
    pub fn spawn_reloader(&self, options: ReloadOptions) -> Result<Reloader, TlsError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| TlsError::Reloader("not inside a tokio runtime".to_string()))?;
        // Register the handler before returning: a SIGHUP sent right after
        // this call must be seen, and must not take the default action
        // (terminating the process).
        let hangup = if options.sighup {
            let _entered = runtime.enter();
            Some(
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                    .map_err(|e| TlsError::Reloader(format!("cannot listen for SIGHUP: {e}")))?,
            )
        } else {
            None
        };
        let poll = options.poll_interval.filter(|d| !d.is_zero());
        let tls = self.clone();
        let task = runtime.spawn(reload_loop(tls, hangup, poll));
        Ok(Reloader { task })
    }
}

/// How [`ServerTls::spawn_reloader`] notices new files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadOptions {
    /// How often to stat the files; `None` or zero disables polling.
    pub poll_interval: Option<Duration>,
    /// Reload (unconditionally) on SIGHUP.
    pub sighup: bool,
}

impl Default for ReloadOptions {
    fn default() -> Self {
        Self {
            poll_interval: Some(Duration::from_secs(5)),
            sighup: true,
        }
    }
}

/// The running reloader; dropping it stops reloading.
#[must_use = "dropping the Reloader stops certificate reloading"]
#[derive(Debug)]
pub struct Reloader {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn reload_loop(
    tls: ServerTls,
    mut hangup: Option<tokio::signal::unix::Signal>,
    poll: Option<Duration>,
) {
    let mut ticker = poll.map(|period| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        if hangup.is_none() && ticker.is_none() {
            return;
        }
        let forced = tokio::select! {
            got = next_hangup(&mut hangup) => {
                if !got {
                    // The signal stream ended (runtime shutting down).
                    hangup = None;
                    continue;
                }
                true
            }
            () = next_tick(&mut ticker) => false,
        };
        let tls = tls.clone();
        // File reads are blocking; keep them off the async workers.
        let outcome = tokio::task::spawn_blocking(move || {
            if forced {
                tls.reload().map(|()| true)
            } else {
                tls.reload_if_changed()
            }
        })
        .await;
        match outcome {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "TLS reload failed; keeping the previous certificate")
            }
            Err(err) => tracing::warn!(error = %err, "TLS reload task failed"),
        }
    }
}

async fn next_hangup(hangup: &mut Option<tokio::signal::unix::Signal>) -> bool {
    match hangup {
        Some(signal) => signal.recv().await.is_some(),
        None => std::future::pending().await,
    }
}

async fn next_tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn build_config(
    paths: &TlsPaths,
    client_names: &Arc<[String]>,
    names_flag: &'static str,
    alpn: &[&[u8]],
) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let cert_pem = read_pem_file("TLS certificate", &paths.cert)?;
    let certs = parse_certs("TLS certificate", &paths.cert, &cert_pem)?;
    let key_pem = read_pem_file("TLS key", &paths.key)?;
    let key = parse_key("TLS key", &paths.key, &key_pem)?;
    check_pair(
        &provider,
        certs.clone(),
        key.clone_key(),
        &paths.cert,
        &paths.key,
    )?;

    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &paths.client_ca {
        Some(ca_path) => {
            let ca_pem = read_pem_file("client CA", ca_path)?;
            let roots = root_store(ca_path, parse_certs("client CA", ca_path, &ca_pem)?)?;
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| TlsError::BadCa {
                        path: ca_path.clone(),
                        reason: e.to_string(),
                    })?;
            if client_names.is_empty() {
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_client_cert_verifier(Arc::new(NamedClients {
                    inner: verifier,
                    names: Arc::clone(client_names),
                    flag: names_flag,
                }))
            }
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// The CA's verdict, then the names: one of `names` must be a DNS or URI
/// subject alternative name of the client's certificate.
#[derive(Debug)]
struct NamedClients {
    inner: Arc<dyn ClientCertVerifier>,
    names: Arc<[String]>,
    flag: &'static str,
}

impl NamedClients {
    fn allows(&self, end_entity: &CertificateDer<'_>) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(end_entity) else {
            return false;
        };
        let allowed = |n: &str| self.names.iter().any(|want| want == n);
        cert.valid_dns_names().any(allowed) || cert.valid_uri_names().any(allowed)
    }
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, tokio_rustls::rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.allows(end_entity) {
            return Ok(verified);
        }
        // Only holders of a certificate from the CA get this far, so
        // this cannot become a flood.
        tracing::info!(
            allowed = ?self.names,
            flag = self.flag,
            "TLS client refused: its certificate has none of the allowed names as a DNS or URI name"
        );
        Err(tokio_rustls::rustls::Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What identifies one version of a file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Stamps of cert, key and CA; `None` where the stat failed (a missing file
/// is a state too: its reappearance is a change).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamps(Vec<Option<Stamp>>);

impl Stamps {
    fn of(paths: &TlsPaths) -> Self {
        let mut files: Vec<&Path> = vec![&paths.cert, &paths.key];
        if let Some(ca) = &paths.client_ca {
            files.push(ca);
        }
        Stamps(
            files
                .into_iter()
                // metadata() follows symlinks, so a Kubernetes-style
                // "..data" symlink swap shows up as a new inode.
                .map(|p| {
                    std::fs::metadata(p).ok().map(|m| Stamp {
                        dev: m.dev(),
                        ino: m.ino(),
                        size: m.size(),
                        mtime: (m.mtime(), m.mtime_nsec()),
                        ctime: (m.ctime(), m.ctime_nsec()),
                    })
                })
                .collect(),
        )
    }
}
