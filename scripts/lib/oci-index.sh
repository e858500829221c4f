# shellcheck shell=bash
# oci_write_index LAYOUT NAME ARCH...: ties the platform images tagged
# NAME-ARCH in the OCI layout LAYOUT into one image index tagged NAME
# (linux/ARCH each). Sourced by scripts/build-extension.sh and
# scripts/build-controller-image.sh; calls `die` on failure.
#
# Why by hand: umoci 0.4 tags only single image manifests, and skopeo 1.9
# copies multi-platform images but cannot assemble one; buildah could, but
# only through a container storage on this machine. So the index is written
# here, and only the index: each entry is the descriptor umoci wrote for a
# platform image plus its platform, the blob is named by its sha256, and
# skopeo reads the result back before it counts.
oci_write_index() {
	local layout=$1 name=$2 entries=() arch
	shift 2
	for arch in "$@"; do
		entries+=("$(jq -c --arg ref "$name-$arch" --arg arch "$arch" '
			[.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $ref)]
			| if length == 1 then .[0] else error("no single manifest tagged \($ref)") end
			| {mediaType, digest, size, platform: {architecture: $arch, os: "linux"}}' "$layout/index.json")") ||
			die "no platform image $name-$arch in $layout"
	done
	local blob=$layout/.index.json.new digest size
	jq -cn --argjson m "[$(IFS=,; echo "${entries[*]}")]" \
		'{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: $m}' >"$blob"
	digest=$(sha256sum "$blob" | cut -d' ' -f1)
	size=$(stat -c %s "$blob")
	mv "$blob" "$layout/blobs/sha256/$digest"
	jq -c --arg ref "$name" --arg digest "sha256:$digest" --argjson size "$size" '
		.manifests += [{mediaType: "application/vnd.oci.image.index.v1+json", digest: $digest, size: $size,
			annotations: {"org.opencontainers.image.ref.name": $ref}}]' "$layout/index.json" >"$layout/index.json.new"
	mv "$layout/index.json.new" "$layout/index.json"
	# Drop the configs and manifests that umoci's intermediate steps left.
	umoci gc --layout "$layout"
	skopeo inspect --raw "oci:$layout:$name" | jq -e --argjson n "$#" '.manifests | length == $n' >/dev/null ||
		die "skopeo does not read the index $name back"
}
