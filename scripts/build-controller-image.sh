#!/usr/bin/env bash
# Builds the sandbox-readiness-controller OCI image without Docker, for
# linux/amd64 and linux/arm64: per architecture a static musl release binary
# as the only file of the image (no base image), made with umoci as
# scripts/build-extension.sh makes the extension's, tied into one index.
#
#   out/controller-oci   OCI image layout: ref "sandbox-readiness-controller"
#                        (the index), "sandbox-readiness-controller-amd64",
#                        "sandbox-readiness-controller-arm64"
#
# Each binary must run before it is packed: the arm64 one under
# qemu-aarch64-static (`--version`), so an image whose binary cannot start
# (a mislinked static-PIE) is never made.
#
# Environment: OUT (default <repo>/out), CONTROLLER_TARGET_DIR (cargo target
# dir; default the extension's, which already holds the node crate's release
# musl build), SOURCE_DATE_EPOCH (image timestamps; default the last commit's
# time), CONTROLLER_NO_CARGO=1 (package the binaries already built).
# Prints the index digest (the one an `@sha256:` reference names) and each
# platform's.
set -euo pipefail
umask 022

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/out}
name=sandbox-readiness-controller
arches=(amd64 arm64)
declare -A targets=([amd64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
export CARGO_TARGET_DIR=${CONTROLLER_TARGET_DIR:-${EXTENSION_TARGET_DIR:-$root/target/extension}}

die() {
	echo "build-controller-image: $*" >&2
	exit 1
}
# shellcheck source=lib/oci-index.sh
source "$root/scripts/lib/oci-index.sh"

for t in clang umoci skopeo jq flock sha256sum readelf qemu-aarch64-static; do
	command -v "$t" >/dev/null || die "missing $t: run scripts/install-test-deps.sh first"
done

version=$(awk -F'"' '/^\[/{p = ($0 == "[package]")} p && /^version *=/{print $2; exit}' "$root/controller/Cargo.toml")
[[ -n $version ]] || die "no [package] version in controller/Cargo.toml"
: "${SOURCE_DATE_EPOCH:=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

mkdir -p "$out"
exec 9>"$out/.controller-build.lock"
flock -w 1800 9 || die "timed out waiting for another build (lock $out/.controller-build.lock)"

if [[ ${CONTROLLER_NO_CARGO:-} != 1 ]]; then
	(cd "$root" && cargo build --profile image --locked -p "$name" --bin "$name" \
		--target "${targets[amd64]}" --target "${targets[arm64]}")
fi

layout=$out/controller-oci bundle=$out/.controller-bundle
rm -rf "$layout" "$bundle"
umoci init --layout "$layout"
for arch in "${arches[@]}"; do
	bin=$CARGO_TARGET_DIR/${targets[$arch]}/image/$name
	[[ -x $bin ]] || die "$bin was not built"
	# Static: no interpreter, so the image needs no base (no libc, no shell).
	if readelf -l "$bin" 2>/dev/null | grep 'INTERP' >/dev/null; then
		die "$bin is dynamically linked"
	fi
	case $arch in
	amd64) run=("$bin") ;;
	arm64) run=(qemu-aarch64-static "$bin") ;;
	esac
	"${run[@]}" --version >/dev/null 2>&1 || die "$bin does not start ($arch: ${run[*]} --version)"
	ref=$name-$arch
	umoci new --image "$layout:$ref"
	umoci unpack --rootless --image "$layout:$ref" "$bundle"
	install -m 0755 "$bin" "$bundle/rootfs/$name"
	chmod 0755 "$bundle/rootfs"
	find "$bundle/rootfs" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	umoci repack --image "$layout:$ref" \
		--history.created="$created" --history.created_by="scripts/build-controller-image.sh" "$bundle"
	# Non-root by default (deploy/ sets the same user); no shell to run.
	umoci config --image "$layout:$ref" --no-history \
		--architecture="$arch" --os=linux --created="$created" --author="sandbox-readiness developers" \
		--config.entrypoint="/$name" --config.user=65532:65532 \
		--config.label="org.opencontainers.image.title=$name" \
		--config.label="org.opencontainers.image.version=$version"
	rm -rf "$bundle"
done
oci_write_index "$layout" "$name" "${arches[@]}"

digest_of() {
	jq -r --arg ref "$1" \
		'.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $ref) | .digest' "$layout/index.json"
}
digest=$(digest_of "$name")
[[ $digest == sha256:* ]] || die "no index for $name in $layout/index.json"
echo "$name $version image: oci:$layout:$name (linux/amd64, linux/arm64)"
for arch in "${arches[@]}"; do
	printf '  %-5s binary %d bytes (static %s), manifest %s\n' "$arch" \
		"$(stat -c %s "$CARGO_TARGET_DIR/${targets[$arch]}/image/$name")" "${targets[$arch]}" "$(digest_of "$name-$arch")"
done
echo "  digest $digest"
