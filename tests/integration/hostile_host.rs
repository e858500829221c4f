//! A hostile host, against the real binary: FIFOs, directories and escaping
//! symlinks where drop-ins and `ConfigPath` files should be, a host read
//! that never returns (a FUSE mount nobody answers), and a `runsc` others
//! may rewrite. `probe` returns within its timeouts with the errors in the
//! report; `serve` keeps answering health and cached reports; an unsafe
//! `runsc` is never executed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    fs,
    os::unix::fs::{symlink, PermissionsExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{args, check, Agent, BIN};
use serde_json::Value;
use tempfile::TempDir;

const GVISOR_PART: &str = r#"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
  ConfigPath = "/etc/cri/conf.d/runsc.toml"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc-up]
  runtime_type = "io.containerd.runsc.v1"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc-up.options]
  ConfigPath = "/etc/cri/conf.d/up.toml"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc-abs]
  runtime_type = "io.containerd.runsc.v1"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc-abs.options]
  ConfigPath = "/etc/abs.toml"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc-dots]
  runtime_type = "io.containerd.runsc.v1"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc-dots.options]
  ConfigPath = "/etc/cri/../../outside.toml"
"#;

fn platform(name: &str) -> String {
    format!("[runsc_config]\n  platform = \"{name}\"\n")
}

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// `<tmp>/root` as the host root, with a FIFO drop-in, a directory named
/// like one, a FIFO `ConfigPath` and symlinks that would leave the root;
/// `<tmp>/outside.toml` is what an escape would read.
fn hostile_tree() -> (TempDir, PathBuf) {
    let tmp = TempDir::new().unwrap();
    let root = tmp.path().join("root");
    let conf = root.join("etc/cri/conf.d");
    fs::create_dir_all(&conf).unwrap();
    fs::write(tmp.path().join("outside.toml"), platform("outside")).unwrap();
    fs::write(root.join("outside.toml"), platform("inside")).unwrap();
    mkfifo(&conf.join("10-x.part"));
    fs::create_dir(conf.join("15-dir.part")).unwrap();
    fs::write(conf.join("20-gvisor.part"), GVISOR_PART).unwrap();
    mkfifo(&conf.join("runsc.toml"));
    // Relative: climbs past the root, which stops it there.
    symlink("../../../../outside.toml", conf.join("up.toml")).unwrap();
    // Absolute: names the real file outside; under the root it does not exist.
    symlink(tmp.path().join("outside.toml"), root.join("etc/abs.toml")).unwrap();
    (tmp, root)
}

