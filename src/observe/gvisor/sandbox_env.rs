//! Whether `runsc do true` can run at all where the agent runs, decided
//! before starting it, so the sandbox probe never reports a failure that
//! says nothing about the node.
//!
//! Three things stop runsc inside a Talos extension service whatever the
//! node can do (reference/talos-node-runtime.md A1): the container has no
//! cgroup filesystem at `/sys/fs/cgroup` (runsc always creates a cgroup for
//! the sandbox); containerd's default seccomp profile, which machined always
//! applies, never allows `pivot_root(2)`, which runsc's gofer and sandbox
//! call; and `runsc do` uses the caller's own `/` as the sandbox root, which
//! there holds no `true` to run.
//!
//! All three are about the agent itself, not the host: runsc runs as the
//! agent's child, in the agent's mount namespace and under its seccomp
//! filter, and finds cgroups through its own mounts. So they are read from
//! the agent's own view ([`SandboxEnv::default`]: `/proc/self/status`,
//! `/sys/fs/cgroup`, `/`), never from [`crate::host::HostPaths`], whose
//! roots may point at a host tree mounted elsewhere (`--sys-root`). A
//! hidden test flag can re-root them at a fixture tree.

use std::{
    ffi::OsStr,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use nix::{errno::Errno, sys::statfs};
use procfs_core::{process::Status, FromRead};

use crate::hostio;

/// `/proc/self/status` is a few KiB.
const MAX_STATUS_BYTES: usize = 64 * 1024;

/// Where the agent's own view of what runsc needs is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxEnv {
    /// The agent's own `/proc/self/status` (its `Seccomp:` mode).
    pub self_status: PathBuf,
    /// The agent's own `/sys/fs/cgroup`.
    pub cgroup_dir: PathBuf,
    /// The root `runsc do` gives the sandbox: the agent's own `/`.
    pub sandbox_root: PathBuf,
}

impl Default for SandboxEnv {
    fn default() -> Self {
        Self::under(Path::new("/"))
    }
}

impl SandboxEnv {
    /// The same paths under `root` (tests: a fixture tree).
    pub fn under(root: &Path) -> Self {
        Self {
            self_status: root.join("proc/self/status"),
            cgroup_dir: root.join("sys/fs/cgroup"),
            sandbox_root: root.to_path_buf(),
        }
    }

    /// Every reason `runsc do true` cannot run here; empty when it can (or
    /// when nothing could be told, so that runsc itself gets to answer).
    pub fn blockers(&self) -> Vec<String> {
        let cgroup = cgroup_blocker(
            &self.cgroup_dir,
            fs_kind(&self.cgroup_dir),
            fs_kind(&self.cgroup_dir.join("cpu")),
            fs_kind(&self.cgroup_dir.join("memory")),
        );
        let seccomp = own_status(&self.self_status)
            .and_then(|s| seccomp_mode(&s))
            .and_then(seccomp_blocker);
        let path = hostio::child_path();
        let true_bin = (find_executable(&self.sandbox_root, &path, "true").is_none())
            .then(|| no_true_blocker(&self.sandbox_root, &path));
        [cgroup, seccomp, true_bin].into_iter().flatten().collect()
    }
}

/// What a directory's filesystem is, as far as cgroups matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// The unified hierarchy (cgroup2).
    Cgroup2,
    /// A cgroup v1 controller hierarchy.
    Cgroup1,
    /// tmpfs: the usual root of a v1 layout.
    Tmpfs,
    /// sysfs: the directory of a `/sys` with nothing mounted on it.
    Sysfs,
    /// Some other filesystem.
    Other,
    /// The directory does not exist.
    Missing,
    /// statfs failed otherwise.
    Unknown,
}

/// The filesystem at `path`.
pub fn fs_kind(path: &Path) -> FsKind {
    match statfs::statfs(path) {
        Ok(st) => {
            let t = st.filesystem_type();
            if t == statfs::CGROUP2_SUPER_MAGIC {
                FsKind::Cgroup2
            } else if t == statfs::CGROUP_SUPER_MAGIC {
                FsKind::Cgroup1
            } else if t == statfs::TMPFS_MAGIC {
                FsKind::Tmpfs
            } else if t == statfs::SYSFS_MAGIC {
                FsKind::Sysfs
            } else {
                FsKind::Other
            }
        }
        Err(Errno::ENOENT | Errno::ENOTDIR) => FsKind::Missing,
        Err(_) => FsKind::Unknown,
    }
}

