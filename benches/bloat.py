#!/usr/bin/env python3
"""Bytes of a linked binary per crate (or per function), from the linker's
map file: a cargo-bloat without installing it, and without an unstripped
build (the map names every input section, also of a stripped binary).

    cargo rustc --profile ship --locked --no-default-features \\
        --bin sandbox-readiness --target x86_64-unknown-linux-musl -- \\
        -C link-arg=-Map=/tmp/x86_64.map    # rust-lld (both targets); through cc: -Wl,-Map=
    benches/bloat.py /tmp/x86_64.map                  # crates, largest first
    benches/bloat.py /tmp/x86_64.map --functions 40   # the 40 largest functions
    benches/bloat.py /tmp/x86_64.map --grep yaml      # functions matching a word

`cargo rustc` passes the flag to the binary's crate alone, so only the last
(LTO) step runs again. With fat LTO a generic function is counted under the
crate that defines it (serde_yaml_ng's deserializer instantiated for a type
of this crate is serde_yaml_ng's), a trait impl under the crate of the type
it is for; sections with no symbol name (merged strings, anonymous
constants) are counted per output section as `[anonymous]`.
"""

import re
import subprocess
import sys
from collections import defaultdict

# An input section and its size: " .text.NAME\n  0xADDR 0xSIZE file" (GNU
# ld; long names wrap) or lld's "VMA LMA SIZE ALIGN  file:(.text.NAME)".
GNU_HEAD = re.compile(r"^ (\.(?:text|rodata|data\.rel\.ro|data|bss|tbss|tdata)[^\s]*)(?:\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(\S.*))?$")
GNU_TAIL = re.compile(r"^\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(\S.*)$")
LLD_LINE = re.compile(r"^\s*[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s+(\S.*):\((\.[^)]*)\)$")
KINDS = (".text", ".rodata", ".data.rel.ro", ".data", ".bss", ".tbss", ".tdata")


def sections(path):
    """(section name, size) of every input section in the map."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    # GNU ld lists the sections it discarded first; count from the memory map.
    start = next((i for i, l in enumerate(lines) if l.startswith("Linker script and memory map")), 0)
    pending = None
    for line in lines[start:]:
        m = LLD_LINE.match(line)
        if m:
            yield m.group(3), int(m.group(1), 16)
            continue
        if pending:
            t = GNU_TAIL.match(line)
            if t:
                yield pending, int(t.group(2), 16)
            pending = None
            continue
        h = GNU_HEAD.match(line)
        if h:
            if h.group(3):
                yield h.group(1), int(h.group(3), 16)
            else:
                pending = h.group(1)


def symbol(name):
    for kind in sorted(KINDS, key=len, reverse=True):
        if name == kind:
            return kind, None
        if name.startswith(kind + "."):
            sym = re.sub(r"\.llvm\.\d+$", "", name[len(kind) + 1:])
            return kind, (sym if sym.startswith(("_ZN", "_R")) else None)
    return name, None


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def crate_of(pretty):
    # `<a::B as c::D>::f` belongs to the type's crate; `a::b::<T>` to a.
    s = pretty.lstrip("<&*")
    s = re.sub(r"^(mut |dyn |const )+", "", s)
    s = re.sub(r"\[[0-9a-f]+\]", "", s)
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", s)
    crate = m.group(0) if m else "[other]"
    # Impls on primitive types are core's (or alloc's, counted as core).
    primitive = {"bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize",
                 "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64"}
    return "core" if crate in primitive else crate


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    path = args[0]
    functions = int(args[args.index("--functions") + 1]) if "--functions" in args else 0
    grep = args[args.index("--grep") + 1] if "--grep" in args else None
    raw = [(n, s) for n, s in sections(path) if s > 0]
    names = demangle(sorted({sym for n, _ in raw for _, sym in [symbol(n)] if sym}))
    per_crate = defaultdict(int)
    per_fn = defaultdict(int)
    total = 0
    for n, size in raw:
        kind, sym = symbol(n)
        if kind not in KINDS:
            continue
        total += size
        if sym:
            pretty = re.sub(r"::h[0-9a-f]{16}$", "", names.get(sym, sym))
            per_crate[crate_of(pretty)] += size
            per_fn[pretty] += size
        else:
            per_crate["[anonymous] " + kind] += size
    if grep or functions:
        rows = [(s, f) for f, s in per_fn.items() if not grep or grep.lower() in f.lower()]
        rows.sort(reverse=True)
        if functions:
            rows = rows[:functions]
        for s, f in rows:
            print(f"{s:>10,}  {f[:160]}")
        print(f"{sum(s for s, _ in rows):>10,}  (these {len(rows)})")
        return
    for c, s in sorted(per_crate.items(), key=lambda kv: -kv[1]):
        print(f"{s:>10,}  {100 * s / total:5.1f} %  {c}")
    print(f"{total:>10,}  in all ({path})")


if __name__ == "__main__":
    main()
