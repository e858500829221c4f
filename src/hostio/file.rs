//! Capped, non-blocking, regular-file-only reads of host files.
//!
//! The file is opened with `O_NONBLOCK | O_CLOEXEC` (a FIFO planted where a
//! host file should be must not hang an observation), the open descriptor is
//! checked with `fstat` (not the path, which could be swapped in between),
//! and at most `cap + 1` bytes are read, so an endless file is an error
//! rather than a hang or an out-of-memory.

use std::{
    ffi::OsString,
    fmt,
    fs::{File, OpenOptions},
    io::{self, Read},
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::{Component, Path, PathBuf},
};

use thiserror::Error;

/// What a non-regular file turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialFile {
    Fifo,
    Socket,
    Device,
    Other,
}

impl fmt::Display for SpecialFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Fifo => "a FIFO",
            Self::Socket => "a socket",
            Self::Device => "a device",
            Self::Other => "a special file",
        })
    }
}

/// Why a host file could not be read. Renders as one line naming the path;
/// [`ReadError::reason`] is the same without the path, for callers whose
/// report already names it.
#[derive(Debug, Error)]
pub enum ReadError {
    /// Opening or reading failed (a directory reads as `EISDIR`, as read(2)
    /// on it would).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read {}: {kind}, not a regular file", path.display())]
    NotRegular { path: PathBuf, kind: SpecialFile },
    #[error("cannot read {}: larger than {cap} bytes", path.display())]
    TooLarge { path: PathBuf, cap: usize },
    #[error("cannot read {}: not valid UTF-8", path.display())]
    NotUtf8 { path: PathBuf },
    /// A host path with a `..` component: it could name a file outside
    /// the host root.
    #[error("cannot read {}: `..` is not allowed in a host path", path.display())]
    ParentDir { path: PathBuf },
}

impl ReadError {
    /// The path that could not be read.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. }
            | Self::NotRegular { path, .. }
            | Self::TooLarge { path, .. }
            | Self::NotUtf8 { path }
            | Self::ParentDir { path } => path,
        }
    }

    /// The reason alone, without the path.
    pub fn reason(&self) -> String {
        match self {
            Self::Io { source, .. } => source.to_string(),
            Self::NotRegular { kind, .. } => format!("{kind}, not a regular file"),
            Self::TooLarge { cap, .. } => format!("larger than {cap} bytes"),
            Self::NotUtf8 { .. } => "not valid UTF-8".to_string(),
            Self::ParentDir { .. } => "`..` is not allowed in a host path".to_string(),
        }
    }

    /// True when the file does not exist (often not an error for a caller).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// True when the path is a directory or a special file.
    pub fn is_not_a_file(&self) -> bool {
        match self {
            Self::NotRegular { .. } => true,
            Self::Io { source, .. } => source.raw_os_error() == Some(libc::EISDIR),
            _ => false,
        }
    }

    /// The underlying OS error, if any.
    pub fn io(&self) -> Option<&io::Error> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A capped reader over one open regular file: reading past `cap` bytes
/// fails with `InvalidData` instead of returning more. Feed it to parsers
/// that take `impl Read` (procfs' `FromRead`/`FromBufRead`).
#[derive(Debug)]
pub struct CappedReader {
    inner: io::Take<File>,
    path: PathBuf,
    cap: usize,
    read: usize,
}

impl CappedReader {
    /// Reads everything left, mapping failures to [`ReadError`].
    pub fn read_all(mut self) -> Result<Vec<u8>, ReadError> {
        let mut buf = Vec::with_capacity(64);
        match self.inner.read_to_end(&mut buf) {
            Ok(_) if self.read + buf.len() > self.cap => Err(ReadError::TooLarge {
                path: self.path,
                cap: self.cap,
            }),
            Ok(_) => Ok(buf),
            Err(source) => Err(ReadError::Io {
                path: self.path,
                source,
            }),
        }
    }
}

impl Read for CappedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n;
        if self.read > self.cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is larger than {} bytes", self.path.display(), self.cap),
            ));
        }
        Ok(n)
    }
}

/// Opens a host file for a capped read: regular files only, non-blocking.
pub fn open_capped(path: &Path, cap: usize) -> Result<CappedReader, ReadError> {
    open_flags(path, cap, 0)
}

