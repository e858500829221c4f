//! `HostPaths`: every path the agent reads, under configurable roots.
//!
//! Nothing outside this module spells a host path. On a Talos node the
//! extension service spec bind-mounts each host path read-only onto the same
//! path inside the service container, so the defaults below are right both on
//! a plain Linux machine and on Talos; tests point the roots at fixture trees.

use std::path::{Path, PathBuf};

/// Default CRI endpoint, relative to the host root.
pub const DEFAULT_CRI_SOCKET: &str = "run/containerd/containerd.sock";
/// Where the Talos gVisor extension installs `runsc` and its shim.
pub const DEFAULT_BIN_DIR: &str = "usr/local/bin";
/// Where Talos reads CRI drop-ins from (and where extensions put them).
pub const DEFAULT_CRI_CONF_DIR: &str = "etc/cri/conf.d";

/// The roots every host path hangs from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// procfs of the host (`/proc`): sysctls, boot id, our own uid_map.
    pub proc_root: PathBuf,
    /// sysfs of the host (`/sys`): device presence when `/dev` is not mounted.
    pub sys_root: PathBuf,
    /// The host's filesystem root (`/`): /etc, /usr/local/bin, /run.
    pub host_root: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            sys_root: PathBuf::from("/sys"),
            host_root: PathBuf::from("/"),
        }
    }
}

impl HostPaths {
    /// Roots for tests: `<root>/proc`, `<root>/sys`, `<root>` as the host root.
    pub fn under(root: &Path) -> Self {
        Self {
            proc_root: root.join("proc"),
            sys_root: root.join("sys"),
            host_root: root.to_path_buf(),
        }
    }

    /// `/proc/sys`.
    pub fn proc_sys(&self) -> PathBuf {
        self.proc_root.join("sys")
    }

    /// `/proc/self/uid_map`: tells whether we run in the initial user namespace.
    pub fn self_uid_map(&self) -> PathBuf {
        self.proc_root.join("self/uid_map")
    }

    /// `/proc/sys/kernel/random/boot_id`.
    pub fn boot_id(&self) -> PathBuf {
        self.proc_sys().join("kernel/random/boot_id")
    }

    /// `/proc/sys/kernel/osrelease`.
    pub fn kernel_release(&self) -> PathBuf {
        self.proc_sys().join("kernel/osrelease")
    }

    /// `/proc/sys/kernel/hostname`: the kernel's (UTS namespace's) hostname.
    pub fn kernel_hostname(&self) -> PathBuf {
        self.proc_sys().join("kernel/hostname")
    }

    /// A path under the host root; `rel` must be relative.
    pub fn host(&self, rel: &str) -> PathBuf {
        self.host_root.join(rel.trim_start_matches('/'))
    }

    /// The host's `/etc/hostname` (the service runs in its own UTS namespace).
    pub fn etc_hostname(&self) -> PathBuf {
        self.host("etc/hostname")
    }

    /// The host's `/etc/machine-id`.
    pub fn machine_id(&self) -> PathBuf {
        self.host("etc/machine-id")
    }

    /// os-release candidates, in the order os-release(5) gives.
    pub fn os_release(&self) -> [PathBuf; 2] {
        [self.host("etc/os-release"), self.host("usr/lib/os-release")]
    }

    /// `/dev/kvm` on the host, when `/dev` is visible.
    pub fn dev_kvm(&self) -> PathBuf {
        self.host("dev/kvm")
    }

    /// `/sys/class/misc/kvm`: present when the kvm device exists, also inside
    /// a container whose `/dev` is a private tmpfs (Talos extension services).
    pub fn sys_kvm(&self) -> PathBuf {
        self.sys_root.join("class/misc/kvm")
    }

    /// The default directory holding `runsc` and `containerd-shim-runsc-v1`.
    pub fn default_bin_dir(&self) -> PathBuf {
        self.host(DEFAULT_BIN_DIR)
    }

    /// The default CRI drop-in directory.
    pub fn default_cri_conf_dir(&self) -> PathBuf {
        self.host(DEFAULT_CRI_CONF_DIR)
    }

    /// The default CRI endpoint, `unix://<host root>/run/containerd/containerd.sock`.
    pub fn default_cri_endpoint(&self) -> String {
        format!("unix://{}", self.host(DEFAULT_CRI_SOCKET).display())
    }

    /// The host paths a Talos service spec must bind-mount for the defaults
    /// above to see the host (checked against `extension/sandbox-readiness.yaml`).
    /// `/proc/sys` and `/sys` need no mount: the service gets the host's.
    /// `/etc/hostname` is absent: Talos never writes that file, and machined
    /// answers a missing mount source with MkdirAll on its read-only root, so
    /// the service would fail to start; the hostname comes from the UTS
    /// namespace instead (copied from the host's when the container starts).
    pub fn talos_bind_mounts() -> &'static [&'static str] {
        &[
            "/etc/os-release",
            "/etc/machine-id",
            "/etc/cri/conf.d",
            "/usr/local/bin",
            "/run/containerd",
            "/var/lib/containerd",
            // `serve --kubeconfig`: kubelet's kubeconfig and its rotated
            // client certificate (directories: the files come later).
            "/etc/kubernetes",
            "/var/lib/kubelet",
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_hang_from_the_host_root() {
        let p = HostPaths::under(Path::new("/fx"));
        assert_eq!(p.etc_hostname(), PathBuf::from("/fx/etc/hostname"));
        assert_eq!(p.host("/usr/local/bin"), PathBuf::from("/fx/usr/local/bin"));
        assert_eq!(p.proc_sys(), PathBuf::from("/fx/proc/sys"));
        assert_eq!(
            p.default_cri_endpoint(),
            "unix:///fx/run/containerd/containerd.sock"
        );
    }

    #[test]
    fn every_default_host_path_is_covered_by_a_talos_mount() {
        let p = HostPaths::default();
        let used = [
            p.machine_id(),
            p.os_release()[0].clone(),
            p.default_bin_dir(),
            p.default_cri_conf_dir(),
            p.host(DEFAULT_CRI_SOCKET),
        ];
        for path in used {
            assert!(
                HostPaths::talos_bind_mounts()
                    .iter()
                    .any(|m| path.starts_with(m)),
                "{} is not under any Talos bind mount",
                path.display()
            );
        }
    }
}
