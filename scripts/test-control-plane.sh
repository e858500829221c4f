#!/usr/bin/env bash
# The tests of scripts/control-plane.sh on the real binaries (built by
# scripts/build-control-plane.sh; run that first): two independent clusters,
# a Node registered with kubelet's credentials, the real Node authorizer and
# NodeRestriction refusing it another Node, the version the pinned build
# reports, the audit log, an outage (stop/start) keeping the data, the
# controller-manager's garbage collection, namespace deletion and default
# ServiceAccounts, front-proxy identity forwarding, and the failure modes: a
# busy DIR, a bad node name, a taken port, an etcd or kube-apiserver that does
# not start (nothing left running); then `capi` (scripts/build-capi.sh's
# real Cluster API and CABPT managers on one cluster, wired to the other):
# loopback ports, contract labels, conversion, defaulting and validating
# webhooks answering, and `down` ending the managers. Ends with
# `control-plane: N passed, N failed` and exits 1 if any failed.
#
# Environment: SR_CONTROL_PLANE_BIN (as control-plane.sh), SR_TEST_CACHE.
# shellcheck disable=SC2317 # cleanup, gone and ns_gone are called indirectly
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cp=$here/control-plane.sh
passed=0
failed=0

ok() {
	passed=$((passed + 1))
	printf 'ok   %s\n' "$1"
}
fail() {
	failed=$((failed + 1))
	printf 'FAIL %s: %s\n' "$1" "$2"
}
# check NAME DETAIL CMD...: ok when CMD succeeds, else fail with DETAIL.
check() {
	local name=$1 detail=$2
	shift 2
	if "$@"; then ok "$name"; else fail "$name" "$detail"; fi
}
finish() {
	printf 'control-plane: %d passed, %d failed\n' "$passed" "$failed"
	((failed == 0))
	exit
}

if [[ -n ${SR_CONTROL_PLANE_BIN:-} ]]; then
	bin=$SR_CONTROL_PLANE_BIN
elif ! bin=$("$here/build-control-plane.sh" path 2>&1); then
	fail "binaries built" "$bin"
	finish
fi
kubectl=$bin/kubectl

