#!/usr/bin/env python3
"""Extract strategic-merge-patch metadata for the built-in kinds the test API
server serves into test-api/data/patch-meta.json.

Source: the Go struct tags (`json`, `patchStrategy`, `patchMergeKey`) of
k8s.io/api and k8s.io/apimachinery at the v0.32 tag that kubectl/kube-apiserver
v1.32 are built from. Both `kubectl patch --local` and kube-apiserver's
strategic merge for built-in kinds read exactly these tags by reflection
(strategicpatch.PatchMetaFromStruct); the `x-kubernetes-patch-strategy` /
`x-kubernetes-patch-merge-key` extensions of the published OpenAPI
(api/openapi-spec) are generated from the same tags.

Usage:
  extract-patch-meta.py API_GIT_DIR APIMACHINERY_GIT_DIR [TAG] > test-api/data/patch-meta.json
where the git dirs are clones of github.com/kubernetes/api and
github.com/kubernetes/apimachinery (bare is fine). Only `git show TAG:PATH` is used.
"""
import json
import re
import subprocess
import sys

TAG = sys.argv[3] if len(sys.argv) > 3 else "v0.32.4"
API, MACH = sys.argv[1], sys.argv[2]

# package id -> (git dir, files)
PACKAGES = {
    "core/v1": (API, ["core/v1/types.go"]),
    "coordination/v1": (API, ["coordination/v1/types.go"]),
    "events/v1": (API, ["events/v1/types.go"]),
    "meta/v1": (MACH, ["pkg/apis/meta/v1/types.go"]),
}
# Go import alias -> package id, as the files above import them.
ALIASES = {"metav1": "meta/v1", "v1": "core/v1", "corev1": "core/v1"}

# Types outside the parsed files (or with custom JSON marshalling): what
# reflection sees of them. Opaque structs: JSON scalars whose Go type is a
# struct, so a strategic merge never descends into them.
EXTERNAL = {
    "meta/v1.Time": {"kind": "struct", "name": "Time", "fields": []},
    "meta/v1.MicroTime": {"kind": "struct", "name": "MicroTime", "fields": []},
    "meta/v1.Duration": {"kind": "struct", "name": "Duration", "fields": []},
    "meta/v1.FieldsV1": {"kind": "struct", "name": "FieldsV1", "fields": []},
    "resource.Quantity": {"kind": "struct", "name": "Quantity", "fields": []},
    "intstr.IntOrString": {"kind": "struct", "name": "IntOrString", "fields": []},
    "runtime.RawExtension": {"kind": "struct", "name": "RawExtension", "fields": []},
}
SCALAR_ALIASES = {"types.UID": "string", "types.NodeName": "string"}
GO_SCALARS = {"string", "bool", "int", "int8", "int16", "int32", "int64", "uint", "uint8",
              "uint16", "uint32", "uint64", "float32", "float64", "byte"}

ROOTS = {
    "v1/Node": "core/v1.Node",
    "v1/Namespace": "core/v1.Namespace",
    "v1/Secret": "core/v1.Secret",
    "v1/ConfigMap": "core/v1.ConfigMap",
    "v1/Event": "core/v1.Event",
    "coordination.k8s.io/v1/Lease": "coordination/v1.Lease",
    "events.k8s.io/v1/Event": "events/v1.Event",
}


