//! Reading node sources, the expected count and the pool's desired state:
//! files (size-capped), stdin, and `--nodes-cmd`/`--expect-cmd`/`--desired-cmd`
//! (a shell command under a timeout, killed with its whole process group),
//! all through [`hostio`].

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::process::Command;

use super::{
    expect,
    nodes::{self, Node},
};
use crate::{
    desired::{self, PoolDesired},
    hostio::{self, Capture, Keep},
};

/// Node documents larger than this are refused (a NodeList of 5000 nodes
/// is about 50 MiB with managed fields).
pub const MAX_DOCUMENT_BYTES: usize = 128 * 1024 * 1024;

/// Keep this much of a failing command's stderr for the error line.
const MAX_STDERR_BYTES: usize = 64 * 1024;

/// Reads a node file, or stdin for `-`, refusing more than
/// `MAX_DOCUMENT_BYTES`; errors name the flag: "--kube-nodes m.json: …".
pub fn read_capped(path: &Path, what: &str) -> Result<String, String> {
    hostio::read_operator_file(path, MAX_DOCUMENT_BYTES)
        .map_err(|e| format!("{what} {}: {}", path.display(), e.reason()))
}

/// Reads and parses `--kube-nodes FILE|-` (a NodeList or a MachineList).
/// `check --wait` calls it again every round, so a file rewritten during a
/// rollout is followed.
pub fn read_kube_nodes(path: &Path, port: u16) -> Result<Vec<Node>, String> {
    let text = read_capped(path, "--kube-nodes")?;
    let origin = format!("--kube-nodes {}", path.display());
    nodes::parse_node_list(&text, port, &origin).map_err(|e| e.to_string())
}

/// Runs `sh -c CMD` and parses its standard output as nodes (NodeList or
/// MachineList JSON, or one entry per line). Errors are one line: the exit status and the
/// first line of stderr, a timeout, or the parse error.
pub async fn run_nodes_cmd(cmd: &str, port: u16, limit: Duration) -> Result<Vec<Node>, String> {
    let text = run_cmd("--nodes-cmd", cmd, limit).await?;
    nodes::parse_cmd_output(&text, port).map_err(|e| e.to_string())
}

/// Reads `--expect-from FILE|-` (a MachineDeployment) and returns its
/// `spec.replicas`. `check --wait` reads a file again every round.
pub fn read_expect_from(path: &Path) -> Result<usize, String> {
    let text = read_capped(path, "--expect-from")?;
    let origin = format!("--expect-from {}", path.display());
    expect::parse_replicas(&text, &origin).map_err(|e| e.to_string())
}

/// Where a document comes from: `--expect-from`/`--desired-from FILE|-`
/// or `--expect-cmd`/`--desired-cmd CMD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocSource {
    /// `--…-from FILE|-`.
    File(PathBuf),
    /// `--…-cmd CMD`.
    Cmd(String),
}

/// Where the expected count comes from.
pub type ExpectSource = DocSource;

impl DocSource {
    /// From a `--…-from` and a `--…-cmd` flag (clap lets only one through).
    pub fn from_flags(from: Option<&PathBuf>, cmd: Option<&String>) -> Option<Self> {
        match (from, cmd) {
            (Some(path), _) => Some(DocSource::File(path.clone())),
            (None, Some(cmd)) => Some(DocSource::Cmd(cmd.clone())),
            (None, None) => None,
        }
    }

    /// Stdin, which can be read once only.
    pub fn is_stdin(&self) -> bool {
        matches!(self, DocSource::File(p) if p.as_os_str() == "-")
    }

    /// The text and its origin for errors ("--desired-from t.yaml",
    /// "--desired-cmd output"); `flag` is the family (`--desired`). A file
    /// is read off the runtime thread, a command runs under `limit`.
    pub async fn read_text(&self, flag: &str, limit: Duration) -> Result<(String, String), String> {
        match self {
            DocSource::File(path) => {
                let (path, what) = (path.clone(), format!("{flag}-from"));
                tokio::task::spawn_blocking(move || {
                    let origin = format!("{what} {}", path.display());
                    read_capped(&path, &what).map(|t| (t, origin))
                })
                .await
                .unwrap_or_else(|e| Err(format!("{flag}-from: {e}")))
            }
            DocSource::Cmd(cmd) => {
                let what = format!("{flag}-cmd");
                let text = run_cmd(&what, cmd, limit).await?;
                Ok((text, format!("{what} output")))
            }
        }
    }
}

/// Reads the pool's desired state (`--desired-from`/`--desired-cmd`, one
/// item picked by `--desired-name`). `check --wait` calls it every round.
pub async fn read_desired(
    source: &DocSource,
    pick: Option<&str>,
    limit: Duration,
) -> Result<PoolDesired, String> {
    let (text, origin) = source.read_text("--desired", limit).await?;
    desired::parse_pool(&text, &origin, pick).map_err(|e| e.to_string())
}

/// Reads the expected count: a file off the runtime thread, a command
/// under `limit`.
pub async fn read_expected(source: &ExpectSource, limit: Duration) -> Result<usize, String> {
    let (text, origin) = source.read_text("--expect", limit).await?;
    expect::parse_replicas(&text, &origin).map_err(|e| e.to_string())
}

/// Runs `--expect-cmd` like `--nodes-cmd` and returns the `spec.replicas`
/// of the MachineDeployment it printed.
pub async fn run_expect_cmd(cmd: &str, limit: Duration) -> Result<usize, String> {
    let text = run_cmd("--expect-cmd", cmd, limit).await?;
    expect::parse_replicas(&text, "--expect-cmd output").map_err(|e| e.to_string())
}

