#!/usr/bin/env bash
# A real Kubernetes control plane for the tests, on loopback, from the pinned
# binaries that scripts/build-control-plane.sh builds (controlplane/README.md):
# etcd (data on tmpfs, --unsafe-no-fsync), kube-apiserver (Node,RBAC,
# NodeRestriction, client certificates, service-account tokens, front-proxy
# request headers, an audit log) and kube-controller-manager (garbage
# collector, namespace, service-account and token controllers, and the
# root-ca-cert-publisher, whose kube-root-ca.crt ConfigMap in every namespace
# a real kubelet's projected service-account token volume needs).
#
#   up DIR          start a new cluster whose state lives in DIR (refuses a DIR
#                   that already has one: exit 2)
#   node DIR NAME   register Node NAME as kubelet does, with a kubelet-style
#                   client certificate (CN=system:node:NAME, O=system:nodes);
#                   leaves DIR/nodes/NAME.kubeconfig (+ .crt/.key beside it)
#   node-cert DIR NAME
#                   only that certificate and kubeconfig, no Node: for a real
#                   kubelet that registers itself (scripts/kubelet-node.sh)
#   stop DIR        stop etcd, kube-apiserver, kube-controller-manager; keep
#                   data, certificates and ports (an outage; the Cluster API
#                   managers of `capi` keep running and reconnect)
#   start DIR       start them again on the same ports, wait for /readyz
#   down DIR        kill everything, remove the etcd data (idempotent)
#   capi DIR [WORKLOAD]
#                   on the cluster in DIR (the management cluster): the real
#                   Cluster API and CABPT managers that scripts/build-capi.sh
#                   builds, with their CRDs (upstream's kustomizations through
#                   controlplane/capi/) and their defaulting, validating and
#                   conversion webhooks registered on loopback with a caBundle;
#                   returns once both managers are ready. WORKLOAD (a second
#                   `up` DIR) is recorded in DIR/capi.env for the Cluster
#                   objects that point at it. `down DIR` stops them too.
#
# Prints nothing on success; any failure is one line on stderr and a non-zero
# exit, and an `up`/`start` that fails kills what it started. The processes
# are in their own session (they outlive the calling shell); `down` ends them.
#
# What DIR holds: admin.kubeconfig (O=system:masters), ca.crt (the cluster CA
# the server's certificate chains to), client-ca.crt/client-ca.key (the CA the
# server trusts for client certificates: mint more with it), pki/ (the rest:
# front-proxy-ca.crt, front-proxy-client.{crt,key} for a proxy that forwards
# X-Remote-User/X-Remote-Group/X-Remote-Extra-*, sa.{key,pub}, serving and
# controller-manager certificates), audit.log (every write, level Request;
# every Secret read, level Metadata; never rotated in practice: an unset
# --audit-log-maxsize is lumberjack's 100 MB, which the scale bench's world
# passes, and a rotated log loses the events counted from a mark),
# audit-policy.yaml, control-plane.env (ports, URLs: source it),
# pids/*.pid, logs/{etcd,kube-apiserver,kube-controller-manager}.log,
# etcd -> the data dir on /dev/shm.
#
# Environment: SR_CONTROL_PLANE_BIN (the bin dir; default: what
# `scripts/build-control-plane.sh path` prints), SR_CONTROL_PLANE_RUN (the
# port reservations shared by every cluster on this machine, default
# /tmp/sr-control-plane), SR_CONTROL_PLANE_READY_TIMEOUT (s, default 60),
# SR_NODE_RUNTIME_VERSION (a registered Node's containerRuntimeVersion,
# default containerd://2.1.0: no runtime runs behind these Nodes),
# SR_NODE_PROVIDER_ID (the Node's spec.providerID, as kubelet's
# --provider-id sets it at registration; default none), SR_CAPI_DIR
# (for `capi`: the build; default what `scripts/build-capi.sh path` prints).
set -euo pipefail

me=control-plane
here=$(cd "$(dirname "$0")" && pwd)
run=${SR_CONTROL_PLANE_RUN:-/tmp/sr-control-plane}
ready_timeout=${SR_CONTROL_PLANE_READY_TIMEOUT:-60}
k8s_version=v1.36.3
service_cidr=10.96.0.0/12
components=(etcd kube-apiserver kube-controller-manager)
managers=(capi-manager cabpt-manager)
# Cluster API v1.13.6's gates, pinned to its defaults so a changed default in a
# later pin shows up here: ReconcilerRateLimiting (one reconcile per object per
# second) shapes every rollout's timing. CABPT v0.6.11 has no feature gates.
capi_feature_gates=MachinePool=true,MachineSetPreflightChecks=true,PriorityQueue=true,ReconcilerRateLimiting=true,ClusterTopology=false,KubeadmBootstrapFormatIgnition=false,RuntimeSDK=false,InPlaceUpdates=false,MachineTaintPropagation=false
declare -A log_from=()

die() {
	printf '%s: %s\n' "$me" "$*" >&2
	exit 1
}

usage() {
	printf 'usage: %s up DIR | node DIR NAME | node-cert DIR NAME | stop DIR | start DIR | down DIR | capi DIR [WORKLOAD]\n' "$0" >&2
	exit 2
}

