#!/usr/bin/env python3
"""The test command's runner: runs the test binaries of ONE workspace build
(`cargo test --workspace --no-run --message-format=json`) tier by tier, as
`tests/tiers.toml` assigns them, instead of one `cargo test -p …` per tier
(each of which resolved features its own way and rebuilt shared crates).

In a tier, the binaries listed under `parallel` run side by side (`--jobs`
at once, each with libtest's `--test-threads`), then each binary under
`alone` runs by itself: floods, faults, sandboxes and timing-sensitive
tests, whose figures would lie with a neighbour on the two cores.

Each binary runs as `cargo test` would run it: from its package's
directory, with Cargo's run-time variables, `--skip reexec_helper_` (those
are helpers a test re-executes, not tests) and its own `SR_SKIP_LOG` (a line
per `common::skip`, which libtest counted as passed). Its output is printed
whole when it ends, so parallel logs never interleave. A binary that dies
before its summary, or outlives `--timeout`, counts as one failure.

Usage:
  run-tests.py check ARTIFACTS              every test binary is in exactly one tier
  run-tests.py run ARTIFACTS TIER RESULTS   run a tier; appends "TIER passed failed skipped seconds"

Exit status of `run`: 0 when no test failed, 1 otherwise; 2 on bad usage.
"""

import concurrent.futures
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIERS = ROOT / "tests" / "tiers.toml"
RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")


def die(msg: str) -> None:
    print(f"run-tests: {msg}", file=sys.stderr)
    sys.exit(2)


def package_name(package_id: str, manifest: str) -> str:
    # Cargo's package ids: "path+file:///dir#name@1.0" or "path+file:///dir/name#1.0".
    frag = package_id.rsplit("#", 1)[-1]
    if "@" in frag:
        return frag.split("@", 1)[0]
    return pathlib.Path(manifest).parent.name


def artifacts(path: str) -> dict:
    """Test executables of the build: "package/kind/name" -> (executable, package dir, package)."""
    found = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
                continue
            if not msg.get("profile", {}).get("test"):
                continue
            target = msg["target"]
            pkg = package_name(msg["package_id"], msg["manifest_path"])
            key = f"{pkg}/{target['kind'][0]}/{target['name']}"
            found[key] = (msg["executable"], str(pathlib.Path(msg["manifest_path"]).parent), pkg)
    return found


def tiers() -> dict:
    try:
        return tomllib.loads(TIERS.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        die(f"cannot read {TIERS}: {err}")
        return {}


def check(built: dict) -> int:
    seen: dict[str, str] = {}
    bad = 0
    for tier, spec in tiers().items():
        for group in ("parallel", "alone"):
            for key in spec.get(group, []):
                if key in seen:
                    print(f"run-tests: {key} is in tiers {seen[key]} and {tier}", file=sys.stderr)
                    bad = 1
                seen[key] = tier
                if key not in built:
                    print(f"run-tests: tier {tier} lists {key}, which the build did not make", file=sys.stderr)
                    bad = 1
    for key in sorted(built):
        if key not in seen:
            print(f"run-tests: {key} is in no tier of {TIERS.relative_to(ROOT)}; add it to one", file=sys.stderr)
            bad = 1
    return bad


def run_one(key: str, built: dict, threads: int, timeout: float, tmp: str) -> dict:
    exe, pkg_dir, pkg = built[key]
    skips = os.path.join(tmp, key.replace("/", "_") + ".skips")
    open(skips, "w").close()
    env = dict(os.environ)
    env.update(
        SR_SKIP_LOG=skips,
        CARGO_MANIFEST_DIR=pkg_dir,
        CARGO_PKG_NAME=pkg,
        RUST_BACKTRACE=env.get("RUST_BACKTRACE", "1"),
    )
    start = time.monotonic()
    proc = subprocess.Popen(
        [exe, f"--test-threads={threads}", "--skip", "reexec_helper_"],
        cwd=pkg_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    text = out.decode(errors="replace")
    passed = failed = ignored = 0
    for line in text.splitlines():
        m = RESULT.match(line)
        if m:
            passed += int(m.group(1))
            failed += int(m.group(2))
            ignored += int(m.group(3))
    with open(skips, encoding="utf-8", errors="replace") as f:
        skipped_lines = [line.rstrip("\n") for line in f if line.strip()]
    ignored_lines = [line for line in text.splitlines() if line.startswith("test ") and line.endswith("... ignored")]
    note = ""
    if timed_out:
        note = f"killed after {timeout:.0f} s"
        failed = max(failed, 1)
    elif proc.returncode != 0 and failed == 0:
        note = f"exited {proc.returncode} with no failed test counted (crashed test binary)"
        failed = 1
    return {
        "key": key,
        "text": text,
        "passed": passed - len(skipped_lines),
        "failed": failed,
        "skipped": len(skipped_lines) + ignored,
        "skip_lines": skipped_lines,
        "ignored_lines": ignored_lines,
        "seconds": time.monotonic() - start,
        "note": note,
    }


def report(r: dict) -> None:
    print(f"==== {r['key']} ({r['seconds']:.0f} s)")
    sys.stdout.write(r["text"])
    for line in r["skip_lines"]:
        print(f"SKIPPED {line}")
    for line in r["ignored_lines"]:
        print(f"SKIPPED (ignored) {line}")
    if r["note"]:
        print(f"==== {r['key']}: {r['note']}")
    print(
        f"==== {r['key']}: {r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped ({r['seconds']:.0f} s)",
        flush=True,
    )


def run(built: dict, tier: str, results: str) -> int:
    spec = tiers().get(tier)
    if spec is None:
        die(f"no tier {tier} in {TIERS}")
    jobs = int(os.environ.get("TEST_JOBS", spec.get("jobs", 2)))
    threads = int(os.environ.get("TEST_THREADS", spec.get("threads", 4)))
    timeout = float(spec.get("timeout", 1200))
    start = time.monotonic()
    done = []
    with tempfile.TemporaryDirectory(prefix=f"sr-{tier}-") as tmp:
        parallel = [k for k in spec.get("parallel", []) if k in built]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
            futures = [pool.submit(run_one, k, built, threads, timeout, tmp) for k in parallel]
            for fut in concurrent.futures.as_completed(futures):
                done.append(fut.result())
                report(done[-1])
        for key in spec.get("alone", []):
            if key in built:
                done.append(run_one(key, built, threads, timeout, tmp))
                report(done[-1])
    missing = [k for g in ("parallel", "alone") for k in spec.get(g, []) if k not in built]
    passed = sum(r["passed"] for r in done)
    failed = sum(r["failed"] for r in done) + len(missing)
    skipped = sum(r["skipped"] for r in done)
    for key in missing:
        print(f"==== {key}: not built (counted as a failure)")
    seconds = time.monotonic() - start
    print(f"== {tier} tier: {passed} passed, {failed} failed, {skipped} skipped ({seconds:.0f} s)")
    slowest = sorted(done, key=lambda r: -r["seconds"])[:5]
    print("== slowest: " + ", ".join(f"{r['key']} {r['seconds']:.0f} s" for r in slowest))
    with open(results, "a", encoding="utf-8") as f:
        f.write(f"{tier} {passed} {failed} {skipped} {seconds:.0f}\n")
    return 1 if failed else 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        return check(artifacts(sys.argv[2]))
    if len(sys.argv) == 5 and sys.argv[1] == "run":
        return run(artifacts(sys.argv[2]), sys.argv[3], sys.argv[4])
    die("usage: run-tests.py check ARTIFACTS | run ARTIFACTS TIER RESULTS")
    return 2


if __name__ == "__main__":
    sys.exit(main())