/// Runs `sh -c CMD` under `limit` and returns its standard output; `flag`
/// names it in the one-line errors.
pub async fn run_cmd(flag: &str, cmd: &str, limit: Duration) -> Result<String, String> {
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(cmd);
    let capture = Capture {
        stdout: Keep::Head(MAX_DOCUMENT_BYTES),
        stderr: Keep::Head(MAX_STDERR_BYTES),
        // The shell may have exited while something it started still runs.
        kill_group_after_exit: true,
    };
    let ran = hostio::run(sh, limit, capture, None)
        .await
        .map_err(|e| format!("{flag}: cannot start sh: {e}"))?;
    if ran.timed_out {
        return Err(format!(
            "{flag} timed out after {}",
            crate::text::fmt_duration(limit)
        ));
    }
    let Some(status) = ran.status else {
        return Err(format!("{flag}: the command could not be reaped"));
    };
    if !status.success() {
        let text = String::from_utf8_lossy(&ran.stderr);
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "{flag} failed ({status}){}{}",
            if first.is_empty() { "" } else { ": " },
            crate::text::clean_line(first.trim())
        ));
    }
    if ran.stdout_overflowed {
        return Err(format!(
            "{flag} printed more than {} MiB",
            MAX_DOCUMENT_BYTES >> 20
        ));
    }
    String::from_utf8(ran.stdout).map_err(|_| format!("{flag} printed non-UTF-8 output"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn command_lines_and_node_lists() {
        let n = run_nodes_cmd("printf 'a\\n# c\\n[::1]:7\\n'", 9, Duration::from_secs(5))
            .await
            .unwrap();
        let got: Vec<_> = n.iter().map(Node::address_display).collect();
        assert_eq!(got, ["a:9", "[::1]:7"]);
        let json = r#"echo '{"kind":"NodeList","items":[{"metadata":{"name":"w1"},"status":{"addresses":[{"type":"InternalIP","address":"10.1.1.1"}]}}]}'"#;
        let n = run_nodes_cmd(json, 9, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            (n[0].name.as_str(), n[0].address_display().as_str()),
            ("w1", "10.1.1.1:9")
        );
    }

    #[tokio::test]
    async fn command_failures_are_one_line() {
        let e = run_nodes_cmd("echo 'no such pool' >&2; exit 3", 9, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            e.contains("exit status: 3") && e.ends_with(": no such pool"),
            "{e}"
        );
        let e = run_nodes_cmd("echo 'bad host'", 9, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.starts_with("--nodes-cmd output line 1: "), "{e}");
    }

    #[tokio::test]
    async fn hung_command_is_killed_with_its_children() {
        // Unique durations mark the two sleeps in the process table.
        let id = std::process::id();
        let cmd = format!("sleep 1000.{id} & exec sleep 1001.{id}");
        let marker = format!("sleep 100[01][.]{id}");
        let started = std::time::Instant::now();
        let e = run_nodes_cmd(&cmd, 9, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(e.contains("timed out after 300ms"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(3));
        // Neither sleep survives: the whole group was killed.
        std::thread::sleep(Duration::from_millis(100));
        let ps = std::process::Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .unwrap();
        assert!(
            ps.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&ps.stdout)
        );
    }

    #[tokio::test]
    async fn expected_count_from_a_file_or_a_command() {
        let dir = tempfile::tempdir().unwrap();
        let md = dir.path().join("md.json");
        std::fs::write(
            &md,
            include_str!("../../tests/fixtures/capi/machinedeployment-v1beta2.json"),
        )
        .unwrap();
        assert_eq!(read_expect_from(&md), Ok(3));
        let cmd = format!("cat '{}'", md.display());
        assert_eq!(run_expect_cmd(&cmd, Duration::from_secs(5)).await, Ok(3));
        let e = run_expect_cmd("echo 'not found' >&2; exit 1", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("--expect-cmd failed (exit status: 1): not found"),
            "{e}"
        );
        let e = run_expect_cmd("echo '{}'", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("--expect-cmd output: expected a MachineDeployment"),
            "{e}"
        );
        let e = read_expect_from(&dir.path().join("absent.json")).unwrap_err();
        assert!(e.starts_with("--expect-from "), "{e}");
    }

    #[tokio::test]
    async fn the_pools_desired_state_from_a_file_or_a_command() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tct.yaml");
        std::fs::write(
            &f,
            include_str!("../../tests/fixtures/desired/cozystack-tct.yaml"),
        )
        .unwrap();
        let limit = Duration::from_secs(5);
        let p = read_desired(&DocSource::File(f.clone()), None, limit)
            .await
            .unwrap();
        assert_eq!(p.sysctls["user.max_user_namespaces"].value, "11255");
        let cmd = DocSource::Cmd(format!("cat '{}'", f.display()));
        assert_eq!(read_desired(&cmd, None, limit).await.unwrap(), p);
        let e = read_desired(&DocSource::Cmd("echo '[]'".into()), None, limit)
            .await
            .unwrap_err();
        assert!(e.starts_with("--desired-cmd output: "), "{e}");
        let e = read_desired(&DocSource::File(dir.path().join("absent")), None, limit)
            .await
            .unwrap_err();
        assert!(e.starts_with("--desired-from "), "{e}");
        let e = read_desired(&DocSource::Cmd("exit 4".into()), None, limit)
            .await
            .unwrap_err();
        assert!(
            e.starts_with("--desired-cmd failed (exit status: 4)"),
            "{e}"
        );
    }

    #[test]
    fn capped_reads() {
        let e = read_capped(Path::new("/nonexistent/x"), "--nodes-file").unwrap_err();
        assert!(e.starts_with("--nodes-file /nonexistent/x: "), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bin");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_capped(&p, "f")
            .unwrap_err()
            .ends_with("not valid UTF-8"));
    }
}
