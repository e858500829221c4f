#!/usr/bin/env bash
# A real kubelet node on Talos's runtime stack, joined to a control plane that
# `scripts/control-plane.sh up DIR` made: containerd laid out as Talos lays it
# out, the gVisor extension's files as siderolabs/extensions ships them, a CNI
# bridge, and the real kubelet registering its own Node. Built by
# scripts/build-node-runtime.sh (pins: controlplane/PINS).
#
#   up DIR NAME [--containerd 2.2|2.1|1.6] [--runc talos|1.3|1.1]
#               [--runsc present|absent|no-shim|broken] [--status-every DURATION]
#                   start node NAME; returns once the Node is Ready and (but
#                   with containerd 1.6, whose CRI has no handler list)
#                   status.runtimeHandlers is filled. Refuses a NAME that is
#                   already up (exit 2).
#     --containerd  2.2: the pinned containerd (Talos 1.13.9's v2.2.7, the
#                   default); 2.1: Debian sid's (scripts/test-env/fetch-debian.sh);
#                   1.6: Debian 12's installed 1.6.20 (config version 2, and
#                   the extension's pre-v1.8 `gvisor.part` under the 1.x CRI key)
#     --runc        talos: the pinned runc (Talos 1.13.9's v1.4.3, the
#                   default); 1.3: Debian sid's (fetch-debian.sh); 1.1: Debian
#                   12's installed 1.1.5
#     --status-every DURATION
#                   kubelet's nodeStatusUpdateFrequency and
#                   nodeStatusReportFrequency (e.g. 2s: a status PATCH every
#                   2 s; default kubelet's, 10s and 5m, as on Talos)
#     --runsc       present: the extension installed (10-gvisor.part,
#                   runsc.toml, runsc and containerd-shim-runsc-v1 in
#                   usr/local/bin; the default); absent: not installed (no
#                   drop-in, no binaries); no-shim: installed but its shim
#                   missing; broken: installed, runsc a program that fails
#   down DIR NAME   stop the node and leave nothing on the host: no process,
#                   mount, cgroup, bridge, changed sysctl, port reservation
#                   (idempotent; the Node object stays in the API)
#
# Prints nothing on success; a failure is one line on stderr and a non-zero
# exit, and an `up` that fails leaves nothing running (it runs `down`).
# `up` gives DIR, DIR/nodes and N o+x (a hostUsers: false container's root
# must reach its rootfs under N) and refuses a DIR with an unsearchable
# ancestor. Nodes of one or several clusters can be up at once.
#
# The node's tree is DIR/nodes/NAME/ (N below), a node's host tree:
#   etc/cri/containerd.toml          the main config (version 3; 2 for 1.6), importing
#                                    etc/cri/conf.d/cri.toml as Talos's
#                                    /etc/cri/containerd.toml does
#   etc/cri/conf.d/*.part            the drop-ins: 00-node.part (this node's CRI
#                                    settings), 10-gvisor.part (the extension's,
#                                    ConfigPath moved into N), runsc.toml;
#                                    cri.toml is their merge (Talos's
#                                    CRIConfigController merges the parts)
#   etc/kubernetes/kubelet.yaml      the KubeletConfiguration
#   etc/kubernetes/manifests/        staticPodPath
#   etc/cni/net.d, opt/cni/bin       the CNI bridge (bridge sr-kn-<n>, subnet
#                                    10.210.<n>.0/24, ipMasq false, no gateway)
#   usr/local/bin                    the extension's runsc, containerd-shim-runsc-v1
#   bin                              containerd, ctr, containerd-shim-runc-v2, runc
#   run/containerd/containerd.sock   the CRI socket
#   var/lib/containerd, var/lib/kubelet, var/log/pods
#   logs/{containerd,kubelet}.log, pids/
#   node.env                         CRI_SOCKET, KUBELET_KUBECONFIG, CRI_CONF_D,
#                                    CONTAINERD_ROOT, HOST_ROOT (the agent's
#                                    host root: N), KUBELET_PORT, ... (source it)
# The image registry.k8s.io/pause:3.10 (busybox-static sleeping, also tagged
# sr-kn.local/busybox:1 for pods' containers: imagePullPolicy Never) is
# imported and pinned; there is no registry.
#
# On the host outside N while up: the cgroup /sr-kn-NAME in every cgroup v1
# hierarchy (kubelet's cgroupRoot), the bridge sr-kn-<n> (made by the CNI
# plugin with the first pod) and pods' veths, the sysctls kubelet's
# protectKernelDefaults wants (vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1) and the inotify limits raised to at least
# fs.inotify.max_user_instances=8192 and max_user_watches=524288 (the values
# before are saved under $SR_CONTROL_PLANE_RUN/kubelet-node/ and restored
# when the last node goes down), /var/log/containers (kubelet's fixed symlink dir), shim sockets in
# /run/containerd/s, runsc state in /run/containerd/runsc. `down` removes all
# of it.
#
# Environment: SR_NODE_RUNTIME_BIN (the bin dir; default what
# `scripts/build-node-runtime.sh path` prints), SR_TEST_CACHE (Debian's
# containerd 2.1 and runc 1.3), SR_CONTROL_PLANE_RUN (port reservations,
# shared with control-plane.sh; default /tmp/sr-control-plane),
# SR_NODE_READY_TIMEOUT (s, default 120).
set -euo pipefail