fn open_flags(path: &Path, cap: usize, flags: i32) -> Result<CappedReader, ReadError> {
    let io_err = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    // std adds O_CLOEXEC itself; O_NONBLOCK keeps a FIFO's open from waiting
    // for a writer (it has no effect on regular files).
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | flags)
        .open(path)
        .map_err(io_err)?;
    let kind = file.metadata().map_err(io_err)?.file_type();
    if kind.is_dir() {
        return Err(io_err(io::Error::from_raw_os_error(libc::EISDIR)));
    }
    if !kind.is_file() {
        let kind = if kind.is_fifo() {
            SpecialFile::Fifo
        } else if kind.is_socket() {
            SpecialFile::Socket
        } else if kind.is_char_device() || kind.is_block_device() {
            SpecialFile::Device
        } else {
            SpecialFile::Other
        };
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    Ok(CappedReader {
        inner: file.take(limit),
        path: path.to_path_buf(),
        cap,
        read: 0,
    })
}

/// Reads a whole host file of at most `cap` bytes.
pub fn read_capped_bytes(path: &Path, cap: usize) -> Result<Vec<u8>, ReadError> {
    open_capped(path, cap)?.read_all()
}

/// Reads a whole host text file of at most `cap` bytes; it must be UTF-8.
pub fn read_capped(path: &Path, cap: usize) -> Result<String, ReadError> {
    String::from_utf8(read_capped_bytes(path, cap)?).map_err(|_| ReadError::NotUtf8 {
        path: path.to_path_buf(),
    })
}

/// Reads a small value file (a sysctl, an id): invalid UTF-8 is replaced
/// rather than refused, and trailing newlines are removed.
pub fn read_value(path: &Path, cap: usize) -> Result<String, ReadError> {
    let bytes = read_capped_bytes(path, cap)?;
    Ok(String::from_utf8_lossy(&bytes)
        .trim_end_matches('\n')
        .to_string())
}

/// Most symlinks followed while resolving one path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Resolves the host path `path` (`/etc/cri/conf.d/runsc.toml`) under
/// `root` as if `root` were `/`, the way a chroot would: symlinks are
/// followed one component at a time, an absolute target starts again at
/// `root` and `..` in a target stops there, so the result never leaves
/// `root` (`runsc.toml -> /etc/shadow` is `<root>/etc/shadow`). `..` in
/// `path` itself is refused; at most 40 links are followed (as Linux does).
pub fn resolve_in_root(root: &Path, path: &Path) -> Result<PathBuf, ReadError> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let shown = root.join(rel);
    if rel.components().any(|c| c == Component::ParentDir) {
        return Err(ReadError::ParentDir { path: shown });
    }
    let io_err = |source| ReadError::Io {
        path: shown.clone(),
        source,
    };
    // Components still to walk, the next one last.
    let mut todo: Vec<OsString> = Vec::new();
    push_components(&mut todo, rel);
    let mut done = PathBuf::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            done.pop();
            continue;
        }
        let next = done.join(&name);
        let full = root.join(&next);
        if !std::fs::symlink_metadata(&full)
            .map_err(io_err)?
            .file_type()
            .is_symlink()
        {
            done = next;
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(io_err(io::Error::from_raw_os_error(libc::ELOOP)));
        }
        let target = std::fs::read_link(&full).map_err(io_err)?;
        if target.is_absolute() {
            done.clear();
        }
        push_components(&mut todo, &target);
    }
    Ok(root.join(done))
}

