//! TLS for the agent's gRPC port and for `check`, which asks it.
//!
//! Everything is rustls with the ring provider, from PEM files. Errors are
//! [`TlsError`]: one line, naming the file or flag at fault, never quoting
//! key material.
//!
//! # Server (`serve --tls-cert --tls-key [--client-ca]`)
//!
//! ```no_run
//! # async fn serve(listener: tokio::net::TcpListener) -> Result<(), Box<dyn std::error::Error>> {
//! use sandbox_readiness::tls::{self, AcceptLimits, ReloadOptions, ServerTls, TlsPaths};
//!
//! let tls = ServerTls::load(TlsPaths {
//!     cert: "/etc/sr/server.pem".into(),
//!     key: "/etc/sr/server-key.pem".into(),
//!     client_ca: Some("/etc/sr/client-ca.pem".into()),
//! })?;
//! // Reload on SIGHUP and when the files change (polled every 5 s); keep
//! // the handle alive for as long as reloading should go on.
//! let _reloader = tls.spawn_reloader(ReloadOptions::default())?;
//! let incoming = tls::incoming(listener, tls.clone(), AcceptLimits::default());
//! let stats = incoming.stats(); // handshake/shed counters, for logs
//! let (_reporter, health) = tonic_health::server::health_reporter();
//! tonic::transport::Server::builder()
//!     .add_service(health)
//!     .serve_with_incoming(incoming)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! - [`ServerTls`]: the configuration, loaded with [`ServerTls::load`],
//!   swapped atomically by [`ServerTls::reload`] (bad new files leave the old
//!   configuration in force and return the error), and
//!   [`ServerTls::spawn_reloader`] for SIGHUP + mtime polling. ALPN offers
//!   `h2`. With a client CA, a client without a certificate chaining to it
//!   (and valid now, with the clientAuth usage if it lists usages) is refused
//!   in the handshake; [`ServerTls::load_for_clients`] also requires one of
//!   the given names as a DNS or URI SAN (`serve --client-name`).
//! - [`incoming`]: the accept loop, a `Stream` of
//!   `Result<tokio_rustls::server::TlsStream<TcpStream>, io::Error>` for
//!   `Server::serve_with_incoming`; tonic implements `Connected` for that
//!   stream type (its `tls-ring` feature turns on `tls-connect-info`), so
//!   `Request::peer_certs()` works in handlers. Handshakes run concurrently,
//!   the ClientHello due within [`AcceptLimits::hello_timeout`] and the
//!   whole handshake within [`AcceptLimits::handshake_timeout`], at most
//!   [`AcceptLimits::max_handshakes`] in flight and
//!   [`AcceptLimits::max_handshakes_per_ip`] per peer address (IPv4 address
//!   or IPv6 /64). With every slot taken, a new connection takes the place
//!   of the oldest handshake still waiting for its ClientHello; beyond the
//!   address's share, or with every slot past its ClientHello, new
//!   connections are closed at once. Failed handshakes are counted in
//!   [`AcceptStats`], logged at debug at most once a second, and never end
//!   the stream. Plaintext connections are accepted by the agent's own
//!   listener (`agent::listen::plaintext`), which also waits for the HTTP/2
//!   preface.
//!
//! # Client (`check --tls-ca [--tls-cert --tls-key]`)
//!
//! [`client_tls_config`] reads and checks the files and returns a
//! `tonic::transport::ClientTlsConfig` for `Endpoint::tls_config` (use an
//! `https://` URL).
//!
//! # Certificates for people (`tls init DIR --node NAME=SAN,...` or `--san NAME...`)
//!
//! [`init_nodes`] writes, all mode 0600 and refusing to overwrite unless
//! forced, the CA and client files below and for each node
//! `nodes/NAME.cert.pem` (serverAuth, valid for NAME and its SANs),
//! `nodes/NAME.key.pem` and `nodes/NAME.yaml`, the node's Talos
//! `ExtensionServiceConfig` carrying only its own key. [`init`] issues one
//! shared server certificate instead:
//!
//! | file | what | used as |
//! |---|---|---|
//! | `ca.pem` | CA certificate (10 years) | `serve --client-ca`, `check --tls-ca` |
//! | `ca-key.pem` | CA key | kept offline, signs more certificates |
//! | `server.pem` | agents' certificate (1 year, serverAuth, the `--san` names) | `serve --tls-cert` |
//! | `server-key.pem` | its key | `serve --tls-key` |
//! | `server.yaml` | the `ExtensionServiceConfig` ([`render_instructions`]) | machine config |
//! | `client.pem` | `check`'s client certificate (1 year, clientAuth) | `check --tls-cert` |
//! | `client-key.pem` | its key | `check --tls-key` |
//!
//! The documents mount server certificate, key and CA at
//! [`NODE_TLS_DIR`]`/{server.pem,server-key.pem,client-ca.pem}` with
//! `SANDBOX_READINESS_TLS_CERT`/`_TLS_KEY`/`_CLIENT_CA` pointing there. They
//! contain a private key: [`render_summary`] and [`render_nodes_summary`]
//! are what `tls init` prints instead.

mod accept;
mod client;
mod error;
mod init;
pub(crate) mod pem;
mod server;

pub use accept::{
    address_key, incoming, AcceptCounts, AcceptLimits, AcceptStats, AddressSlot, PerAddress,
    TlsIncoming,
};
pub use client::{client_tls_config, CLIENT_HANDSHAKE_TIMEOUT};
pub use error::TlsError;
pub use init::{
    init, init_nodes, parse_nodes_file, render_instructions, render_nodes_summary, render_summary,
    InitOptions, InitOutput, NodeFiles, NodeSpec, NodesInitOutput, CA_CERT_FILE, CA_KEY_FILE,
    CLIENT_CERT_FILE, CLIENT_KEY_FILE, NODES_DIR, NODE_TLS_DIR, SERVER_CERT_FILE,
    SERVER_CONFIG_FILE, SERVER_KEY_FILE,
};
pub use server::{ReloadOptions, Reloader, ServerTls, TlsPaths};
