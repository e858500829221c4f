#!/usr/bin/env bash
# Builds the sandbox-readiness-controller OCI image without Docker: a
# static musl release binary as the only file of the image (no base image),
# made with umoci as scripts/build-extension.sh makes the extension's.
#
#   out/controller-oci   OCI image layout, ref "sandbox-readiness-controller"
#
# Environment: OUT (default <repo>/out), CONTROLLER_TARGET_DIR (cargo target
# dir; default the extension's, which already holds the node crate's release
# musl build), SOURCE_DATE_EPOCH (image timestamps; default the last commit's
# time), CONTROLLER_NO_CARGO=1 (package the binary already built).
# Prints the image manifest's digest.
set -euo pipefail
umask 022

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/out}
name=sandbox-readiness-controller
target=x86_64-unknown-linux-musl
export CARGO_TARGET_DIR=${CONTROLLER_TARGET_DIR:-${EXTENSION_TARGET_DIR:-$root/target/extension}}

die() {
	echo "build-controller-image: $*" >&2
	exit 1
}

for t in clang umoci jq flock sha256sum; do
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
	(cd "$root" && cargo build --profile image --locked -p "$name" --bin "$name" --target "$target")
fi
bin=$CARGO_TARGET_DIR/$target/image/$name
[[ -x $bin ]] || die "$bin was not built"
# Static: no interpreter, so the image needs no base (no libc, no shell).
if readelf -l "$bin" 2>/dev/null | grep -q 'INTERP'; then
	die "$bin is dynamically linked"
fi

layout=$out/controller-oci bundle=$out/.controller-bundle
rm -rf "$layout" "$bundle"
umoci init --layout "$layout"
umoci new --image "$layout:$name"
umoci unpack --rootless --image "$layout:$name" "$bundle"
install -m 0755 "$bin" "$bundle/rootfs/$name"
chmod 0755 "$bundle/rootfs"
find "$bundle/rootfs" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
umoci repack --image "$layout:$name" \
	--history.created="$created" --history.created_by="scripts/build-controller-image.sh" "$bundle"
# Non-root by default (deploy/ sets the same user); no shell to run.
umoci config --image "$layout:$name" --no-history \
	--architecture=amd64 --os=linux --created="$created" --author="sandbox-readiness developers" \
	--config.entrypoint="/$name" --config.user=65532:65532 \
	--config.label="org.opencontainers.image.title=$name" \
	--config.label="org.opencontainers.image.version=$version"
umoci gc --layout "$layout"
rm -rf "$bundle"

digest=$(jq -r --arg ref "$name" \
	'.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $ref) | .digest' "$layout/index.json")
[[ $digest == sha256:* ]] || die "no manifest for $name in $layout/index.json"
echo "$name $version image: oci:$layout:$name"
printf '  binary %d bytes (static %s)\n' "$(stat -c %s "$bin")" "$target"
echo "  digest $digest"
