//! The real Kubernetes control plane for the wire-facing tests: etcd,
//! kube-apiserver (Node,RBAC authorization, NodeRestriction, client
//! certificates, an audit log of every write) and kube-controller-manager,
//! built from the upstream Go modules at pinned versions
//! (controlplane/README.md) and run by scripts/control-plane.sh.
//!
//! [`RealCluster::shared`] starts one per test binary, lazily, the first
//! time a test asks, and every test of the binary shares it: a test makes
//! its Nodes with [`RealCluster::new_node`] (unique names) and finds them
//! by name or by a label of its own, never by position in a list.
//! [`RealCluster::private`] is a cluster of the test's own, for what would
//! disturb the others (stopping the API server); it goes down on drop.
//!
//! A cluster that cannot start FAILS the test with the one line the script
//! printed: these tests exist to run against the real server, they never
//! pass without it. Each cluster has a watchdog, a small shell in a session
//! of its own that runs `control-plane.sh down` once the test process is
//! gone, so a panic, an abort or a SIGKILL of the test binary leaves no
//! etcd or kube-apiserver behind.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use serde_json::Value;

static SHARED: OnceLock<Result<RealCluster, String>> = OnceLock::new();
/// More shared clusters of one test binary, by role (a management and a
/// workload cluster): each started once, by the first test that asks.
#[allow(clippy::type_complexity)]
static ROLES: Mutex<Vec<(&'static str, &'static OnceLock<Result<RealCluster, String>>)>> =
    Mutex::new(Vec::new());
/// Node names and namespaces are unique within the test process (the
/// shared cluster lives as long as it).
static UNIQUE: AtomicU32 = AtomicU32::new(0);

/// The repository's top: the crate including this file may be a member
/// of the workspace (the controller's tests include it by path).
fn repo() -> &'static Path {
    static TOP: OnceLock<PathBuf> = OnceLock::new();
    TOP.get_or_init(|| {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        here.ancestors()
            .find(|d| d.join("scripts/control-plane.sh").is_file())
            .unwrap_or(here)
            .to_path_buf()
    })
}

fn script(name: &str) -> PathBuf {
    repo().join("scripts").join(name)
}

fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(it printed nothing)")
        .to_string()
}

/// The bin dir of the pinned, already built control plane
/// (`scripts/build-control-plane.sh path`), or its one-line refusal.
pub fn bin_dir() -> Result<PathBuf, String> {
    if let Some(b) = std::env::var_os("SR_CONTROL_PLANE_BIN").filter(|b| !b.is_empty()) {
        return Ok(PathBuf::from(b));
    }
    let out = Command::new(script("build-control-plane.sh"))
        .arg("path")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!("real control plane: cannot run scripts/build-control-plane.sh: {e}")
        })?;
    if !out.status.success() {
        return Err(format!("real control plane: {}", first_line(&out.stderr)));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    ))
}

/// One write as the audit log recorded it (level Request: the body is in
/// `requestObject`).
pub type AuditEvent = Value;

/// A running control plane in a directory of its own.
pub struct RealCluster {
    dir: PathBuf,
    bin: PathBuf,
    admin: PathBuf,
    private: bool,
    /// A cluster this process did not start ([`RealCluster::attach`]): left
    /// running on drop.
    attached: bool,
    watchdog: Mutex<Option<Child>>,
    /// The admin's TLS client, built once.
    tls: OnceLock<Arc<tokio_rustls::rustls::ClientConfig>>,
    port: u16,
}

