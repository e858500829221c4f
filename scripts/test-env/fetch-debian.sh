#!/usr/bin/env bash
# Fetches the parts of the node-faithful test environment from Debian's
# archive into a cache outside the checkout, and extracts them there; nothing
# is installed system-wide (shared/reference/test-environments.md):
#
#   kernels/{bookworm,trixie,sid}/vmlinuz   Debian's amd64 kernels 6.1, 6.12 and
#                                            the newest (7.x): Talos's older lines
#                                            and the next, booted under QEMU by
#                                            tests/kernels.rs; `release` beside
#                                            each holds its uname -r
#   kernels/arm64/{bookworm,trixie,sid}/vmlinuz
#                                            the same three lines of Debian's
#                                            arm64 kernels (an uncompressed or
#                                            gzip'd arm64 Image: QEMU 7.2 cannot
#                                            read an EFI zboot image, so one is
#                                            unpacked here)
#   busybox-arm64/bin/busybox                bookworm's arm64 busybox-static, the
#                                            arm64 initramfs's shell (extracted
#                                            from its .deb, never installed)
#   containerd-sid/usr/bin/{containerd,ctr,containerd-shim-runc-v2}
#                                            containerd 2.1 (runs on Debian 12's
#                                            glibc 2.36 as is)
#   runc-sid/runc                            runc 1.3 with sid's libc6 and
#                                            libseccomp2 beside it, repointed with
#                                            patchelf (a wrapper through ld.so
#                                            breaks runc's re-exec of
#                                            /proc/self/exe)
#   prometheus-bookworm/usr/bin/{prometheus,promtool}
#                                            Prometheus 2.42 and its linter, for
#                                            tests/metrics.rs (extracted, so no
#                                            system service is installed or run)
#
# Idempotent: a .deb is kept under its exact archive file name and never
# fetched twice; each extracted directory records the .deb it came from and
# is redone only when the archive moved on to a new version. The private
# package lists are refreshed when older than SR_TEST_APT_MAX_AGE_DAYS (default
# 7) or when a download fails (the archive dropped the version the lists
# named), so a second run within that time touches no network at all.
#
# Environment: SR_TEST_CACHE (default /var/cache/sandbox-readiness-tests).
# Needs: apt-get, dpkg-deb, patchelf, flock, gzip, zstd (scripts/install-test-deps.sh).
set -euo pipefail
umask 022

cache=${SR_TEST_CACHE:-/var/cache/sandbox-readiness-tests}
max_age_days=${SR_TEST_APT_MAX_AGE_DAYS:-7}
apt_dir=$cache/apt
debs=$cache/debs

die() {
	echo "fetch-debian: $*" >&2
	exit 1
}

for tool in apt-get apt-cache dpkg-deb patchelf flock gzip zstd; do
	command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-test-deps.sh installs it)"
done

mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$debs"
# Two test runs at once would tear each other's extractions.
exec 9>"$cache/.lock"
flock -w 1800 9 || die "timed out waiting for another fetch (lock $cache/.lock)"

# Only the suites' main Packages, for amd64 and arm64 (the arm64 kernels and
# busybox): the system's sources and status file stay out of it, so nothing
# here sees or changes what is installed. With two architectures in the lists
# every package is named with its architecture (`containerd:amd64`): a
# version can differ between them (binNMUs).
cat >"$apt_dir/sources.list.new" <<EOF
deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
EOF
if ! cmp -s "$apt_dir/sources.list.new" "$apt_dir/sources.list" 2>/dev/null; then
	mv "$apt_dir/sources.list.new" "$apt_dir/sources.list"
	rm -f "$apt_dir/updated"
else
	rm -f "$apt_dir/sources.list.new"