/// Runs `probe` to completion, killing it (and failing) after `limit`.
fn probe(extra: &[&str], limit: Duration) -> (Value, Duration) {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .args(["probe", "-o", "json"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("probe {extra:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = started.elapsed();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let doc = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (doc, took)
}

fn gvisor(doc: &Value) -> &Value {
    if doc["gvisor"].is_object() {
        &doc["gvisor"]
    } else {
        &doc["report"]["gvisor"]
    }
}

fn drop_in_error(doc: &Value, name: &str) -> String {
    gvisor(doc)["dropIns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("no drop-in entry for {name}: {:#}", gvisor(doc)["dropIns"]))
        ["error"]
        .as_str()
        .unwrap()
        .to_string()
}

fn handler<'a>(doc: &'a Value, name: &str) -> &'a Value {
    gvisor(doc)["configuredHandlers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == name)
        .unwrap_or_else(|| panic!("no handler {name}: {:#}", gvisor(doc)))
}

/// Every way the tree is hostile shows up in the report, and nothing
/// outside the host root is read.
fn assert_hostile_tree_reported(doc: &Value) {
    assert!(
        drop_in_error(doc, "10-x.part").contains("a FIFO, not a regular file"),
        "{doc:#}"
    );
    assert!(
        drop_in_error(doc, "15-dir.part").contains("Is a directory"),
        "{doc:#}"
    );
    assert!(
        drop_in_error(doc, "runsc.toml").contains("a FIFO, not a regular file"),
        "{doc:#}"
    );
    let up = handler(doc, "runsc-up");
    assert_eq!(up["platform"], "inside", "{up:#}");
    let abs = handler(doc, "runsc-abs");
    assert!(
        abs["platform"].is_null() || abs["platform"] == "",
        "{abs:#}"
    );
    assert!(
        abs["configPathExists"].is_null() || abs["configPathExists"] == false,
        "{abs:#}"
    );
    let dots = gvisor(doc)["dropIns"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["error"].as_str())
        .any(|e| e.contains("ConfigPath /etc/cri/../../outside.toml") && e.contains("`..`"));
    assert!(dots, "{:#}", gvisor(doc)["dropIns"]);
    assert!(!doc.to_string().contains("\"outside\""), "{doc:#}");
}

#[test]
fn probe_reports_fifos_directories_and_escaping_symlinks_within_its_timeouts() {
    let (_tmp, root) = hostile_tree();
    let (doc, took) = probe(
        &["--host-root", root.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(took < Duration::from_secs(15), "probe took {took:?}");
    assert_hostile_tree_reported(&doc);
}

async fn health(addr: std::net::SocketAddr) -> Result<i32, String> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let call = async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        HealthClient::new(channel)
            .check(HealthCheckRequest::default())
            .await
            .map(|r| r.into_inner().status)
            .map_err(|e| e.to_string())
    };
    tokio::time::timeout(Duration::from_secs(3), call)
        .await
        .map_err(|_| "no health answer within 3s".to_string())?
}

/// Health answers SERVING and `check -n` gets the cached report, `rounds`
/// times, each within a few seconds.
async fn still_answers(agent: &Agent, rounds: usize) -> Value {
    let mut last = Value::Null;
    for _ in 0..rounds {
        assert_eq!(health(agent.addr).await, Ok(1), "health");
        let addr = agent.addr.to_string();
        let run = tokio::task::spawn_blocking(move || {
            check(&args(&["-n", &addr, "-o", "json"]), Duration::from_secs(10))
        })
        .await
        .unwrap();
        assert!(
            run.took < Duration::from_secs(5),
            "check took {:?}",
            run.took
        );
        last = run.json();
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_answering_while_fifos_sit_in_the_drop_in_directory() {
    let (_tmp, root) = hostile_tree();
    let agent = Agent::start(
        None,
        &[
            "--host-root",
            root.to_str().unwrap(),
            "--probe-interval",
            "1s",
            "--min-refresh-interval",
            "0s",
        ],
    );
    let doc = still_answers(&agent, 3).await;
    let text = doc.to_string();
    assert!(text.contains("a FIFO, not a regular file"), "{doc:#}");
}

/// A FUSE mount whose server never answers: every access to it blocks
/// (killably) in the kernel. Dropping it aborts the connection and
/// detaches the mount.
struct HungFuse {
    dir: PathBuf,
    fd: Option<std::os::fd::OwnedFd>,
}

impl HungFuse {
    fn mount(dir: &Path) -> Result<HungFuse, String> {
        use std::os::fd::AsRawFd;
        let fd: std::os::fd::OwnedFd = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| format!("cannot open /dev/fuse: {e}"))?
            .into();
        let opts = format!("fd={},rootmode=40000,user_id=0,group_id=0", fd.as_raw_fd());
        let c = |s: &[u8]| std::ffi::CString::new(s).unwrap();
        let (src, target, kind, data) = (
            c(b"hung"),
            c(dir.as_os_str().as_encoded_bytes()),
            c(b"fuse"),
            c(opts.as_bytes()),
        );
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                kind.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("cannot mount fuse on {}: {e}", dir.display()));
        }
        Ok(HungFuse {
            dir: dir.to_path_buf(),
            fd: Some(fd),
        })
    }
}

impl Drop for HungFuse {
    fn drop(&mut self) {
        drop(self.fd.take());
        if let Ok(dir) = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes()) {
            // SAFETY: a NUL-terminated path that outlives the call.
            unsafe { libc::umount2(dir.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Whether a thread of `pid` waits on a FUSE request.
fn blocked_in_fuse(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .filter_map(Result::ok)
        .any(|t| fs::read_to_string(t.path().join("wchan")).is_ok_and(|w| w.starts_with("fuse")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_answering_while_a_host_read_never_returns() {
    let tmp = TempDir::new().unwrap();
    let conf = tmp.path().join("etc/cri/conf.d");
    fs::create_dir_all(&conf).unwrap();
    let agent = Agent::start(
        None,
        &[
            "--host-root",
            tmp.path().to_str().unwrap(),
            "--probe-interval",
            "1s",
        ],
    );
    still_answers(&agent, 1).await;
    let _fuse = match HungFuse::mount(&conf) {
        Ok(f) => f,
        Err(e) => return common::skip(e),
    };
    // The next observation lists the drop-in directory and blocks there.
    let pid = agent.pid();
    common::wait_until_async(
        Duration::from_secs(20),
        "the agent blocks in FUSE",
        || async move { blocked_in_fuse(pid) },
    )
    .await;
    still_answers(&agent, 3).await;
    assert!(blocked_in_fuse(pid), "the read was to stay blocked");
    // And SIGTERM still ends it: nothing waits for the stuck read.
    let mut agent = agent;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    common::wait_until(
        Duration::from_secs(20),
        "the agent exits on SIGTERM",
        || agent.child.try_wait().unwrap().is_some(),
    );
    assert!(agent.child.try_wait().unwrap().unwrap().success());
}

// ------------------------------------------------------------ runsc

const FAKE_RUNSC: &str = r#"#!/bin/sh
echo "$0 $*" >> "$(dirname "$0")/../ran"
echo "runsc version release-20260101.0"
"#;

/// A host root whose `usr/local/bin/runsc` writes `usr/local/ran` when run.
fn runsc_tree(file_mode: u32, dir_mode: u32) -> (TempDir, PathBuf) {
    let tmp = TempDir::new().unwrap();
    let bin = tmp.path().join("usr/local/bin");
    fs::create_dir_all(&bin).unwrap();
    let runsc = bin.join("runsc");
    fs::write(&runsc, FAKE_RUNSC).unwrap();
    fs::set_permissions(&runsc, fs::Permissions::from_mode(file_mode)).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(dir_mode)).unwrap();
    let marker = tmp.path().join("usr/local/ran");
    (tmp, marker)
}

fn runsc_entry(doc: &Value) -> &Value {
    gvisor(doc)["binaries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "runsc")
        .unwrap()
}

#[test]
fn runsc_others_may_rewrite_is_never_executed() {
    if !nix::unistd::geteuid().is_root() {
        return common::skip("needs root: the check wants a root-owned runsc");
    }
    // The control: a root-owned 0755 runsc in a 0755 directory runs.
    let (tmp, marker) = runsc_tree(0o755, 0o755);
    let (doc, _) = probe(
        &["--host-root", tmp.path().to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(marker.exists(), "the safe runsc was not run: {doc:#}");
    assert_eq!(runsc_entry(&doc)["version"], "release-20260101.0");

    for (file_mode, dir_mode, why) in [
        (0o775, 0o755, "writable by group or others (mode 0775)"),
        (0o755, 0o777, "its directory"),
    ] {
        let (tmp, marker) = runsc_tree(file_mode, dir_mode);
        let (doc, _) = probe(
            &[
                "--host-root",
                tmp.path().to_str().unwrap(),
                "--sandbox-probe",
            ],
            Duration::from_secs(30),
        );
        assert!(
            !marker.exists(),
            "runsc {file_mode:o} in a {dir_mode:o} directory was executed: {}",
            fs::read_to_string(&marker).unwrap_or_default()
        );
        let error = runsc_entry(&doc)["error"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            error.contains("not executed") && error.contains(why),
            "{file_mode:o}/{dir_mode:o}: {error:?}"
        );
        let sandbox = gvisor(&doc)["sandbox"]["message"].as_str().unwrap_or("");
        assert!(sandbox.contains("not executed"), "{sandbox:?}");
    }
}