impl RealCluster {
    /// The cluster every test of this binary shares, started by the first
    /// test that asks. Fails the test (every test that asks) when it cannot
    /// start.
    pub fn shared() -> &'static RealCluster {
        match SHARED.get_or_init(|| RealCluster::up(false)) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// The shared cluster of role `role` (e.g. "management", "workload"):
    /// one per role and test binary, started by the first test that asks,
    /// in parallel with the other roles'. Fails the test when it cannot
    /// start.
    pub fn shared_as(role: &'static str) -> &'static RealCluster {
        let cell = {
            let mut roles = ROLES.lock().unwrap();
            match roles.iter().find(|(r, _)| *r == role) {
                Some((_, c)) => *c,
                None => {
                    let c: &'static OnceLock<Result<RealCluster, String>> =
                        Box::leak(Box::new(OnceLock::new()));
                    roles.push((role, c));
                    c
                }
            }
        };
        match cell.get_or_init(|| RealCluster::up(false)) {
            Ok(c) => c,
            Err(e) => panic!("{role} cluster: {e}"),
        }
    }

    /// A cluster of the calling test's own (an outage must not stop the
    /// others' server); down when dropped.
    pub fn private() -> RealCluster {
        RealCluster::up(true).unwrap_or_else(|e| panic!("{e}"))
    }

    fn up(private: bool) -> Result<RealCluster, String> {
        let started = Instant::now();
        let bin = bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("sr-real-cluster.")
            .tempdir()
            .map_err(|e| format!("real control plane: no temporary directory: {e}"))?
            .keep();
        let watchdog = spawn_watchdog(&dir, &bin)
            .map_err(|e| format!("real control plane: cannot start its watchdog: {e}"))?;
        let mut c = RealCluster {
            admin: dir.join("admin.kubeconfig"),
            dir,
            bin,
            private,
            attached: false,
            watchdog: Mutex::new(Some(watchdog)),
            tls: OnceLock::new(),
            port: 0,
        };
        if let Err(e) = c.control_plane(&["up"]) {
            // Dropped: down, the directory removed, the watchdog ended.
            return Err(format!("real control plane: {e}"));
        }
        c.port = c
            .env("APISERVER_PORT")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| {
                format!(
                    "real control plane: no APISERVER_PORT in {}/control-plane.env",
                    c.dir.display()
                )
            })?;
        eprintln!(
            "real control plane ({}) up in {:?}: {}",
            if private { "private" } else { "shared" },
            started.elapsed(),
            c.dir.display()
        );
        Ok(c)
    }