fi
apt_opts=(
	-o "Dir::Etc::SourceList=$apt_dir/sources.list"
	-o "Dir::Etc::SourceParts=/dev/null"
	-o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::Cache=$apt_dir/cache"
	# The system's apt.conf.d may turn the binary cache off (Docker images
	# do); every apt-cache call would then parse three suites' lists again.
	-o "Dir::Cache::pkgcache=$apt_dir/cache/pkgcache.bin"
	-o "Dir::Cache::srcpkgcache=$apt_dir/cache/srcpkgcache.bin"
	-o "Dir::State::status=/dev/null"
	-o "APT::Architecture=amd64"
	-o "APT::Architectures::=amd64"
	-o "APT::Architectures::=arm64"
	-o "Acquire::Languages=none"
	# apt-get download as root otherwise warns that it cannot drop to _apt.
	-o "APT::Sandbox::User=root"
	-o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
	-o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
	-o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
	-o "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false"
	-o "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false"
)

update_lists() {
	echo "fetch-debian: refreshing the private package lists (bookworm, trixie, sid)"
	if apt-get "${apt_opts[@]}" -qq update; then
		touch "$apt_dir/updated"
	elif compgen -G "$apt_dir/lists/*_Packages*" >/dev/null; then
		# Offline: the old lists still name what the cache holds.
		echo "fetch-debian: apt-get update failed; going on with the lists from $(date -r "$apt_dir/lists" +%F)" >&2
	else
		die "apt-get update failed and there are no package lists yet"
	fi
}

if [ -z "$(find "$apt_dir/updated" -mtime "-$max_age_days" 2>/dev/null)" ]; then
	update_lists
fi

# `resolve PKG:ARCH SUITE`: the version of PKG that SUITE holds now.
resolve() {
	apt-cache "${apt_opts[@]}" madison "$1" |
		awk -F'|' -v suite=" $2/" '
			{ gsub(/ /, "", $2) }
			index($3, suite) && !seen++ { print $2 }'
}

# `deb_name PKG:ARCH VERSION`: the archive's file name for that package version.
deb_name() {
	apt-cache "${apt_opts[@]}" show "$1=$2" | sed -n 's|^Filename: .*/||p' | head -n1
}

