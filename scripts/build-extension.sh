#!/usr/bin/env bash
# Builds the sandbox-readiness Talos system extension without Docker, from the
# static musl binaries of Cargo's `ship` profile (size-optimised, panic=abort,
# no unwind tables; Cargo.toml), the one pkg.yaml builds too.
#
#   out/extension/<arch>/manifest.yaml + rootfs/   the extension tree (amd64, arm64)
#   out/oci                                        OCI image layout:
#     ref "sandbox-readiness"          multi-platform index (linux/amd64, linux/arm64)
#     refs "sandbox-readiness-<arch>"  the two platform images it points to
#
# Environment: OUT (default <repo>/out), EXTENSION_TARGET_DIR (cargo target dir,
# default <repo>/target/extension), SOURCE_DATE_EPOCH (timestamps in the trees
# and images; default: the last commit's time), EXTENSION_NO_CARGO=1 (package
# the binaries already built, e.g. to check that packaging is deterministic),
# EXTENSION_OPERATOR=1 (also build the operator binaries; build_binaries).
set -euo pipefail
umask 022

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/out}
name=sandbox-readiness
# A target dir of its own: ship musl builds then neither wait on nor evict
# the debug builds in target/, also when this runs from inside `cargo test`.
export CARGO_TARGET_DIR=${EXTENSION_TARGET_DIR:-$root/target/extension}

# OCI architecture -> Rust target.
declare -A targets=(
	[amd64]=x86_64-unknown-linux-musl
	[arm64]=aarch64-unknown-linux-musl
)
arches=(amd64 arm64)
profile=ship
# Service spec mount destinations that are files on a Talos node; every other
# destination gets a directory as its mount point.
file_mounts=(/etc/os-release /etc/machine-id)

die() {
	echo "build-extension: $*" >&2
	exit 1
}

# shellcheck source=lib/oci-index.sh
source "$root/scripts/lib/oci-index.sh"