/// Pushes `path`'s names and `..`s onto `todo` so that its first is popped first.
fn push_components(todo: &mut Vec<OsString>, path: &Path) {
    for c in path.components().rev() {
        match c {
            Component::Normal(n) => todo.push(n.to_os_string()),
            Component::ParentDir => todo.push("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

/// Reads the host text file `path` under `root` (see [`resolve_in_root`])
/// of at most `cap` bytes, with [`read_capped`]'s rules.
pub fn read_in_root(root: &Path, path: &Path, cap: usize) -> Result<String, ReadError> {
    let resolved = resolve_in_root(root, path)?;
    // Resolved, it has no symlink left; one swapped in since is not followed.
    let bytes = open_flags(&resolved, cap, libc::O_NOFOLLOW)?.read_all()?;
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8 { path: resolved })
}

/// Reads a file the operator named on the command line (`check
/// --kube-nodes`, `--nodes-file`), or stdin for `-`, of at most `cap` bytes;
/// it must be UTF-8. Unlike host files, a pipe is accepted and read to its
/// end (`--kube-nodes <(kubectl get nodes -o json)`): the operator chose it,
/// and only the operator's own command waits on it. Directories are refused
/// and the cap still holds (so `/dev/zero` is an error, not a hang).
pub fn read_operator_file(path: &Path, cap: usize) -> Result<String, ReadError> {
    let io_err = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let mut buf = Vec::new();
    if path == Path::new("-") {
        io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut buf)
            .map_err(io_err)?;
    } else {
        let file = File::open(path).map_err(io_err)?;
        if file.metadata().map_err(io_err)?.is_dir() {
            return Err(io_err(io::Error::from_raw_os_error(libc::EISDIR)));
        }
        file.take(limit).read_to_end(&mut buf).map_err(io_err)?;
    }
    if buf.len() > cap {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            cap,
        });
    }
    String::from_utf8(buf).map_err(|_| ReadError::NotUtf8 {
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_within_the_cap_and_refuses_beyond() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v");
        std::fs::write(&p, "12345\n").unwrap();
        assert_eq!(read_value(&p, 6).unwrap(), "12345");
        assert_eq!(read_capped(&p, 6).unwrap(), "12345\n");
        let e = read_capped(&p, 5).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { cap: 5, .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!("cannot read {}: larger than 5 bytes", p.display())
        );
        assert_eq!(e.reason(), "larger than 5 bytes");
    }

    #[test]
    fn missing_directories_and_bad_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_capped(&dir.path().join("nope"), 10).unwrap_err();
        assert!(e.is_not_found() && !e.is_not_a_file(), "{e}");
        let e = read_capped(dir.path(), 10).unwrap_err();
        assert!(
            e.is_not_a_file() && e.to_string().contains("Is a directory"),
            "{e}"
        );
        let p = dir.path().join("bin");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_capped(&p, 10),
            Err(ReadError::NotUtf8 { .. })
        ));
        assert_eq!(read_value(&p, 10).unwrap(), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn devices_and_fifos_are_refused_without_blocking() {
        let e = read_capped(Path::new("/dev/zero"), 10).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::NotRegular {
                    kind: SpecialFile::Device,
                    ..
                }
            ),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // No writer: a blocking open would never return.
        let e = read_capped(&fifo, 10).unwrap_err();
        assert_eq!(e.reason(), "a FIFO, not a regular file");
        assert!(
            e.to_string().ends_with(": a FIFO, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn host_paths_resolve_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let conf = root.join("etc/cri/conf.d");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(root.join("etc/shadow"), "fixture shadow").unwrap();
        std::fs::write(dir.path().join("x"), "outside").unwrap();
        std::fs::write(root.join("x"), "inside").unwrap();
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(target, conf.join(name)).unwrap();
        };
        link("/etc/shadow", "abs.toml");
        link("../../../../x", "up.toml");
        link("loop.toml", "loop.toml");
        link("/etc/cri", "dir");
        let read = |p: &str| read_in_root(&root, Path::new(p), 100);
        assert_eq!(read("/etc/cri/conf.d/abs.toml").unwrap(), "fixture shadow");
        assert_eq!(read("/etc/cri/conf.d/up.toml").unwrap(), "inside");
        assert_eq!(
            read("etc/cri/conf.d/dir/conf.d/abs.toml").unwrap(),
            "fixture shadow"
        );
        let e = read("/etc/cri/conf.d/loop.toml").unwrap_err();
        assert_eq!(
            e.io().and_then(io::Error::raw_os_error),
            Some(libc::ELOOP),
            "{e}"
        );
        let e = read("/etc/cri/../shadow").unwrap_err();
        assert!(matches!(e, ReadError::ParentDir { .. }), "{e}");
        assert!(read("/etc/nope").unwrap_err().is_not_found());
    }

    #[test]
    fn the_reader_stops_at_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        std::fs::write(&p, "x".repeat(100)).unwrap();
        let mut r = open_capped(&p, 10).unwrap();
        let mut s = String::new();
        let e = r.read_to_string(&mut s).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