# `keep_as PKG:ARCH VERSION NAME`: apt-get download names a file after the
# version with its epoch (`busybox-static_1%3a1.35.0-4_arm64.deb`), the
# archive's file name has none: the cache keeps the archive's name.
keep_as() {
	local got=$debs/${1%%:*}_${2//:/%3a}_${1##*:}.deb
	[ "$got" = "$debs/$3" ] || [ ! -f "$got" ] || mv "$got" "$debs/$3"
}

# `fetch PKG:ARCH SUITE`: prints the cached .deb of PKG as SUITE holds it,
# downloading it only when that exact file is not cached yet.
fetch() {
	local pkg=$1 suite=$2 version name attempt
	for attempt in 1 2; do
		version=$(resolve "$pkg" "$suite")
		if [ -n "$version" ]; then
			name=$(deb_name "$pkg" "$version")
			if [ -n "$name" ] && [ -s "$debs/$name" ]; then
				echo "$debs/$name"
				return
			fi
			if [ -n "$name" ] && (cd "$debs" && apt-get "${apt_opts[@]}" -qq download "$pkg=$version" >&2) &&
				keep_as "$pkg" "$version" "$name" && [ -s "$debs/$name" ]; then
				echo "fetch-debian: downloaded $name" >&2
				echo "$debs/$name"
				return
			fi
		fi
		# Stale lists: the archive may have replaced the version they name.
		[ "$attempt" = 2 ] || update_lists >&2
	done
	die "cannot fetch $pkg from $suite (version '${version:-none}')"
}

# `stamp_ok DIR DEBS...`: whether DIR was extracted from exactly these .debs.
stamp_ok() {
	local dir=$1
	shift
	[ -f "$dir/.from" ] && [ "$(cat "$dir/.from")" = "$(printf '%s\n' "$@")" ]
}

# `kernel SUITE ARCH`: the kernel image of a suite's linux-image-ARCH (its
# dependency names the real package, e.g. linux-image-6.12.117+deb13-amd64):
# only the image is extracted, the modules are not needed (the initramfs
# loads none). amd64 into kernels/SUITE, arm64 into kernels/arm64/SUITE.
kernel() {
	local suite=$1 arch=$2 meta_version pkg deb dir=$cache/kernels/$1
	[ "$arch" = amd64 ] || dir=$cache/kernels/$arch/$suite
	local meta=linux-image-$arch:$arch
	meta_version=$(resolve "$meta" "$suite")
	[ -n "$meta_version" ] || update_lists
	meta_version=$(resolve "$meta" "$suite")
	[ -n "$meta_version" ] || die "no $meta in $suite"
	pkg=$(apt-cache "${apt_opts[@]}" show "$meta=$meta_version" |
		sed -n 's/^Depends: //p' | head -n1 | tr ',' '\n' |
		sed -n 's/^ *\(linux-image-[0-9][^ ]*\).*/\1/p' | head -n1)
	[ -n "$pkg" ] || die "$meta $meta_version ($suite) names no kernel package"
	# From 7.x (sid) the image package is itself a meta package and the
	# kernel sits in linux-binary-<release>.
	local binary
	binary=$(apt-cache "${apt_opts[@]}" show "$pkg:$arch" | sed -n 's/^Depends: //p' | head -n1 | tr ',' '\n' |
		sed -n 's/^ *\(linux-binary-[0-9][^ ]*\).*/\1/p' | head -n1)
	[ -z "$binary" ] || pkg=$binary
	deb=$(fetch "$pkg:$arch" "$suite")
	stamp_ok "$dir" "$deb" && return
	rm -rf "$dir" "$dir.new"
	mkdir -p "$dir.new"
	# boot/vmlinuz-<release> up to 6.x, usr/lib/modules/<release>/vmlinuz in
	# 7.x: both patterns in one pass over the package (its data is
	# decompressed once); tar exits 2 for the pattern the package lacks,
	# which the check below makes an error only when both are missing.
	local member release
	mkdir -p "$dir.new/x"
	dpkg-deb --fsys-tarfile "$deb" |
		tar -x -C "$dir.new/x" --wildcards './boot/vmlinuz-*' './usr/lib/modules/*/vmlinuz' 2>/dev/null || true
	member=$(cd "$dir.new/x" && find . -type f \( -path './boot/vmlinuz-*' -o -path './usr/lib/modules/*/vmlinuz' \) |
		sort | head -n1)
	[ -n "$member" ] ||
		die "$deb has no kernel image"
	case $member in
	./boot/vmlinuz-*) release=${member#./boot/vmlinuz-} ;;
	*) release=$(basename "$(dirname "$member")") ;;
	esac
	mv "$dir.new/x/$member" "$dir.new/vmlinuz"
	rm -rf "$dir.new/x"
	unpack_zboot "$dir.new/vmlinuz"
	echo "$release" >"$dir.new/release"
	printf '%s\n' "$deb" >"$dir.new/.from"
	mkdir -p "$(dirname "$dir")"
	mv "$dir.new" "$dir"
	echo "fetch-debian: kernel $(cat "$dir/release") ($suite, $arch) in $dir"
}

# `unpack_zboot FILE`: an arm64 EFI zboot image ("MZ", then "zimg" at offset
# 4) is replaced by the Image it carries, which QEMU 7.2's -kernel loads
# (QEMU reads zboot itself only from 8.1). The header (Linux
# drivers/firmware/efi/libstub/zboot-header.S): payload offset and size as
# little-endian u32 at 8 and 12, the compression's name at 24.
unpack_zboot() {
	local file=$1
	# "zimg" in hex: the bytes before it hold NULs, which $(...) would drop.
	[ "$(od -An -tx1 -j4 -N4 "$file" | tr -d ' \n')" = 7a696d67 ] || return 0
	local offset size method
	offset=$(od -An -tu4 -j8 -N4 "$file" | tr -d ' ')
	size=$(od -An -tu4 -j12 -N4 "$file" | tr -d ' ')
	method=$(dd if="$file" bs=1 skip=24 count=8 status=none | tr -d '\0')
	case $method in
	gzip) tail -c "+$((offset + 1))" "$file" | head -c "$size" | gzip -dc >"$file.image" ;;
	zstd22 | zstd) tail -c "+$((offset + 1))" "$file" | head -c "$size" | zstd -dcq >"$file.image" ;;
	*) die "$file: EFI zboot image compressed with '$method', which this script cannot unpack" ;;
	esac
	mv "$file.image" "$file"
}

