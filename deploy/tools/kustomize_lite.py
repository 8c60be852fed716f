#!/usr/bin/env python3
"""A small kustomize, for rendering deploy/k8s where kubectl is not installed.

Supports exactly what deploy/k8s uses, with kustomize's semantics, and refuses everything else
(an unknown kustomization field is an error, never silently ignored):

- Kustomization (kustomize.config.k8s.io/v1beta1) and Component (v1alpha1) files;
- resources: local YAML files and local directories holding a kustomization (no URLs);
- components: local directories holding a Component;
- namespace (not applied to cluster-scoped kinds);
- images: name, newName, newTag, digest (every containers[].image / initContainers[].image);
- configMapGenerator, secretGenerator: files, literals, envs; behavior create/replace/merge;
  options and generatorOptions: labels, annotations, disableNameSuffixHash; secret type;
- patches: strategic merge patches (path or inline; merge keys of the pod spec lists) and
  JSON 6902 patches (add/remove/replace/test) with a target (kind, name, namespace, group,
  version);
- name suffix hashes of generated ConfigMaps/Secrets (kustomize's hash, so names are identical)
  and the rewrite of their references in pod specs;
- kustomize's "legacy" output order.

deploy/validate.sh compares this renderer's output with `kubectl kustomize` whenever kubectl is
there, so a divergence fails CI instead of going unnoticed.

Usage: kustomize_lite.py DIR [-o FILE]
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import os
import re
import sys
from typing import Any

import yaml


class KustomizeError(Exception):
    pass


# --------------------------------------------------------------------------------------------
# YAML: reject duplicate keys (PyYAML keeps the last one silently).
# --------------------------------------------------------------------------------------------


class StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise KustomizeError(
                f"duplicate key {key!r} at line {key_node.start_mark.line + 1}"
                f" of {key_node.start_mark.name}"
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_docs(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        try:
            docs = [d for d in yaml.load_all(f, Loader=StrictLoader) if d is not None]
        except yaml.YAMLError as e:
            raise KustomizeError(f"{path}: {e}") from e
    for d in docs:
        if not isinstance(d, dict):
            raise KustomizeError(f"{path}: a document is not a mapping")
    return docs


def load_one(path: str) -> dict:
    docs = load_docs(path)
    if len(docs) != 1:
        raise KustomizeError(f"{path}: expected one YAML document, found {len(docs)}")
    return docs[0]


# --------------------------------------------------------------------------------------------
# Resources
# --------------------------------------------------------------------------------------------

CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "APIService",
    "CSIDriver",
    "CSINode",
    "Node",
    "PodSecurityPolicy",
}

# kustomize's legacy order (api/resid/gvk.go).
ORDER_FIRST = [
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
]
ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


class Res:
    """One resource plus what kustomize tracks about it."""

    def __init__(self, obj: dict, origin: str, needs_hash: bool = False, generated: bool = False):
        for field in ("apiVersion", "kind"):
            if not isinstance(obj.get(field), str):
                raise KustomizeError(f"{origin}: resource without {field}")
        if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
            raise KustomizeError(f"{origin}: resource without metadata.name")
        self.obj = obj
        self.origin = origin
        self.needs_hash = needs_hash
        self.generated = generated
        self.original_name = obj["metadata"]["name"]

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def namespace(self) -> str | None:
        return self.obj["metadata"].get("namespace")

    @property
    def group_version(self) -> tuple[str, str]:
        av = self.obj["apiVersion"]
        return tuple(av.split("/", 1)) if "/" in av else ("", av)  # type: ignore[return-value]

    def ident(self) -> str:
        return f"{self.obj['apiVersion']} {self.kind} {self.namespace or '~'}/{self.name}"


def _find(resources: list[Res], kind: str, name: str, namespace: str | None) -> list[Res]:
    return [
        r
        for r in resources
        if r.kind == kind
        and r.original_name == name
        and (namespace is None or (r.namespace or None) == namespace)
    ]


# --------------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------------

_ENV_KEY = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _parse_env_file(path: str) -> list[tuple[str, str]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f.read().splitlines(), 1):
            line = raw.lstrip()
            if n == 1:
                line = line.lstrip("\ufeff")
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                # kustomize would read the value from its own environment: refused here.
                raise KustomizeError(f"{path}:{n}: expected KEY=VALUE")
            key, value = line.split("=", 1)
            if not _ENV_KEY.match(key):
                raise KustomizeError(f"{path}:{n}: {key!r} is not a valid key")
            out.append((key, value))
    return out


def _literal(spec: str) -> tuple[str, str]:
    if "=" not in spec:
        raise KustomizeError(f"literal {spec!r}: expected KEY=VALUE")
    key, value = spec.split("=", 1)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return key, value


def _generator_data(base_dir: str, gen: dict) -> list[tuple[str, bytes]]:
    items: list[tuple[str, bytes]] = []
    for env in gen.get("envs", []) or []:
        items += [(k, v.encode()) for k, v in _parse_env_file(os.path.join(base_dir, env))]
    for spec in gen.get("literals", []) or []:
        k, v = _literal(spec)
        items.append((k, v.encode()))
    for spec in gen.get("files", []) or []:
        key, path = spec.split("=", 1) if "=" in spec else (os.path.basename(spec), spec)
        with open(os.path.join(base_dir, path), "rb") as f:
            items.append((key, f.read()))
    seen = set()
    for k, _ in items:
        if not _DATA_KEY.match(k):
            raise KustomizeError(f"generator {gen.get('name')}: {k!r} is not a valid data key")
        if k in seen:
            raise KustomizeError(f"generator {gen.get('name')}: key {k!r} given twice")
        seen.add(k)
    return items


GENERATOR_FIELDS = {"name", "namespace", "behavior", "files", "literals", "envs", "options", "type"}
OPTION_FIELDS = {"labels", "annotations", "disableNameSuffixHash"}


def _wrapped_base64(value: bytes) -> str:
    """kustomize's encodeBase64: 70-character lines, each ending in a newline once there are two
    or more (the value, newlines included, is part of the name hash)."""
    enc = base64.b64encode(value).decode()
    if len(enc) < 70:
        return enc
    return "".join(enc[i : i + 70] + "\n" for i in range(0, len(enc), 70))


def _generate(base_dir: str, gen: dict, kind: str, global_opts: dict) -> tuple[Res, str]:
    unknown = set(gen) - GENERATOR_FIELDS
    if unknown:
        raise KustomizeError(f"{kind} generator: unsupported fields {sorted(unknown)}")
    if kind == "ConfigMap" and "type" in gen:
        raise KustomizeError("configMapGenerator: 'type' is for secrets")
    opts = dict(global_opts)
    local = gen.get("options") or {}
    if set(local) - OPTION_FIELDS or set(opts) - OPTION_FIELDS:
        raise KustomizeError(f"generator options: supported are {sorted(OPTION_FIELDS)}")
    labels = {**(opts.get("labels") or {}), **(local.get("labels") or {})}
    annotations = {**(opts.get("annotations") or {}), **(local.get("annotations") or {})}
    no_hash = bool(local.get("disableNameSuffixHash", opts.get("disableNameSuffixHash", False)))
    meta: dict[str, Any] = {"name": gen["name"]}
    if gen.get("namespace"):
        meta["namespace"] = gen["namespace"]
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    data = _generator_data(base_dir, gen)
    if kind == "ConfigMap":
        text, binary = {}, {}
        for k, v in data:
            try:
                text[k] = v.decode("utf-8")
            except UnicodeDecodeError:
                binary[k] = base64.b64encode(v).decode()
        if text:
            obj["data"] = text
        if binary:
            obj["binaryData"] = binary
    else:
        obj["type"] = gen.get("type", "Opaque")
        if data:
            obj["data"] = {k: _wrapped_base64(v) for k, v in data}
    behavior = gen.get("behavior", "create")
    if behavior not in ("create", "replace", "merge"):
        raise KustomizeError(f"generator {gen['name']}: unknown behavior {behavior!r}")
    return Res(obj, f"{kind} generator {gen['name']}", needs_hash=not no_hash, generated=True), behavior


def _add_generated(resources: list[Res], res: Res, behavior: str) -> None:
    found = _find(resources, res.kind, res.name, res.namespace)
    if behavior == "create":
        if found:
            raise KustomizeError(f"{res.ident()} generated twice (use behavior: merge or replace)")
        resources.append(res)
        return
    if len(found) != 1:
        raise KustomizeError(f"{res.ident()}: behavior {behavior} needs exactly one existing")
    old = found[0]
    meta_old = old.obj["metadata"]
    meta_new = res.obj["metadata"]
    # kustomize keeps the old name and namespace, merges labels and annotations (new wins).
    for field in ("labels", "annotations"):
        merged = {**(meta_old.get(field) or {}), **(meta_new.get(field) or {})}
        if merged:
            meta_new[field] = merged
    meta_new["name"] = meta_old["name"]
    if "namespace" in meta_old:
        meta_new["namespace"] = meta_old["namespace"]
    if behavior == "merge":
        for field in ("data", "binaryData"):
            merged = {**(old.obj.get(field) or {}), **(res.obj.get(field) or {})}
            if merged:
                res.obj[field] = merged
    old.obj = res.obj
    old.needs_hash = old.needs_hash and res.needs_hash


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------

# Merge keys of the lists kustomize merges by key in a strategic merge patch (the ones a pod
# template has); any other list is replaced, as kustomize does for lists without a merge key.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
}
# Container ports merge on containerPort; Service ports on port.
PORT_KEYS = ("containerPort", "port")


def _smp(target: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(patch, dict):
        if any(str(k).startswith("$") for k in patch):
            raise KustomizeError("strategic merge patch directives ($patch, ...) are not supported")
        if not isinstance(target, dict):
            return {k: v for k, v in copy.deepcopy(patch).items() if v is not None}
        out = dict(target)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = _smp(out[k], v, k)
            else:
                out[k] = _smp(None, v, k)
        return out
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field or "")
        if field == "ports" and patch and isinstance(patch[0], dict):
            key = next((k for k in PORT_KEYS if k in patch[0]), None)
        if key is None or not isinstance(target, list):
            return copy.deepcopy(patch)
        out = [copy.deepcopy(x) for x in target]
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                raise KustomizeError(f"patch of list {field!r}: every item needs {key!r}")
            for i, cur in enumerate(out):
                if isinstance(cur, dict) and cur.get(key) == item[key]:
                    out[i] = _smp(cur, item, None)
                    break
            else:
                out.append(_smp(None, item, None))
        return out
    return copy.deepcopy(patch)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise KustomizeError(f"JSON patch path {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _json6902(obj: dict, ops: list) -> dict:
    obj = copy.deepcopy(obj)
    for op in ops:
        kind = op.get("op")
        parts = _pointer(op.get("path", ""))
        parent: Any = obj
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1] if parts else ""
        if kind in ("add", "replace"):
            value = copy.deepcopy(op["value"])
            if isinstance(parent, list):
                if last == "-":
                    parent.append(value)
                elif kind == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            else:
                if kind == "replace" and last not in parent:
                    raise KustomizeError(f"JSON patch replace: {op['path']} does not exist")
                parent[last] = value
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
        elif kind == "test":
            cur = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if cur != op.get("value"):
                raise KustomizeError(f"JSON patch test failed at {op['path']}")
        else:
            raise KustomizeError(f"JSON patch op {kind!r} is not supported")
    return obj


TARGET_FIELDS = {"kind", "name", "namespace", "group", "version"}


def _matches(res: Res, target: dict) -> bool:
    unknown = set(target) - TARGET_FIELDS
    if unknown:
        raise KustomizeError(f"patch target: unsupported selectors {sorted(unknown)}")
    group, version = res.group_version
    checks = {
        "kind": res.kind,
        "name": res.original_name,
        "namespace": res.namespace or "",
        "group": group,
        "version": version,
    }
    return all(re.fullmatch(str(v), checks[k]) is not None for k, v in target.items())


def _apply_patch(base_dir: str, resources: list[Res], spec: dict) -> None:
    unknown = set(spec) - {"path", "patch", "target", "options"}
    if unknown or spec.get("options"):
        raise KustomizeError(f"patches: unsupported fields {sorted(unknown | set(spec.get('options') or {}))}")
    if ("path" in spec) == ("patch" in spec):
        raise KustomizeError("patches: give exactly one of path and patch")
    if "path" in spec:
        origin = os.path.join(base_dir, spec["path"])
        with open(origin, encoding="utf-8") as f:
            text = f.read()
    else:
        origin, text = "inline patch", spec["patch"]
    try:
        text_docs = [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]
    except yaml.YAMLError as e:
        raise KustomizeError(f"{origin}: {e}") from e
    for doc in text_docs:
        if not isinstance(doc, (dict, list)):
            raise KustomizeError(f"{origin}: a patch is a mapping (strategic merge) or a list (JSON 6902)")
    target = spec.get("target")
    for doc in text_docs:
        if isinstance(doc, list):
            if not target:
                raise KustomizeError(f"{origin}: a JSON 6902 patch needs a target")
            hits = [r for r in resources if _matches(r, target)]
            if not hits:
                raise KustomizeError(f"{origin}: no resource matches {target}")
            for r in hits:
                r.obj = _json6902(r.obj, doc)
            continue
        if target:
            hits = [r for r in resources if _matches(r, target)]
        else:
            meta = doc.get("metadata") or {}
            hits = [
                r
                for r in resources
                if r.kind == doc.get("kind")
                and r.original_name == meta.get("name")
                and ("namespace" not in meta or r.namespace == meta["namespace"])
            ]
        if not hits:
            raise KustomizeError(f"{origin}: no resource matches the patch")
        for r in hits:
            patch = copy.deepcopy(doc)
            if target:
                # A patch applied through a target keeps the target's identity.
                patch.pop("apiVersion", None)
                patch.pop("kind", None)
                (patch.get("metadata") or {}).pop("name", None)
            r.obj = _smp(r.obj, patch)


# --------------------------------------------------------------------------------------------
# Transformers
# --------------------------------------------------------------------------------------------


def _walk_images(node: Any, fn) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("containers", "initContainers", "ephemeralContainers") and isinstance(v, list):
                for c in v:
                    if isinstance(c, dict) and isinstance(c.get("image"), str):
                        c["image"] = fn(c["image"])
            _walk_images(v, fn)
    elif isinstance(node, list):
        for v in node:
            _walk_images(v, fn)


def _split_image(image: str) -> tuple[str, str, str]:
    name, digest = (image.split("@", 1) + [""])[:2]
    tag = ""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag, digest


def _apply_images(resources: list[Res], images: list[dict]) -> None:
    for spec in images:
        unknown = set(spec) - {"name", "newName", "newTag", "digest"}
        if unknown:
            raise KustomizeError(f"images: unsupported fields {sorted(unknown)}")

        def change(image: str, spec: dict = spec) -> str:
            name, tag, digest = _split_image(image)
            if name != spec["name"]:
                return image
            name = spec.get("newName", name)
            if "digest" in spec:
                return f"{name}@{spec['digest']}"
            if "newTag" in spec:
                return f"{name}:{spec['newTag']}"
            return name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")

        for r in resources:
            _walk_images(r.obj, change)


def _apply_namespace(resources: list[Res], namespace: str) -> None:
    for r in resources:
        if r.kind in CLUSTER_SCOPED:
            continue
        r.obj["metadata"]["namespace"] = namespace
        if r.kind in ("RoleBinding", "ClusterRoleBinding"):
            raise KustomizeError("namespace with role bindings: subjects are not rewritten here")


# --------------------------------------------------------------------------------------------
# Hashes and name references
# --------------------------------------------------------------------------------------------


def _go_json(value: Any) -> str:
    """encoding/json.Marshal: sorted keys, no spaces, <>& escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def kustomize_hash(obj: dict) -> str:
    """kustomize's api/hasher: sha256 of the JSON of kind, name, data (and type for a Secret),
    first 10 hex digits with 0, 1, 3, a, e mapped to g, h, k, m, t.

    The name is always "": kustomize looks it up with yaml.Lookup("metadata/name"), a single
    field of that name, which never exists. Reproduced as is, since the point is equal output.
    A missing data field is "" too, not {}.
    """
    if obj["kind"] == "ConfigMap":
        m: dict[str, Any] = {"kind": "ConfigMap", "name": "", "data": obj.get("data", "")}
        if obj.get("binaryData"):
            m["binaryData"] = obj["binaryData"]
    elif obj["kind"] == "Secret":
        m = {
            "kind": "Secret",
            "type": obj.get("type", ""),
            "name": "",
            "data": obj.get("data", ""),
        }
        if obj.get("stringData"):
            m["stringData"] = obj["stringData"]
    else:
        raise KustomizeError(f"cannot hash a {obj['kind']}")
    if obj.get("immutable"):
        m["immutable"] = True
    digest = hashlib.sha256(_go_json(m).encode()).hexdigest()[:10]
    return digest.translate(str.maketrans({"0": "g", "1": "h", "3": "k", "a": "m", "e": "t"}))