me=kubelet-node
here=$(cd "$(dirname "$0")" && pwd)
run=${SR_CONTROL_PLANE_RUN:-/tmp/sr-control-plane}
cache=${SR_TEST_CACHE:-/var/cache/sandbox-readiness-tests}
ready_timeout=${SR_NODE_READY_TIMEOUT:-120}
hostrun=$run/kubelet-node
pause_image=registry.k8s.io/pause:3.10
busybox_image=sr-kn.local/busybox:1
# All that kubelet's protectKernelDefaults checks (cm/container_manager_linux.go
# setupKernelTunables); here the first three differ.
sysctls=(vm.overcommit_memory=1 kernel.panic=10 kernel.panic_on_oops=1 vm.panic_on_oom=0 kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000)
# Raised to at least these while a node is up (never lowered): a kubelet and
# its containerd hold 18 inotify instances, a control plane 14, and Debian's
# default of 128 per user runs out with a few nodes beside the test tiers'
# control planes (kubelet then exits: "Failed to start cAdvisor ...
# inotify_init: too many open files"). Kubernetes nodes raise them (Talos
# among them); these are the values kind documents.
floor_sysctls=(fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=524288)

die() {
	printf '%s: %s\n' "$me" "$*" >&2
	exit 1
}

usage() {
	printf 'usage: %s up DIR NAME [--containerd 2.2|2.1|1.6] [--runc talos|1.3|1.1] [--runsc present|absent|no-shim|broken] [--status-every DURATION] | down DIR NAME\n' "$0" >&2
	exit 2
}

# ---------------------------------------------------------------- processes
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

pid_of() {
	local f=$n/pids/$1.pid p
	[[ -f $f ]] || return 1
	p=$(<"$f")
	[[ $p =~ ^[0-9]+$ ]] && alive "$p" || return 1
	printf '%s' "$p"
}

# launch NAME EXE ARGS...: EXE in a session of its own, output to
# N/logs/NAME.log, its pid in N/pids/NAME.pid; the environment is env_path's.
launch() {
	local name=$1
	shift
	mkdir -p "$n/pids" "$n/logs"
	rm -f "$n/pids/$name.pid"
	# shellcheck disable=SC2016 # $$ and $@ belong to the inner shell
	env -i PATH="$env_path" HOME=/root LANG=C.UTF-8 setsid bash -c 'echo $$ >"$0"; exec "$@"' "$n/pids/$name.pid" "$@" \
		</dev/null >>"$n/logs/$name.log" 2>&1 7>&- 8>&- 9>&- &
	local i
	for ((i = 0; i < 50; i++)); do
		[[ -s $n/pids/$name.pid ]] && return 0
		sleep 0.02
	done
	return 1
}

kill_one() {
	local p i
	p=$(pid_of "$1") || {
		rm -f "$n/pids/$1.pid"
		return 0
	}
	kill -TERM "$p" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		alive "$p" || break
		sleep 0.1
	done
	alive "$p" && kill -KILL "$p" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		alive "$p" || break
		sleep 0.1
	done
	rm -f "$n/pids/$1.pid"
}