# bookworm's arm64 busybox-static: the /bin/busybox of the arm64 initramfs.
busybox_arm64() {
	local deb dir=$cache/busybox-arm64
	deb=$(fetch busybox-static:arm64 bookworm)
	stamp_ok "$dir" "$deb" && return
	rm -rf "$dir" "$dir.new"
	dpkg-deb -x "$deb" "$dir.new"
	[ -f "$dir.new/bin/busybox" ] || die "$deb has no bin/busybox"
	printf '%s\n' "$deb" >"$dir.new/.from"
	mv "$dir.new" "$dir"
	echo "fetch-debian: arm64 busybox-static ($(basename "$deb")) in $dir"
}

containerd_sid() {
	local deb dir=$cache/containerd-sid
	deb=$(fetch containerd:amd64 sid)
	stamp_ok "$dir" "$deb" && return
	rm -rf "$dir" "$dir.new"
	dpkg-deb -x "$deb" "$dir.new"
	printf '%s\n' "$deb" >"$dir.new/.from"
	mv "$dir.new" "$dir"
	echo "fetch-debian: $("$dir/usr/bin/containerd" --version) in $dir"
}

runc_sid() {
	local runc libc seccomp dir=$cache/runc-sid
	runc=$(fetch runc:amd64 sid)
	libc=$(fetch libc6:amd64 sid)
	seccomp=$(fetch libseccomp2:amd64 sid)
	stamp_ok "$dir" "$runc" "$libc" "$seccomp" && return
	rm -rf "$dir" "$dir.new"
	mkdir -p "$dir.new/root"
	local d
	for d in "$runc" "$libc" "$seccomp"; do
		dpkg-deb -x "$d" "$dir.new/root"
	done
	local interp=$dir/root/usr/lib64/ld-linux-x86-64.so.2
	[ -e "$dir.new/root/usr/lib64/ld-linux-x86-64.so.2" ] ||
		interp=$dir/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
	cp "$dir.new/root/usr/sbin/runc" "$dir.new/runc"
	# The final paths: patchelf writes them into the binary before the
	# directory is renamed into place.
	patchelf --set-interpreter "$interp" --set-rpath "$dir/root/usr/lib/x86_64-linux-gnu" "$dir.new/runc"
	printf '%s\n' "$runc" "$libc" "$seccomp" >"$dir.new/.from"
	mv "$dir.new" "$dir"
	# sed reads all of it: `head -n1` could close the pipe while runc still
	# writes, and the SIGPIPE would end this script (pipefail).
	"$dir/runc" --version | sed -n "1{s|^|fetch-debian: |; s|\$| in $dir|; p}"
}

prometheus_bookworm() {
	local deb dir=$cache/prometheus-bookworm
	deb=$(fetch prometheus:amd64 bookworm)
	stamp_ok "$dir" "$deb" && return
	rm -rf "$dir" "$dir.new"
	dpkg-deb -x "$deb" "$dir.new"
	printf '%s\n' "$deb" >"$dir.new/.from"
	mv "$dir.new" "$dir"
	echo "fetch-debian: $("$dir/usr/bin/prometheus" --version 2>&1 | head -n1) in $dir"
}

for arch in amd64 arm64; do
	kernel bookworm "$arch"
	kernel trixie "$arch"
	kernel sid "$arch"
done
busybox_arm64
containerd_sid
runc_sid
prometheus_bookworm
echo "fetch-debian: cache $cache ready"
