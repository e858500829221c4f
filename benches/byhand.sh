#!/usr/bin/env bash
# The checks an operator does by hand on a node, as one script: the baseline
# the agent's full observation is compared with (benches/run.sh times both,
# interleaved). Same inputs as the agent in the suite: the sysctls it reads,
# a user namespace with uid/gid maps (unshare -r writes them, as the agent's
# probe does), the CRI drop-ins and the runtime config files they name, the
# gVisor binaries and `runsc --version`, and the node identity files.
# Not done by hand here (the agent does them): the idmapped-mount probe and
# the live CRI query (no crictl on this machine).
#
# Usage: byhand.sh RUNSC CRI_CONF_DIR
set -u
runsc=${1:?runsc path}
conf=${2:?CRI drop-in directory}

for f in /proc/sys/user/max_*; do
	echo "$f $(cat "$f")"
done
for f in /proc/sys/kernel/unprivileged_userns_clone \
	/proc/sys/kernel/apparmor_restrict_unprivileged_userns \
	/proc/sys/kernel/yama/ptrace_scope; do
	[ -r "$f" ] && echo "$f $(cat "$f")"
done
cat /proc/self/uid_map
if unshare -U -r true; then echo "userns: ok"; else echo "userns: failed"; fi
for p in "$conf"/*.part; do
	[ -r "$p" ] || continue
	cat "$p"
	# The runtime config file each drop-in names (ConfigPath = "...").
	for c in $(sed -n 's/.*ConfigPath *= *"\(.*\)".*/\1/p' "$p"); do
		[ -r "$c" ] && cat "$c"
	done
done
for b in "$runsc" "$(dirname "$runsc")/containerd-shim-runsc-v1"; do
	if [ -x "$b" ]; then echo "$b: executable"; else echo "$b: missing"; fi
done
timeout 2 "$runsc" --version | head -n 1
cat /proc/sys/kernel/random/boot_id /etc/machine-id /etc/os-release 2>/dev/null
uname -r
hostname
