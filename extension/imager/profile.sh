#!/usr/bin/env bash
# Prints a Talos imager profile (the YAML `imager -` reads on stdin) that
# builds a Talos disk image, or an installer, carrying this project's
# extension and the official gVisor extension. One template for every
# platform and architecture, so the profiles cannot drift apart; see
# README.md beside it.
#
#   extension/imager/profile.sh PLATFORM ARCH
#     PLATFORM  nocloud | openstack | metal   a disk image (Talos pre-installed)
#               aws | gcp                     a cloud disk image (AMI import,
#                                             GCE image)
#               installer                     the installer image for
#                                             machine.install.image and upgrades
#     ARCH      amd64 | arm64
#
# Environment (both references pinned by digest: a tag can move under a
# built image, and the imager pulls by whatever the profile names):
#   SR_EXTENSION_IMAGE  REGISTRY/sandbox-readiness:0.1.0@sha256:<index digest>
#                       (docs/deployment/images.md: the sha256 of the raw index)
#   GVISOR_IMAGE        ghcr.io/siderolabs/gvisor:<tag>@sha256:<digest>, the one
#                       listed for your Talos release
#   TALOS_VERSION       the nodes' Talos release, also the imager's tag
#                       (default v1.13.9)
#   SR_DISK_FORMAT_OUT  the disk image's compression: .xz (the default but for
#                       gcp; what KubeVirt's CDI and Cozystack import), .zst,
#                       .gz, raw, or .tar.gz (a disk.raw inside: gcp's default,
#                       the form GCE imports)
set -euo pipefail

usage() {
	echo "usage: SR_EXTENSION_IMAGE=…@sha256:… GVISOR_IMAGE=…@sha256:… $0 nocloud|openstack|metal|aws|gcp|installer amd64|arm64" >&2
	exit 2
}

[ $# -eq 2 ] || usage
platform=$1 arch=$2
case $platform in nocloud | openstack | metal | aws | gcp | installer) ;; *) usage ;; esac
case $arch in amd64 | arm64) ;; *) usage ;; esac

version=${TALOS_VERSION:-v1.13.9}
# The profile's version also names the base installer the imager pulls
# (ghcr.io/siderolabs/installer-base:<version>), whose tags carry the "v".
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || {
	echo "profile.sh: TALOS_VERSION=$version is not a Talos release tag (vX.Y.Z)" >&2
	exit 2
}

default_format=.xz
[ "$platform" != gcp ] || default_format=.tar.gz
out_format=${SR_DISK_FORMAT_OUT:-$default_format}
case $out_format in .xz | .zst | .gz | raw | .tar.gz) ;; *)
	echo "profile.sh: SR_DISK_FORMAT_OUT=$out_format is not one of .xz .zst .gz raw .tar.gz" >&2
	exit 2
	;;
esac

pinned() {
	local var=$1 ref=${!1:-}
	if [ -z "$ref" ]; then
		echo "profile.sh: $var is not set (a reference pinned by digest, …@sha256:<64 hex>)" >&2
		exit 2
	fi
	if ! [[ $ref =~ ^[a-z0-9][^@[:space:]]*@sha256:[0-9a-f]{64}$ ]]; then
		echo "profile.sh: $var=$ref is not pinned by digest (…@sha256:<64 hex>)" >&2
		exit 2
	fi
	printf '%s' "$ref"
}
ext=$(pinned SR_EXTENSION_IMAGE)
gvisor=$(pinned GVISOR_IMAGE)

cat <<YAML
# Talos imager profile, printed by extension/imager/profile.sh $platform $arch.
# Build: docker run --rm -i --privileged -v /dev:/dev -v "\$PWD/_out:/out" \\
#          ghcr.io/siderolabs/imager:$version - < this-file.yaml
arch: $arch
YAML

if [ "$platform" = installer ]; then
	# Talos's own "installer" profile (pkg/imager/profile/default.go) says
	# platform metal; an installer serves every platform.
	cat <<YAML
platform: metal
secureboot: false
version: $version
input:
  systemExtensions:
    - imageRef: $gvisor
    - imageRef: $ext
output:
  kind: installer
  outFormat: raw
YAML
else
	# diskSize is what Talos's own profile of the platform starts from
	# (pkg/imager/profile/default.go): MinRAWDiskSize (1246 MiB) for
	# nocloud, openstack and metal, DefaultRAWDiskSize (8 GiB) for aws and
	# gcp; the imager adds the boot partitions' sizes (Output.FillDefaults),
	# and Talos grows its EPHEMERAL volume to the disk it boots on.
	disk_size=1306525696
	case $platform in aws | gcp) disk_size=8589934592 ;; esac
	cat <<YAML
platform: $platform
secureboot: false
version: $version
input:
  systemExtensions:
    - imageRef: $gvisor
    - imageRef: $ext
output:
  kind: image
  imageOptions:
    diskSize: $disk_size
    diskFormat: raw
  outFormat: $out_format
YAML
fi