# node_pids: every process of this node: command line or cwd or root in N,
# or in its cgroup, and their descendants.
node_pids() {
	local p cmd cwd root f
	declare -A found=() mine=()
	# This script and its callers (a shell whose command names N) are spared.
	p=$BASHPID
	while [[ -n $p && $p != 0 ]]; do
		mine[$p]=1
		p=$(sed -E 's/^.*\) [A-Za-z] ([0-9]+) .*$/\1/' "/proc/$p/stat" 2>/dev/null) || break
	done
	mine[$$]=1
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[[ -n ${mine[$p]:-} ]] && continue
		cmd=$({ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null) || continue
		cwd=$(readlink "/proc/$p/cwd" 2>/dev/null) || cwd=
		root=$(readlink "/proc/$p/root" 2>/dev/null) || root=
		if [[ $cmd == *"$n/"* || $cwd == "$n"/* || $root == "$n"/* ]]; then
			found[$p]=1
		fi
	done
	for f in /sys/fs/cgroup/*/"$cgroot"; do
		[[ -d $f ]] || continue
		while read -r p; do
			[[ -n $p ]] && found[$p]=1
		done < <(find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null)
	done
	# Descendants (children of a found process), to a fixed point.
	local changed=1 pid ppid
	local -a table
	mapfile -t table < <(ps -e -o pid=,ppid=)
	while ((changed)); do
		changed=0
		for p in "${table[@]}"; do
			read -r pid ppid <<<"$p"
			[[ -n ${found[$pid]:-} || -n ${mine[$pid]:-} ]] && continue
			if [[ -n ${found[$ppid]:-} ]]; then
				found[$pid]=1
				changed=1
			fi
		done
	done
	for p in "${!mine[@]}"; do unset "found[$p]"; done
	printf '%s\n' "${!found[@]}"
}

# ---------------------------------------------------------------- ports
# As control-plane.sh: reserved machine-wide under $run/ports while a lock is
# held; a reservation names N and is stale once N/node.env lacks the port.
port_in_use() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6
}

reserved() {
	local f=$run/ports/$1 owner
	[[ -f $f ]] || return 1
	owner=$(<"$f")
	if grep -qsE "^[A-Z_]+_PORT=$1\$" "$owner/control-plane.env" "$owner/capi.env" "$owner/node.env"; then
		return 0
	fi
	[[ $owner == "$n" ]] && return 0
	[[ -f $owner/.starting ]] && return 0
	rm -f "$f"
	return 1
}

pick_ports() {
	local want=$1 lo=20000 hi=32000 tries=0 p
	mkdir -p "$run/ports"
	ports=()
	exec 7>"$run/ports.lock"
	flock -w 30 7 || die "cannot lock $run/ports.lock"
	while ((${#ports[@]} < want)); do
		((++tries < 2000)) || die "no free loopback port in $lo-$hi"
		p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
		port_in_use "$p" && continue
		reserved "$p" && continue
		printf '%s\n' "$n" >"$run/ports/$p"
		ports+=("$p")
	done
	exec 7>&-
}

release_ports() {
	local f
	for f in "$run"/ports/*; do
		[[ -f $f && $(<"$f") == "$n" ]] && rm -f "$f"
	done
	return 0
}

# ---------------------------------------------------------------- host state
# The sysctls kubelet's protectKernelDefaults requires: set while any node is
# up; the values from before the first node come back with the last one.
sysctl_hold() {
	mkdir -p "$hostrun/holders"
	exec 6>"$hostrun/sysctl.lock"
	flock 6
	local h
	for h in "$hostrun"/holders/*; do # holders whose node is gone (neither up nor starting)
		[[ -e $h ]] || continue
		[[ -f $(<"$h")/node.env || -f $(<"$h")/.starting || $(<"$h") == "$n" ]] || rm -f "$h"
	done
	if [[ ! -f $hostrun/sysctl.saved ]]; then
		local s k
		: >"$hostrun/sysctl.saved.tmp"
		for s in "${sysctls[@]}" "${floor_sysctls[@]}"; do
			k=${s%%=*}
			printf '%s=%s\n' "$k" "$(sysctl -n "$k")" >>"$hostrun/sysctl.saved.tmp"
		done
		mv "$hostrun/sysctl.saved.tmp" "$hostrun/sysctl.saved"
	fi
	printf '%s\n' "$n" >"$hostrun/holders/$(printf '%s' "$n" | sha256sum | cut -c1-16)"
	local out want=("${sysctls[@]}") f
	for f in "${floor_sysctls[@]}"; do
		(($(sysctl -n "${f%%=*}") < ${f#*=})) && want+=("$f")
	done
	out=$(sysctl -q -w "${want[@]}" 2>&1) || die "cannot set ${want[*]}: $out"
	exec 6>&-
}

sysctl_release() {
	[[ -d $hostrun/holders ]] || return 0
	exec 6>"$hostrun/sysctl.lock"
	flock 6
	rm -f "$hostrun/holders/$(printf '%s' "$n" | sha256sum | cut -c1-16)"
	local h left=0
	for h in "$hostrun"/holders/*; do
		[[ -e $h ]] || continue
		# A node still starting (no node.env yet) holds too: restoring the
		# sysctls under it would fail its kubelet's protectKernelDefaults.
		if [[ -f $(<"$h")/node.env || -f $(<"$h")/.starting ]]; then left=1; else rm -f "$h"; fi
	done
	if ((!left)) && [[ -f $hostrun/sysctl.saved ]]; then
		local line
		while read -r line; do
			sysctl -q -w "$line" >/dev/null 2>&1 || printf '%s: warning: cannot restore %s\n' "$me" "$line" >&2
		done <"$hostrun/sysctl.saved"
		rm -f "$hostrun/sysctl.saved"
	fi
	exec 6>&-
	rmdir "$hostrun/holders" "$hostrun" 2>/dev/null || true
}

# The cgroup v1 hierarchies kubelet uses (not the empty cgroup2 `unified`).
v1_hierarchies() {
	local d
	for d in /sys/fs/cgroup/*/; do
		d=${d%/}
		[[ $(stat -f -c %T "$d" 2>/dev/null) == cgroupfs ]] && printf '%s\n' "$d"
	done
}

cgroups_create() {
	local h
	while read -r h; do
		mkdir -p "$h/$cgroot" || die "cannot create the cgroup $h/$cgroot"
	done < <(v1_hierarchies)
	# cpuset: a child has no cpus/mems until given its parent's.
	local c=/sys/fs/cgroup/cpuset
	if [[ -d $c/$cgroot ]]; then
		cat "$c/cpuset.cpus" >"$c/$cgroot/cpuset.cpus"
		cat "$c/cpuset.mems" >"$c/$cgroot/cpuset.mems"
	fi
}

cgroups_remove() {
	local h
	for h in /sys/fs/cgroup/*/"$cgroot"; do
		[[ -d $h ]] || continue
		find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[[ -d $h ]] && printf '%s: warning: cannot remove the cgroup %s\n' "$me" "$h" >&2
	done
	return 0
}

# ---------------------------------------------------------------- config
write_part_node() { # this node's CRI settings: Talos's hack/cri-plugin.part plus the paths of a shared host
	local f=$n/etc/cri/conf.d/00-node.part
	if [[ $ctd == 1.6 ]]; then
		cat >"$f" <<EOF
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$n/opt/cni/bin"
    conf_dir = "$n/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = "$n/run/runc"
EOF
		return
	fi
	cat >"$f" <<EOF
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  discard_unpacked_layers = true
  use_local_image_pull = true

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "$pause_image"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["$n/opt/cni/bin"]
  conf_dir = "$n/etc/cni/net.d"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  Root = "$n/run/runc"
EOF
}

write_gvisor_files() { # exactly the extension's files, ConfigPath moved into N
	local d=$n/etc/cri/conf.d
	[[ $runsc == absent ]] && return 0
	if [[ $ctd == 1.6 ]]; then
		# siderolabs/extensions before v1.8.0: gvisor.part under the 1.x CRI key.
		cat >"$d/gvisor.part" <<EOF
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = "$d/runsc.toml"
EOF
	else
		sed "s#ConfigPath = \"/etc/cri/conf.d/#ConfigPath = \"$d/#" "$fixtures/etc/cri/conf.d/10-gvisor.part" >"$d/10-gvisor.part"
	fi
	cp "$fixtures/etc/cri/conf.d/runsc.toml" "$d/runsc.toml"
}

# cri.toml: the parts merged. Their tables do not overlap, so the merge is
# their concatenation in name order (checked: it must parse as TOML).
write_cri_toml() {
	local d=$n/etc/cri/conf.d f
	: >"$d/cri.toml.tmp"
	for f in "$d"/*.part; do
		[[ -f $f ]] || continue
		{
			cat "$f"
			echo
		} >>"$d/cri.toml.tmp"
	done
	[[ $ctd == 1.6 ]] && sed -i '1i version = 2\n' "$d/cri.toml.tmp"
	[[ $ctd != 1.6 ]] && sed -i '1i version = 3\n' "$d/cri.toml.tmp"
	python3 -c 'import sys, tomllib; tomllib.load(open(sys.argv[1], "rb"))' "$d/cri.toml.tmp" 2>"$n/logs/cri-toml.err" ||
		die "the merged cri.toml does not parse: $(tail -n1 "$n/logs/cri-toml.err")"
	mv "$d/cri.toml.tmp" "$d/cri.toml"
	chmod 600 "$d/cri.toml"
}

write_containerd_toml() {
	local f=$n/etc/cri/containerd.toml
	if [[ $ctd == 1.6 ]]; then
		cat >"$f" <<EOF
version = 2
root = "$n/var/lib/containerd"
state = "$n/run/containerd"
imports = ["$n/etc/cri/conf.d/cri.toml"]
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.internal.v1.tracing",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[debug]
  level = "info"

[metrics]
  address = ""
EOF
		return
	fi
	# Talos's hack/cri-containerd.toml, plus the paths of a shared host and
	# the plugins this VM cannot use.
	cat >"$f" <<EOF
version = 3
root = "$n/var/lib/containerd"
state = "$n/run/containerd"

disabled_plugins = [
    "io.containerd.differ.v1.erofs",
    "io.containerd.internal.v1.tracing",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.ttrpc.v1.otelttrpc",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.opt",
    "io.containerd.nri.v1.nri",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
]

imports = [
    "$n/etc/cri/conf.d/cri.toml",
]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[metrics]
  address = ""

[debug]
level = "info"
format = "json"
EOF
}

write_cni() {
	cat >"$n/etc/cni/net.d/10-sr-kn.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sr-kn-$bridge_n",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n/var/lib/cni/networks",
        "ranges": [[{"subnet": "10.210.$bridge_n.0/24"}]]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

write_kubelet_config() {
	cat >"$n/etc/kubernetes/kubelet.yaml" <<EOF
# Talos 1.13's KubeletConfiguration (internal/app/machined/pkg/controllers/k8s/kubelet_spec.go)
# where this VM allows; the differences are marked.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$sock
protectKernelDefaults: true
failSwapOn: false
staticPodPath: $n/etc/kubernetes/manifests
podLogsDir: $n/var/log/pods
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/client-ca.crt}
authorization: {mode: Webhook}
oomScoreAdj: -450
serializeImagePulls: false
seccompDefault: true
tlsMinVersion: VersionTLS13
streamingConnectionIdleTimeout: 5m
systemReserved: {cpu: 50m, memory: 384Mi, pid: "100", ephemeral-storage: 256Mi}
# Not Talos: text logs (Talos: logging.format json), /etc/resolv.conf (Talos:
# /system/resolved/resolv.conf), no shutdownGracePeriod (Talos: 30s/10s; it
# needs logind's inhibitor locks, and this VM has no systemd).
# Not Talos: private ports on loopback (Talos: 10250, healthz 10248), no
# read-only port.
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
# Not Talos: this VM is cgroup v1 without systemd (Talos: v2, cgroupDriver
# systemd... with kubeletCgroups /podruntime/kubelet, systemCgroups /system).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$cgroot
# Not Talos: no iptables chains on a shared host (Talos's kubelet makes them).
makeIPTablesUtilChains: false
# Not Talos: a fixed client certificate (Talos: bootstrap kubeconfig, rotation).
rotateCertificates: false
serverTLSBootstrap: false
# A node that shares its disk with the tests: no eviction on disk.
evictionHard: {memory.available: 100Mi}
imageGCHighThresholdPercent: 100
EOF
	if [[ -n ${status_every:-} ]]; then
		# kubelet posts its status at least this often, changed or not
		# (Talos: the defaults, 10s and 5m).
		printf 'nodeStatusUpdateFrequency: %s\nnodeStatusReportFrequency: %s\n' "$status_every" "$status_every" >>"$n/etc/kubernetes/kubelet.yaml"
	fi
}

# ---------------------------------------------------------------- the image
# The pause image: busybox-static sleeping forever, as the tests build it
# (tests/support/containerd.rs pause_archive), kept in the cache by the
# busybox it holds.
pause_archive() {
	local sum dir a
	sum=$(sha256sum /bin/busybox | cut -c1-12)
	dir=$cache/noderuntime/images
	a=$dir/pause-$sum.tar
	if [[ ! -f $a ]]; then
		command -v umoci >/dev/null || die "umoci is not installed (scripts/install-test-deps.sh installs it)"
		mkdir -p "$dir"
		local tmp
		tmp=$(mktemp -d "$dir/.tmp.XXXXXX")
		(
			set -e
			umoci init --layout "$tmp/layout"
			umoci new --image "$tmp/layout:3.10"
			umoci unpack --image "$tmp/layout:3.10" "$tmp/bundle"
			mkdir -p "$tmp/bundle/rootfs/bin"
			cp /bin/busybox "$tmp/bundle/rootfs/bin/busybox"
			umoci repack --image "$tmp/layout:3.10" "$tmp/bundle"
			umoci config --image "$tmp/layout:3.10" --config.entrypoint /bin/busybox --config.cmd sleep --config.cmd 2147483647
			tar -C "$tmp/layout" -cf "$tmp/pause.tar" .
		) >"$n/logs/image.log" 2>&1 || {
			rm -rf "$tmp"
			die "building the pause image failed: $(tail -n1 "$n/logs/image.log") (log: $n/logs/image.log)"
		}
		mv "$tmp/pause.tar" "$a"
		rm -rf "$tmp"
	fi
	printf '%s' "$a"
}

ctr_n() { "$n/bin/ctr" --address "$sock" --timeout 30s -n k8s.io "$@"; }

import_images() {
	local a out label=()
	a=$(pause_archive)
	[[ $ctd != 1.6 ]] && label=(--label io.cri-containerd.pinned=pinned)
	out=$(ctr_n images import --base-name registry.k8s.io/pause "${label[@]}" "$a" 2>&1) ||
		die "ctr images import failed: $(printf '%s' "$out" | tail -n1)"
	out=$(ctr_n images tag --force "$pause_image" "$busybox_image" 2>&1) ||
		die "ctr images tag failed: $(printf '%s' "$out" | tail -n1)"
}

# ---------------------------------------------------------------- start
why() { # NAME: one line of its log saying why it failed
	local log=$n/logs/$1.log line
	line=$(grep -iE '"level":"(fatal|error)"|level=(fatal|error)|^[EF][0-9]{4} |failed|address already in use' "$log" 2>/dev/null | tail -n1 || true)
	[[ -n $line ]] || line=$(grep -v '^[[:space:]]*$' "$log" 2>/dev/null | tail -n1 || true)
	line=$(printf '%s' "$line" | tr -s '[:space:]' ' ' | cut -c1-400)
	printf '%s (log: %s)' "${line:-no reason in its log}" "$log"
}

wait_containerd() {
	local deadline=$((SECONDS + 30)) plugins
	until plugins=$("$n/bin/ctr" --address "$sock" --timeout 2s plugins ls 2>/dev/null); do
		pid_of containerd >/dev/null || die "containerd exited: $(why containerd)"
		((SECONDS < deadline)) || die "containerd did not answer on $sock in 30s: $(why containerd)"
		sleep 0.1
	done
	# The CRI service must have loaded (containerd serves its socket without it).
	local cri=io.containerd.grpc.v1.cri
	grep -E "[[:space:]]cri[[:space:]]" <<<"$plugins" | grep -qE "[[:space:]]ok[[:space:]]*$" ||
		die "containerd's CRI plugin did not load: $(grep -m1 -iE 'failed to load plugin.*cri|cri.*(error|failed)' "$n/logs/containerd.log" | tr -s '[:space:]' ' ' | cut -c1-400) (log: $n/logs/containerd.log)"
	: "$cri"
}

kubectl_admin() { "$kubectl" --kubeconfig="$dir/admin.kubeconfig" --request-timeout=10s "$@"; }

wait_node() {
	local deadline=$((SECONDS + ready_timeout)) ready handlers
	while :; do
		pid_of kubelet >/dev/null || die "kubelet exited: $(why kubelet)"
		pid_of containerd >/dev/null || die "containerd exited: $(why containerd)"
		ready=$(kubectl_admin get node "$name" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
		handlers=$(kubectl_admin get node "$name" -o 'jsonpath={.status.runtimeHandlers[*].name}' 2>/dev/null || true)
		if [[ $ready == True ]] && [[ -n $handlers || $ctd == 1.6 ]]; then
			return 0
		fi
		if ((SECONDS >= deadline)); then
			local msg
			msg=$(kubectl_admin get node "$name" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null || true)
			die "Node $name not Ready with runtimeHandlers after ${ready_timeout}s (Ready=${ready:-absent}${msg:+: $msg}; handlers: ${handlers:-none}): $(why kubelet)"
		fi
		sleep 0.5
	done
}

set_node() { # DIR NAME
	[[ -n ${1:-} && -n ${2:-} ]] || usage
	local re='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
	[[ ${#2} -le 40 && $2 =~ $re ]] || {
		printf '%s: bad node name %q: a DNS label of at most 40 characters\n' "$me" "$2" >&2
		exit 2
	}
	[[ -d $1 ]] || die "no cluster in $1 (no such directory)"
	dir=$(cd "$1" && pwd -P)
	name=$2
	n=$dir/nodes/$name
	sock=$n/run/containerd/containerd.sock
	cgroot=sr-kn-$name
}

lock_node() {
	mkdir -p "$n"
	exec 8>"$n/.lock"
	flock -n 8 || {
		printf '%s: node %s in %s is busy: another kubelet-node command is running on it\n' "$me" "$name" "$dir" >&2
		exit 2
	}
}

# pick_bridge: the lowest n with no link sr-kn-<n> and no other node's claim.
pick_bridge() {
	mkdir -p "$hostrun/bridges"
	exec 5>"$hostrun/bridges.lock"
	flock 5
	local i f
	for ((i = 0; i < 250; i++)); do
		f=$hostrun/bridges/$i
		if [[ -f $f ]] && [[ $(<"$f") != "$n" ]] && [[ -f $(<"$f")/node.env || -f $(<"$f")/.starting ]]; then
			continue
		fi
		ip link show "sr-kn-$i" >/dev/null 2>&1 && continue
		printf '%s\n' "$n" >"$f"
		bridge_n=$i
		bridge=sr-kn-$i
		exec 5>&-
		return 0
	done
	die "no free bridge name sr-kn-0..249"
}

cmd_up() {
	set_node "$1" "$2"
	shift 2
	ctd=2.2 runc=talos runsc=present status_every=
	while (($#)); do
		case $1 in
		--containerd) [[ ${2:-} =~ ^(2\.2|2\.1|1\.6)$ ]] || usage; ctd=$2 ;;
		--runc) [[ ${2:-} =~ ^(talos|1\.3|1\.1)$ ]] || usage; runc=$2 ;;
		--runsc) [[ ${2:-} =~ ^(present|absent|no-shim|broken)$ ]] || usage; runsc=$2 ;;
		--status-every) [[ ${2:-} =~ ^[1-9][0-9]*(s|m)$ ]] || usage; status_every=$2 ;;
		*) usage ;;
		esac
		shift 2
	done
	[[ -f $dir/control-plane.env ]] || die "no cluster in $dir (run: scripts/control-plane.sh up $dir)"
	# shellcheck disable=SC1091
	source "$dir/control-plane.env"
	kubectl=$BIN/kubectl
	[[ -f $dir/pids/kube-apiserver.pid ]] && alive "$(<"$dir/pids/kube-apiserver.pid")" ||
		die "the cluster in $dir is stopped (run: scripts/control-plane.sh start $dir)"
	lock_node
	# The tree must be searchable by a user namespace's mapped root (a
	# hostUsers: false container's rootfs is under N): DIR, DIR/nodes and N
	# get o+x (their files keep their modes), DIR's ancestors must have it.
	local a=$dir
	while [[ $a != / ]]; do
		a=$(dirname "$a")
		[[ $(($(stat -c %#a "$a") & 1)) == 1 ]] ||
			die "$a is not searchable by others (mode $(stat -c %a "$a")): hostUsers: false containers under $n could not reach their rootfs"
	done
	chmod o+x "$dir" "$dir/nodes" "$n"
	if [[ -f $n/node.env ]]; then
		printf '%s: node %s is already up in %s (run: %s down %s %s)\n' "$me" "$name" "$dir" "$0" "$dir" "$name" >&2
		exit 2
	fi
	((EUID == 0)) || die "needs root (containerd and kubelet manage mounts and cgroups)"
	local t
	for t in ip sysctl setsid flock python3 openssl; do
		command -v "$t" >/dev/null || die "$t is not installed"
	done
	# The binaries.
	local nrb=${SR_NODE_RUNTIME_BIN:-}
	if [[ -z $nrb ]]; then
		nrb=$("$here/build-node-runtime.sh" path 2>/dev/null) || die "the node runtime is not built: run scripts/build-node-runtime.sh all (or set SR_NODE_RUNTIME_BIN)"
	fi
	fixtures=$here/../tests/fixtures/talos-gvisor
	local ctd_bin runc_bin
	case $ctd in
	2.2) ctd_bin=$nrb ;;
	2.1) ctd_bin=$cache/containerd-sid/usr/bin ;;
	1.6) ctd_bin=/usr/bin ;;
	esac
	case $runc in
	talos) runc_bin=$nrb/runc ;;
	1.3) runc_bin=$cache/runc-sid/runc ;;
	1.1) runc_bin=/usr/sbin/runc ;;
	esac
	local b
	for b in containerd ctr containerd-shim-runc-v2; do
		[[ -x $ctd_bin/$b ]] || die "no $b in $ctd_bin (--containerd $ctd: $([[ $ctd == 2.1 ]] && echo 'scripts/test-env/fetch-debian.sh fetches it' || echo 'scripts/install-test-deps.sh or build-node-runtime.sh'))"
	done
	[[ -x $runc_bin ]] || die "no runc at $runc_bin (--runc $runc)"
	for b in kubelet runsc containerd-shim-runsc-v1 bridge host-local loopback; do
		[[ -x $nrb/$b ]] || die "no $b in $nrb"
	done
	# From here on a failure takes down what was started.
	rm -rf "$n/logs" "$n/pids"
	mkdir -p "$n/logs" "$n/pids"
	: >"$n/.starting"
	ports=()
	trap 'rc=$?; trap - EXIT; if ((rc != 0)); then do_down; fi; exit $rc' EXIT
	pick_ports 2
	KUBELET_PORT=${ports[0]} KUBELET_HEALTHZ_PORT=${ports[1]}
	pick_bridge
	ip link show "$bridge" >/dev/null 2>&1 && die "a link $bridge exists already"
	# The tree.
	mkdir -p "$n"/etc/cri/conf.d "$n"/etc/kubernetes/manifests "$n"/etc/kubernetes/pki "$n"/etc/cni/net.d "$n"/opt/cni/bin \
		"$n"/usr/local/bin "$n"/bin "$n"/run/containerd "$n"/run/runc "$n"/var/lib/containerd "$n"/var/lib/kubelet \
		"$n"/var/log/pods "$n"/var/lib/cni/networks "$n"/usr/libexec/kubernetes/kubelet-plugins/volume/exec
	# containerd itself a file of N/bin (a hard link, else a copy): containerd
	# 2.x looks for a shim missing on PATH beside its own executable, which
	# would find the pinned bin dir's runsc shim for --runsc no-shim.
	ln -f "$(readlink -f "$ctd_bin/containerd")" "$n/bin/containerd" 2>/dev/null ||
		cp "$ctd_bin/containerd" "$n/bin/containerd" || die "cannot copy $ctd_bin/containerd into $n/bin"
	ln -sfn "$ctd_bin/ctr" "$n/bin/ctr"
	ln -sfn "$ctd_bin/containerd-shim-runc-v2" "$n/bin/containerd-shim-runc-v2"
	ln -sfn "$runc_bin" "$n/bin/runc"
	for b in bridge host-local loopback; do
		ln -sfn "$nrb/$b" "$n/opt/cni/bin/$b"
	done
	case $runsc in
	present)
		ln -sfn "$nrb/runsc" "$n/usr/local/bin/runsc"
		ln -sfn "$nrb/containerd-shim-runsc-v1" "$n/usr/local/bin/containerd-shim-runsc-v1"
		;;
	no-shim) ln -sfn "$nrb/runsc" "$n/usr/local/bin/runsc" ;;
	broken)
		printf '#!/bin/sh\necho "runsc: broken on purpose (kubelet-node.sh --runsc broken)" >&2\nexit 1\n' >"$n/usr/local/bin/runsc"
		chmod +x "$n/usr/local/bin/runsc"
		ln -sfn "$nrb/containerd-shim-runsc-v1" "$n/usr/local/bin/containerd-shim-runsc-v1"
		;;
	absent) ;;
	esac
	# The only runc, shims and runsc containerd finds are the node's.
	env_path=$n/bin:$n/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	write_part_node
	write_gvisor_files
	write_cri_toml
	write_containerd_toml
	write_cni
	# The kubelet's identity: control-plane.sh's client certificate minting.
	"$here/control-plane.sh" node-cert "$dir" "$name" || die "minting the kubelet's client certificate failed"
	cp "$dir/nodes/$name.kubeconfig" "$n/etc/kubernetes/kubeconfig-kubelet"
	write_kubelet_config
	cat >"$n/node.env.tmp" <<EOF
KUBELET_PORT=$KUBELET_PORT
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
EOF
	# Host state.
	sysctl_hold
	cgroups_create
	[[ -d /var/log/containers ]] || : >"$n/.made-var-log-containers"
	# containerd.
	launch containerd "$n/bin/containerd" --config "$n/etc/cri/containerd.toml" || die "containerd did not start"
	wait_containerd
	import_images
	# kubelet.
	env_path=$env_path launch kubelet "$nrb/kubelet" --config="$n/etc/kubernetes/kubelet.yaml" \
		--kubeconfig="$n/etc/kubernetes/kubeconfig-kubelet" --hostname-override="$name" \
		--root-dir="$n/var/lib/kubelet" --cert-dir="$n/var/lib/kubelet/pki" \
		--volume-plugin-dir="$n/usr/libexec/kubernetes/kubelet-plugins/volume/exec" --v=2 ||
		die "kubelet did not start"
	wait_node
	cat >>"$n/node.env.tmp" <<EOF
# kubelet-node.sh: node $name of the cluster in $dir (source it)
NODE_NAME=$name
CRI_SOCKET=unix://$sock
KUBELET_KUBECONFIG=$n/etc/kubernetes/kubeconfig-kubelet
CRI_CONF_D=$n/etc/cri/conf.d
CONTAINERD_CONFIG=$n/etc/cri/containerd.toml
CONTAINERD_ROOT=$n/var/lib/containerd
CONTAINERD_STATE=$n/run/containerd
HOST_ROOT=$n
KUBELET_ROOT=$n/var/lib/kubelet
CGROUP_ROOT=/$cgroot
BRIDGE=$bridge
POD_SUBNET=10.210.$bridge_n.0/24
CONTAINERD_VERSION=$ctd
RUNC=$runc
RUNSC=$runsc
BIN=$nrb
EOF
	mv "$n/node.env.tmp" "$n/node.env"
	rm -f "$n/.starting"
	trap - EXIT
}

# ---------------------------------------------------------------- down
do_down() {
	# Pod containers through containerd first, so shims exit the normal way.
	if pid_of containerd >/dev/null && [[ -x $n/bin/ctr ]]; then
		kill_one kubelet
		local id
		for id in $(ctr_n tasks ls -q 2>/dev/null); do
			ctr_n tasks delete --force "$id" >/dev/null 2>&1 || true
		done
	fi
	kill_one kubelet
	kill_one containerd
	# Whatever is left: shims, runsc sandboxes, containers.
	local p i left
	for i in 1 2 3; do
		left=$(node_pids)
		[[ -z $left ]] && break
		for p in $left; do kill -KILL "$p" 2>/dev/null || true; done
		sleep 0.3
	done
	# Mounts under N (kubelet's rshared root dir, netns, overlay, shm), deepest first.
	local m
	for i in 1 2 3; do
		left=$(awk -v d="$n/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
		[[ -z $left ]] && break
		for m in $left; do umount -R "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
	done
	cgroups_remove
	# The bridge (pods' veths went with their network namespaces).
	local b
	b=$(cat "$n/node.env" "$n/node.env.tmp" 2>/dev/null | sed -n 's/^BRIDGE=//p' | head -n1 || true)
	[[ -z $b ]] && b=${bridge:-}
	if [[ -z $b ]] && [[ -f $n/etc/cni/net.d/10-sr-kn.conflist ]]; then
		b=$(sed -nE 's/.*"bridge": "(sr-kn-[0-9]+)".*/\1/p' "$n/etc/cni/net.d/10-sr-kn.conflist")
	fi
	if [[ -n $b ]]; then
		ip link del "$b" 2>/dev/null || true
		[[ -d $hostrun/bridges ]] && rm -f "$hostrun/bridges/${b#sr-kn-}"
	fi
	# kubelet's fixed /var/log/containers: the links into this node's pod logs.
	if [[ -d /var/log/containers ]]; then
		local l
		for l in /var/log/containers/*; do
			[[ -L $l && $(readlink "$l") == "$n"/* ]] && rm -f "$l"
		done
		[[ -f $n/.made-var-log-containers ]] && { rmdir /var/log/containers 2>/dev/null || true; }
	fi
	rm -f "$n/.made-var-log-containers"
	# Shim sockets in /run/containerd/s, runsc state in /run/containerd/runsc:
	# the names hash or name this node's own tasks.
	# Every id containerd logged (a shim that failed to start leaves its
	# socket, and its bundle is gone) and every bundle still there.
	# (A list of its own: the node's logs/ may already be gone, when its
	# cluster's directory was removed first, and the node must still be
	# taken down whole.)
	local bd id ids
	ids=$(mktemp)
	{
		for bd in "$n"/run/containerd/io.containerd.runtime.v2.task/k8s.io/*; do
			[[ -d $bd ]] && printf '%s\n' "${bd##*/}"
		done
		grep -ohE '\b[0-9a-f]{64}\b' "$n/logs/containerd.log" 2>/dev/null || true
	} | sort -u >"$ids"
	while read -r id; do
		[[ -n $id ]] || continue
		for bd in "$sock/k8s.io/$id" "$sock/k8s.io/$id/debug"; do
			rm -f "/run/containerd/s/$(printf '%s' "$bd" | sha256sum | cut -c1-64)"
		done
		[[ -d /run/containerd/runsc/k8s.io/$id ]] && rm -rf "/run/containerd/runsc/k8s.io/$id"
	done <"$ids"
	rm -f "$ids"
	rmdir /run/containerd/runsc/k8s.io /run/containerd/runsc /run/containerd/s /run/containerd 2>/dev/null || true
	sysctl_release
	release_ports
	rmdir "$hostrun/bridges" 2>/dev/null || true
	rmdir "$hostrun" 2>/dev/null || true
	# The tree, but its logs.
	local e
	for e in "$n"/* "$n"/.starting; do
		[[ -e $e ]] || continue
		[[ $e == "$n/logs" ]] && continue
		rm -rf "$e" 2>/dev/null || printf '%s: warning: cannot remove %s\n' "$me" "$e" >&2
	done
	return 0
}

cmd_down() {
	set_node "$1" "$2"
	[[ -d $n ]] || return 0
	lock_node
	do_down
}

[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0 # sourced: the functions only
(($# >= 3)) || usage
case $1 in
up) cmd_up "${@:2}" ;;
down) (($# == 3)) || usage && cmd_down "$2" "$3" ;;
*) usage ;;
esac
