#!/usr/bin/env python3
"""Unused-dependency lint of the test command: every dependency a workspace
member declares ([dependencies], [dev-dependencies], [build-dependencies])
must be named somewhere in that member's Rust sources (`name::`, `use name`,
`extern crate name`, `#[name::…]`), the same textual rule cargo-machete
applies, without building cargo-machete (a release build of it cost the
install step a minute of both cores on every fresh machine).

Names listed in `[package.metadata.cargo-machete] ignored` are skipped, so
the manifests keep their existing exceptions and their reasons.

Usage: scripts/unused-deps.py [WORKSPACE-ROOT]; exits 1 naming each unused
dependency, 2 on an unreadable manifest.
"""

import pathlib
import re
import sys
import tomllib

SECTIONS = ("dependencies", "dev-dependencies", "build-dependencies")


def members(root: pathlib.Path) -> list[pathlib.Path]:
    manifest = tomllib.loads((root / "Cargo.toml").read_text())
    found = []
    for member in manifest.get("workspace", {}).get("members", ["."]):
        if any(c in member for c in "*?["):
            found.extend(sorted(root.glob(member)))
        else:
            found.append((root / member).resolve())
    return found


PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]')


def sources(package: pathlib.Path, nested: set[pathlib.Path]) -> str:
    """Every .rs file of the package, without other members' trees and target
    dirs, and every file a `#[path = "…"]` module takes in from elsewhere
    (the controller's tests share the root crate's tests/support/cluster.rs)."""
    texts = []
    seen = set()
    queue = []
    for path in package.rglob("*.rs"):
        if "target" in path.relative_to(package).parts:
            continue
        if any(n != package and package in n.parents and n in path.parents for n in nested):
            continue
        queue.append(path.resolve())
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        text = path.read_text(errors="replace")
        texts.append(text)
        for rel in PATH_ATTR.findall(text):
            included = (path.parent / rel).resolve()
            if included.is_file() and package not in included.parents:
                queue.append(included)
    return "\n".join(texts)


def used(crate: str, text: str) -> bool:
    name = re.escape(crate)
    pattern = rf"(\b{name}::|\buse\s+{name}\b|\bextern\s+crate\s+{name}\b|#\[{name}\b)"
    return re.search(pattern, text) is not None


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    try:
        packages = members(root)
    except (OSError, tomllib.TOMLDecodeError) as err:
        print(f"unused-deps: cannot read {root / 'Cargo.toml'}: {err}", file=sys.stderr)
        return 2
    nested = set(packages)
    unused = []
    for package in packages:
        try:
            manifest = tomllib.loads((package / "Cargo.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError) as err:
            print(f"unused-deps: cannot read {package / 'Cargo.toml'}: {err}", file=sys.stderr)
            return 2
        name = manifest.get("package", {}).get("name", package.name)
        metadata = manifest.get("package", {}).get("metadata", {})
        ignored = set(metadata.get("cargo-machete", {}).get("ignored", []))
        text = sources(package, nested)
        for section in SECTIONS:
            for dep in manifest.get(section, {}):
                if dep in ignored:
                    continue
                # A renamed dependency (`package = …`) is used under its key.
                if not used(dep.replace("-", "_"), text):
                    unused.append(f"{name}: [{section}] {dep} is not used in its sources")
    for line in unused:
        print(f"unused-deps: {line}")
    return 1 if unused else 0


if __name__ == "__main__":
    sys.exit(main())