need_tools() {
	# Installing is scripts/install-test-deps.sh's job (the one place that
	# installs anything); here a missing tool is named, not fetched.
	local missing=() t
	for t in clang umoci skopeo jq flock qemu-aarch64-static readelf; do
		command -v "$t" >/dev/null || missing+=("$t")
	done
	((${#missing[@]} == 0)) || die "missing ${missing[*]}: run scripts/install-test-deps.sh first"
	local installed
	installed=$(rustup target list --installed 2>/dev/null) || die "rustup is needed to add the musl targets"
	for arch in "${arches[@]}"; do
		grep -qx "${targets[$arch]}" <<<"$installed" ||
			die "Rust target ${targets[$arch]} is missing: run scripts/install-test-deps.sh first"
	done
	# .cargo/config.toml links aarch64 with rust-lld, which rustup toolchains ship.
	compgen -G "$(rustc --print sysroot)/lib/rustlib/*/bin/rust-lld" >/dev/null ||
		die "rust-lld is missing from the Rust toolchain"
}

# The [package] version in Cargo.toml (pkg.yaml reads it the same way).
package_version() {
	awk -F'"' '/^\[/{p = ($0 == "[package]")} p && /^version *=/{print $2; exit}' "$root/Cargo.toml"
}

# Both targets in one cargo call: the host-side build script and the
# proc-macros compile once, and the two link-time optimisations (one codegen
# unit each, so one core each) run side by side. The node build: without the
# `operator` feature, so the extension carries `serve` and `probe` only
# (Cargo.toml; docs/developer/binary.md). EXTENSION_OPERATOR=1 first builds
# the operator build (every command) of both targets too, kept beside it as
# <target>/ship/sandbox-readiness-operator (tests/kernels.rs runs `check` from
# it inside the VM); the dependencies are shared, only the link is repeated.
build_binaries() {
	local args=() arch
	for arch in "${arches[@]}"; do
		args+=(--target "${targets[$arch]}")
	done
	if [[ ${EXTENSION_OPERATOR:-} == 1 ]]; then
		(cd "$root" && cargo build --profile "$profile" --locked --bin "$name" "${args[@]}")
		for arch in "${arches[@]}"; do
			cp -f "$CARGO_TARGET_DIR/${targets[$arch]}/$profile/$name" \
				"$CARGO_TARGET_DIR/${targets[$arch]}/$profile/$name-operator"
		done
	fi
	(cd "$root" && cargo build --profile "$profile" --locked --no-default-features --bin "$name" "${args[@]}")
}

# Lays out out/extension/<arch> from the binary, the service spec and the
# manifest template: the same paths pkg.yaml installs into /rootfs.
lay_out_tree() {
	local arch=$1 version=$2
	local tree=$out/extension/$arch
	local croot=$tree/rootfs/usr/local/lib/containers/$name
	rm -rf "$tree"
	install -d -m 0755 "$croot" "$tree/rootfs/usr/local/etc/containers"
	# An empty /usr/local/bin on the host side: the Talos root has none, and
	# machined would answer the missing bind-mount source with MkdirAll on the
	# read-only root when no other extension (gvisor) provides it.
	install -d -m 0755 "$tree/rootfs/usr/local/bin"
	install -m 0755 "$CARGO_TARGET_DIR/${targets[$arch]}/$profile/$name" "$croot/$name"
	install -m 0644 "$root/extension/$name.yaml" "$tree/rootfs/usr/local/etc/containers/$name.yaml"
	sed "s/@VERSION@/$version/" "$root/extension/manifest.yaml.in" >"$tree/manifest.yaml"
	chmod 0644 "$tree/manifest.yaml"
	# Mount points inside the container root, which is read-only at run time.
	local dest
	while read -r dest; do
		[[ $dest == /* ]] || die "mount destination $dest is not absolute"
		if [[ " ${file_mounts[*]} " == *" $dest "* ]]; then
			install -d -m 0755 "$croot$(dirname "$dest")"
			install -m 0644 /dev/null "$croot$dest"
		else
			install -d -m 0755 "$croot$dest"
		fi
	done < <(sed -n 's/^ *destination: *//p' "$root/extension/$name.yaml")
	# Where the ExtensionServiceConfig from `sandbox-readiness tls init` mounts
	# the certificate, key and client CA (NODE_TLS_DIR in src/tls/init.rs).
	install -d -m 0755 "$croot/usr/local/etc/$name/tls"
	find "$tree" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# One image per architecture, made by umoci from the tree: an empty image is
# unpacked, the tree copied into its rootfs and repacked as the single layer.
build_platform_image() {
	local arch=$1 version=$2 created=$3
	local ref=$name-$arch bundle=$out/.bundle-$arch
	rm -rf "$bundle"
	umoci new --image "$out/oci:$ref"
	umoci unpack --image "$out/oci:$ref" "$bundle"
	cp -a "$out/extension/$arch/." "$bundle/rootfs/"
	chmod 0755 "$bundle/rootfs"
	touch -h -d "@$SOURCE_DATE_EPOCH" "$bundle/rootfs"
	umoci repack --image "$out/oci:$ref" \
		--history.created="$created" --history.created_by="scripts/build-extension.sh" "$bundle"
	umoci config --image "$out/oci:$ref" --no-history \
		--architecture="$arch" --os=linux --created="$created" --author="sandbox-readiness developers" \
		--config.label="org.opencontainers.image.title=$name" \
		--config.label="org.opencontainers.image.version=$version"
	rm -rf "$bundle"
}

main() {
	need_tools
	mkdir -p "$out"
	# Concurrent builds (two `cargo test` runs) would tear each other's trees.
	exec 9>"$out/.build.lock"
	flock -w 1800 9 || die "timed out waiting for another build (lock $out/.build.lock)"

	local version
	version=$(package_version)
	[[ -n $version ]] || die "no [package] version in Cargo.toml"
	: "${SOURCE_DATE_EPOCH:=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}"
	export SOURCE_DATE_EPOCH
	local created
	created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

	[[ ${EXTENSION_NO_CARGO:-} == 1 ]] || build_binaries
	rm -rf "$out/oci" "$out/extension"
	umoci init --layout "$out/oci"
	for arch in "${arches[@]}"; do
		lay_out_tree "$arch" "$version"
		build_platform_image "$arch" "$version" "$created"
	done
	oci_write_index "$out/oci" "$name" "${arches[@]}"

	echo "sandbox-readiness $version extension image: oci:$out/oci:$name"
	for arch in "${arches[@]}"; do
		printf '  %-5s binary %8d bytes, tree %s\n' "$arch" \
			"$(stat -c %s "$out/extension/$arch/rootfs/usr/local/lib/containers/$name/$name")" \
			"$out/extension/$arch"
	done
	printf '  layout %d bytes (du --apparent-size of %s)\n' \
		"$(du -sb --apparent-size "$out/oci" | cut -f1)" "$out/oci"
}

main "$@"
