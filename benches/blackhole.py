#!/usr/bin/env python3
"""Black-holed endpoints for the fan-out benchmark: listen on loopback ports,
accept every connection and never answer (nor read), like a node whose agent
hangs. Exits by itself after --lifetime seconds so a forgotten one cannot
linger; benches/run.sh also kills it.

Usage: blackhole.py --ports-file FILE [--host 127.0.0.1] [--lifetime 600]
Prints "ready N" on stdout once every port listens.
"""

import argparse
import selectors
import socket
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports-file", required=True, help="one port per line")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--lifetime", type=float, default=600.0)
    args = ap.parse_args()
    if not args.host.startswith("127.") and args.host != "::1":
        print("blackhole: loopback addresses only", file=sys.stderr)
        return 2
    with open(args.ports_file, encoding="ascii") as f:
        ports = [int(line) for line in f if line.strip()]
    sel = selectors.DefaultSelector()
    listeners = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((args.host, port))
        s.listen(1024)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        listeners.append(s)
    print(f"ready {len(listeners)}", flush=True)
    held = []
    deadline = time.monotonic() + args.lifetime
    while time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            try:
                conn, _ = key.fileobj.accept()
            except BlockingIOError:
                continue
            # Held open and never read: the client's request goes unanswered.
            held.append(conn)
    for c in held + listeners:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
