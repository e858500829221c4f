#!/usr/bin/env python3
"""What the tests may leave on the host, recorded before and compared after.

usage: scripts/host-state.py snapshot FILE
       scripts/host-state.py diff FILE [--within SECONDS]

  snapshot  writes to FILE the host state the test command can change:
            processes of the parts the tests start (etcd, kube-apiserver,
            kube-controller-manager, the Cluster API managers, kubelet,
            containerd and its shims, runc, runsc, the agent, the
            controller and the test providers, Prometheus, QEMU), mounts, network interfaces,
            iptables chains, the sysctls kubelet and the tests touch, and
            every cgroup directly under a hierarchy named runsc-* (runsc's),
            sr-* or kubepods (the tests' and kubelet's)
  diff      compares the host now with FILE: prints one line per thing that
            is new (or a sysctl that changed) and exits 1 if any is; waits up
            to SECONDS (default 60) for leftovers to go first, since the
            tests' watchdogs stop their clusters once the test process is gone

A process is compared by name and arguments, not by pid. Exit status: 0
clean, 1 leftovers, 2 bad usage.
"""

import json
import os
import re
import subprocess
import sys
import time

PROCESS_NAMES = re.compile(
    r"^(etcd|kube-apiserver|kube-controller-manager|kubelet|capi-manager|cabpt-manager|"
    r"manager|containerd|containerd-shim.*|runc|runsc.*|exe|sandbox-readiness.*|prometheus|"
    r"qemu-system-.*|kubectl|test-providers)$"
)
CGROUP_NAMES = re.compile(r"^(runsc-\d+|sr-.*|kubepods.*)$")
SYSCTLS = [
    "vm.overcommit_memory",
    "kernel.panic",
    "kernel.panic_on_oops",
    "user.max_user_namespaces",
    "net.ipv4.ip_forward",
    "fs.inotify.max_user_instances",
    "fs.inotify.max_user_watches",
]


def processes():
    out = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if PROCESS_NAMES.match(comm) and args:
            out.append(f"process {comm}: {args[:300]}")
    return out


def mounts():
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4:
                    out.append(f"mount {fields[4]}")
    except OSError:
        pass
    return out


def links():
    try:
        r = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for line in r.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            out.append(f"link {parts[1].strip().split('@')[0]}")
    return out


def iptables():
    out = []
    for tool in ("iptables-save", "ip6tables-save"):
        try:
            r = subprocess.run([tool], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in r.stdout.splitlines():
            if line.startswith(":") or line.startswith("-A"):
                out.append(f"{tool} {line.split(' [')[0]}")
    return out


def cgroups():
    out = []
    base = "/sys/fs/cgroup"
    try:
        tops = os.listdir(base)
    except OSError:
        return out
    for h in tops:
        path = os.path.join(base, h)
        if CGROUP_NAMES.match(h) and os.path.isdir(path):
            out.append(f"cgroup {path}")
            continue
        try:
            for e in os.listdir(path):
                if CGROUP_NAMES.match(e) and os.path.isdir(os.path.join(path, e)):
                    out.append(f"cgroup {path}/{e}")
        except OSError:
            continue
    return out


def sysctls():
    out = {}
    for name in SYSCTLS:
        try:
            with open("/proc/sys/" + name.replace(".", "/")) as f:
                out[name] = f.read().strip()
        except OSError:
            pass
    return out


def state():
    things = processes() + mounts() + links() + iptables() + cgroups()
    return {"things": sorted(things), "sysctls": sysctls()}


def new_since(before):
    now = state()
    seen = {}
    for t in before["things"]:
        seen[t] = seen.get(t, 0) + 1
    left = []
    for t in now["things"]:
        if seen.get(t, 0) > 0:
            seen[t] -= 1
        else:
            left.append(t)
    for name, value in now["sysctls"].items():
        was = before["sysctls"].get(name)
        if was is not None and was != value:
            left.append(f"sysctl {name} = {value} (was {was})")
    return left


def main(argv):
    if len(argv) < 3 or argv[1] not in ("snapshot", "diff"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    path = argv[2]
    if argv[1] == "snapshot":
        with open(path, "w") as f:
            json.dump(state(), f)
        return 0
    within = 60.0
    if len(argv) == 5 and argv[3] == "--within":
        try:
            within = float(argv[4])
        except ValueError:
            print(f"host-state: --within {argv[4]!r} is not a number of seconds", file=sys.stderr)
            return 2
    elif len(argv) != 3:
        print("host-state: usage: diff FILE [--within SECONDS]", file=sys.stderr)
        return 2
    try:
        with open(path) as f:
            before = json.load(f)
    except (OSError, ValueError) as e:
        print(f"host-state: cannot read the snapshot {path}: {e}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + within
    while True:
        left = new_since(before)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(1)
    for t in left:
        print(f"host-state: left behind: {t}")
    if not left:
        print("host-state: nothing of the tests is left on the host")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