# ---------------------------------------------------------------- binaries
find_bin() {
	if [[ -n ${SR_CONTROL_PLANE_BIN:-} ]]; then
		bin=$SR_CONTROL_PLANE_BIN
	else
		bin=$("$here/build-control-plane.sh" path 2>/dev/null) ||
			die "the control-plane binaries are not built: run scripts/build-control-plane.sh all (or set SR_CONTROL_PLANE_BIN)"
	fi
	local b
	for b in "${components[@]}" kubectl; do
		[[ -x $bin/$b ]] || die "no $b in $bin"
	done
	command -v openssl >/dev/null 2>&1 || die "openssl is not installed (Debian package openssl)"
	command -v setsid >/dev/null 2>&1 || die "setsid is not installed (Debian package util-linux)"
}

# ---------------------------------------------------------------- processes
# alive PID: the process exists and is not a zombie (a child of this shell
# that died stays a zombie until reaped: kill -0 would still succeed).
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

pid_of() { # pid_of NAME: the pid from DIR/pids/NAME.pid if that process is alive
	local f=$dir/pids/$1.pid p
	[[ -f $f ]] || return 1
	p=$(<"$f")
	[[ $p =~ ^[0-9]+$ ]] && alive "$p" || return 1
	printf '%s' "$p"
}

# launch NAME ARGS...: start $bin/NAME in a session of its own, stdin from
# /dev/null, output to DIR/logs/NAME.log; its pid in DIR/pids/NAME.pid.
launch() {
	local name=$1
	shift
	mkdir -p "$dir/pids" "$dir/logs"
	rm -f "$dir/pids/$name.pid"
	# Logs are appended across stop/start: failures are read from here on.
	log_from[$name]=$(($(stat -c %s "$dir/logs/$name.log" 2>/dev/null || echo 0) + 1))
	# shellcheck disable=SC2016 # $$ and $@ belong to the inner shell
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$dir/pids/$name.pid" "${exe_dir:-$bin}/$name" "$@" \
		</dev/null >>"$dir/logs/$name.log" 2>&1 7>&- 8>&- &
	local i
	for ((i = 0; i < 50; i++)); do
		[[ -s $dir/pids/$name.pid ]] && return 0
		sleep 0.02
	done
	return 1
}

# kill_one NAME: TERM, up to 10 s, then KILL; waits until it is gone.
kill_one() {
	local p i
	p=$(pid_of "$1") || {
		rm -f "$dir/pids/$1.pid"
		return 0
	}
	kill -TERM "$p" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		alive "$p" || break
		sleep 0.1
	done
	if alive "$p"; then
		kill -KILL "$p" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			alive "$p" || break
			sleep 0.1
		done
	fi
	rm -f "$dir/pids/$1.pid"
}

# sweep [managers]: any etcd, kube-apiserver or kube-controller-manager (and
# with `managers`, capi-manager or cabpt-manager) whose command line names
# DIR, e.g. one whose pid file was lost. Nothing else is touched.
sweep() {
	local p exe cmd
	for p in /proc/[0-9]*; do
		exe=$(readlink "$p/exe" 2>/dev/null) || continue
		case ${exe##*/} in
		etcd | kube-apiserver | kube-controller-manager) ;;
		capi-manager | cabpt-manager) [[ ${1:-} == managers ]] || continue ;;
		*) continue ;;
		esac
		cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
		[[ $cmd == *"$dir/"* ]] || continue
		kill -KILL "${p#/proc/}" 2>/dev/null || true
	done
}

