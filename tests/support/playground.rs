//! `scripts/playground` as the tests drive it: `up` and `down` on a
//! directory with this build's programs (SR_PLAYGROUND_BUILD: `up` runs no
//! cargo), and a guard that runs `down` however the test ends.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::Value;

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/playground")
}

/// The directory of this build's programs, from the agent's path `bin`: the
/// agent, the controller and the providers (`cargo test --workspace
/// --no-run` builds all three).
pub fn build(bin: &str) -> PathBuf {
    let dir = PathBuf::from(bin).parent().unwrap().to_path_buf();
    for b in ["sandbox-readiness-controller", "examples/test-providers"] {
        assert!(
            dir.join(b).is_file(),
            "{} is not built (cargo test --workspace --no-run builds it)",
            dir.join(b).display()
        );
    }
    dir
}

/// `scripts/playground CMD DIR` with the programs in `build`.
pub fn run(cmd: &str, dir: &Path, build: &Path) -> Output {
    Command::new(script())
        .args([cmd, dir.to_str().unwrap()])
        .env("SR_PLAYGROUND_BUILD", build)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `down` when the test ends, passed or not; and, should the test process
/// be killed (the runner's timeout), a watchdog in a session of its own
/// that runs `down` once the process is gone (it ends by itself once DIR
/// is: `down` removes it).
pub struct Down(PathBuf, PathBuf, std::process::Child);
impl Down {
    /// Makes DIR (empty, as `up` takes it) and watches it from now.
    pub fn guard(dir: &Path, build: &Path) -> Down {
        const WATCH: &str = r#"p=$1 s=$2 d=$3
while kill -0 "$p" 2>/dev/null; do
	[ -d "$d" ] || exit 0
	sleep 1
done
SR_PLAYGROUND_BUILD=$4 "$s" down "$d" >/dev/null 2>&1"#;
        std::fs::create_dir(dir).unwrap();
        let watchdog = Command::new("setsid")
            .args(["sh", "-c", WATCH, "sr-playground-watchdog"])
            .arg(std::process::id().to_string())
            .arg(script())
            .arg(dir)
            .arg(build)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Down(dir.to_path_buf(), build.to_path_buf(), watchdog)
    }
}
impl Drop for Down {
    fn drop(&mut self) {
        let _ = run("down", &self.0, &self.1);
        let _ = self.2.kill();
        let _ = self.2.wait();
    }
}

/// An object's condition of type `kind` (`status.conditions`).
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// That condition's status, "" when there is none.
pub fn status(obj: &Value, kind: &str) -> String {
    condition(obj, kind)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}
