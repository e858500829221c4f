//! A real kubelet node of `scripts/kubelet-node.sh` (kubelet v1.36.3 on the
//! pinned node runtime, joined to a control plane `scripts/control-plane.sh
//! up` made), taken down when dropped. Shared by the kubelet matrix (the
//! node crate) and the controller's pod proof (included by path).

#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use super::cluster::RealCluster;

/// The repository's `scripts/NAME`, from either crate of the workspace.
pub fn script(name: &str) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let own = here.join("scripts").join(name);
    if own.exists() {
        own
    } else {
        here.join("..").join("scripts").join(name)
    }
}

pub struct KubeletNode {
    pub dir: PathBuf,
    pub name: String,
    /// The node's host tree (`DIR/nodes/NAME`).
    pub root: PathBuf,
}

impl KubeletNode {
    /// `kubelet-node.sh up DIR NAME OPTS`: returns once the Node is Ready.
    pub fn up(c: &RealCluster, name: &str, opts: &[&str]) -> KubeletNode {
        let out = Command::new(script("kubelet-node.sh"))
            .arg("up")
            .arg(c.dir())
            .arg(name)
            .args(opts)
            .output()
            .unwrap();
        let node = KubeletNode {
            dir: c.dir().to_path_buf(),
            name: name.to_string(),
            root: c.dir().join("nodes").join(name),
        };
        assert!(
            out.status.success(),
            "kubelet-node.sh up {name} {opts:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        node
    }

    /// `kubelet-node.sh down`: kubelet and containerd stopped, nothing
    /// left on the host (the Node object stays).
    pub fn down(&self) {
        let out = Command::new(script("kubelet-node.sh"))
            .arg("down")
            .arg(&self.dir)
            .arg(&self.name)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubelet-node.sh down {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for KubeletNode {
    fn drop(&mut self) {
        let _ = Command::new(script("kubelet-node.sh"))
            .arg("down")
            .arg(&self.dir)
            .arg(&self.name)
            .output();
    }
}
