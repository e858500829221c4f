#!/usr/bin/env bash
# Proves scripts/kubelet-node.sh by hand, on the real binaries: a control plane
# (scripts/control-plane.sh up), then for each node state a node (kubelet-node.sh
# up with its options), three pods with spec.nodeName on it, what kubelet did
# with each, the Node's status.runtimeHandlers, and `down`. The pods:
#   a  hostUsers: false on the default (runc) handler, with the projected
#      service-account token and a memory emptyDir
#   b  runtimeClassName gvisor (a RuntimeClass with handler runsc)
#   c  both
# For each pod one line: Running (with the container's /proc/self/uid_map
# first line, read from its log file under the node's podLogsDir), or the
# exact message of kubelet's FailedCreatePodSandBox event, or the pod's state
# when neither came within the wait. Then the host after every node is down
# against the host before the first came up: processes and mounts naming the
# run's dir, cgroup v1 top-level entries, links, iptables rules, kubelet's
# sysctls, /run/containerd, /var/log/containers.
#
# Usage: scripts/test-kubelet-node.sh [STATE...]
#   STATE is NAME:OPTIONS, OPTIONS the `up` options with commas for spaces,
#   e.g. runc11:--runc,1.1. Default: every state below. Output: one block per
#   state, then `host after down: same` or the differences; exit 1 if a node
#   did not come up or the host differs.
#
# Environment: SR_KN_DIR (the run's dir; default a new one under /tmp, removed
# at the end), SR_KN_POD_WAIT (s per pod, default 90), and those of
# control-plane.sh and kubelet-node.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cp=$here/control-plane.sh
kn=$here/kubelet-node.sh
pod_wait=${SR_KN_POD_WAIT:-90}
status=0