/// Whether runsc finds a cgroup hierarchy it can put the sandbox in: cgroup2
/// at `dir`, or a v1 layout with the cpu and memory controllers runsc treats
/// as mandatory. Pure.
pub fn cgroup_blocker(dir: &Path, root: FsKind, cpu: FsKind, memory: FsKind) -> Option<String> {
    let what = match root {
        FsKind::Cgroup2 | FsKind::Unknown => return None,
        FsKind::Tmpfs if cpu == FsKind::Cgroup1 && memory == FsKind::Cgroup1 => return None,
        FsKind::Tmpfs => "a tmpfs without the cpu and memory cgroup v1 controllers",
        FsKind::Cgroup1 => "a single cgroup v1 hierarchy",
        FsKind::Sysfs => "the bare sysfs directory, no cgroup filesystem",
        FsKind::Other => "not a cgroup filesystem",
        FsKind::Missing => "missing",
    };
    Some(format!(
        "the agent has no cgroup filesystem at {} ({what}), and runsc creates a cgroup for every sandbox",
        dir.display()
    ))
}

/// A `/proc/<pid>/status` file, read through the host-file reader (capped,
/// non-blocking, regular files only) and parsed by procfs-core. `None` when
/// it cannot be read or parsed: nothing can be told, so runsc answers.
pub fn own_status(path: &Path) -> Option<Status> {
    let reader = hostio::open_capped(path, MAX_STATUS_BYTES).ok()?;
    Status::from_read(reader).ok()
}

/// The `Seccomp:` mode of a status (0 none, 1 strict, 2 filter; absent
/// before Linux 3.8 or without CONFIG_SECCOMP). Pure.
pub fn seccomp_mode(status: &Status) -> Option<u8> {
    status.seccomp.and_then(|m| u8::try_from(m).ok())
}

/// Why a seccomp mode stops runsc, if it does. Pure.
pub fn seccomp_blocker(mode: u8) -> Option<String> {
    match mode {
        0 => None,
        1 => Some("the agent runs in strict seccomp mode (Seccomp: 1)".into()),
        _ => Some(format!(
            "a seccomp filter is in force on the agent (Seccomp: {mode}), and container runtimes' default profiles (always applied to Talos extension services) refuse pivot_root(2), which runsc's sandbox setup calls"
        )),
    }
}

fn no_true_blocker(root: &Path, path: &OsStr) -> String {
    format!(
        "no `true` executable on PATH {} inside {}, the root `runsc do` gives the sandbox",
        path.to_string_lossy(),
        root.display()
    )
}