work=$(mktemp -d /tmp/sr-test-control-plane.XXXXXX)
a=$work/a
b=$work/b
listener=
cleanup() {
	[[ -n $listener ]] && kill "$listener" 2>/dev/null
	"$cp" down "$a" >/dev/null 2>&1 || true
	"$cp" down "$b" >/dev/null 2>&1 || true
	"$cp" down "$work/c" >/dev/null 2>&1 || true
	"$cp" down "$work/d" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# run NAME CMD...: CMD must exit 0 and print nothing.
silent_ok() {
	local name=$1 out rc=0
	shift
	out=$("$@" 2>&1) || rc=$?
	if ((rc != 0)); then
		fail "$name" "exit $rc: $out"
	elif [[ -n $out ]]; then
		fail "$name" "printed: $out"
	else
		ok "$name"
	fi
	return "$rc"
}

# refused NAME WANT_RC CMD...: CMD exits WANT_RC (or non-zero for `any`),
# prints exactly one line on stderr and nothing on stdout.
refused() {
	local name=$1 want=$2 rc=0 err
	shift 2
	"$@" >"$work/out" 2>"$work/err" || rc=$?
	err=$(<"$work/err")
	if ((rc == 0)); then
		fail "$name" "exit 0"
	elif [[ $want != any ]] && ((rc != want)); then
		fail "$name" "exit $rc, wanted $want: $err"
	elif [[ -s $work/out ]]; then
		fail "$name" "printed on stdout: $(<"$work/out")"
	elif (($(wc -l <"$work/err") != 1)); then
		fail "$name" "wanted one line on stderr, got: $err"
	else
		ok "$name ($err)"
	fi
}

# nothing_runs NAME DIR: no process has DIR in its command line.
nothing_runs() {
	local left
	left=$(pgrep -af -- "$2/" || true)
	if [[ -n $left ]]; then
		fail "$1" "still running: $left"
	else
		ok "$1"
	fi
}

env_of() { (
	# shellcheck disable=SC1090,SC1091
	source "$1/control-plane.env"
	printf '%s' "${!2}"
); }

ka() { "$kubectl" --kubeconfig="$a/admin.kubeconfig" --request-timeout=10s "$@"; }

# eventually NAME SECONDS CMD...: CMD succeeds within SECONDS.
eventually() {
	local name=$1 deadline=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			fail "$name" "not within ${deadline}s"
			return 1
		fi
		sleep 0.5
	done
	ok "$name"
}

# ---------------------------------------------------------------- up
t0=$SECONDS
if ! silent_ok "up A prints nothing" "$cp" up "$a"; then
	for f in "$a"/logs/*.log; do [[ -f $f ]] && tail -n 5 "$f"; done
	finish
fi
printf '     (up took %ss)\n' "$((SECONDS - t0))"
for f in admin.kubeconfig client-ca.crt client-ca.key ca.crt control-plane.env audit.log; do
	[[ -s $a/$f ]] || fail "up leaves $f" "missing or empty"
done
ok "up leaves admin.kubeconfig, client-ca.crt, client-ca.key"
silent_ok "up B (a second cluster)" "$cp" up "$b" || finish
if [[ $(env_of "$a" APISERVER_PORT) != "$(env_of "$b" APISERVER_PORT)" ]]; then
	ok "A and B on different ports"
else
	fail "A and B on different ports" "both on $(env_of "$a" APISERVER_PORT)"
fi
ka create namespace only-in-a >/dev/null
if "$kubectl" --kubeconfig="$b/admin.kubeconfig" get namespace only-in-a >/dev/null 2>&1; then
	fail "A and B independent" "B sees A's namespace"
else
	ok "A and B independent"
fi

# ---------------------------------------------------------------- version
ver=$(ka version -o json 2>&1 || true)
if [[ $(grep -c '"gitVersion": "v1.36.3"' <<<"$ver") == 2 ]]; then
	ok "kubectl version: client and server v1.36.3"
else
	fail "kubectl version: client and server v1.36.3" "$ver"
fi
# The test command puts the pinned kubectl first on PATH: every test that
# spawns `kubectl` gets this build, not the machine's.
path_kubectl=$(command -v kubectl || true)
check "kubectl on PATH is the pinned build" "PATH's kubectl is ${path_kubectl:-none}, not $kubectl" \
	test "$path_kubectl" -ef "$kubectl"
if ka get --raw=/version | grep '"gitVersion": "v1.36.3"' >/dev/null; then
	ok "/version reports v1.36.3"
else
	fail "/version reports v1.36.3" "$(ka get --raw=/version 2>&1)"
fi

# ---------------------------------------------------------------- busy DIR, bad input
refused "up on a busy DIR" 2 "$cp" up "$a"
if ka get --raw=/readyz >/dev/null 2>&1; then ok "A still up after the refused up"; else fail "A still up after the refused up" "not ready"; fi
for bad in "../evil" "a/b" "Upper" "-lead" "trail-" "a..b" "" "$(printf 'x%.0s' {1..254})"; do
	refused "node name '${bad:0:20}' refused" 2 "$cp" node "$a" "$bad"
done
if [[ -e $work/evil.kubeconfig || -e $a/evil.kubeconfig ]]; then fail "no file written for a bad name" "found one"; else ok "no file written for a bad name"; fi

# ---------------------------------------------------------------- nodes
silent_ok "node A n1 prints nothing" "$cp" node "$a" n1
silent_ok "node A n2.example" "$cp" node "$a" n2.example
silent_ok "node A n1 again (idempotent)" "$cp" node "$a" n1
n1=("$kubectl" --kubeconfig="$a/nodes/n1.kubeconfig" --request-timeout=10s)
who=$("${n1[@]}" auth whoami -o jsonpath='{.status.userInfo.username} {.status.userInfo.groups}' 2>&1 || true)
check "n1's kubeconfig is system:node:n1 in system:nodes" "$who" grep -q '^system:node:n1 .*system:nodes' <<<"$who"
ready=$(ka get node n1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.kubeletVersion} {.metadata.labels.kubernetes\.io/hostname} {.status.addresses[0].address}' 2>&1 || true)
check "Node n1 registered as kubelet does (Ready, v1.36.3, hostname, InternalIP)" "$ready" test "$ready" == "True v1.36.3 n1 127.0.0.1"
conds=$(ka get node n1 -o jsonpath='{.status.conditions[*].type}' 2>&1 || true)
check "n1 has kubelet's four conditions only" "$conds" test "$conds" == "MemoryPressure DiskPressure PIDPressure Ready"
owner=$(ka -n kube-node-lease get lease n1 -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}' 2>&1 || true)
check "n1's Lease in kube-node-lease, owned by its Node" "$owner" test "$owner" == Node/n1

# status_patch NODE: n1's credentials send a strategic merge patch of NODE's
# status, as kubelet (and the agent) do; prints the HTTP code.
patch='{"status":{"conditions":[{"type":"TestCondition","status":"True","reason":"Test","message":"written by the test"}]}}'
status_patch() {
	curl -sS --max-time 10 -o "$work/reply" -w '%{http_code}' --cacert "$a/ca.crt" \
		--cert "$a/nodes/n1.crt" --key "$a/nodes/n1.key" -X PATCH \
		-H 'Content-Type: application/strategic-merge-patch+json' --data-binary "$patch" \
		"https://127.0.0.1:$(env_of "$a" APISERVER_PORT)/api/v1/nodes/$1/status" 2>&1 || true
}
code=$(status_patch n1)
check "n1 patches its own Node status (HTTP $code)" "$(cat "$work/reply" 2>/dev/null)" test "$code" == 200
code=$(status_patch n2.example)
check "NodeRestriction refuses n1 n2's status (HTTP $code, \"is not allowed to modify node\")" \
	"$(cat "$work/reply" 2>/dev/null)" grep -q 'is not allowed to modify node' "$work/reply"
check "that refusal is a 403" "HTTP $code" test "$code" == 403
all_conds=$(ka get node n1 -o jsonpath='{.status.conditions[*].type}' 2>&1 | tr ' ' '\n' | LC_ALL=C sort | tr '\n' ' ' || true)
check "the patch merged by type (kubelet's four kept, TestCondition added)" "$all_conds" \
	test "$all_conds" == "DiskPressure MemoryPressure PIDPressure Ready TestCondition "
if out=$("${n1[@]}" get node n2.example 2>&1); then
	fail "the Node authorizer refuses n1 reading n2" "allowed: $out"
elif [[ $out == *"Forbidden"* ]]; then
	ok "the Node authorizer refuses n1 reading n2: $(head -n1 <<<"$out" | cut -c1-150)"
else
	fail "the Node authorizer refuses n1 reading n2" "not a 403: $out"
fi
silent_ok "node A n1 again keeps a condition another writer set" "$cp" node "$a" n1
all_conds=$(ka get node n1 -o jsonpath='{.status.conditions[*].type}' 2>&1 || true)
check "TestCondition still there after node re-ran" "$all_conds" grep -q TestCondition <<<"$all_conds"
if out=$("${n1[@]}" label node n1 node-role.kubernetes.io/control-plane= 2>&1); then
	fail "NodeRestriction refuses n1 a node-role label on itself" "allowed: $out"
elif [[ $out == *"orbidden"* || $out == *"is not allowed"* ]]; then
	ok "NodeRestriction refuses n1 a node-role label on itself"
else
	fail "NodeRestriction refuses n1 a node-role label on itself" "$out"
fi

# ---------------------------------------------------------------- audit
# The audit backend writes after the response: wait up to 15 s for the event
# (one second was not enough on a loaded machine).
# The wait is for that very event: n1 made other patches (the refused label)
# that may be logged before it.
n1_status_patch() {
	grep '"verb":"patch"' "$a/audit.log" | grep '"username":"system:node:n1"' | grep '"subresource":"status"' | grep '"name":"n1"' | grep '"code":200' >/dev/null
}
for _ in $(seq 30); do
	n1_status_patch && break
	sleep 0.5
done
if n1_status_patch; then
	ok "audit log records n1's status patch"
else
	fail "audit log records n1's status patch" "no such event in $a/audit.log"
fi
if grep '"username":"system:node:n1"' "$a/audit.log" | grep '"name":"n2.example"' | grep '"code":403' |
	grep '"authorization.k8s.io/decision":"allow"' >/dev/null; then
	ok "audit log records the refused patch (403, authorized, refused by admission)"
else
	fail "audit log records the refused patch (403)" "no such event"
fi
if grep -q '"verb":"get"' "$a/audit.log"; then
	fail "audit log holds writes only" "a get is logged"
else
	ok "audit log holds writes only"
fi

# ---------------------------------------------------------------- front proxy
port=$(env_of "$a" APISERVER_PORT)
if command -v curl >/dev/null 2>&1; then
	fp=(curl -sS --max-time 10 --cacert "$a/ca.crt" --cert "$a/pki/front-proxy-client.crt" --key "$a/pki/front-proxy-client.key")
	code=$("${fp[@]}" -o /dev/null -w '%{http_code}' -H 'X-Remote-User: system:node:n1' -H 'X-Remote-Group: system:nodes' \
		"https://127.0.0.1:$port/api/v1/nodes/n1" 2>&1 || true)
	code2=$("${fp[@]}" -o /dev/null -w '%{http_code}' -H 'X-Remote-User: system:node:n1' -H 'X-Remote-Group: system:nodes' \
		-X PATCH -H 'Content-Type: application/strategic-merge-patch+json' -d '{"metadata":{"labels":{"x":"y"}}}' \
		"https://127.0.0.1:$port/api/v1/nodes/n2.example" 2>&1 || true)
	check "front proxy forwards the node's identity (own Node 200, other Node 403)" "own $code, other $code2" \
		test "$code:$code2" == 200:403
	# That very request (its body's label), once the audit backend wrote it.
	forwarded_logged() {
		grep '"username":"system:node:n1"' "$a/audit.log" | grep '"name":"n2.example"' | grep '"x":"y"' | grep '"code":403' >/dev/null
	}
	for _ in $(seq 30); do
		forwarded_logged && break
		sleep 0.5
	done
	if forwarded_logged; then
		ok "audit log names the forwarded user"
	else
		fail "audit log names the forwarded user" "no event"
	fi
else
	fail "front proxy forwards the node's identity" "curl is not installed (Debian package curl)"
fi

# ---------------------------------------------------------------- controller-manager
ka create namespace gc-test >/dev/null
eventually "default ServiceAccount in a new namespace (kcm serviceaccount)" 30 ka -n gc-test get serviceaccount default
ka -n gc-test create configmap owner >/dev/null
uid=$(ka -n gc-test get configmap owner -o jsonpath='{.metadata.uid}')
ka -n gc-test apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: "$uid"}]
EOF
ka -n gc-test delete configmap owner --wait=false >/dev/null
gone() { ! ka -n gc-test get configmap dependent >/dev/null 2>&1; }
eventually "ownerRef cascade (kcm garbagecollector)" 60 gone
ka delete namespace gc-test --wait=false >/dev/null
ns_gone() { ! ka get namespace gc-test >/dev/null 2>&1; }
eventually "namespace deletion completes (kcm namespace)" 60 ns_gone

# ---------------------------------------------------------------- outage
silent_ok "stop A" "$cp" stop "$a"
nothing_runs "stop A leaves no process of A" "$a"
if ka get --raw=/readyz >/dev/null 2>&1; then fail "A unreachable while stopped" "answers"; else ok "A unreachable while stopped"; fi
if "$kubectl" --kubeconfig="$b/admin.kubeconfig" --request-timeout=10s get --raw=/readyz >/dev/null 2>&1; then
	ok "B unaffected by A's stop"
else
	fail "B unaffected by A's stop" "B not ready"
fi
# A port of A taken while it is stopped: start fails with one line, nothing runs.
cert=$work/squatter
cp "$a/pki/apiserver.crt" "$cert.crt"
cp "$a/pki/apiserver.key" "$cert.key"
openssl s_server -quiet -accept "127.0.0.1:$port" -cert "$cert.crt" -key "$cert.key" </dev/null >/dev/null 2>&1 &
listener=$!
for _ in $(seq 50); do
	grep -q ":$(printf '%04X' "$port") .* 0A " /proc/net/tcp && break
	sleep 0.1
done
refused "start A with its port taken" any "$cp" start "$a"
nothing_runs "the failed start leaves no process of A" "$a"
kill "$listener" 2>/dev/null
wait "$listener" 2>/dev/null || true
listener=
t0=$SECONDS
silent_ok "start A" "$cp" start "$a"
printf '     (start took %ss)\n' "$((SECONDS - t0))"
if [[ $(ka get node n1 -o jsonpath='{.metadata.name}' 2>&1) == n1 ]]; then
	ok "Node n1 survives stop/start"
else
	fail "Node n1 survives stop/start" "$(ka get node n1 2>&1)"
fi
code=$(status_patch n1)
check "n1's credentials work after the restart (HTTP $code)" "$(cat "$work/reply" 2>/dev/null)" test "$code" == 200

# ---------------------------------------------------------------- failures of up
# A bin dir whose etcd (then kube-apiserver) cannot start: up fails with one
# line and leaves nothing running.
fake=$work/bin-etcd-fails
mkdir -p "$fake"
ln -s "$bin/kube-apiserver" "$bin/kube-controller-manager" "$bin/kubectl" "$fake/"
ln -s "$bin/etcd" "$fake/etcd-real"
# shellcheck disable=SC2016 # expanded by the wrapper, not here
printf '#!/bin/sh\nexec "$(dirname "$0")/etcd-real" --no-such-flag "$@"\n' >"$fake/etcd"
chmod +x "$fake/etcd"
SR_CONTROL_PLANE_BIN=$fake refused "up with an etcd that does not start" any "$cp" up "$work/c"
nothing_runs "the failed up leaves no process" "$work/c"
check "the failed up leaves no cluster state" "control-plane.env left" test ! -e "$work/c/control-plane.env"
fake2=$work/bin-apiserver-fails
mkdir -p "$fake2"
ln -s "$bin/etcd" "$bin/kube-controller-manager" "$bin/kubectl" "$fake2/"
ln -s "$bin/kube-apiserver" "$fake2/kube-apiserver-real"
# shellcheck disable=SC2016 # expanded by the wrapper, not here
printf '#!/bin/sh\nexec "$(dirname "$0")/kube-apiserver-real" --no-such-flag "$@"\n' >"$fake2/kube-apiserver"
chmod +x "$fake2/kube-apiserver"
SR_CONTROL_PLANE_BIN=$fake2 refused "up with a kube-apiserver that does not start" any "$cp" up "$work/d"
nothing_runs "the failed up kills the etcd it started" "$work/d"

# ---------------------------------------------------------------- capi
# The real Cluster API and CABPT managers on A (management) wired to B
# (workload): CRDs from upstream's kustomizations, webhooks on loopback.
capi_of() { (
	# shellcheck disable=SC1090,SC1091
	source "$1/capi.env"
	printf '%s' "${!2}"
); }
if ! capi_dir=$("$here/build-capi.sh" path 2>&1); then
	fail "Cluster API built" "$capi_dir"
else
	refused "capi with a WORKLOAD that holds no cluster" any "$cp" capi "$a" "$work/nowhere"
	if silent_ok "capi A B (CAPI v1.13.6, CABPT v0.6.11, webhooks registered)" "$cp" capi "$a" "$b"; then
		refused "capi on a DIR where it already runs" 2 "$cp" capi "$a"
		check "capi.env records the workload cluster" "$(cat "$a/capi.env")" test "$(capi_of "$a" WORKLOAD_DIR)" == "$(cd "$b" && pwd -P)"
		for m in CAPI CABPT; do
			port=$(capi_of "$a" "${m}_HEALTH_PORT")
			check "$m manager ready (/readyz on 127.0.0.1:$port)" "not ready" curl -fsS --max-time 5 -o /dev/null "http://127.0.0.1:$port/readyz"
			hex=$(printf '0100007F:%04X' "$port")
			check "$m health port bound to loopback only" "not on $hex" grep -q " $hex 00000000:0000 0A " /proc/net/tcp
		done
		label=$(ka get crd talosconfigs.bootstrap.cluster.x-k8s.io -o 'jsonpath={.metadata.labels.cluster\.x-k8s\.io/v1beta1}' 2>&1 || true)
		check "TalosConfig CRD carries CABPT's contract label (v1beta1: $label)" "$label" test "$label" == v1alpha3
		url=$(ka get crd machines.cluster.x-k8s.io -o 'jsonpath={.spec.conversion.webhook.clientConfig.url}' 2>&1 || true)
		check "Machine conversion webhook on CAPI's loopback port ($url)" "$url" test "$url" == "https://127.0.0.1:$(capi_of "$a" CAPI_WEBHOOK_PORT)/convert"
		ka create namespace capi-test >/dev/null
		ka apply --server-side -f - >/dev/null 2>"$work/err" <<'EOT' || fail "create a MachineDeployment" "$(cat "$work/err")"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: md, namespace: capi-test}
spec:
  clusterName: c1
  replicas: 0
  template:
    spec:
      clusterName: c1
      bootstrap: {configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: TalosConfigTemplate, name: t}}
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: TestMachineTemplate, name: t}
EOT
		sel=$(ka -n capi-test get machinedeployment md -o 'jsonpath={.spec.selector.matchLabels.cluster\.x-k8s\.io/deployment-name}' 2>&1 || true)
		check "CAPI's defaulting webhook set the MachineDeployment's selector ($sel)" "$sel" test "$sel" == md
		# v1beta2 is stored; the v1beta1 view is made by CAPI's conversion
		# webhook (nodeStartupTimeoutSeconds 600 -> nodeStartupTimeout 10m0s).
		# A MachineHealthCheck, because converting an object with references
		# needs the referenced kinds' CRDs (a MachineDeployment whose
		# infrastructure template kind has no CRD cannot be read as v1beta1).
		ka apply --server-side -f - >/dev/null 2>"$work/err" <<'EOT' || fail "create a MachineHealthCheck" "$(cat "$work/err")"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata: {name: h, namespace: capi-test}
spec: {clusterName: c1, selector: {matchLabels: {pool: a}}}
EOT
		v1=$(ka -n capi-test get machinehealthchecks.v1beta1.cluster.x-k8s.io h -o 'jsonpath={.apiVersion} {.spec.nodeStartupTimeout}' 2>"$work/err" || true)
		check "the v1beta1 view comes from CAPI's conversion webhook ($v1)" "$v1 $(cat "$work/err")" test "$v1" == "cluster.x-k8s.io/v1beta1 10m0s"
		ka apply --server-side -f - >/dev/null 2>"$work/err" <<'EOT' || fail "create a TalosConfigTemplate" "$(cat "$work/err")"
apiVersion: bootstrap.cluster.x-k8s.io/v1alpha3
kind: TalosConfigTemplate
metadata: {name: t, namespace: capi-test}
spec: {template: {spec: {generateType: worker, talosVersion: v1.11}}}
EOT
		refused "CABPT's webhook refuses a changed TalosConfigTemplate" any \
			"$kubectl" --kubeconfig="$a/admin.kubeconfig" -n capi-test patch talosconfigtemplate t --type merge -p '{"spec":{"template":{"spec":{"talosVersion":"v1.12"}}}}'
		grep -q 'Spec is immutable' "$work/err" && ok "that refusal is CABPT's (Spec is immutable)" || fail "that refusal is CABPT's" "$(cat "$work/err")"
	fi
fi

# ---------------------------------------------------------------- down
data=$(env_of "$a" ETCD_DATA)
silent_ok "down A" "$cp" down "$a"
nothing_runs "down A leaves no process of A (the CAPI and CABPT managers too)" "$a"
check "down A removes capi.env" "capi.env left" test ! -e "$a/capi.env"
check "down A removes the etcd data" "$data left" test ! -e "$data"
silent_ok "down A again (idempotent)" "$cp" down "$a"
refused "node on a downed DIR" any "$cp" node "$a" n3
silent_ok "down B" "$cp" down "$b"
nothing_runs "down B leaves no process of B" "$b"
finish
