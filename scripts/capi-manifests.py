#!/usr/bin/env python3
"""Points the CRDs' and webhook configurations' webhooks at managers on loopback.

Reads the YAML stream `kubectl kustomize controlplane/capi` prints and writes
it back with each `clientConfig.service` (a Service in front of the manager's
pod, which a test cluster without pods cannot have) replaced by
`clientConfig.url` (https://127.0.0.1:PORT + the service's path) and the test
CA's `caBundle` -- what cert-manager's CA injection and the Service give a real
cluster. The Services and cert-manager annotations are dropped.

    capi-manifests.py CA_FILE SERVICE=PORT... < built.yaml > apply.yaml

SERVICE is the Service's namespaced name as kustomize wrote it
(capi-system/capi-webhook-service). A reference to any other Service is an
error: a webhook left pointing at nothing would fail every request it gates.
"""

import base64
import sys

import yaml


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: capi-manifests.py CA_FILE SERVICE=PORT... < in.yaml > out.yaml")
    with open(argv[1], "rb") as f:
        bundle = base64.b64encode(f.read()).decode()
    ports = {}
    for arg in argv[2:]:
        name, _, port = arg.partition("=")
        if not port.isdigit():
            sys.exit(f"capi-manifests: bad SERVICE=PORT {arg!r}")
        ports[name] = int(port)

    def point(cc, where):
        svc = cc.pop("service", None)
        if svc is None:
            return
        key = f"{svc.get('namespace')}/{svc.get('name')}"
        if key not in ports:
            sys.exit(f"capi-manifests: {where} names Service {key}, which no manager serves")
        cc["url"] = f"https://127.0.0.1:{ports[key]}{svc.get('path', '/')}"
        cc["caBundle"] = bundle

    out = []
    for doc in yaml.safe_load_all(sys.stdin):
        if not doc:
            continue
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        if kind == "Service":
            continue
        annotations = doc.get("metadata", {}).get("annotations") or {}
        annotations.pop("cert-manager.io/inject-ca-from", None)
        if kind == "CustomResourceDefinition":
            hook = (doc.get("spec", {}).get("conversion") or {}).get("webhook")
            if hook:
                point(hook.setdefault("clientConfig", {}), f"CRD {name}")
        elif kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for w in doc.get("webhooks") or []:
                point(w.setdefault("clientConfig", {}), f"{kind} {name} webhook {w.get('name')}")
        out.append(doc)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main(sys.argv)