states=("$@")
if ((${#states[@]} == 0)); then
	states=(
		kn-default:
		kn-runc11:--runc,1.1
		kn-runc13:--runc,1.3
		kn-ctd16:--containerd,1.6
		kn-ctd21:--containerd,2.1
		kn-runsc-absent:--runsc,absent
		kn-runsc-noshim:--runsc,no-shim
		kn-runsc-broken:--runsc,broken
	)
fi

if [[ -n ${SR_KN_DIR:-} ]]; then
	dir=$SR_KN_DIR
	mkdir -p "$dir"
	own_dir=0
else
	dir=$(mktemp -d /tmp/sr-kn-test.XXXXXX)
	own_dir=1
fi
dir=$(cd "$dir" && pwd -P)

# host_state: what a node may leave on the host (see the header).
host_state() {
	echo "## processes naming $dir"
	local p cmd
	for p in /proc/[0-9]*; do
		cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
		[[ $cmd == *"$dir/nodes"* || $(readlink "$p/cwd" 2>/dev/null) == "$dir/nodes"* ]] && printf '%s %s\n' "${p#/proc/}" "${cmd:0:160}"
	done | sort
	echo "## processes: kubelet, containerd-shim*, runsc*"
	ps -eo comm= | grep -E '^(kubelet|containerd-shim|runsc|runsc-)' | sort | uniq -c || true
	echo "## mounts naming $dir or kubelet or containerd"
	awk '{ print $5 }' /proc/self/mountinfo | grep -E "^$dir/|kubelet|/run/containerd|/run/netns" | sort || true
	echo "## cgroup v1 top-level entries"
	find /sys/fs/cgroup/ -mindepth 2 -maxdepth 2 -type d | sort
	echo "## links"
	ip -o link | awk -F': ' '{ print $2 }' | sed 's/@.*//' | sort
	echo "## iptables"
	{ iptables-save; ip6tables-save; } 2>/dev/null | grep -vE '^(#|:)' | sed -E 's/\[[0-9]+:[0-9]+\]//' | sort
	echo "## sysctls"
	sysctl vm.overcommit_memory kernel.panic kernel.panic_on_oops vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
	echo "## /run/containerd, /var/log/containers, kubelet-node.sh's sysctl holders"
	find /run/containerd /var/log/containers "${SR_CONTROL_PLANE_RUN:-/tmp/sr-control-plane}/kubelet-node" ! -name "*.lock" 2>/dev/null | sort || true
}

k() { "$BIN/kubectl" --kubeconfig="$dir/admin.kubeconfig" --request-timeout=10s "$@"; }

# pod_result POD: Running (+ uid_map line), the FailedCreatePodSandBox
# message, or the state when neither came.
pod_result() {
	local pod=$1 deadline=$((SECONDS + pod_wait)) phase msg
	while :; do
		phase=$(k -n sr-kn get pod "$pod" -o 'jsonpath={.status.phase}' 2>/dev/null || true)
		if [[ $phase == Running ]]; then
			local log uid
			log=$(find "$node_dir/var/log/pods" -path "*_${pod}_*" -name '*.log' 2>/dev/null | head -n1)
			uid=
			for _ in $(seq 20); do
				uid=$(sed -nE 's/^[^ ]+ stdout [FP] (.*)$/\1/p' "$log" 2>/dev/null | head -n1 | tr -s ' ')
				[[ -n $uid ]] && break
				sleep 0.5
			done
			printf 'Running (uid_map: %s)' "${uid:-?}"
			return
		fi
		msg=$(k -n sr-kn get events --field-selector "involvedObject.name=$pod,reason=FailedCreatePodSandBox" \
			-o 'jsonpath={.items[0].message}' 2>/dev/null || true)
		if [[ -n $msg ]]; then
			printf 'FailedCreatePodSandBox: %s' "$msg"
			return
		fi
		if ((SECONDS >= deadline)); then
			local why
			why=$(k -n sr-kn get pod "$pod" -o 'jsonpath={.status.phase} {.status.containerStatuses[0].state}' 2>/dev/null || true)
			local ev
			ev=$(k -n sr-kn get events --field-selector "involvedObject.name=$pod" -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null | tail -n2 | tr '\n' ' ')
			printf 'no result in %ss: %s; events: %s' "$pod_wait" "$why" "${ev:-none}"
			return
		fi
		sleep 1
	done
}

pod() { # NAME NODE HOSTUSERS RUNTIMECLASS
	local rc=
	[[ -n $4 ]] && rc="  runtimeClassName: $4"
	k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: sr-kn}
spec:
  nodeName: $2
  hostUsers: $3
$rc
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: sr-kn.local/busybox:1
    imagePullPolicy: Never
    command: [/bin/busybox, sh, -c, 'head -n1 /proc/self/uid_map; ls /var/run/secrets/kubernetes.io/serviceaccount/ >/dev/null && sleep 3600']
    volumeMounts: [{name: mem, mountPath: /mem}]
  volumes:
  - name: mem
    emptyDir: {medium: Memory, sizeLimit: 16Mi}
EOF
}

cleanup() {
	local rc=$?
	trap - EXIT
	if [[ -d $dir/nodes ]]; then
		local d
		for d in "$dir"/nodes/*/; do
			[[ -d $d ]] && "$kn" down "$dir" "$(basename "$d")" || true
		done
	fi
	"$cp" down "$dir" || true
	((own_dir)) && rm -rf "$dir"
	exit "$rc"
}

before=$(host_state)
trap cleanup EXIT
t0=$SECONDS
"$cp" up "$dir"
# shellcheck disable=SC1091
source "$dir/control-plane.env"
echo "control plane up in $((SECONDS - t0))s ($dir)"
k create namespace sr-kn >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
EOF
for _ in $(seq 60); do
	k -n sr-kn get serviceaccount default >/dev/null 2>&1 && k -n sr-kn get configmap kube-root-ca.crt >/dev/null 2>&1 && break
	sleep 0.5
done
k -n sr-kn get configmap kube-root-ca.crt >/dev/null || echo "WARNING: no kube-root-ca.crt in sr-kn (root-ca-cert-publisher not running?)"

for st in "${states[@]}"; do
	name=${st%%:*}
	opts=${st#*:}
	IFS=, read -r -a args <<<"$opts"
	[[ -z $opts ]] && args=()
	node_dir=$dir/nodes/$name
	echo "=== $name: up ${args[*]:-(defaults)}"
	t=$SECONDS
	if ! "$kn" up "$dir" "$name" "${args[@]}"; then
		echo "node did not come up"
		status=1
		"$kn" down "$dir" "$name" || true
		continue
	fi
	echo "node Ready in $((SECONDS - t))s"
	echo "runtimeHandlers: $(k get node "$name" -o 'jsonpath={range .status.runtimeHandlers[*]}{.name}={.features}{" "}{end}')"
	echo "containerRuntimeVersion: $(k get node "$name" -o 'jsonpath={.status.nodeInfo.containerRuntimeVersion}')"
	pod a-"$name" "$name" false ""
	pod b-"$name" "$name" true gvisor
	pod c-"$name" "$name" false gvisor
	for p in a b c; do
		echo "pod $p: $(pod_result "$p-$name")"
	done
	k -n sr-kn delete pod "a-$name" "b-$name" "c-$name" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
	"$kn" down "$dir" "$name"
done

"$cp" down "$dir"
rm -rf "$dir/nodes"
after=$(host_state)
if [[ $before == "$after" ]]; then
	echo "host after down: same"
else
	echo "host after down: differs"
	diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") || true
	status=1
fi
exit "$status"