# stop_all [managers]: the components (a `stop` leaves the Cluster API
# managers running, as their pods would ride out an API server outage and
# reconnect; `down` passes `managers`).
stop_all() {
	local i
	for ((i = ${#components[@]} - 1; i >= 0; i--)); do
		kill_one "${components[i]}"
	done
	sweep "${1:-}"
}

# listening_by PID PORT: PID holds a socket listening on 127.0.0.1:PORT.
listening_by() {
	local hex inode
	hex=$(printf '%04X' "$2")
	while read -r inode; do
		if find "/proc/$1/fd" -lname "socket:\[$inode\]" 2>/dev/null | grep . >/dev/null; then
			return 0
		fi
	done < <(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' /proc/net/tcp /proc/net/tcp6)
	return 1
}

# ---------------------------------------------------------------- ports
# Free loopback ports, reserved machine-wide under $run/ports (one file per
# port naming the DIR) while a lock is held, so two `up`s never pick the same
# port; the range is below the kernel's ephemeral range, so no outgoing
# connection or bind(0) takes them meanwhile. A reservation whose DIR no
# longer has a cluster is stale and taken back.
port_in_use() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6
}

reserved() {
	local f=$run/ports/$1 owner
	[[ -f $f ]] || return 1
	owner=$(<"$f")
	if [[ -f $owner/control-plane.env ]] && grep -qsE "^[A-Z_]+_PORT=$1\$" "$owner/control-plane.env" "$owner/capi.env"; then
		return 0
	fi
	# Reserved by an `up` still starting (its env not written yet)?
	[[ $owner == "$dir" ]] && return 0
	[[ -f $owner/.starting ]] && return 0
	rm -f "$f"
	return 1
}

# pick_ports N: sets ports=(N free, reserved ports)
pick_ports() {
	local n=$1 lo=20000 hi=32000 tries=0 p
	mkdir -p "$run/ports"
	ports=()
	exec 7>"$run/ports.lock"
	flock -w 30 7 || die "cannot lock $run/ports.lock"
	while ((${#ports[@]} < n)); do
		((++tries < 2000)) || {
			exec 7>&-
			die "no free loopback port in $lo-$hi"
		}
		p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
		port_in_use "$p" && continue
		reserved "$p" && continue
		printf '%s\n' "$dir" >"$run/ports/$p"
		ports+=("$p")
	done
	exec 7>&-
}

release_ports() {
	local p f
	for p in "$@"; do
		f=$run/ports/$p
		[[ -f $f && $(<"$f") == "$dir" ]] && rm -f "$f"
	done
	return 0
}

# ---------------------------------------------------------------- PKI
ossl() {
	local out
	out=$(openssl "$@" 2>&1) || die "openssl $1 failed: $(printf '%s' "$out" | head -n1)"
}

new_key() { ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

# new_ca KEY CRT CN
new_ca() {
	new_key "$1"
	ossl req -x509 -new -key "$1" -subj "/CN=$3" -days 3650 -out "$2" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-addext "subjectKeyIdentifier=hash"
}

# new_cert CA_KEY CA_CRT KEY CRT SUBJECT EXT_USAGE [SAN]
new_cert() {
	local ext
	ext=$(mktemp)
	{
		printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n'
		printf 'extendedKeyUsage=%s\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n' "$6"
		[[ -n ${7:-} ]] && printf 'subjectAltName=%s\n' "$7"
	} >"$ext"
	new_key "$3"
	local csr
	csr=$(mktemp)
	ossl req -new -key "$3" -subj "$5" -out "$csr"
	ossl x509 -req -in "$csr" -CA "$2" -CAkey "$1" -set_serial "0x$(openssl rand -hex 16)" \
		-days 3650 -extfile "$ext" -out "$4"
	rm -f "$ext" "$csr"
}

make_pki() {
	local k=$dir/pki
	mkdir -p "$k"
	chmod 700 "$k"
	new_ca "$k/ca.key" "$dir/ca.crt" "sandbox-readiness test cluster CA"
	new_ca "$dir/client-ca.key" "$dir/client-ca.crt" "sandbox-readiness test client CA"
	new_ca "$k/front-proxy-ca.key" "$k/front-proxy-ca.crt" "sandbox-readiness test front-proxy CA"
	new_cert "$k/ca.key" "$dir/ca.crt" "$k/apiserver.key" "$k/apiserver.crt" "/CN=kube-apiserver" serverAuth \
		"DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:::1,IP:10.96.0.1"
	new_cert "$dir/client-ca.key" "$dir/client-ca.crt" "$k/admin.key" "$k/admin.crt" "/O=system:masters/CN=sandbox-readiness-admin" clientAuth
	new_cert "$dir/client-ca.key" "$dir/client-ca.crt" "$k/kcm.key" "$k/kcm.crt" "/CN=system:kube-controller-manager" clientAuth
	new_cert "$k/front-proxy-ca.key" "$k/front-proxy-ca.crt" "$k/front-proxy-client.key" "$k/front-proxy-client.crt" "/CN=front-proxy-client" clientAuth
	ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$k/sa.key"
	ossl pkey -in "$k/sa.key" -pubout -out "$k/sa.pub"
	chmod 600 "$dir/client-ca.key" "$k"/*.key
}

# kubeconfig FILE USER CERT KEY [embed]: a kubeconfig for the server; with
# `embed` the credentials are inline (the file can be copied), else by path
# (as kubelet's).
kubeconfig() {
	local f=$1 user=$2 cert=$3 key=$4 cred
	if [[ ${5:-} == embed ]]; then
		cred="    client-certificate-data: $(base64 -w0 <"$cert")
    client-key-data: $(base64 -w0 <"$key")"
	else
		cred="    client-certificate: $cert
    client-key: $key"
	fi
	umask 077
	cat >"$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandbox-readiness-test
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$dir/ca.crt")
users:
- name: $user
  user:
$cred
contexts:
- name: $user@sandbox-readiness-test
  context:
    cluster: sandbox-readiness-test
    user: $user
current-context: $user@sandbox-readiness-test
EOF
	mv "$f.tmp" "$f"
	umask 022
}

write_audit_policy() {
	cat >"$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
# Every write, with its request body (a patch's body is the patch).
- level: Request
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
# Every read of a Secret, without its content: who read which Secret.
- level: Metadata
  resources: [{group: "", resources: ["secrets"]}]
  verbs: ["get", "list", "watch"]
- level: None
EOF
}

# ---------------------------------------------------------------- components
load_env() {
	[[ -f $dir/control-plane.env ]] || die "no cluster in $dir (run: $0 up $dir)"
	# shellcheck disable=SC1091
	source "$dir/control-plane.env"
}

# wait_listening NAME PORT: the process is up and listens on PORT; else
# returns 1 (dead: `bind` in its log if the port was taken) after 30 s.
wait_listening() {
	local p i
	for ((i = 0; i < 300; i++)); do
		p=$(pid_of "$1") || return 1
		listening_by "$p" "$2" && return 0
		sleep 0.1
	done
	return 1
}

# this_run NAME: NAME's log since its last launch.
this_run() { tail -c "+${log_from[$1]:-1}" "$dir/logs/$1.log" 2>/dev/null || true; }

# why NAME: one line from NAME's log saying why it failed.
why() {
	local log=$dir/logs/$1.log line
	line=$(this_run "$1" | grep -m1 -iE 'address already in use' ||
		this_run "$1" | grep -iE '"level":"(fatal|error)"|^[EF][0-9]{4} |error:|failed|unknown flag|not defined' | tail -n1 ||
		this_run "$1" | grep -v '^[[:space:]]*$' | tail -n1 || true)
	line=$(printf '%s' "$line" | tr -s '[:space:]' ' ' | cut -c1-300)
	printf '%s' "${line:-no reason in its log} (log: $log)"
}

bind_failed() { this_run "$1" | grep 'address already in use' >/dev/null; }

start_etcd() {
	launch etcd --name=sr-test --data-dir="$dir/etcd" \
		--listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster="sr-test=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state="$1" \
		--unsafe-no-fsync --quota-backend-bytes=$((2 * 1024 * 1024 * 1024)) --log-level=warn || return 1
	wait_listening etcd "$ETCD_CLIENT_PORT"
}

start_apiserver() {
	local k=$dir/pki
	launch kube-apiserver \
		--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
		--cert-dir="$k/apiserver-cert-dir" --tls-cert-file="$k/apiserver.crt" --tls-private-key-file="$k/apiserver.key" \
		--client-ca-file="$dir/client-ca.crt" \
		--authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction \
		--allow-privileged=true \
		--service-account-key-file="$k/sa.pub" --service-account-signing-key-file="$k/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-cluster-ip-range="$service_cidr" \
		--requestheader-client-ca-file="$k/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$k/front-proxy-client.crt" --proxy-client-key-file="$k/front-proxy-client.key" \
		--audit-log-path="$dir/audit.log" --audit-policy-file="$dir/audit-policy.yaml" \
		--audit-log-maxsize=1000000 \
		--profiling=false --v=1 || return 1
	wait_listening kube-apiserver "$APISERVER_PORT"
}

start_kcm() {
	local k=$dir/pki
	launch kube-controller-manager \
		--kubeconfig="$dir/kcm.kubeconfig" \
		--authentication-kubeconfig="$dir/kcm.kubeconfig" --authorization-kubeconfig="$dir/kcm.kubeconfig" \
		--controllers=garbagecollector,namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher \
		--service-account-private-key-file="$k/sa.key" --root-ca-file="$dir/ca.crt" \
		--use-service-account-credentials=true \
		--bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$k/kcm-cert-dir" \
		--leader-elect=false --v=1 || return 1
	wait_listening kube-controller-manager "$KCM_PORT"
}

kubectl_admin() { "$bin/kubectl" --kubeconfig="$dir/admin.kubeconfig" --request-timeout=5s "$@"; }

# wait_readyz: kube-apiserver answers /readyz (RBAC's bootstrap roles are
# in place by then: the controller-manager starts after it, as it would
# crash-loop in a real cluster before it).
wait_readyz() {
	local deadline=$((SECONDS + ready_timeout)) c
	until kubectl_admin get --raw=/readyz >/dev/null 2>&1; do
		for c in etcd kube-apiserver; do
			pid_of "$c" >/dev/null || die "$c exited: $(why "$c")"
		done
		((SECONDS < deadline)) || die "kube-apiserver not ready after ${ready_timeout}s: $(why kube-apiserver)"
		sleep 0.2
	done
}

# wait_default_sa: the controller-manager made the default ServiceAccount.
wait_default_sa() {
	local deadline=$((SECONDS + ready_timeout))
	until kubectl_admin -n default get serviceaccount default >/dev/null 2>&1; do
		pid_of kube-controller-manager >/dev/null || die "kube-controller-manager exited: $(why kube-controller-manager)"
		((SECONDS < deadline)) || die "no default ServiceAccount after ${ready_timeout}s: $(why kube-controller-manager)"
		sleep 0.2
	done
}

# start_components new|existing: etcd, kube-apiserver (until /readyz),
# kube-controller-manager; returns 3 when a port was taken (the caller may
# pick others), dies otherwise.
start_components() {
	local c fn
	for c in "${components[@]}"; do
		case $c in
		etcd) fn=(start_etcd "$1") ;;
		kube-apiserver) fn=(start_apiserver) ;;
		kube-controller-manager)
			wait_readyz
			fn=(start_kcm)
			;;
		esac
		if ! "${fn[@]}"; then
			failed_component=$c
			bind_failed "$c" && return 3
			die "$c did not start: $(why "$c")"
		fi
	done
}

# ---------------------------------------------------------------- commands
# set_dir DIR [create]
set_dir() {
	[[ -n ${1:-} ]] || usage
	if [[ ${2:-} == create ]]; then
		mkdir -p "$1" || die "cannot create $1"
	fi
	[[ -d $1 ]] || die "no cluster in $1 (no such directory)"
	dir=$(cd "$1" && pwd -P)
}

# Held for the whole command: one command at a time on a DIR.
lock_dir() {
	exec 8>"$dir/.lock"
	flock -n 8 || {
		printf '%s: %s is busy: another control-plane command is running on it\n' "$me" "$dir" >&2
		exit 2
	}
}

cleanup_failed_up() {
	local rc=$?
	trap - EXIT
	if ((rc != 0)); then
		stop_all
		release_ports "${ports[@]}"
		[[ -n ${data:-} ]] && rm -rf "$data"
		rm -f "$dir/etcd" "$dir/control-plane.env" "$dir/.starting"
	fi
	exit "$rc"
}

cmd_up() {
	set_dir "$1" create
	lock_dir
	if [[ -f $dir/control-plane.env ]]; then
		printf '%s: %s is busy: it already holds a cluster (run: %s down %s)\n' "$me" "$dir" "$0" "$dir" >&2
		exit 2
	fi
	find_bin
	local c
	for c in "${components[@]}"; do
		! pid_of "$c" >/dev/null || {
			printf '%s: %s is busy: %s is running from it\n' "$me" "$dir" "$c" >&2
			exit 2
		}
	done
	ports=()
	data=
	trap cleanup_failed_up EXIT
	: >"$dir/.starting"
	rm -rf "$dir/logs" "$dir/pids" "$dir/nodes" "$dir/audit.log"
	mkdir -p "$dir/logs" "$dir/pids"
	make_pki
	write_audit_policy
	data=$(mktemp -d /dev/shm/sr-control-plane-etcd.XXXXXX) || die "cannot make the etcd data dir on /dev/shm"
	chmod 700 "$data"
	ln -sfn "$data" "$dir/etcd"
	local attempt rc
	for attempt in 1 2 3 4 5; do
		pick_ports 4
		ETCD_CLIENT_PORT=${ports[0]} ETCD_PEER_PORT=${ports[1]} APISERVER_PORT=${ports[2]} KCM_PORT=${ports[3]}
		kubeconfig "$dir/admin.kubeconfig" admin "$dir/pki/admin.crt" "$dir/pki/admin.key" embed
		kubeconfig "$dir/kcm.kubeconfig" kube-controller-manager "$dir/pki/kcm.crt" "$dir/pki/kcm.key" embed
		cat >"$dir/control-plane.env.tmp" <<EOF
# control-plane.sh: the cluster in $dir (source it)
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
ETCD_URL=http://127.0.0.1:$ETCD_CLIENT_PORT
ETCD_DATA=$data
BIN=$bin
EOF
		mv "$dir/control-plane.env.tmp" "$dir/control-plane.env"
		rc=0
		start_components new || rc=$?
		((rc == 0)) && break
		# A port was taken between the pick and the bind: others, from scratch.
		stop_all
		release_ports "${ports[@]}"
		rm -rf "${data:?}"/* "$dir/control-plane.env"
		mkdir -p "$dir/logs/failed-$attempt"
		mv "$dir"/logs/*.log "$dir/logs/failed-$attempt/" 2>/dev/null || true
		((attempt < 5)) || die "ports kept being taken while starting (logs: $dir/logs/failed-*)"
	done
	wait_default_sa
	rm -f "$dir/.starting"
	trap - EXIT
}

cmd_start() {
	set_dir "$1"
	lock_dir
	load_env
	bin=${SR_CONTROL_PLANE_BIN:-$BIN}
	find_bin
	[[ -d $ETCD_DATA ]] || die "the etcd data $ETCD_DATA is gone (tmpfs cleared?): run $0 down $dir, then up"
	local c rc=0
	for c in "${components[@]}"; do
		pid_of "$c" >/dev/null && die "$c is already running from $dir (stop it first)"
	done
	trap 'rc=$?; trap - EXIT; ((rc == 0)) || stop_all; exit $rc' EXIT
	start_components existing || rc=$?
	((rc != 3)) || die "$failed_component cannot bind its port (taken by another process): $(why "$failed_component")"
	trap - EXIT
}

cmd_stop() {
	set_dir "$1"
	lock_dir
	load_env
	bin=${SR_CONTROL_PLANE_BIN:-$BIN}
	stop_all
}

cmd_down() {
	set_dir "$1"
	lock_dir
	if [[ ! -f $dir/control-plane.env ]]; then
		# Nothing up here; still end anything a lost state left.
		stop_managers
		stop_all managers
		return 0
	fi
	load_env
	bin=${SR_CONTROL_PLANE_BIN:-$BIN}
	stop_managers
	stop_all managers
	release_ports "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT"
	[[ $ETCD_DATA == /dev/shm/sr-control-plane-etcd.* ]] && rm -rf "$ETCD_DATA"
	rm -f "$dir/etcd" "$dir/control-plane.env" "$dir/.starting"
}

# node_cert NAME: DIR/nodes/NAME.kubeconfig with a kubelet's client
# certificate (CN=system:node:NAME, O=system:nodes), made once.
node_cert() {
	local name=$1
	local re='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'
	if ((${#name} > 253)) || ! [[ $name =~ $re ]]; then
		printf '%s: bad node name %q: must be a DNS-1123 subdomain (lower-case alphanumerics, "-", ".")\n' "$me" "$name" >&2
		exit 2
	fi
	load_env
	mkdir -p "$dir/nodes"
	local n=$dir/nodes/$name
	if [[ ! -f $n.kubeconfig ]]; then
		new_cert "$dir/client-ca.key" "$dir/client-ca.crt" "$n.key" "$n.crt" "/O=system:nodes/CN=system:node:$name" clientAuth
		kubeconfig "$n.kubeconfig" "system:node:$name" "$n.crt" "$n.key"
	fi
}

cmd_node_cert() {
	set_dir "$1"
	command -v openssl >/dev/null 2>&1 || die "openssl is not installed (Debian package openssl)"
	node_cert "$2"
}

cmd_node() {
	set_dir "$1"
	local name=$2
	node_cert "$name"
	bin=${SR_CONTROL_PLANE_BIN:-$BIN}
	find_bin
	command -v curl >/dev/null 2>&1 || die "curl is not installed (Debian package curl)"
	pid_of kube-apiserver >/dev/null || die "the cluster in $dir is stopped (run: $0 start $dir)"
	local n=$dir/nodes/$name
	local k=("$bin/kubectl" --kubeconfig="$n.kubeconfig" --request-timeout=10s) out arch
	case $(uname -m) in
	x86_64) arch=amd64 ;;
	aarch64) arch=arm64 ;;
	*) arch=$(uname -m) ;;
	esac
	# The Node as kubelet registers it (pkg/kubelet/kubelet_node_status.go,
	# initialNode: no cloud provider, no --register-with-taints).
	if ! "${k[@]}" get node "$name" -o name >/dev/null 2>&1; then
		out=$("${k[@]}" create -f - 2>&1 >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels:
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: $arch
    beta.kubernetes.io/os: linux
    beta.kubernetes.io/arch: $arch
  annotations:
    volumes.kubernetes.io/controller-managed-attach-detach: "true"
spec: {${SR_NODE_PROVIDER_ID:+providerID: "$SR_NODE_PROVIDER_ID"}}
EOF
		) || [[ $out == *AlreadyExists* || $out == *"already exists"* ]] ||
			die "registering Node $name failed: $(printf '%s' "$out" | head -n1)"
	fi
	# Its status, as kubelet's status setters fill it, sent as kubelet sends
	# it (a strategic merge patch on the status subresource).
	local now mem cpu machine boot kernel os_image disk runtime=${SR_NODE_RUNTIME_VERSION:-containerd://2.1.0}
	now=$(date -u +%FT%TZ)
	disk=$(df -Pk / | awk 'NR == 2 { print $2 }')
	cpu=$(nproc)
	mem=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
	machine=$(printf '%s' "$name" | sha256sum | cut -c1-32)
	boot=$(cat /proc/sys/kernel/random/boot_id)
	kernel=$(uname -r)
	os_image=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null)
	os_image=${os_image:-Linux}
	local status
	status=$(
		cat <<EOF
{"status":{
 "addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":"$name"}],
 "daemonEndpoints":{"kubeletEndpoint":{"Port":10250}},
 "capacity":{"cpu":"$cpu","memory":"${mem}Ki","pods":"110","ephemeral-storage":"${disk}Ki","hugepages-1Gi":"0","hugepages-2Mi":"0"},
 "allocatable":{"cpu":"$cpu","memory":"$((mem - 102400))Ki","pods":"110","ephemeral-storage":"$((disk * 1024 * 9 / 10))","hugepages-1Gi":"0","hugepages-2Mi":"0"},
 "nodeInfo":{"machineID":"$machine","systemUUID":"$machine","bootID":"$boot","kernelVersion":"$kernel","osImage":"$os_image",
  "containerRuntimeVersion":"$runtime","kubeletVersion":"$k8s_version","operatingSystem":"linux","architecture":"$arch"},
 "conditions":[
  {"type":"MemoryPressure","status":"False","lastHeartbeatTime":"$now","lastTransitionTime":"$now","reason":"KubeletHasSufficientMemory","message":"kubelet has sufficient memory available"},
  {"type":"DiskPressure","status":"False","lastHeartbeatTime":"$now","lastTransitionTime":"$now","reason":"KubeletHasNoDiskPressure","message":"kubelet has no disk pressure"},
  {"type":"PIDPressure","status":"False","lastHeartbeatTime":"$now","lastTransitionTime":"$now","reason":"KubeletHasSufficientPID","message":"kubelet has sufficient PID available"},
  {"type":"Ready","status":"True","lastHeartbeatTime":"$now","lastTransitionTime":"$now","reason":"KubeletReady","message":"kubelet is posting ready status"}]}}
EOF
	)
	# Not `kubectl patch --subresource=status`: it GETs nodes/status first,
	# which the system:node role does not grant (kubelet never reads it).
	local code
	code=$(curl -sS --max-time 10 -o "$dir/nodes/.$name.status-reply" -w '%{http_code}' \
		--cacert "$dir/ca.crt" --cert "$n.crt" --key "$n.key" -X PATCH \
		-H 'Content-Type: application/strategic-merge-patch+json' -H 'Accept: application/json' \
		-H "User-Agent: kubelet/$k8s_version (linux/$arch) sandbox-readiness-control-plane" \
		--data-binary "$status" "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$name/status" 2>&1) || code="curl: $code"
	if [[ $code != 200 ]]; then
		out=$(grep -m1 -oE '"message": *"([^"\\]|\\.)*"' "$dir/nodes/.$name.status-reply" 2>/dev/null || true)
		rm -f "$dir/nodes/.$name.status-reply"
		die "updating Node $name status failed: HTTP $code ${out}"
	fi
	rm -f "$dir/nodes/.$name.status-reply"
	# kubelet's heartbeat Lease in kube-node-lease, owned by its Node.
	if ! "${k[@]}" -n kube-node-lease get lease "$name" -o name >/dev/null 2>&1; then
		local uid
		uid=$("${k[@]}" get node "$name" -o 'jsonpath={.metadata.uid}' 2>&1) || die "reading Node $name failed: $uid"
		out=$("${k[@]}" create -f - 2>&1 >/dev/null <<EOF
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: $name
  namespace: kube-node-lease
  ownerReferences:
  - apiVersion: v1
    kind: Node
    name: $name
    uid: $uid
spec:
  holderIdentity: $name
  leaseDurationSeconds: 40
  renewTime: "$(date -u +%FT%T.000000Z)"
EOF
		) || [[ $out == *AlreadyExists* || $out == *"already exists"* ]] ||
			die "creating Lease kube-node-lease/$name failed: $(printf '%s' "$out" | head -n1)"
	fi
}

# ---------------------------------------------------------------- Cluster API
# stop_managers: the Cluster API and CABPT managers `capi` started (if any),
# and their port reservations.
stop_managers() {
	local m
	for m in "${managers[@]}"; do
		kill_one "$m"
	done
	if [[ -f $dir/capi.env ]]; then
		local p
		# shellcheck disable=SC2046 # one port per word
		release_ports $(sed -nE 's/^[A-Z_]+_PORT=([0-9]+)$/\1/p' "$dir/capi.env")
		rm -f "$dir/capi.env"
	fi
}

# wait_healthy NAME PORT: the manager answers /readyz on its health port (its
# webhook server has started: both managers add that check).
wait_healthy() {
	local deadline=$((SECONDS + ready_timeout))
	until curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$2/readyz" 2>/dev/null; do
		pid_of "$1" >/dev/null || die "$1 exited: $(why "$1")"
		((SECONDS < deadline)) || die "$1 not ready after ${ready_timeout}s: $(why "$1")"
		sleep 0.2
	done
}

cmd_capi() {
	set_dir "$1"
	lock_dir
	load_env
	bin=${SR_CONTROL_PLANE_BIN:-$BIN}
	find_bin
	command -v curl >/dev/null 2>&1 || die "curl is not installed (Debian package curl)"
	python3 -c 'import yaml' 2>/dev/null || die "python3 with yaml is not installed (Debian package python3-yaml)"
	pid_of kube-apiserver >/dev/null || die "the cluster in $dir is stopped (run: $0 start $dir)"
	local workload=
	if [[ -n ${2:-} ]]; then
		[[ -f $2/control-plane.env ]] || die "no cluster in $2 (run: $0 up $2)"
		workload=$(cd "$2" && pwd -P)
		[[ $workload != "$dir" ]] || die "the workload cluster must be another DIR than the management cluster"
	fi
	if [[ -f $dir/capi.env ]]; then
		printf '%s: %s is busy: Cluster API already runs on it (run: %s down %s)\n' "$me" "$dir" "$0" "$dir" >&2
		exit 2
	fi
	local capi=${SR_CAPI_DIR:-}
	if [[ -z $capi ]]; then
		capi=$("$here/build-capi.sh" path 2>/dev/null) ||
			die "Cluster API and CABPT are not built: run scripts/build-capi.sh (or set SR_CAPI_DIR)"
	fi
	local m
	for m in "${managers[@]}"; do
		[[ -x $capi/bin/$m ]] || die "no $m in $capi/bin"
	done
	ports=()
	trap 'rc=$?; trap - EXIT; if ((rc != 0)); then stop_managers; release_ports "${ports[@]}"; fi; exit $rc' EXIT
	pick_ports 6
	local c=$dir/capi
	rm -rf "$c"
	mkdir -p "$c/pki" "$c/certs/capi" "$c/certs/cabpt"
	chmod 700 "$c/pki"
	cat >"$dir/capi.env.tmp" <<EOT
# control-plane.sh capi: Cluster API on the cluster in $dir (source it)
CAPI_WEBHOOK_PORT=${ports[0]}
CAPI_HEALTH_PORT=${ports[1]}
CAPI_METRICS_PORT=${ports[2]}
CABPT_WEBHOOK_PORT=${ports[3]}
CABPT_HEALTH_PORT=${ports[4]}
CABPT_METRICS_PORT=${ports[5]}
CAPI_FEATURE_GATES=$capi_feature_gates
CAPI_DIR=$capi
WORKLOAD_DIR=$workload
EOT
	mv "$dir/capi.env.tmp" "$dir/capi.env"
	# shellcheck disable=SC1091
	source "$dir/capi.env"
	# One CA for both webhook servers: it is the caBundle the API server checks
	# them with (cert-manager's role in a real cluster).
	new_ca "$c/pki/webhook-ca.key" "$c/pki/webhook-ca.crt" "sandbox-readiness test webhook CA"
	for m in capi cabpt; do
		new_cert "$c/pki/webhook-ca.key" "$c/pki/webhook-ca.crt" "$c/certs/$m/tls.key" "$c/certs/$m/tls.crt" \
			"/CN=$m-webhook-service.$m-system.svc" serverAuth "DNS:localhost,IP:127.0.0.1"
	done
	chmod 600 "$c/pki"/*.key "$c"/certs/*/tls.key
	# The CRDs and webhook configurations, from the modules' own kustomizations.
	cp -r "$here/../controlplane/capi" "$c/manifests"
	for m in capi cabpt; do
		mkdir -p "$c/manifests/$m/upstream"
		cp -r "$capi/config/$m/crd" "$capi/config/$m/webhook" "$c/manifests/$m/upstream/"
	done
	# Each provider apart (controlplane/capi/README.md says why).
	: >"$c/built.yaml"
	for m in capi cabpt; do
		{
			"$bin/kubectl" kustomize "$c/manifests/$m" 2>"$c/kustomize.err" || die "kubectl kustomize of the $m manifests failed: $(grep -v '^# Warning' "$c/kustomize.err" | head -n1)"
			echo ---
		} >>"$c/built.yaml"
	done
	local out
	python3 "$here/capi-manifests.py" "$c/pki/webhook-ca.crt" \
		"capi-system/capi-webhook-service=$CAPI_WEBHOOK_PORT" "cabpt-system/cabpt-webhook-service=$CABPT_WEBHOOK_PORT" \
		<"$c/built.yaml" >"$c/apply.yaml" 2>"$c/manifests.err" || die "$(head -n1 "$c/manifests.err")"
	# Server-side: the ClusterClass CRD is larger than the 256 KiB
	# last-applied annotation a client-side apply writes.
	out=$(kubectl_admin create namespace capi-system 2>&1 && kubectl_admin create namespace cabpt-system 2>&1) ||
		[[ $out == *AlreadyExists* ]] || die "creating the managers' namespaces failed: $(printf '%s' "$out" | head -n1)"
	out=$("$bin/kubectl" --kubeconfig="$dir/admin.kubeconfig" --request-timeout=60s apply --server-side \
		--field-manager=sandbox-readiness-capi -f "$c/apply.yaml" 2>&1 >/dev/null) ||
		die "applying the CAPI/CABPT CRDs and webhooks failed: $(printf '%s' "$out" | head -n1)"
	out=$("$bin/kubectl" --kubeconfig="$dir/admin.kubeconfig" --request-timeout=60s wait --timeout=60s \
		--for=condition=Established crd -l 'cluster.x-k8s.io/provider in (cluster-api,bootstrap-talos)' 2>&1 >/dev/null) ||
		die "the CAPI/CABPT CRDs are not Established: $(printf '%s' "$out" | head -n1)"
	# The managers run with the admin credentials (system:masters): their RBAC
	# in upstream's config/rbac is not what these tests judge.
	exe_dir=$capi/bin KUBECONFIG=$dir/admin.kubeconfig launch capi-manager \
		--webhook-port="$CAPI_WEBHOOK_PORT" --webhook-cert-dir="$c/certs/capi" \
		--health-addr="127.0.0.1:$CAPI_HEALTH_PORT" --diagnostics-address="127.0.0.1:$CAPI_METRICS_PORT" \
		--leader-elect=false --feature-gates="$capi_feature_gates" --v=1 ||
		die "capi-manager did not start: $(why capi-manager)"
	exe_dir=$capi/bin KUBECONFIG=$dir/admin.kubeconfig launch cabpt-manager \
		--webhook-port="$CABPT_WEBHOOK_PORT" --webhook-cert-dir="$c/certs/cabpt" \
		--health-addr="127.0.0.1:$CABPT_HEALTH_PORT" --diagnostics-address="127.0.0.1:$CABPT_METRICS_PORT" \
		--enable-leader-election=false --v=1 ||
		die "cabpt-manager did not start: $(why cabpt-manager)"
	wait_healthy capi-manager "$CAPI_HEALTH_PORT"
	wait_healthy cabpt-manager "$CABPT_HEALTH_PORT"
	trap - EXIT
}

(($# >= 2)) || usage
case $1 in
up) (($# == 2)) || usage && cmd_up "$2" ;;
node) (($# == 3)) || usage && cmd_node "$2" "$3" ;;
node-cert) (($# == 3)) || usage && cmd_node_cert "$2" "$3" ;;
stop) (($# == 2)) || usage && cmd_stop "$2" ;;
start) (($# == 2)) || usage && cmd_start "$2" ;;
down) (($# == 2)) || usage && cmd_down "$2" ;;
capi) (($# == 2 || $# == 3)) || usage && cmd_capi "$2" "${3:-}" ;;
*) usage ;;
esac