    /// A cluster that `scripts/control-plane.sh up DIR` started elsewhere
    /// (the playground's, for the test providers as a program): used as
    /// is, never taken down by this process (no watchdog, nothing on drop).
    pub fn attach(dir: &Path) -> Result<RealCluster, String> {
        let bin = bin_dir()?;
        let mut c = RealCluster {
            admin: dir.join("admin.kubeconfig"),
            dir: dir.to_path_buf(),
            bin,
            private: false,
            attached: true,
            watchdog: Mutex::new(None),
            tls: OnceLock::new(),
            port: 0,
        };
        c.port = c
            .env("APISERVER_PORT")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| {
                format!(
                    "{}: no cluster there (no APISERVER_PORT in its control-plane.env)",
                    dir.display()
                )
            })?;
        if !c.admin.is_file() {
            return Err(format!("{}: no admin.kubeconfig", dir.display()));
        }
        Ok(c)
    }

    /// `scripts/control-plane.sh CMD DIR [ARGS…]`: its one-line error on
    /// failure.
    fn control_plane(&self, args: &[&str]) -> Result<(), String> {
        self.control_plane_env(args, &[])
    }

    /// As [`control_plane`](Self::control_plane), with more environment.
    fn control_plane_env(&self, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
        let (cmd, rest) = args.split_first().expect("a command");
        let out = Command::new(script("control-plane.sh"))
            .arg(cmd)
            .arg(&self.dir)
            .args(rest)
            .envs(env.iter().copied())
            .env("SR_CONTROL_PLANE_BIN", &self.bin)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run scripts/control-plane.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(first_line(&out.stderr))
        }
    }

    /// Starts the real Cluster API and CABPT managers on this cluster, their
    /// CRDs and webhooks registered (`scripts/control-plane.sh capi`): fails
    /// the test with the script's one line when they cannot start.
    pub fn start_capi(&self) {
        let started = Instant::now();
        if let Err(e) = self.control_plane(&["capi"]) {
            panic!("Cluster API on the real control plane: {e}");
        }
        eprintln!(
            "Cluster API and CABPT up in {:?} (feature gates {})",
            started.elapsed(),
            self.capi_env("CAPI_FEATURE_GATES").unwrap_or_default()
        );
    }

    /// Registers the Prometheus Operator's ServiceMonitor, PrometheusRule and
    /// ScrapeConfig CRDs (from the module archive scripts/build-capi.sh stages beside
    /// Cluster API, `config/prometheus-operator`; `capi` must have run) and
    /// waits until they are served.
    pub fn register_prometheus_operator_crds(&self) {
        let staged = Path::new(&self.capi_env("CAPI_DIR").expect("CAPI_DIR in capi.env"))
            .join("config/prometheus-operator");
        for crd in [
            "monitoring.coreos.com_servicemonitors.yaml",
            "monitoring.coreos.com_prometheusrules.yaml",
            "monitoring.coreos.com_scrapeconfigs.yaml",
        ] {
            self.kubectl_ok(
                &[
                    "apply",
                    "--server-side",
                    "-f",
                    staged.join(crd).to_str().unwrap(),
                ],
                None,
            );
        }
        // Read, not `kubectl wait`: that fails at once on a CRD whose status
        // has no conditions yet ("accessor error: <nil>").
        for crd in ["servicemonitors", "prometheusrules", "scrapeconfigs"] {
            let path = format!(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}.monitoring.coreos.com"
            );
            poll(
                Duration::from_secs(60),
                &format!("{crd} established"),
                || {
                    self.get(&path).is_some_and(|c| {
                        c["status"]["conditions"].as_array().is_some_and(|cs| {
                            cs.iter()
                                .any(|x| x["type"] == "Established" && x["status"] == "True")
                        })
                    })
                },
            );
        }
    }

    /// Registers the test providers' CRDs (tests/support/capi/crds.yaml:
    /// the played infrastructure and control plane) and waits until they
    /// are served.
    pub fn register_test_provider_crds(&self) {
        self.kubectl_ok(
            &["apply", "--server-side", "-f", "-"],
            Some(include_str!("capi/crds.yaml")),
        );
        self.kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                "-l",
                "sandbox-readiness.io/test-provider=true",
            ],
            None,
        );
    }

    /// Stops the Cluster API and CABPT managers and removes their admission
    /// webhooks: objects made while they ran stay, and from now on no
    /// Cluster API controller acts on them (a test then plays it).
    pub fn stop_capi_managers(&self) {
        for m in ["capi-manager", "cabpt-manager"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join("pids").join(format!("{m}.pid")))
            {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        for kind in [
            "validatingwebhookconfigurations",
            "mutatingwebhookconfigurations",
        ] {
            let base = format!("/apis/admissionregistration.k8s.io/v1/{kind}");
            let list = self.get(&base).unwrap_or(Value::Null);
            for w in list["items"].as_array().into_iter().flatten() {
                let name = w["metadata"]["name"].as_str().unwrap();
                self.write(
                    "DELETE",
                    &format!("{base}/{name}"),
                    "application/json",
                    &serde_json::json!({}),
                );
            }
        }
    }

    /// A value of `DIR/capi.env` (after [`start_capi`](Self::start_capi)).
    pub fn capi_env(&self, key: &str) -> Option<String> {
        self.env_file("capi.env", key)
    }

    fn env(&self, key: &str) -> Option<String> {
        self.env_file("control-plane.env", key)
    }

    /// `KEY=value` from one of the env files control-plane.sh writes in DIR.
    fn env_file(&self, file: &str, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The admin's kubeconfig (O=system:masters, credentials inline).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin
    }

    /// The pinned kubectl (v1.36.3), not the one on PATH.
    pub fn kubectl_bin(&self) -> PathBuf {
        self.bin.join("kubectl")
    }

    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// `prefix-N`, unique in this test process (a DNS-1123 label when
    /// `prefix` is one).
    pub fn unique(&self, prefix: &str) -> String {
        format!("{prefix}-{}", UNIQUE.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers Node `name` as kubelet does (`control-plane.sh node`):
    /// kubelet's client certificate, labels, status with `Ready` and this
    /// machine's bootID, the Lease. Returns the kubelet-style kubeconfig
    /// (pointing at the certificate files, as on Talos).
    pub fn node(&self, name: &str) -> PathBuf {
        self.control_plane(&["node", name])
            .unwrap_or_else(|e| panic!("registering Node {name} on the real cluster: {e}"));
        self.dir.join("nodes").join(format!("{name}.kubeconfig"))
    }

    /// A new Node named `prefix-N`: its name and kubeconfig.
    pub fn new_node(&self, prefix: &str) -> (String, PathBuf) {
        let name = self.unique(prefix);
        let kc = self.node(&name);
        (name, kc)
    }

    /// A new kubelet client certificate for Node `node` (CN=system:node:NODE,
    /// O=system:nodes, signed by the cluster's client CA), laid out in `dir`
    /// as kubelet keeps it: `pki/kubelet-client-N.pem` (certificate and
    /// key), the symlink `pki/kubelet-client-current.pem` re-pointed to it,
    /// and `kubeconfig-kubelet` naming the symlink. Called again on the
    /// same `dir` it is kubelet's rotation. Returns the kubeconfig and the
    /// certificate's SHA-256, as the audit log names the credential
    /// (`user.extra["authentication.kubernetes.io/credential-id"]` =
    /// `X509SHA256=<hex>`).
    pub fn kubelet_credential(&self, node: &str, dir: &Path) -> (PathBuf, String) {
        use rustls_pki_types::{pem::PemObject, CertificateDer};
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).unwrap();
        let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
        let (key, csr, crt) = (
            pki.join(format!("k{n}.key")),
            pki.join(format!("k{n}.csr")),
            pki.join(format!("k{n}.crt")),
        );
        let ext = pki.join(format!("k{n}.ext"));
        std::fs::write(
            &ext,
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        let subject = format!("/O=system:nodes/CN=system:node:{node}");
        let serial = format!("0x{:032x}", fastrand::u128(..));
        let (ca_crt, ca_key) = (
            self.dir.join("client-ca.crt"),
            self.dir.join("client-ca.key"),
        );
        let steps: [Vec<&std::ffi::OsStr>; 3] = [
            [
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
            ]
            .iter()
            .map(std::ffi::OsStr::new)
            .chain([key.as_os_str()])
            .collect(),
            vec![
                "req".as_ref(),
                "-new".as_ref(),
                "-key".as_ref(),
                key.as_os_str(),
                "-subj".as_ref(),
                subject.as_ref(),
                "-out".as_ref(),
                csr.as_os_str(),
            ],
            vec![
                "x509".as_ref(),
                "-req".as_ref(),
                "-in".as_ref(),
                csr.as_os_str(),
                "-CA".as_ref(),
                ca_crt.as_os_str(),
                "-CAkey".as_ref(),
                ca_key.as_os_str(),
                "-set_serial".as_ref(),
                serial.as_ref(),
                "-days".as_ref(),
                "30".as_ref(),
                "-extfile".as_ref(),
                ext.as_os_str(),
                "-out".as_ref(),
                crt.as_os_str(),
            ],
        ];
        for args in steps {
            let out = Command::new("openssl")
                .args(&args)
                .stdin(Stdio::null())
                .output()
                .expect("openssl (Debian package openssl)");
            assert!(
                out.status.success(),
                "openssl {:?}: {}",
                args.first(),
                first_line(&out.stderr)
            );
        }
        let cert_pem = std::fs::read_to_string(&crt).unwrap();
        let key_pem = std::fs::read_to_string(&key).unwrap();
        let pem = pki.join(format!("kubelet-client-{n}.pem"));
        std::fs::write(&pem, format!("{cert_pem}{key_pem}")).unwrap();
        for f in [&key, &csr, &crt, &ext] {
            let _ = std::fs::remove_file(f);
        }
        let current = pki.join("kubelet-client-current.pem");
        let tmp = pki.join(format!(".kubelet-client-current.{n}.tmp"));
        std::os::unix::fs::symlink(&pem, &tmp).unwrap();
        std::fs::rename(&tmp, &current).unwrap();
        let kubeconfig = dir.join("kubeconfig-kubelet");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: kubelet\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: kubelet@c\n  context: {{cluster: c, user: kubelet}}\ncurrent-context: kubelet@c\n",
            self.server_url(),
            self.dir.join("ca.crt").display(),
            current.display(),
            current.display()
        );
        std::fs::write(&kubeconfig, text).unwrap();
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let sum = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
        let hex: String = sum.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        (kubeconfig, hex)
    }

    /// A token of ServiceAccount `ns/name` from the TokenRequest API (as a
    /// projected token a pod gets), valid for an hour.
    pub fn service_account_token(&self, ns: &str, name: &str) -> String {
        self.kubectl_ok(&["-n", ns, "create", "token", name, "--duration=1h"], None)
            .trim()
            .to_string()
    }

    /// A kubeconfig at `path` for this server with `token` as its bearer
    /// token (the CA inline, as a Secret's kubeconfig must carry it).
    pub fn token_kubeconfig(&self, token: &str, path: &Path) -> PathBuf {
        use base64::Engine as _;
        let ca = std::fs::read(self.dir.join("ca.crt")).unwrap();
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: u@c\n  context: {{cluster: c, user: u}}\ncurrent-context: u@c\n",
            self.server_url(),
            base64::engine::general_purpose::STANDARD.encode(ca),
        );
        std::fs::write(path, text).unwrap();
        path.to_path_buf()
    }

    /// The pinned kubectl as the admin, its own cache dir, no in-cluster
    /// environment.
    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.kubectl_bin());
        c.env("KUBECONFIG", &self.admin)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg("--cache-dir")
            .arg(self.dir.join("kubectl-cache"))
            .args(args);
        c
    }

    /// The pinned kubectl as the admin with `args` (a `wait` or a
    /// `--watch`), started at `-v=6`, returned once its watch request has
    /// been answered by the server: client-go logs each round trip at that
    /// level, the watch's with `watch=true` in its URL. A test then changes
    /// what kubectl waits for, knowing the watch will see it (a fixed sleep
    /// only guesses that kubectl got that far). Killed when dropped, so a
    /// failing test leaves no kubectl behind.
    pub fn kubectl_watching(&self, args: &[&str], within: Duration) -> KubectlWatch {
        let mut all = args.to_vec();
        all.push("-v=6");
        let mut child = self
            .kubectl_cmd(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut all = String::new();
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("watch=true") {
                    let _ = tx.send(line.clone());
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        let w = KubectlWatch {
            child: Some(child),
            reader: Some(reader),
        };
        match rx.recv_timeout(within) {
            Ok(_) => w,
            Err(_) => panic!("kubectl {args:?} opened no watch within {within:?}"),
        }
    }

    /// `(exit code, stdout, stderr)` of the pinned kubectl as the admin.
    pub fn kubectl(&self, args: &[&str]) -> (i32, String, String) {
        self.kubectl_stdin(args, None)
    }

    /// As [`kubectl`](Self::kubectl), `input` on its stdin.
    pub fn kubectl_stdin(&self, args: &[&str], input: Option<&str>) -> (i32, String, String) {
        let mut cmd = self.kubectl_cmd(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().expect("cannot start the pinned kubectl");
        if let Some(i) = input {
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(i.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// kubectl that must succeed: its stdout.
    pub fn kubectl_ok(&self, args: &[&str], input: Option<&str>) -> String {
        let (code, out, err) = self.kubectl_stdin(args, input);
        assert_eq!(code, 0, "kubectl {args:?}: {err}");
        out
    }

    /// GET `path` as the admin, straight over HTTPS (no kubectl process per
    /// poll): `None` on 404.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.try_get(path).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A write as the admin, straight over HTTPS (a kubectl process per
    /// write takes a second on a loaded machine): `method` on `path` with
    /// `body` of `content_type`; the object the server answers with. Fails
    /// the test on anything but 200/201.
    pub fn write(&self, method: &str, path: &str, content_type: &str, body: &Value) -> Value {
        self.try_write(method, path, content_type, body)
            .unwrap_or_else(|(code, answer)| panic!("{method} {path}: {code} {answer}"))
    }

    /// As [`get`](Self::get), a refusal (a 429 while the server's storage
    /// initializes, a 5xx) as an error instead of a failed test.
    pub fn try_get(&self, path: &str) -> Result<Option<Value>, String> {
        let (code, body) = self
            .https("GET", path, None, Vec::new())
            .map_err(|e| format!("GET {path}: {e}"))?;
        match code {
            200 => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| e.to_string()),
            404 => Ok(None),
            c => Err(format!(
                "GET {path}: {c} {}",
                String::from_utf8_lossy(&body)
            )),
        }
    }

    /// As [`write`](Self::write), the refusal as an error instead of a
    /// failed test: `(status, body)` of anything but 200/201.
    pub fn try_write(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &Value,
    ) -> Result<Value, (u16, String)> {
        let (code, answer) = self
            .https(
                method,
                path,
                Some(content_type),
                serde_json::to_vec(body).unwrap(),
            )
            .map_err(|e| (0, e))?;
        if code == 200 || code == 201 {
            serde_json::from_slice(&answer).map_err(|e| (code, e.to_string()))
        } else {
            Err((code, String::from_utf8_lossy(&answer).into_owned()))
        }
    }

    /// Registers Node `name` as kubelet started with `--provider-id` does
    /// (the Node carries `spec.providerID` from its creation on).
    pub fn node_with_provider_id(&self, name: &str, provider_id: &str) -> PathBuf {
        self.control_plane_env(&["node", name], &[("SR_NODE_PROVIDER_ID", provider_id)])
            .unwrap_or_else(|e| panic!("registering Node {name} on the real cluster: {e}"));
        self.dir.join("nodes").join(format!("{name}.kubeconfig"))
    }

    /// The Node as the API server holds it (`Value::Null` when there is
    /// none).
    pub fn get_node(&self, name: &str) -> Value {
        self.get(&format!("/api/v1/nodes/{name}"))
            .unwrap_or(Value::Null)
    }

    /// Every event the audit log holds so far (ResponseComplete).
    fn audit_events(&self) -> Vec<AuditEvent> {
        audit_lines(&self.dir.join("audit.log"))
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .collect()
    }

    /// Every write the audit log holds so far.
    pub fn audit(&self) -> Vec<AuditEvent> {
        let writes = ["create", "update", "patch", "delete", "deletecollection"];
        self.audit_events()
            .into_iter()
            .filter(|e| e["verb"].as_str().is_some_and(|v| writes.contains(&v)))
            .collect()
    }

    /// Every read of a Secret so far (`get`, `list`, `watch`; the policy
    /// logs them at level Metadata: who read which Secret, never its data).
    pub fn secret_reads(&self) -> Vec<AuditEvent> {
        self.audit_events()
            .into_iter()
            .filter(|e| {
                e["objectRef"]["resource"] == "secrets"
                    && e["verb"]
                        .as_str()
                        .is_some_and(|v| ["get", "list", "watch"].contains(&v))
            })
            .collect()
    }

    /// Now, as a mark for [`audit_writes_since`](Self::audit_writes_since):
    /// the writes the server receives from now on.
    pub fn audit_mark(&self) -> AuditMark {
        AuditMark::now()
    }

    /// The writes `filter` picks, in the log's order.
    pub fn audit_writes(&self, filter: impl Fn(&AuditEvent) -> bool) -> Vec<AuditEvent> {
        self.audit_writes_since(AuditMark::BEGINNING, filter)
    }

    /// The writes received after `mark` that `filter` picks.
    pub fn audit_writes_since(
        &self,
        mark: AuditMark,
        filter: impl Fn(&AuditEvent) -> bool,
    ) -> Vec<AuditEvent> {
        self.audit()
            .into_iter()
            .filter(|e| mark.precedes(e) && filter(e))
            .collect()
    }

    /// The writes after `mark` that `filter` picks, once `done` holds for
    /// them; fails the test with what there is after `within`. kube-apiserver
    /// logs a write when its handler has finished, after the answer went out:
    /// a read that already shows the write can be ahead of its audit event.
    pub fn audit_wait(
        &self,
        within: Duration,
        mark: AuditMark,
        filter: impl Fn(&AuditEvent) -> bool,
        done: impl Fn(&[AuditEvent]) -> bool,
    ) -> Vec<AuditEvent> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.audit_writes_since(mark, &filter);
            if done(&got) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "the audit log does not have the writes expected within {within:?}: {got:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Returns once the audit log holds a write made now by the admin (a
    /// ConfigMap of its own, created): the writes the server answered before
    /// this call are logged by then. A check that something was *not*
    /// written reads the log after this, not after a sleep.
    pub fn audit_barrier(&self) {
        let name = format!(
            "sr-audit-barrier-{}-{}",
            std::process::id(),
            self.unique("b")
        );
        self.kubectl_ok(&["-n", "default", "create", "configmap", &name], None);
        self.audit_wait(
            Duration::from_secs(10),
            AuditMark::BEGINNING,
            |e| {
                e["objectRef"]["resource"] == "configmaps"
                    && e["objectRef"]["name"] == name.as_str()
            },
            |got| !got.is_empty(),
        );
        let _ = self.kubectl(&[
            "-n",
            "default",
            "delete",
            "configmap",
            &name,
            "--wait=false",
        ]);
    }

    /// Stops etcd, kube-apiserver and kube-controller-manager, keeping the
    /// data and the ports (an outage). Private clusters only.
    pub fn stop(&self) {
        assert!(
            self.private,
            "stop the shared cluster? use RealCluster::private()"
        );
        self.control_plane(&["stop"])
            .unwrap_or_else(|e| panic!("control-plane.sh stop: {e}"));
    }

    /// Starts them again on the same ports; returns once /readyz answers.
    pub fn start(&self) {
        assert!(
            self.private,
            "start the shared cluster? use RealCluster::private()"
        );
        self.control_plane(&["start"])
            .unwrap_or_else(|e| panic!("control-plane.sh start: {e}"));
    }

    fn tls(&self) -> Arc<tokio_rustls::rustls::ClientConfig> {
        self.tls
            .get_or_init(|| {
                use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
                use tokio_rustls::rustls;
                let pki = self.dir.join("pki");
                let mut roots = rustls::RootCertStore::empty();
                for ca in CertificateDer::pem_file_iter(self.dir.join("ca.crt")).unwrap() {
                    roots.add(ca.unwrap()).unwrap();
                }
                let chain: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_file_iter(pki.join("admin.crt"))
                        .unwrap()
                        .map(Result::unwrap)
                        .collect();
                let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).unwrap();
                let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_client_auth_cert(chain, key)
                .unwrap();
                Arc::new(cfg)
            })
            .clone()
    }

    fn https(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), String> {
        use http_body_util::{BodyExt, Full};
        use hyper::body::Bytes;
        let tls = self.tls();
        let port = self.port;
        let path = path.to_string();
        let method = hyper::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let content_type = content_type.map(str::to_string);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let go = async {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .map_err(|e| format!("connect: {e}"))?;
                let name =
                    rustls_pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
                let stream = tokio_rustls::TlsConnector::from(tls)
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                let (mut send, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .map_err(|e| e.to_string())?;
                tokio::spawn(conn);
                let mut req = hyper::Request::builder()
                    .method(method)
                    .uri(&path)
                    .header("host", format!("127.0.0.1:{port}"))
                    .header("accept", "application/json");
                if let Some(ct) = &content_type {
                    req = req.header("content-type", ct);
                }
                let req = req
                    .body(Full::new(Bytes::from(body)))
                    .map_err(|e| e.to_string())?;
                let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
                let code = resp.status().as_u16();
                let body = resp
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?
                    .to_bytes();
                Ok::<_, String>((code, body.to_vec()))
            };
            tokio::time::timeout(Duration::from_secs(10), go)
                .await
                .map_err(|_| "no answer within 10 s".to_string())?
        })
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        if self.attached {
            return;
        }
        // Private clusters, and a shared one whose `up` failed (the one
        // that started is a static: its watchdog takes it down when the
        // process is gone).
        if let Err(e) = self.control_plane(&["down"]) {
            eprintln!("control-plane.sh down {}: {e}", self.dir.display());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(mut w) = self.watchdog.lock().unwrap().take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// `sh` in a session of its own (a signal to the test's process group does
/// not reach it), output nowhere (it never holds the test's pipes open):
/// polls this process every second; once it is gone, `control-plane.sh
/// down DIR` and the directory removed. Gives up when DIR goes (a private
/// cluster's drop took it down).
fn spawn_watchdog(dir: &Path, bin: &Path) -> std::io::Result<Child> {
    const WATCH: &str = r#"p=$1 cp=$2 d=$3
while kill -0 "$p" 2>/dev/null; do
	[ -d "$d" ] || exit 0
	sleep 1
done
"$cp" down "$d" >/dev/null 2>&1
rm -rf "$d""#;
    Command::new("setsid")
        .args(["sh", "-c", WATCH, "sr-cluster-watchdog"])
        .arg(std::process::id().to_string())
        .arg(script("control-plane.sh"))
        .arg(dir)
        .env("SR_CONTROL_PLANE_BIN", bin)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// A kubectl started by [`RealCluster::kubectl_watching`].
pub struct KubectlWatch {
    child: Option<std::process::Child>,
    reader: Option<std::thread::JoinHandle<String>>,
}

impl KubectlWatch {
    /// Waits for kubectl to exit: `(success, stdout, stderr)`.
    pub fn finish(mut self) -> (bool, String, String) {
        let mut child = self.child.take().unwrap();
        let mut out = String::new();
        if let Some(mut o) = child.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut out);
        }
        let ok = child.wait().unwrap().success();
        let err = self.reader.take().unwrap().join().unwrap_or_default();
        (ok, out, err)
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A point in time that splits the audit log into before and after by each
/// event's `requestReceivedTimestamp`, not by its place in the log: the
/// server logs a write once its handler has finished, so a write received
/// before a mark can be logged after it (counting lines, it would count as
/// "after"). The server runs on this host: its clock is ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditMark(std::time::SystemTime);

impl AuditMark {
    /// Before every event.
    pub const BEGINNING: AuditMark = AuditMark(std::time::UNIX_EPOCH);

    pub fn now() -> AuditMark {
        AuditMark(std::time::SystemTime::now())
    }

    /// When the server received the event's request (`None` when the event
    /// has no readable timestamp).
    pub fn received(e: &AuditEvent) -> Option<std::time::SystemTime> {
        humantime::parse_rfc3339(e["requestReceivedTimestamp"].as_str()?).ok()
    }

    /// Whether the server received `e`'s request at or after this mark (an
    /// event without a timestamp is never after a mark but the beginning).
    pub fn precedes(&self, e: &AuditEvent) -> bool {
        // The log's timestamps are whole microseconds: truncate the mark to
        // match, so a request received in the mark's own microsecond counts.
        let micros = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros())
        };
        *self == Self::BEGINNING || Self::received(e).is_some_and(|t| micros(t) >= micros(self.0))
    }
}

/// The whole lines of an audit log as it is being written. The server may
/// be writing its last line: that part is left out, and it may end in the
/// middle of a character (a condition message's dash), so the file is read
/// as bytes — read as a string it would be an error, and read as nothing.
pub fn audit_lines(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let whole = bytes
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(&bytes[..0], |end| &bytes[..=end]);
    String::from_utf8_lossy(whole)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Polls `cond` every 100 ms until it holds; fails the test with `what`
/// after `within`. For conditions read from the API server: a poll is a
/// request, and tests share the server and two cores.
pub fn poll(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A process's peak resident set (VmHWM in /proc/PID/status), KiB; `None`
/// when it cannot be read (the process is gone).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The name of `obj`'s owner of kind `kind` (its ownerReferences).
pub fn owner_name<'a>(obj: &'a Value, kind: &str) -> Option<&'a str> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["kind"] == kind)?["name"]
        .as_str()
}

/// The identity an audit event names for the credential used
/// (`X509SHA256=<hex>` for a client certificate).
pub fn credential_id(e: &AuditEvent) -> Option<&str> {
    e["user"]["extra"]["authentication.kubernetes.io/credential-id"][0].as_str()
}