/// The first executable regular file `name` on `path` (a PATH value),
/// resolved inside `root` the way the sandbox resolves it inside its root
/// filesystem. Relative PATH entries are ignored, as the sandbox does.
pub fn find_executable(root: &Path, path: &OsStr, name: &str) -> Option<PathBuf> {
    path.to_string_lossy()
        .split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| root.join(d.trim_start_matches('/')).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A whole status file as Linux 6.18 writes it (the agent's, inside a
    /// container with a seccomp filter).
    const STATUS: &str = "Name:\tsandbox-readiness\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t7\nNgid:\t0\nPid:\t7\nPPid:\t1\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t0 \nNStgid:\t7\nNSpid:\t7\nNSpgid:\t1\nNSsid:\t1\nKthread:\t0\nVmPeak:\t   12104 kB\nVmSize:\t   12104 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\nVmHWM:\t    3880 kB\nVmRSS:\t    3880 kB\nRssAnon:\t     900 kB\nRssFile:\t    2980 kB\nRssShmem:\t       0 kB\nVmData:\t    1352 kB\nVmStk:\t     132 kB\nVmExe:\t    3424 kB\nVmLib:\t       8 kB\nVmPTE:\t      52 kB\nVmSwap:\t       0 kB\nHugetlbPages:\t       0 kB\nCoreDumping:\t0\nTHP_enabled:\t1\nuntag_mask:\t0xffffffffffffffff\nThreads:\t3\nSigQ:\t0/94971\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000001000\nSigCgt:\t0000000100004002\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffbf\nCapEff:\t000001fffeffffbf\nCapBnd:\t000001fffeffffbf\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\nSpeculation_Store_Bypass:\tthread force mitigated\nSpeculationIndirectBranch:\tconditional force disabled\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed:\t00000000,00000001\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t3\n";

    fn parse(text: &str) -> Option<Status> {
        Status::from_read(text.as_bytes()).ok()
    }

    #[test]
    fn reads_the_seccomp_mode_from_a_status_file() {
        let status = parse(STATUS).unwrap();
        assert_eq!(seccomp_mode(&status), Some(2));
        // The capabilities of the same file, as procfs-core reads them.
        assert_eq!(status.capbnd, Some(0x1fffeffffbf));
        let none = parse(&STATUS.replace("Seccomp:\t2", "Seccomp:\t0")).unwrap();
        assert_eq!(seccomp_mode(&none), Some(0));
        // Seccomp_filters must not be read as Seccomp.
        let old_kernel = parse(&STATUS.replace("Seccomp:\t2\n", "")).unwrap();
        assert_eq!(seccomp_mode(&old_kernel), None);
        // Not a status file: nothing to tell.
        assert!(parse("").is_none());
        assert!(parse("Seccomp:\t2\n").is_none());
        assert_eq!(seccomp_blocker(0), None);
        let b = seccomp_blocker(2).unwrap();
        assert!(b.contains("Seccomp: 2") && b.contains("pivot_root"), "{b}");
        assert!(seccomp_blocker(1).is_some());
    }

    #[test]
    fn a_status_fixture_with_a_filter_blocks_and_one_without_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let env = SandboxEnv::under(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
        std::fs::write(&env.self_status, STATUS).unwrap();
        let blockers = env.blockers();
        assert!(
            blockers.iter().any(|b| b.contains("Seccomp: 2")),
            "{blockers:?}"
        );
        std::fs::write(
            &env.self_status,
            STATUS.replace("Seccomp:\t2", "Seccomp:\t0"),
        )
        .unwrap();
        assert!(
            !env.blockers().iter().any(|b| b.contains("seccomp")),
            "{:?}",
            env.blockers()
        );
    }

    #[test]
    fn the_agents_own_status_is_readable_through_hostio() {
        // procfs files are regular files: the capped reader takes them, so
        // production reads a real mode, not a silent "unknown".
        let status = own_status(&SandboxEnv::default().self_status).expect("/proc/self/status");
        assert!(seccomp_mode(&status).is_some(), "{status:?}");
    }

    #[test]
    fn cgroup_classification() {
        let dir = Path::new("/sys/fs/cgroup");
        use FsKind::*;
        assert_eq!(cgroup_blocker(dir, Cgroup2, Missing, Missing), None);
        assert_eq!(cgroup_blocker(dir, Tmpfs, Cgroup1, Cgroup1), None);
        // statfs failing otherwise tells nothing: let runsc answer.
        assert_eq!(cgroup_blocker(dir, Unknown, Missing, Missing), None);
        // A Talos extension container: /sys is a fresh sysfs, nothing on it.
        let talos = cgroup_blocker(dir, Sysfs, Missing, Missing).unwrap();
        assert!(
            talos.contains("/sys/fs/cgroup") && talos.contains("no cgroup filesystem"),
            "{talos}"
        );
        assert!(cgroup_blocker(dir, Tmpfs, Cgroup1, Missing).is_some());
        assert!(cgroup_blocker(dir, Missing, Missing, Missing).is_some());
        assert!(cgroup_blocker(dir, Other, Missing, Missing).is_some());
    }

    #[test]
    fn cgroup_fixture_directories_are_not_cgroup_filesystems() {
        let dir = tempfile::tempdir().unwrap();
        let env = SandboxEnv::under(dir.path());
        // No sys/fs/cgroup at all, then a plain directory.
        assert!(env.blockers().iter().any(|b| b.contains("(missing)")));
        std::fs::create_dir_all(&env.cgroup_dir).unwrap();
        assert_ne!(fs_kind(&env.cgroup_dir), FsKind::Cgroup2);
        assert!(
            env.blockers()
                .iter()
                .any(|b| b.contains("no cgroup filesystem")),
            "{:?}",
            env.blockers()
        );
    }

    #[test]
    fn true_is_resolved_on_path_inside_the_sandbox_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let path = OsStr::new("relative:/usr/local/bin:/bin");
        assert_eq!(find_executable(root, path, "true"), None);
        std::fs::create_dir_all(root.join("bin")).unwrap();
        // Not executable: not found.
        std::fs::write(root.join("bin/true"), "").unwrap();
        assert_eq!(find_executable(root, path, "true"), None);
        std::fs::set_permissions(
            root.join("bin/true"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_eq!(
            find_executable(root, path, "true"),
            Some(root.join("bin/true"))
        );
        // A relative PATH entry is not searched.
        std::fs::create_dir_all(root.join("relative")).unwrap();
        assert_eq!(find_executable(root, OsStr::new("relative"), "true"), None);
        let env = SandboxEnv::under(root);
        let msg = no_true_blocker(&env.sandbox_root, path);
        assert!(
            msg.contains("no `true`") && msg.contains("/usr/local/bin"),
            "{msg}"
        );
    }
}