def git_show(repo, path):
    return subprocess.run(["git", "-C", repo, "show", f"{TAG}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


decls = {}  # "pkg.Name" -> ("struct", [field lines]) | ("alias", type expr)
for pkg, (repo, files) in PACKAGES.items():
    for f in files:
        src = strip_comments(git_show(repo, f))
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.S | re.M):
            decls[f"{pkg}.{m.group(1)}"] = ("struct", m.group(2).splitlines())
        for m in re.finditer(r"^type (\w+) ([^\s{][^\n]*)$", src, re.M):
            if not m.group(2).startswith(("struct", "interface")):
                decls.setdefault(f"{pkg}.{m.group(1)}", ("alias", m.group(2).strip()))


def qualify(pkg, name):
    if "." in name:
        alias, n = name.split(".", 1)
        return f"{ALIASES.get(alias, alias)}.{n}"
    return f"{pkg}.{name}"


types = {}


def type_expr(pkg, expr):
    """A Go type expression -> our JSON form, registering struct types."""
    expr = expr.strip()
    if expr.startswith("[]"):
        return {"slice": type_expr(pkg, expr[2:])}
    if expr.startswith("*"):
        return {"ptr": type_expr(pkg, expr[1:])}
    if expr.startswith("map["):
        depth, i = 0, 3
        while True:
            if expr[i] == "[":
                depth += 1
            elif expr[i] == "]":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        return {"map": type_expr(pkg, expr[i + 1:])}
    if expr in GO_SCALARS:
        return {"scalar": "uint8" if expr == "byte" else expr}
    q = qualify(pkg, expr)
    if q in SCALAR_ALIASES:
        return {"scalar": SCALAR_ALIASES[q]}
    if q in EXTERNAL:
        types.setdefault(q, EXTERNAL[q])
        return {"struct": q}
    decl = decls.get(q)
    if decl is None:
        raise SystemExit(f"unknown type {q} (from {expr!r} in {pkg})")
    if decl[0] == "alias":
        # a defined type: reflection sees its underlying kind
        return type_expr(q.rsplit(".", 1)[0], decl[1])
    register_struct(q)
    return {"struct": q}


TAG_RE = re.compile(r'(\w+):"([^"]*)"')


def struct_fields(q):
    """Fields as encoding/json sees them, embedded structs without a json name promoted."""
    pkg = q.rsplit(".", 1)[0]
    out = []
    for line in decls[q][1]:
        line = line.strip()
        if not line:
            continue
        head, _, rest = line.partition("`")
        tags = "`" + rest if rest else ""
        tokens = head.split()
        embedded = None
        if len(tokens) == 1:
            texpr = tokens[0]
            name = texpr.lstrip("*").split(".")[-1]
            embedded = texpr
        else:
            name, texpr = tokens[0], " ".join(tokens[1:])
        tagmap = dict(TAG_RE.findall(tags))
        jname = tagmap.get("json", "").split(",")[0]
        if tagmap.get("json", "").split(",")[0] == "-":
            continue
        if not name[0].isupper():
            continue
        if embedded is not None and jname == "":
            inner = type_expr(pkg, embedded)
            target = inner.get("ptr", inner).get("struct")
            if target is None:
                raise SystemExit(f"embedded non-struct {embedded} in {q}")
            out.extend(struct_fields(target))
            continue
        out.append({
            "json": jname or name,
            "type": type_expr(pkg, texpr),
            "strategy": tagmap.get("patchStrategy", ""),
            "mergeKey": tagmap.get("patchMergeKey", ""),
        })
    return out


def register_struct(q):
    if q in types:
        return
    types[q] = None  # cycle guard
    types[q] = {"kind": "struct", "name": q.rsplit(".", 1)[1], "fields": struct_fields(q)}


for root in ROOTS.values():
    register_struct(root)

json.dump({
    "source": {
        "repos": ["github.com/kubernetes/api", "github.com/kubernetes/apimachinery"],
        "tag": TAG,
        "files": {pkg: [f"{'k8s.io/api' if repo == API else 'k8s.io/apimachinery'}/{f}" for f in files]
                  for pkg, (repo, files) in PACKAGES.items()},
        "what": "Go struct tags json/patchStrategy/patchMergeKey, read as strategicpatch.PatchMetaFromStruct reads them",
        "generator": "test-api/scripts/extract-patch-meta.py",
    },
    "kinds": ROOTS,
    "types": dict(sorted(types.items())),
}, sys.stdout, indent=1, sort_keys=False)
sys.stdout.write("\n")
