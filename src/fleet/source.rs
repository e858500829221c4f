//! Reading node sources: files (size-capped), stdin, and `--nodes-cmd`
//! (a shell command under a timeout, killed with its whole process group).

use std::{io::Read, path::Path, process::Stdio, time::Duration};

use tokio::{io::AsyncReadExt, process::Command};

use super::nodes::{self, Node};

/// Node documents larger than this are refused (a NodeList of 5000 nodes
/// is about 50 MiB with managed fields).
pub const MAX_DOCUMENT_BYTES: u64 = 128 * 1024 * 1024;

/// Keep this much of a failing command's stderr for the error line.
const MAX_STDERR_BYTES: u64 = 64 * 1024;

/// Reads a file, or stdin for `-`, refusing more than `MAX_DOCUMENT_BYTES`
/// (so `/dev/zero` is an error, not a hang or an out-of-memory).
pub fn read_capped(path: &Path, what: &str) -> Result<String, String> {
    let mut buf = Vec::new();
    let shown = path.display();
    let read = if path == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(MAX_DOCUMENT_BYTES + 1)
            .read_to_end(&mut buf)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_DOCUMENT_BYTES + 1).read_to_end(&mut buf))
    };
    read.map_err(|e| format!("{what} {shown}: {e}"))?;
    if buf.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(format!(
            "{what} {shown}: larger than {} MiB",
            MAX_DOCUMENT_BYTES >> 20
        ));
    }
    String::from_utf8(buf).map_err(|_| format!("{what} {shown}: not UTF-8 text"))
}

/// Runs `sh -c CMD` and parses its standard output as nodes (NodeList JSON
/// or one entry per line). Errors are one line: the exit status and the
/// first line of stderr, a timeout, or the parse error.
pub async fn run_nodes_cmd(cmd: &str, port: u16, limit: Duration) -> Result<Vec<Node>, String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout kills what it started too
        // (kubectl under sh), not only the shell.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("--nodes-cmd: cannot start sh: {e}"))?;
    let pid = child.id();
    let (Some(mut stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("--nodes-cmd: no pipes to the command".into());
    };
    let run = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut stderr = stderr.take(MAX_STDERR_BYTES);
        let mut capped = (&mut stdout).take(MAX_DOCUMENT_BYTES + 1);
        let (o, e, status) = tokio::join!(
            capped.read_to_end(&mut out),
            stderr.read_to_end(&mut err),
            child.wait()
        );
        (o.map(|_| out), e.map(|_| err), status)
    };
    let (out, err, status) = match tokio::time::timeout(limit, run).await {
        Ok(r) => r,
        Err(_) => {
            kill_group(pid);
            return Err(format!(
                "--nodes-cmd timed out after {}",
                crate::text::fmt_duration(limit)
            ));
        }
    };
    // The shell may have exited while something it started still runs.
    kill_group(pid);
    let status = status.map_err(|e| format!("--nodes-cmd: {e}"))?;
    let out = out.map_err(|e| format!("--nodes-cmd: reading its output: {e}"))?;
    if !status.success() {
        let err = err.unwrap_or_default();
        let text = String::from_utf8_lossy(&err);
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "--nodes-cmd failed ({status}){}{}",
            if first.is_empty() { "" } else { ": " },
            crate::text::clean_line(first.trim())
        ));
    }
    if out.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(format!(
            "--nodes-cmd printed more than {} MiB",
            MAX_DOCUMENT_BYTES >> 20
        ));
    }
    let text =
        String::from_utf8(out).map_err(|_| "--nodes-cmd printed non-UTF-8 output".to_string())?;
    nodes::parse_cmd_output(&text, port).map_err(|e| e.to_string())
}

fn kill_group(pid: Option<u32>) {
    let Some(pgid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals the process group we
    // created for the command (process_group(0) made its pid the group id);
    // it touches no memory of ours. ESRCH (already gone) is fine.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
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

    #[test]
    fn capped_reads() {
        let e = read_capped(Path::new("/nonexistent/x"), "--nodes-file").unwrap_err();
        assert!(e.starts_with("--nodes-file /nonexistent/x: "), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bin");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_capped(&p, "f")
            .unwrap_err()
            .ends_with("not UTF-8 text"));
    }
}