def _pod_specs(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "Pod":
        return [spec]
    if obj["kind"] == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    tmpl = (spec.get("template") or {}).get("spec")
    return [tmpl] if isinstance(tmpl, dict) else []


def _rename_refs(resources: list[Res], renames: dict[tuple[str, str | None, str], str]) -> None:
    def lookup(kind: str, ns: str | None, name: str) -> str:
        return renames.get((kind, ns, name), name)

    for r in resources:
        ns = r.namespace
        for pod in _pod_specs(r.obj):
            for vol in pod.get("volumes") or []:
                if "configMap" in vol and "name" in vol["configMap"]:
                    vol["configMap"]["name"] = lookup("ConfigMap", ns, vol["configMap"]["name"])
                if "secret" in vol and "secretName" in vol["secret"]:
                    vol["secret"]["secretName"] = lookup("Secret", ns, vol["secret"]["secretName"])
                for src in (vol.get("projected") or {}).get("sources") or []:
                    for field, kind in (("configMap", "ConfigMap"), ("secret", "Secret")):
                        if field in src and "name" in src[field]:
                            src[field]["name"] = lookup(kind, ns, src[field]["name"])
            for ips in pod.get("imagePullSecrets") or []:
                ips["name"] = lookup("Secret", ns, ips["name"])
            for group in ("containers", "initContainers", "ephemeralContainers"):
                for c in pod.get(group) or []:
                    for env in c.get("env") or []:
                        vf = env.get("valueFrom") or {}
                        for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                            if field in vf and "name" in vf[field]:
                                vf[field]["name"] = lookup(kind, ns, vf[field]["name"])
                    for ef in c.get("envFrom") or []:
                        for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                            if field in ef and "name" in ef[field]:
                                ef[field]["name"] = lookup(kind, ns, ef[field]["name"])


def _finish(resources: list[Res]) -> list[dict]:
    renames = {}
    for r in resources:
        if r.needs_hash:
            new = f"{r.name}-{kustomize_hash(r.obj)}"
            renames[(r.kind, r.namespace, r.name)] = new
            r.obj["metadata"]["name"] = new
    _rename_refs(resources, renames)
    keys = {r.ident() for r in resources}
    if len(keys) != len(resources):
        raise KustomizeError("two resources with the same apiVersion, kind, namespace and name")

    def order(r: Res) -> tuple:
        if r.kind in ORDER_FIRST:
            rank = ORDER_FIRST.index(r.kind) - len(ORDER_FIRST)
        elif r.kind in ORDER_LAST:
            rank = 1 + ORDER_LAST.index(r.kind)
        else:
            rank = 0
        group, version = r.group_version
        return (rank, f"{group}_{version}_{r.kind}", r.namespace or "", r.name)

    return [r.obj for r in sorted(resources, key=order)]


# --------------------------------------------------------------------------------------------
# Kustomizations
# --------------------------------------------------------------------------------------------

SUPPORTED = {
    "apiVersion",
    "kind",
    "resources",
    "components",
    "namespace",
    "images",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "patches",
}


def _kustomization_file(path: str) -> str:
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        p = os.path.join(path, name)
        if os.path.isfile(p):
            return p
    raise KustomizeError(f"{path}: no kustomization file")


def _accumulate(path: str, resources: list[Res], expect: str) -> list[Res]:
    kfile = _kustomization_file(path)
    k = load_one(kfile)
    kind = k.get("kind", "Kustomization")
    api = k.get("apiVersion", "")
    if kind != expect:
        raise KustomizeError(f"{kfile}: expected kind {expect}, found {kind}")
    want_api = "kustomize.config.k8s.io/v1alpha1" if kind == "Component" else "kustomize.config.k8s.io/v1beta1"
    if api != want_api and not (api == "" and kind == "Kustomization"):
        raise KustomizeError(f"{kfile}: apiVersion must be {want_api}")
    unknown = set(k) - SUPPORTED
    if unknown:
        raise KustomizeError(
            f"{kfile}: unsupported kustomization fields {sorted(unknown)}"
            " (kustomize_lite supports: " + ", ".join(sorted(SUPPORTED - {'apiVersion', 'kind'})) + ")"
        )
    for entry in k.get("resources") or []:
        if re.match(r"^[a-z]+://|^github\.com/|^git@", entry):
            raise KustomizeError(f"{kfile}: remote resource {entry!r} is not supported")
        p = os.path.normpath(os.path.join(path, entry))
        if os.path.isdir(p):
            resources += _accumulate(p, [], "Kustomization")
        elif os.path.isfile(p):
            resources += [Res(d, p) for d in load_docs(p)]
        else:
            raise KustomizeError(f"{kfile}: resource {entry!r} not found")
    for entry in k.get("components") or []:
        p = os.path.normpath(os.path.join(path, entry))
        if not os.path.isdir(p):
            raise KustomizeError(f"{kfile}: component {entry!r} is not a directory")
        resources = _accumulate(p, resources, "Component")
    global_opts = k.get("generatorOptions") or {}
    for gen in k.get("configMapGenerator") or []:
        _add_generated(resources, *_generate(path, gen, "ConfigMap", global_opts))
    for gen in k.get("secretGenerator") or []:
        _add_generated(resources, *_generate(path, gen, "Secret", global_opts))
    for spec in k.get("patches") or []:
        _apply_patch(path, resources, spec)
    if k.get("namespace"):
        _apply_namespace(resources, k["namespace"])
    if k.get("images"):
        _apply_images(resources, k["images"])
    return resources


def build(path: str) -> list[dict]:
    """Renders the kustomization in directory `path`."""
    return _finish(_accumulate(os.path.normpath(path), [], "Kustomization"))


class _Dumper(yaml.SafeDumper):
    pass


def _str_repr(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_repr)


def dump(docs: list[dict]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=1000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    try:
        text = dump(build(args.dir))
    except (KustomizeError, OSError, KeyError, IndexError, ValueError) as e:
        print(f"kustomize_lite: {e}", file=sys.stderr)
        return 1
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
