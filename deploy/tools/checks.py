#!/usr/bin/env python3
"""Offline checks of the deployment artefacts in deploy/ (run by deploy/validate.sh).

Subcommands (each exits 1 with one line per problem, 0 when clean):

  schema FILE...           Kubernetes JSON schemas (strict) of every object, for the oldest and
                           newest supported Kubernetes; our own schemas for the Prometheus
                           operator kinds; an unknown kind is an error
  policy --base F --overlay F
                           the gateway's contract with its pod spec (single replica, grace
                           period vs drain, ports, probes, mounts, secrets) and the hardening
                           (restricted Pod Security Standard and more)
  config FILE...           gateway.toml of rendered ConfigMaps against deploy/config.example.toml
  dockerfile               the Dockerfile against the manifests, the ignore file and the
                           workspace
  monitoring --promql MJS  Grafana dashboard and alert rules: structure, PromQL syntax (node runs
                           MJS, the PromQL parser), every metric and label against the sources
  sync-rules               rewrite the PrometheusRule from deploy/prometheus/alerts.yml
  smoke --bin BIN FILE...  start the real binary with each render's config and environment
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from typing import Any, Iterable

import yaml



class KustomizeError(Exception):
    """A rendered manifest that cannot be read (duplicate keys, not a mapping)."""


class StrictLoader(yaml.SafeLoader):
    """YAML that rejects duplicate keys (PyYAML keeps the last one silently)."""


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

DEPLOY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(DEPLOY)

# The oldest and the newest Kubernetes the manifests are checked against.
K8S_VERSIONS = ("1.28", "1.37")
GATEWAY_UID = 10001
# terminationGracePeriodSeconds must leave this much after the drain for the store flush.
FLUSH_MARGIN_S = 10
STATEFULSET = "devshard-gateway"
# Placeholder values allowed in committed Secrets (the example overlay).
PLACEHOLDER_MARK = "not-a-secret"


class Problems:
    def __init__(self, what: str):
        self.what = what
        self.items: list[str] = []

    def add(self, msg: str) -> None:
        self.items.append(msg)

    def check(self, cond: bool, msg: str) -> bool:
        if not cond:
            self.add(msg)
        return cond

    def finish(self) -> int:
        for p in self.items:
            print(f"  FAIL {self.what}: {p}")
        if not self.items:
            print(f"  ok   {self.what}")
        return 1 if self.items else 0


def load_docs(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=StrictLoader) if d is not None]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def meta(d: dict, field: str, default: Any = None) -> Any:
    return (d.get("metadata") or {}).get(field, default)


# --------------------------------------------------------------------------------------------
# schema
# --------------------------------------------------------------------------------------------

DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
    "additionalProperties": False,
}
LABEL_SELECTOR = {
    "type": "object",
    "properties": {"matchLabels": STRING_MAP, "matchExpressions": {"type": "array"}},
    "additionalProperties": False,
}
# Subsets of the prometheus-operator CRDs (monitoring.coreos.com/v1): the fields these
# manifests use plus the common ones; unknown fields are errors, to catch typos.
CRD_SCHEMAS: dict[tuple[str, str], dict] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": OBJECT_META,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": LABEL_SELECTOR,
                    "namespaceSelector": {"type": "object"},
                    "jobLabel": {"type": "string"},
                    "targetLabels": {"type": "array", "items": {"type": "string"}},
                    "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                    "sampleLimit": {"type": "integer"},
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "properties": {
                                "port": {"type": "string"},
                                "targetPort": {"type": ["string", "integer"]},
                                "path": {"type": "string", "pattern": "^/"},
                                "scheme": {"enum": ["http", "https"]},
                                "params": {"type": "object"},
                                "interval": DURATION,
                                "scrapeTimeout": DURATION,
                                "honorLabels": {"type": "boolean"},
                                "honorTimestamps": {"type": "boolean"},
                                "relabelings": {"type": "array"},
                                "metricRelabelings": {"type": "array"},
                                "tlsConfig": {"type": "object"},
                                "authorization": {"type": "object"},
                                "basicAuth": {"type": "object"},
                                "bearerTokenSecret": {"type": "object"},
                                "followRedirects": {"type": "boolean"},
                                "enableHttp2": {"type": "boolean"},
                                "filterRunning": {"type": "boolean"},
                                "proxyUrl": {"type": "string"},
                            },
                            "additionalProperties": False,
                        },
                    },
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
    ("monitoring.coreos.com/v1", "PrometheusRule"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": OBJECT_META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "interval": DURATION,
                                "limit": {"type": "integer"},
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["expr"],
                                        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                        "properties": {
                                            "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string", "minLength": 1},
                                            "for": DURATION,
                                            "keep_firing_for": DURATION,
                                            "labels": STRING_MAP,
                                            "annotations": STRING_MAP,
                                        },
                                        "additionalProperties": False,
                                    },
                                },
                            },
                            "additionalProperties": False,
                        },
                    }
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
    # A subset of CloudNativePG's Cluster (postgresql.cnpg.io/v1): the fields the postgres-cnpg
    # overlay uses plus common ones.
    ("postgresql.cnpg.io/v1", "Cluster"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "postgresql.cnpg.io/v1"},
            "kind": {"const": "Cluster"},
            "metadata": OBJECT_META,
            "spec": {
                "type": "object",
                "required": ["instances", "storage"],
                "properties": {
                    "instances": {"type": "integer", "minimum": 1},
                    "imageName": {"type": "string"},
                    "primaryUpdateStrategy": {"enum": ["unsupervised", "supervised"]},
                    "bootstrap": {
                        "type": "object",
                        "properties": {
                            "initdb": {
                                "type": "object",
                                "properties": {
                                    "database": {"type": "string"},
                                    "owner": {"type": "string"},
                                    "secret": {"type": "object"},
                                },
                                "additionalProperties": False,
                            }
                        },
                        "additionalProperties": False,
                    },
                    "postgresql": {
                        "type": "object",
                        "properties": {"parameters": STRING_MAP, "pg_hba": {"type": "array"}},
                        "additionalProperties": False,
                    },
                    "storage": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {"size": {"type": "string"}, "storageClass": {"type": "string"}},
                        "additionalProperties": False,
                    },
                    "resources": {"type": "object"},
                    "affinity": {
                        "type": "object",
                        "properties": {
                            "enablePodAntiAffinity": {"type": "boolean"},
                            "topologyKey": {"type": "string"},
                            "podAntiAffinityType": {"enum": ["preferred", "required"]},
                        },
                        "additionalProperties": False,
                    },
                    "monitoring": {"type": "object"},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
}


def cmd_schema(files: list[str]) -> int:
    import jsonschema
    import kubernetes_validate

    rc = 0
    for path in files:
        p = Problems(f"schemas of {os.path.basename(path)} (Kubernetes {', '.join(K8S_VERSIONS)}, strict)")
        docs = load_docs(path)
        p.check(bool(docs), "no objects")
        for d in docs:
            what = f"{d.get('kind')}/{meta(d, 'name')}"
            crd = CRD_SCHEMAS.get((d.get("apiVersion"), d.get("kind")))
            if crd is not None:
                for err in jsonschema.Draft202012Validator(crd).iter_errors(d):
                    p.add(f"{what}: {'.'.join(map(str, err.absolute_path))}: {err.message}")
                continue
            for version in K8S_VERSIONS:
                try:
                    kubernetes_validate.validate(d, version, strict=True)
                except kubernetes_validate.SchemaNotFoundError:
                    p.add(f"{what}: no schema for {d.get('apiVersion')} {d.get('kind')} in Kubernetes {version}")
                except kubernetes_validate.ValidationError as e:
                    loc = ".".join(map(str, e.absolute_path)) or "(root)"
                    p.add(f"{what} (Kubernetes {version}): {loc}: {e.message}")
        rc |= p.finish()
    return rc


# --------------------------------------------------------------------------------------------
# policy
# --------------------------------------------------------------------------------------------

PSS_VOLUME_TYPES = {"configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected", "downwardAPI", "csi", "ephemeral"}
TARGET_LABELS = {"namespace", "pod", "instance", "job", "service", "endpoint", "container"}


def _env(container: dict) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env") or []}


def _env_value(container: dict, name: str) -> str | None:
    e = _env(container).get(name)
    return None if e is None else e.get("value")


def _selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _quantity(q: Any) -> float:
    s = str(q)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for u, f in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if s.endswith(u):
            return float(s[: -len(u)]) * f
    return float(s)


def _dockerfile(path: str | None = None) -> dict:
    """The facts of deploy/Dockerfile the manifests must agree with."""
    text = open(path or os.path.join(DEPLOY, "Dockerfile"), encoding="utf-8").read()
    joined = re.sub(r"\\\n", " ", text)
    lines = [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    stages: list[dict] = []
    for ln in lines:
        word, _, rest = ln.partition(" ")
        word = word.upper()
        if word == "FROM":
            stages.append({"from": rest.split()[0], "lines": []})
        elif stages:
            stages[-1]["lines"].append((word, rest.strip()))
    final = stages[-1]["lines"]
    facts: dict[str, Any] = {"stages": stages}
    for word, rest in final:
        if word == "USER":
            facts["user"] = rest
        elif word == "EXPOSE":
            facts["expose"] = rest.split()
        elif word == "ENTRYPOINT":
            facts["entrypoint"] = json.loads(rest)
        elif word == "ENV":
            facts.setdefault("env", {}).update(dict(re.findall(r"(\w+)=(\S+)", rest)))
        elif word == "HEALTHCHECK":
            facts["healthcheck"] = rest
    return facts


def _database_url(c: dict, docs: list[dict]) -> str | None:
    """How the PostgreSQL store is configured: `env` (DEVSHARD_DATABASE_URL), `config` ([store]
    url of a rendered gateway.toml), or None (SQLite)."""
    if "DEVSHARD_DATABASE_URL" in _env(c):
        return "env"
    for cm in by_kind(docs, "ConfigMap"):
        text = (cm.get("data") or {}).get("gateway.toml")
        if text and (tomllib.loads(text).get("store") or {}).get("url"):
            return "config"
    return None


def _cnpg_secrets(docs: list[dict]) -> set[str]:
    """Secrets a CloudNativePG Cluster of the render creates (its application user's)."""
    return {f"{meta(d, 'name')}-app" for d in docs if d.get("apiVersion") == "postgresql.cnpg.io/v1" and d.get("kind") == "Cluster"}


def _check_replicas(p: Problems, w: dict, c: dict, docs: list[dict], pod_labels: dict) -> None:
    """Several replicas on PostgreSQL: names, addresses, spreading, disruption budget."""
    pod = w["spec"]["template"]["spec"]
    env = _env(c)
    db = env.get("DEVSHARD_DATABASE_URL")
    if db is not None:
        p.check("secretKeyRef" in (db.get("valueFrom") or {}), "DEVSHARD_DATABASE_URL must come from a Secret (the URL carries a password)")
    field = lambda name: (((env.get(name) or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    p.check(field("DEVSHARD_REPLICA_ID") == "metadata.name", "DEVSHARD_REPLICA_ID must be the pod name (fieldRef metadata.name): unique per replica")
    advertise = (env.get("DEVSHARD_ADVERTISE_URL") or {}).get("value") or ""
    ip_vars = [n for n in env if field(n) == "status.podIP"]
    p.check(any(re.fullmatch(rf"http://\$\({v}\):\d+", advertise) for v in ip_vars),
            f"DEVSHARD_ADVERTISE_URL {advertise!r} must be http://$(POD_IP):PORT with POD_IP from fieldRef status.podIP")
    if (w["spec"].get("replicas") or 1) > 1:
        spread = pod.get("topologySpreadConstraints") or ((pod.get("affinity") or {}).get("podAntiAffinity"))
        p.check(bool(spread), "several replicas: spread them (topologySpreadConstraints or podAntiAffinity)")
    hooks = ((c.get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command") or []
    p.check(hooks[-2:-1] == ["sleep"] and hooks[-1].isdigit(), "several replicas: a preStop sleep, so the Service drops the pod before SIGTERM")
    pdbs = by_kind(docs, "PodDisruptionBudget")
    if pdbs:
        spec = pdbs[0]["spec"]
        p.check(spec.get("maxUnavailable") == 1 and "minAvailable" not in spec,
                "several replicas: the PodDisruptionBudget must let one replica go at a time (maxUnavailable: 1)")


def _check_pod(p: Problems, sts: dict, docs: list[dict], mode: str, external: set[str]) -> None:
    tmpl = sts["spec"]["template"]
    pod = tmpl["spec"]
    pod_labels = (tmpl.get("metadata") or {}).get("labels") or {}
    name = meta(sts, "name")
    kind = sts["kind"]
    c0 = (pod.get("containers") or [{}])[0]
    database = _database_url(c0, docs)
    if database is None:
        p.check(kind == "StatefulSet", f"{kind} {name}: without a PostgreSQL database (DEVSHARD_DATABASE_URL) the gateway runs as a one-replica StatefulSet: a Deployment's surge would run two writers of gateway.db")
        p.check(sts["spec"].get("replicas") == 1, f"{kind} {name}: replicas must be 1 without a PostgreSQL database (DEVSHARD_DATABASE_URL): single writer of gateway.db")
    else:
        _check_replicas(p, sts, c0, docs, pod_labels)
    p.check(_selects(sts["spec"]["selector"].get("matchLabels") or {}, pod_labels), f"{kind} selector does not match its pod labels")

    # Pod-level hardening.
    p.check(pod.get("automountServiceAccountToken") is False, "pod: automountServiceAccountToken must be false")
    p.check(pod.get("enableServiceLinks") is False, "pod: enableServiceLinks must be false (service links inject DEVSHARD_* variables)")
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        p.check(not pod.get(host), f"pod: {host} must not be set")
    psc = pod.get("securityContext") or {}
    p.check(psc.get("runAsNonRoot") is True, "pod securityContext: runAsNonRoot must be true")
    p.check(psc.get("runAsUser") == GATEWAY_UID, f"pod securityContext: runAsUser must be {GATEWAY_UID} (the image's user)")
    p.check(psc.get("fsGroup") == GATEWAY_UID, f"pod securityContext: fsGroup must be {GATEWAY_UID} (the volume must be writable)")
    p.check((psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault", "pod securityContext: seccompProfile RuntimeDefault")
    sa_name = pod.get("serviceAccountName")
    p.check(bool(sa_name) and sa_name != "default", "pod: a dedicated serviceAccountName")
    sas = [d for d in by_kind(docs, "ServiceAccount") if meta(d, "name") == sa_name]
    if p.check(len(sas) == 1, f"ServiceAccount {sa_name} is not in the render"):
        p.check(sas[0].get("automountServiceAccountToken") is False, f"ServiceAccount {sa_name}: automountServiceAccountToken false")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for v in volumes.values():
        kinds = set(v) - {"name"}
        p.check(kinds <= PSS_VOLUME_TYPES, f"volume {v['name']}: type {sorted(kinds)} is not allowed by the restricted policy")

    # Grace period against the drain.
    containers = pod.get("containers") or []
    if not p.check(len(containers) == 1, "pod: exactly one container"):
        return
    c = containers[0]
    grace = _env_value(c, "DEVSHARD_SHUTDOWN_GRACE_SECONDS")
    tgps = pod.get("terminationGracePeriodSeconds")
    hook = ((c.get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command") or []
    pre_stop = int(hook[-1]) if hook[-2:-1] == ["sleep"] and hook[-1].isdigit() else 0
    if p.check(grace is not None and grace.isdigit(), "DEVSHARD_SHUTDOWN_GRACE_SECONDS must be set to a number of seconds"):
        p.check(
            isinstance(tgps, int) and tgps >= pre_stop + int(grace) + FLUSH_MARGIN_S,
            f"terminationGracePeriodSeconds ({tgps}) must be at least the preStop sleep ({pre_stop}) + DEVSHARD_SHUTDOWN_GRACE_SECONDS ({grace}) + {FLUSH_MARGIN_S} for the store flush and the lease release",
        )

    # Container hardening (restricted Pod Security Standard and more).
    sc = c.get("securityContext") or {}
    p.check(sc.get("allowPrivilegeEscalation") is False, "container: allowPrivilegeEscalation must be false")
    p.check(sc.get("readOnlyRootFilesystem") is True, "container: readOnlyRootFilesystem must be true")
    p.check(not sc.get("privileged"), "container: privileged must not be true")
    p.check(sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, "container: runAsNonRoot")
    p.check(sc.get("runAsUser", psc.get("runAsUser")) == GATEWAY_UID, f"container: runAsUser {GATEWAY_UID}")
    caps = sc.get("capabilities") or {}
    p.check("ALL" in (caps.get("drop") or []), "container: capabilities.drop must contain ALL")
    p.check(not caps.get("add"), "container: no capabilities added")
    p.check((sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault", "container: seccompProfile RuntimeDefault")
    p.check(sc.get("procMount") in (None, "Default"), "container: procMount Default")

    # Image.
    image = c.get("image", "")
    p.check(bool(re.search(r":[\w.-]+$|@sha256:[0-9a-f]{64}$", image)) and not image.endswith(":latest"), f"container image {image!r}: pin a version tag or a digest")

    # Resources.
    res = c.get("resources") or {}
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            p.check(r in (res.get(kind) or {}), f"container resources: {kind}.{r} must be set")
    for r in ("cpu", "memory", "ephemeral-storage"):
        req, lim = (res.get("requests") or {}).get(r), (res.get("limits") or {}).get(r)
        if req is not None and lim is not None:
            p.check(_quantity(req) <= _quantity(lim), f"container resources: {r} request {req} above its limit {lim}")

    # Listen address, port, probes.
    listen = _env_value(c, "DEVSHARD_LISTEN") or ""
    m = re.fullmatch(r"0\.0\.0\.0:(\d+)|\[::\]:(\d+)", listen)
    port = int(m.group(1) or m.group(2)) if m else None
    p.check(port is not None, f"DEVSHARD_LISTEN {listen!r} must listen on all interfaces (0.0.0.0:PORT)")
    ports = {pt.get("name"): pt for pt in c.get("ports") or []}
    http = ports.get("http")
    if p.check(http is not None, "container: a port named http"):
        p.check(http.get("containerPort") == port, f"container port http ({http.get('containerPort')}) must be DEVSHARD_LISTEN's port ({port})")
    df = _dockerfile()
    p.check(str(port) in df.get("expose", []), f"the Dockerfile must EXPOSE {port}")
    p.check(df.get("env", {}).get("DEVSHARD_LISTEN") == listen, "the Dockerfile's DEVSHARD_LISTEN must equal the StatefulSet's")
    p.check(df.get("user", "").split(":")[0] == str(GATEWAY_UID), f"the Dockerfile's USER must be {GATEWAY_UID}")
    p.check(df.get("env", {}).get("DEVSHARD_SHUTDOWN_GRACE_SECONDS") == grace, "the Dockerfile's DEVSHARD_SHUTDOWN_GRACE_SECONDS must equal the StatefulSet's")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = ((c.get(probe) or {}).get("httpGet")) or {}
        p.check(get.get("path") == path and get.get("port") in ("http", port), f"container: {probe} must GET {path} on port http")

    # Command line and config file.
    argv = (c.get("command") or []) + (c.get("args") or [])
    p.check(argv == df.get("entrypoint"), f"container command+args {argv} must equal the Dockerfile's ENTRYPOINT {df.get('entrypoint')}")
    config_path = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
    mounts = {mt["mountPath"]: mt for mt in c.get("volumeMounts") or []}
    if p.check(config_path is not None, "container: serve --config PATH"):
        cdir, cfile = os.path.split(config_path)
        mt = mounts.get(cdir)
        vol = volumes.get(mt["name"]) if mt else None
        if p.check(vol is not None and "configMap" in vol, f"{cdir} must be a configMap volume mount"):
            items = {i["key"]: i["path"] for i in vol["configMap"].get("items") or []}
            key = next((k for k, v in items.items() if v == cfile), cfile if not items else None)
            p.check(key is not None, f"the configMap volume does not provide {cfile}")
            cms = [d for d in by_kind(docs, "ConfigMap") if meta(d, "name") == vol["configMap"]["name"]]
            if p.check(len(cms) == 1, f"ConfigMap {vol['configMap']['name']} is not in the render"):
                p.check(key in (cms[0].get("data") or {}), f"ConfigMap {meta(cms[0], 'name')} has no key {key}")
            p.check(mt.get("readOnly") is True, f"{cdir} mount must be readOnly")

    # Data directory on the volumeClaimTemplate (SQLite), scratch on PostgreSQL.
    data_dir = _env_value(c, "DEVSHARD_DATA_DIR")
    vcts = {meta(v, "name"): v for v in sts["spec"].get("volumeClaimTemplates") or []}
    mt = mounts.get(data_dir or "")
    if p.check(mt is not None, f"DEVSHARD_DATA_DIR {data_dir!r} must be a volume mount"):
        if database is None:
            p.check(mt["name"] in vcts and mt["name"] not in volumes, f"{data_dir} must be mounted from a volumeClaimTemplate")
        else:
            p.check(not vcts and "emptyDir" in volumes.get(mt["name"], {}), f"{data_dir}: scratch only on PostgreSQL (an emptyDir, no volumeClaimTemplate)")
        p.check(not mt.get("readOnly"), f"{data_dir} must be writable")
    p.check(df.get("env", {}).get("DEVSHARD_DATA_DIR") == data_dir, "the Dockerfile's DEVSHARD_DATA_DIR must equal the StatefulSet's")
    for v in vcts.values():
        p.check((v.get("spec") or {}).get("accessModes") == ["ReadWriteOnce"], f"volumeClaimTemplate {meta(v, 'name')}: ReadWriteOnce")
    tmp = mounts.get("/tmp")
    p.check(tmp is not None and "emptyDir" in volumes.get(tmp["name"], {}), "/tmp must be an emptyDir (the root filesystem is read-only)")

    # Secrets: the key as a file from a secret volume, the two others from the same Secret.
    p.check("DEVSHARD_PRIVATE_KEY" not in _env(c), "the private key must come as a file (DEVSHARD_PRIVATE_KEY_FILE), not as a variable")
    key_file = _env_value(c, "DEVSHARD_PRIVATE_KEY_FILE") or ""
    kdir, kfile = os.path.split(key_file)
    mt = mounts.get(kdir)
    vol = volumes.get(mt["name"]) if mt else None
    secret_names = set()
    if p.check(vol is not None and "secret" in vol, f"DEVSHARD_PRIVATE_KEY_FILE {key_file!r} must be in a secret volume mount"):
        p.check(mt.get("readOnly") is True, f"{kdir} mount must be readOnly")
        items = {i["path"]: i["key"] for i in vol["secret"].get("items") or []}
        p.check(kfile in items, f"the secret volume must map a key to {kfile}")
        file_mode = vol["secret"].get("defaultMode")
        p.check(file_mode is not None and file_mode & 0o007 == 0, "the secret volume's defaultMode must give others no access")
        secret_names.add((vol["secret"]["secretName"], items.get(kfile), False))
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            secret_names.add((ref["name"], ref["key"], bool(ref.get("optional"))))
        p.check(not re.search(r"KEY|SECRET|TOKEN|PASSWORD", e["name"]) or "value" not in e or e["name"].endswith("_FILE"),
                f"env {e['name']}: a secret must come from a Secret, not a literal value")
    secrets = {meta(d, "name"): d for d in by_kind(docs, "Secret")}
    for sname, skey, optional in sorted(secret_names, key=str):
        if mode == "base" and sname not in secrets:
            continue  # the base expects the overlay (or the operator) to provide it
        if sname in external or sname in _cnpg_secrets(docs):
            continue  # created out of band (declared external), or by the render's CNPG Cluster
        if p.check(sname in secrets, f"Secret {sname} is not in the render"):
            p.check(optional or skey in (secrets[sname].get("data") or {}), f"Secret {sname} has no key {skey}")

    # Services, PDB, NetworkPolicy, ServiceMonitor select this pod.
    services = {meta(d, "name"): d for d in by_kind(docs, "Service")}
    headless_name = sts["spec"].get("serviceName") if kind == "StatefulSet" else next((n for n, s in services.items() if s["spec"].get("clusterIP") == "None"), None)
    headless = services.get(headless_name)
    if p.check(headless is not None, f"{'serviceName' if kind == 'StatefulSet' else 'headless Service'} {headless_name} is not a Service of the render"):
        p.check(headless["spec"].get("clusterIP") == "None", "the governing Service must be headless")
        p.check(headless["spec"].get("publishNotReadyAddresses") is True, "the governing Service must publish not-ready addresses (metrics, admin)")
    for s in services.values():
        p.check(_selects(s["spec"].get("selector") or {}, pod_labels), f"Service {meta(s, 'name')} does not select the pod")
        for sp in s["spec"].get("ports") or []:
            p.check(sp.get("targetPort") in ("http", port), f"Service {meta(s, 'name')}: targetPort must be the http port")
    pdbs = by_kind(docs, "PodDisruptionBudget")
    if p.check(len(pdbs) == 1, "one PodDisruptionBudget"):
        spec = pdbs[0]["spec"]
        p.check(_selects((spec.get("selector") or {}).get("matchLabels") or {}, pod_labels), "the PodDisruptionBudget does not select the pod")
        p.check(spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow", "PodDisruptionBudget: unhealthyPodEvictionPolicy AlwaysAllow (a broken pod must not block drains)")
    nps = by_kind(docs, "NetworkPolicy")
    if p.check(len(nps) >= 1, "a NetworkPolicy"):
        np_ = nps[0]["spec"]
        p.check(_selects((np_.get("podSelector") or {}).get("matchLabels") or {}, pod_labels), "the NetworkPolicy does not select the pod")
        allowed = {pt.get("port") for rule in np_.get("ingress") or [] for pt in rule.get("ports") or []}
        p.check(port in allowed or "http" in allowed, "the NetworkPolicy must let the http port in")
    for sm in by_kind(docs, "ServiceMonitor"):
        sel = (sm["spec"].get("selector") or {}).get("matchLabels") or {}
        hits = [s for s in services.values() if _selects(sel, meta(s, "labels") or {})]
        if p.check(len(hits) == 1, f"ServiceMonitor {meta(sm, 'name')} must select exactly one Service (got {len(hits)})"):
            sport = {sp.get("name") for sp in hits[0]["spec"].get("ports") or []}
            for ep in sm["spec"].get("endpoints") or []:
                p.check(ep.get("port") in sport, f"ServiceMonitor endpoint port {ep.get('port')} is not a port of {meta(hits[0], 'name')}")
                p.check(ep.get("path") == "/metrics", "ServiceMonitor endpoint path must be /metrics")


def _check_committed_secrets(p: Problems, docs: list[dict]) -> None:
    for s in by_kind(docs, "Secret"):
        for k, v in (s.get("data") or {}).items():
            value = base64.b64decode("".join(v.split())).decode("utf-8", "replace")
            placeholder = PLACEHOLDER_MARK in value or (k == "private-key" and set(value.strip()) <= {"0"})
            p.check(placeholder, f"Secret {meta(s, 'name')} key {k}: not a placeholder; never commit a real secret "
                                 f"(placeholders are all zeros for private-key, or contain {PLACEHOLDER_MARK!r})")


def cmd_policy(bases: list[str], overlays: list[str], external: set[str]) -> int:
    rc = 0
    for path, mode in [(b, "base") for b in bases] + [(o, "overlay") for o in overlays]:
        p = Problems(f"gateway contract and hardening of {os.path.basename(path)}")
        docs = load_docs(path)
        workloads = by_kind(docs, "StatefulSet") + by_kind(docs, "Deployment")
        if p.check(len(workloads) == 1 and meta(workloads[0], "name") == STATEFULSET,
                   f"exactly one StatefulSet or Deployment named {STATEFULSET} (got {len(workloads)})"):
            _check_pod(p, workloads[0], docs, mode, external)
        _check_committed_secrets(p, docs)
        if mode == "overlay":
            namespaces = by_kind(docs, "Namespace")
            ns_names = {meta(n, "name") for n in namespaces}
            for d in docs:
                if d["kind"] != "Namespace":
                    p.check(meta(d, "namespace") in ns_names, f"{d['kind']}/{meta(d, 'name')}: namespace {meta(d, 'namespace')!r} is not created by the overlay")
            for n in namespaces:
                p.check((meta(n, "labels") or {}).get("pod-security.kubernetes.io/enforce") == "restricted",
                        f"Namespace {meta(n, 'name')}: enforce the restricted Pod Security Standard")
        rc |= p.finish()
    return rc


# --------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------


def _example_keys() -> dict[str, type]:
    """Every key of deploy/config.example.toml (commented-out ones included) with its type."""
    text = open(os.path.join(DEPLOY, "config.example.toml"), encoding="utf-8").read()
    # "# key = value" lines whose value is TOML (a string, number, boolean or list).
    uncommented = re.sub(r'(?m)^#\s*([a-z_]+\s*=\s*(?:"|\d|true\b|false\b|\[))', r"\1", text)
    parsed = tomllib.loads(uncommented)
    keys: dict[str, type] = {}

    def walk(prefix: str, table: dict) -> None:
        for k, v in table.items():
            if isinstance(v, dict):
                keys[prefix + k] = dict
                walk(prefix + k + ".", v)
            else:
                keys[prefix + k] = type(v)

    walk("", parsed)
    return keys


def check_config_text(p: Problems, text: str, origin: str) -> None:
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        p.add(f"{origin}: not TOML: {e}")
        return
    known = _example_keys()

    def walk(prefix: str, table: dict) -> None:
        for k, v in table.items():
            key = prefix + k
            if key not in known:
                p.add(f"{origin}: unknown key {key!r} (the gateway refuses it: exit code 64)")
                continue
            want = known[key]
            if isinstance(v, dict):
                if p.check(want is dict, f"{origin}: {key} must not be a table"):
                    walk(key + ".", v)
            elif want is float:
                p.check(isinstance(v, (int, float)) and not isinstance(v, bool), f"{origin}: {key} must be a number")
            else:
                p.check(type(v) is want, f"{origin}: {key} must be a {want.__name__}, not {type(v).__name__}")

    walk("", parsed)
    for url_key in ("chain_rest_url", "public_api_url"):
        url = parsed.get(url_key)
        if url:
            p.check(str(url).startswith("http://"), f"{origin}: {url_key} must be http:// (this build has no TLS)")


def cmd_config(files: list[str]) -> int:
    rc = 0
    for path in files:
        p = Problems(f"gateway.toml of {os.path.basename(path)} against deploy/config.example.toml")
        cms = [d for d in by_kind(load_docs(path), "ConfigMap") if "gateway.toml" in (d.get("data") or {})]
        if p.check(len(cms) == 1, "one ConfigMap with gateway.toml"):
            check_config_text(p, cms[0]["data"]["gateway.toml"], meta(cms[0], "name"))
        rc |= p.finish()
    return rc


# --------------------------------------------------------------------------------------------
# dockerfile
# --------------------------------------------------------------------------------------------


def cmd_dockerfile(path: str) -> int:
    p = Problems("Dockerfile against rust-toolchain.toml, the ignore file and the workspace")
    df = _dockerfile(path)
    p.check(df.get("user", "").split(":")[0] not in ("", "0", "root"), "the image must run as a non-root USER")
    stages = df["stages"]
    channel = tomllib.load(open(os.path.join(ROOT, "rust-toolchain.toml"), "rb"))["toolchain"]["channel"]
    builder = stages[0]["from"]
    p.check(builder.startswith(f"rust:{channel}-bookworm"), f"builder image {builder} must be rust:{channel}-bookworm (rust-toolchain.toml)")
    p.check(stages[-1]["from"].startswith("debian:bookworm-slim"), "runtime image must be debian:bookworm-slim")
    build_runs = " ".join(rest for word, rest in stages[0]["lines"] if word == "RUN")
    p.check("cargo build --release --locked" in build_runs, "the builder must run cargo build --release --locked")
    p.check("/healthz" in df.get("healthcheck", ""), "HEALTHCHECK must GET /healthz")
    p.check(re.search(r"CMD \[", df.get("healthcheck", "")) is not None, "HEALTHCHECK must use the exec form (no shell)")
    # Every COPY source (from the context) is allowed by the allowlist ignore file.
    ignore = [ln.strip() for ln in open(os.path.join(DEPLOY, "Dockerfile.dockerignore"), encoding="utf-8") if ln.strip() and not ln.startswith("#")]
    p.check(ignore and ignore[0] == "*", "Dockerfile.dockerignore must start with * (an allowlist)")
    allowed = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    sources: list[str] = []
    for stage in stages:
        for word, rest in stage["lines"]:
            if word == "COPY" and not rest.startswith("--from"):
                parts = [x for x in rest.split() if not x.startswith("--")]
                sources += parts[:-1]
    for src in sources:
        src = src.rstrip("/")
        p.check(any(src == a or src.startswith(a + "/") for a in allowed), f"COPY {src}: left out by Dockerfile.dockerignore")
        p.check(os.path.exists(os.path.join(ROOT, src)), f"COPY {src}: no such path in the repository")
    # The builder's sources form a workspace cargo can read (no file of another member is missing).
    if subprocess.run(["sh", "-c", "command -v cargo"], capture_output=True).returncode == 0:
        with tempfile.TemporaryDirectory() as ctx:
            for src in [s for s in sources if not s.startswith("deploy/")]:
                dst = os.path.join(ctx, src)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                subprocess.run(["cp", "-r", os.path.join(ROOT, src), dst], check=True)
            r = subprocess.run(["cargo", "metadata", "--no-deps", "--offline", "--format-version", "1"], cwd=ctx, capture_output=True, text=True)
            if p.check(r.returncode == 0, f"cargo cannot read the build context's workspace: {r.stderr.strip()[-2000:]}"):
                targets = {t["name"] for pkg in json.loads(r.stdout)["packages"] for t in pkg["targets"] if "bin" in t["kind"]}
                p.check("devshard-gateway" in targets, "the build context has no devshard-gateway binary target")
    else:
        print("  note cargo not found: the build-context workspace check is skipped")
    return p.finish()


# --------------------------------------------------------------------------------------------
# monitoring: metrics catalogue, dashboard, rules, PromQL
# --------------------------------------------------------------------------------------------

METRIC_TYPES = r"IntCounterVec|IntCounter|CounterVec|Counter|IntGaugeVec|IntGauge|GaugeVec|Gauge|HistogramVec|Histogram"
DEF = re.compile(r"\b(" + METRIC_TYPES + r")::(?:new|with_opts)\(\s*(?:(?:Histogram)?Opts::new\(\s*)?\"([a-z_:][a-z0-9_:]*)\"")
NAMESPACE = "devshard"
# Announced by the repair work but not registered by the sources yet: allowed in the dashboard
# (their panels stay empty until then). Each one found in the sources is taken from there.
PENDING = {}
# Standard series an alert may use besides ours.
STANDARD = {"up": ("gauge", ["job", "instance"])}


def metric_catalogue() -> dict[str, tuple[str, list[str]]]:
    """name -> (counter|gauge|histogram, labels), from every metric the Rust sources define."""
    out: dict[str, tuple[str, list[str]]] = {}
    files = glob.glob(os.path.join(ROOT, "src", "**", "*.rs"), recursive=True)
    files += glob.glob(os.path.join(ROOT, "actors", "src", "**", "*.rs"), recursive=True)
    for path in sorted(files):
        text = open(path, encoding="utf-8").read()
        matches = list(DEF.finditer(text))
        for i, m in enumerate(matches):
            typ, name = m.group(1), m.group(2)
            kind = "histogram" if "Histogram" in typ else "gauge" if "Gauge" in typ else "counter"
            labels: list[str] = []
            if typ.endswith("Vec"):
                end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
                lm = re.search(r"&\[([^\]]*)\]", text[m.end() : end])
                labels = re.findall(r"\"([a-z_]+)\"", lm.group(1)) if lm else []
            out[f"{NAMESPACE}_{name}"] = (kind, labels)
    return out


def _series(catalogue: dict) -> dict[str, tuple[str, str, list[str]]]:
    """Exposed series name -> (base metric, kind of series, labels)."""
    out = {}
    for name, (kind, labels) in catalogue.items():
        if kind == "histogram":
            out[name + "_bucket"] = (name, "counter", labels + ["le"])
            out[name + "_sum"] = (name, "counter", labels)
            out[name + "_count"] = (name, "counter", labels)
        else:
            out[name] = (name, kind, labels)
    return out


GRAFANA_VARS = re.compile(r"\$(?:__rate_interval|__interval|__range|\{__rate_interval\}|\{__interval\}|\{__range\})")


def _promql_input(expr: str) -> str:
    return GRAFANA_VARS.sub("5m", expr)


def _dashboard_exprs(p: Problems, path: str) -> list[tuple[str, str]]:
    try:
        dash = json.load(open(path, encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        p.add(f"{path}: not JSON: {e}")
        return []
    for field in ("title", "uid", "panels", "templating", "schemaVersion"):
        p.check(field in dash, f"dashboard: no {field}")
    variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list") or []}
    p.check(variables.get("datasource", {}).get("type") == "datasource", "dashboard: a datasource variable (portable import)")
    exprs: list[tuple[str, str]] = []
    for name, v in variables.items():
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q or "")
            if p.check(m is not None, f"variable {name}: label_values(SELECTOR, LABEL) expected"):
                exprs.append((f"variable {name}", m.group(1)))
    panels = list(dash.get("panels") or [])
    for pnl in list(panels):
        panels += pnl.get("panels") or []  # collapsed rows keep their panels inside
    ids = [pnl.get("id") for pnl in panels]
    p.check(len(ids) == len(set(ids)), "dashboard: panel ids must be unique")
    taken: dict[tuple[int, int], str] = {}
    for pnl in dash.get("panels") or []:
        gp = pnl.get("gridPos") or {}
        for x in range(gp.get("x", 0), gp.get("x", 0) + gp.get("w", 0)):
            for yy in range(gp.get("y", 0), gp.get("y", 0) + gp.get("h", 0)):
                other = taken.setdefault((x, yy), f"{pnl.get('id')}:{pnl.get('title')}")
                if other != f"{pnl.get('id')}:{pnl.get('title')}":
                    p.add(f"panels {other!r} and {pnl.get('title')!r} overlap")
                    break
            else:
                continue
            break
    for pnl in panels:
        title = pnl.get("title", "?")
        gp = pnl.get("gridPos") or {}
        p.check(all(k in gp for k in ("h", "w", "x", "y")) and gp.get("x", 0) + gp.get("w", 0) <= 24, f"panel {title!r}: gridPos")
        if pnl.get("type") == "row":
            continue
        p.check((pnl.get("datasource") or {}).get("uid") == "${datasource}", f"panel {title!r}: datasource must be ${{datasource}}")
        targets = pnl.get("targets") or []
        p.check(bool(targets), f"panel {title!r}: no query")
        for t in targets:
            expr = t.get("expr", "")
            p.check(bool(re.search(r"\bdevshard_[a-z0-9_]+", expr)), f"panel {title!r} {t.get('refId')}: the query uses no devshard_ metric")
            p.check(f'namespace=~"$namespace"' in expr and f'pod=~"$pod"' in expr, f"panel {title!r} {t.get('refId')}: filter on $namespace and $pod")
            exprs.append((f"panel {title!r} {t.get('refId')}", expr))
    return exprs


def _rule_groups(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return (yaml.load(f, Loader=StrictLoader) or {}).get("groups") or []


RULES = os.path.join(DEPLOY, "prometheus", "alerts.yml")
PROMETHEUS_RULE = os.path.join(DEPLOY, "k8s", "components", "monitoring", "prometheusrule.yaml")


def _rules_exprs(p: Problems, rules: str, prometheus_rule: str) -> list[tuple[str, str]]:
    exprs = []
    groups = _rule_groups(rules)
    p.check(bool(groups), "alerts.yml: no groups")
    names = set()
    for g in groups:
        p.check(set(g) <= {"name", "interval", "limit", "rules"} and bool(g.get("name")), f"alerts.yml group {g.get('name')!r}: fields")
        for r in g.get("rules") or []:
            alert = r.get("alert")
            p.check(set(r) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, f"rule {alert}: unknown fields {sorted(set(r) - {'alert', 'expr', 'for', 'keep_firing_for', 'labels', 'annotations'})}")
            p.check(bool(alert) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", alert or "") is not None, f"rule {alert!r}: alert name")
            p.check(alert not in names, f"rule {alert}: duplicate alert name")
            names.add(alert)
            p.check((r.get("labels") or {}).get("severity") in ("critical", "warning", "info"), f"rule {alert}: labels.severity critical|warning|info")
            ann = r.get("annotations") or {}
            p.check("summary" in ann and "description" in ann, f"rule {alert}: summary and description annotations")
            if "for" in r:
                p.check(re.fullmatch(DURATION["pattern"], str(r["for"])) is not None, f"rule {alert}: for {r['for']!r} is not a duration")
            for k, v in ann.items():
                p.check(v.count("{{") == v.count("}}"), f"rule {alert}: annotation {k}: unbalanced template braces")
            exprs.append((f"rule {alert}", r.get("expr", "")))
    # The PrometheusRule carries the same groups.
    pr = load_docs(prometheus_rule)
    p.check(len(pr) == 1 and pr[0]["spec"]["groups"] == groups,
            "prometheusrule.yaml differs from alerts.yml: run `python3 deploy/tools/checks.py sync-rules`")
    return exprs


def _analyse(p: Problems, promql_cmd: list[str], exprs: list[tuple[str, str]], catalogue: dict, alert_ids: set) -> set[str]:
    items = [{"id": str(i), "expr": _promql_input(e)} for i, (_, e) in enumerate(exprs)]
    r = subprocess.run(promql_cmd, input=json.dumps(items), capture_output=True, text=True)
    if r.returncode != 0:
        p.add(f"the PromQL parser failed: {r.stderr.strip()[-500:]}")
        return set()
    series = _series(catalogue)
    used: set[str] = set()
    for res in json.loads(r.stdout):
        where, expr = exprs[int(res["id"])]
        for err in res["errors"]:
            p.add(f"{where}: PromQL syntax error near {err['near']!r}")
        allowed = dict(series)
        if where in alert_ids:
            allowed.update({k: (k, v[0], v[1]) for k, v in STANDARD.items()})
        for sel in res["selectors"]:
            name = sel["metric"]
            if not name:
                p.add(f"{where}: a selector without a metric name")
                continue
            if name not in allowed:
                p.add(f"{where}: {name} is not a metric the gateway exports")
                continue
            base, kind, labels = allowed[name]
            used.add(base)
            for label in sel["labels"]:
                p.check(label in labels or label in TARGET_LABELS, f"{where}: {name} has no label {label!r}")
            if sel["fn"] in ("rate", "irate", "increase", "resets"):
                p.check(kind == "counter", f"{where}: {sel['fn']}() of {name}, which is a {kind}")
        for agg in res["aggregations"]:
            if agg["modifier"] != "by":
                continue
            labels = set(TARGET_LABELS)
            for m in agg["metrics"]:
                labels |= set(allowed.get(m, ("", "", []))[2])
            for label in agg["labels"]:
                p.check(label in labels, f"{where}: grouping by {label!r}, which none of {sorted(set(agg['metrics']))} has")
        for call in res["calls"]:
            if call.get("range_function"):
                p.check(bool(call["args"]) and call["args"][-1] in ("MatrixSelector", "SubqueryExpr"), f"{where}: {call['name']}() needs a range vector")
            if call["name"] == "histogram_quantile":
                p.check(call.get("grouped_by") is not None and "le" in call["grouped_by"], f"{where}: histogram_quantile over sum by (le, ...)")
    return used


def cmd_monitoring(script: str, dashboard: str, rules: str, prometheus_rule: str) -> int:
    promql_cmd = ["node", script]
    catalogue = metric_catalogue()
    p = Problems(f"dashboard {os.path.relpath(dashboard, ROOT)} and alert rules against the {len(catalogue)} metrics of the sources")
    p.check(len(catalogue) >= 20, f"only {len(catalogue)} metrics found in the sources: the catalogue parser is broken")
    for name, spec in PENDING.items():
        if name in catalogue:
            print(f"  note {name} is registered by the sources now: remove it from PENDING in deploy/tools/checks.py")
        else:
            catalogue[name] = spec
    dash_exprs = _dashboard_exprs(p, dashboard)
    rule_exprs = _rules_exprs(p, rules, prometheus_rule)
    used_dash = _analyse(p, promql_cmd, dash_exprs, catalogue, set())
    _analyse(p, promql_cmd, rule_exprs, catalogue, {w for w, _ in rule_exprs})
    missing = sorted(set(catalogue) - used_dash)
    p.check(not missing, f"the dashboard shows no panel for {missing}")
    return p.finish()


def cmd_sync_rules() -> int:
    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None))
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "devshard-gateway",
            "labels": {"app.kubernetes.io/name": "devshard-gateway", "app.kubernetes.io/instance": "devshard-gateway"},
        },
        "spec": {"groups": _rule_groups(RULES)},
    }
    header = (
        "# GENERATED from deploy/prometheus/alerts.yml by `python3 deploy/tools/checks.py sync-rules`:\n"
        "# edit alerts.yml, not this file (deploy/validate.sh fails when they differ).\n"
    )
    with open(PROMETHEUS_RULE, "w", encoding="utf-8") as f:
        f.write(header + yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=100))
    print(f"wrote {os.path.relpath(PROMETHEUS_RULE, ROOT)}")
    return 0


# --------------------------------------------------------------------------------------------
# smoke: the real binary with the rendered config and environment
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _closed_port() -> int:
    return _free_port()  # nothing listens there: chain calls are refused at once


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def _smoke_one(p: Problems, binary: str, docs: list[dict], label: str) -> None:
    sts = by_kind(docs, "StatefulSet")[0]
    c = sts["spec"]["template"]["spec"]["containers"][0]
    argv = (c.get("command") or []) + (c.get("args") or [])
    cm = [d for d in by_kind(docs, "ConfigMap") if "gateway.toml" in (d.get("data") or {})][0]
    secrets = {meta(d, "name"): d for d in by_kind(docs, "Secret")}
    with tempfile.TemporaryDirectory(prefix="devshard-smoke-") as tmp:
        cfg = os.path.join(tmp, "gateway.toml")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write(cm["data"]["gateway.toml"])
        data = os.path.join(tmp, "data")
        os.mkdir(data)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVSHARD_", "GATEWAY_"))}
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                sec = secrets.get(ref["name"])
                if sec and ref["key"] in (sec.get("data") or {}):
                    env[e["name"]] = base64.b64decode("".join(sec["data"][ref["key"]].split())).decode()
        port = _free_port()
        closed = f"http://127.0.0.1:{_closed_port()}"
        env.update({
            "DEVSHARD_LISTEN": f"127.0.0.1:{port}",
            "DEVSHARD_DATA_DIR": data,
            "DEVSHARD_CHAIN_REST_URL": closed,
            "DEVSHARD_PUBLIC_API_URL": closed,
            "DEVSHARD_PRIVATE_KEY_FILE": os.path.join(tmp, "private-key"),
        })
        args = [binary] + argv[1:]
        args[args.index("--config") + 1] = cfg
        grace = int(env.get("DEVSHARD_SHUTDOWN_GRACE_SECONDS", "30"))

        # 1. The committed placeholder key must not run.
        placeholder = None
        for sec in secrets.values():
            if "private-key" in (sec.get("data") or {}):
                placeholder = base64.b64decode("".join(sec["data"]["private-key"].split()))
        if placeholder is not None:
            with open(env["DEVSHARD_PRIVATE_KEY_FILE"], "wb") as f:
                f.write(placeholder)
            r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
            p.check(r.returncode == 64 and "private key" in r.stderr,
                    f"{label}: with the placeholder key the gateway must refuse the key (exit 64), got {r.returncode}: {r.stderr.strip()[-2000:]}")

        # 2. A throwaway key: starts, answers the probes and /metrics, drains on SIGTERM.
        with open(env["DEVSHARD_PRIVATE_KEY_FILE"], "w") as f:
            f.write("4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318\n")
        log = open(os.path.join(tmp, "gateway.log"), "w+")
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            status = None
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status = _get(base + "/healthz")[0]
                    if status == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.2)
            if p.check(status == 200, f"{label}: /healthz did not answer 200 (exit {proc.poll()}): " + _tail(log)):
                code, _, body = _get(base + "/readyz")
                p.check(code in (200, 503) and "status" in json.loads(body), f"{label}: /readyz answered {code} {body[:200]}")
                code, ctype, body = _get(base + "/metrics")
                p.check(code == 200 and ctype.startswith("text/plain") and "devshard_" in body, f"{label}: /metrics answered {code} {ctype}")
                p.check(os.path.exists(os.path.join(data, "gateway.db")), f"{label}: no gateway.db in DEVSHARD_DATA_DIR")
                proc.send_signal(signal.SIGTERM)
                try:
                    rc = proc.wait(timeout=grace + 5)
                    p.check(rc == 0, f"{label}: exit code {rc} after SIGTERM: " + _tail(log))
                except subprocess.TimeoutExpired:
                    p.add(f"{label}: still running {grace + 5} s after SIGTERM")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


def _tail(log) -> str:
    log.flush()
    log.seek(0)
    return log.read().strip()[-2000:]


def cmd_smoke(binary: str, files: list[str]) -> int:
    rc = 0
    for path in files:
        p = Problems(f"the gateway binary runs with the config and environment of {os.path.basename(path)}")
        _smoke_one(p, binary, load_docs(path), os.path.basename(path))
        rc |= p.finish()
    return rc


# --------------------------------------------------------------------------------------------
# mutate: deliberately broken inputs for `validate.sh --self-test`
# --------------------------------------------------------------------------------------------


def _workload(docs: list[dict]) -> dict:
    return (by_kind(docs, "StatefulSet") + by_kind(docs, "Deployment"))[0]


def _container(docs: list[dict]) -> dict:
    return _workload(docs)["spec"]["template"]["spec"]["containers"][0]


def _literal_replica_id(docs: list[dict]) -> None:
    for e in _container(docs)["env"]:
        if e["name"] == "DEVSHARD_REPLICA_ID":
            e.pop("valueFrom")
            e["value"] = "gateway"


def _drop_database(docs: list[dict]) -> None:
    c = _container(docs)
    c["env"] = [e for e in c["env"] if e["name"] != "DEVSHARD_DATABASE_URL"]


def _mutate_yaml(fn):
    def run(src: str, dst: str) -> None:
        docs = load_docs(src)
        fn(docs)
        with open(dst, "w", encoding="utf-8") as f:
            yaml.safe_dump_all(docs, f, sort_keys=False)
    return run


def _mutate_dashboard(fn):
    def run(src: str, dst: str) -> None:
        dash = json.load(open(src, encoding="utf-8"))
        panel = next(p for p in dash["panels"] if p.get("type") != "row")
        fn(panel)
        json.dump(dash, open(dst, "w", encoding="utf-8"), indent=2)
    return run


def _mutate_text(old: str, new: str):
    def run(src: str, dst: str) -> None:
        text = open(src, encoding="utf-8").read()
        if old not in text:
            raise ValueError(f"mutation anchor {old!r} not found in {src}")
        open(dst, "w", encoding="utf-8").write(text.replace(old, new, 1))
    return run


def _set_config_key(docs: list[dict]) -> None:
    cm = [d for d in by_kind(docs, "ConfigMap") if "gateway.toml" in (d.get("data") or {})][0]
    cm["data"]["gateway.toml"] = "listen_adress = \"0.0.0.0:8080\"\n" + cm["data"]["gateway.toml"]


def _real_key(docs: list[dict]) -> None:
    sec = [d for d in by_kind(docs, "Secret") if "private-key" in (d.get("data") or {})][0]
    sec["data"]["private-key"] = base64.b64encode(b"4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318").decode()


MUTATIONS = {
    "privileged": _mutate_yaml(lambda d: _container(d)["securityContext"].update(privileged=True, allowPrivilegeEscalation=True)),
    "unknown-field": _mutate_yaml(lambda d: _container(d).update(imagePullPolicyy="Always")),
    "replicas-2": _mutate_yaml(lambda d: by_kind(d, "StatefulSet")[0]["spec"].update(replicas=2)),
    "no-database": _mutate_yaml(_drop_database),
    "replica-id-literal": _mutate_yaml(_literal_replica_id),
    "short-grace": _mutate_yaml(lambda d: by_kind(d, "StatefulSet")[0]["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30)),
    "real-key": _mutate_yaml(_real_key),
    "config-typo": _mutate_yaml(_set_config_key),
    "dash-unknown-metric": _mutate_dashboard(lambda p: p["targets"][0].update(expr=p["targets"][0]["expr"].replace("devshard_http_requests_total", "devshard_http_request_total"))),
    "dash-syntax": _mutate_dashboard(lambda p: p["targets"][0].update(expr="sum(rate(devshard_http_requests_total{namespace=~\"$namespace\", pod=~\"$pod\"}[5m])")),
    "dash-bad-label": _mutate_dashboard(lambda p: p["targets"][0].update(expr="sum by (escrow) (rate(devshard_http_requests_total{namespace=~\"$namespace\", pod=~\"$pod\"}[5m]))")),
    "rules-unsynced": _mutate_text("for: 15m", "for: 20m"),
    "alert-threshold": _mutate_text(") > 0.05", ") > 0.5"),
    "dockerfile-root": _mutate_text("USER 10001:10001", "USER root"),
}


def cmd_mutate(name: str, src: str, dst: str) -> int:
    MUTATIONS[name](src, dst)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description="offline checks of deploy/")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("schema")
    s.add_argument("files", nargs="+")
    s = sub.add_parser("policy")
    s.add_argument("--base", action="append", default=[], help="a render without its Secrets (repeatable)")
    s.add_argument("--overlay", action="append", default=[], help="a render to apply as is (repeatable)")
    s.add_argument("--external-secret", action="append", default=[], help="a Secret the overlay's users create out of band")
    s = sub.add_parser("config")
    s.add_argument("files", nargs="+")
    s = sub.add_parser("dockerfile")
    s.add_argument("--dockerfile", default=os.path.join(DEPLOY, "Dockerfile"))
    s = sub.add_parser("monitoring")
    s.add_argument("--promql", required=True, help="promql_check.mjs next to its node_modules")
    s.add_argument("--dashboard", default=os.path.join(DEPLOY, "grafana", "devshard-gateway.json"))
    s.add_argument("--rules", default=RULES)
    s.add_argument("--prometheus-rule", default=PROMETHEUS_RULE)
    sub.add_parser("sync-rules")
    s = sub.add_parser("smoke")
    s.add_argument("--bin", required=True)
    s.add_argument("files", nargs="+")
    s = sub.add_parser("mutate")
    s.add_argument("name", choices=sorted(MUTATIONS))
    s.add_argument("src")
    s.add_argument("dst")
    a = ap.parse_args()
    try:
        if a.cmd == "schema":
            return cmd_schema(a.files)
        if a.cmd == "policy":
            return cmd_policy(a.base, a.overlay, set(a.external_secret))
        if a.cmd == "config":
            return cmd_config(a.files)
        if a.cmd == "dockerfile":
            return cmd_dockerfile(a.dockerfile)
        if a.cmd == "monitoring":
            return cmd_monitoring(a.promql, a.dashboard, a.rules, a.prometheus_rule)
        if a.cmd == "sync-rules":
            return cmd_sync_rules()
        if a.cmd == "mutate":
            return cmd_mutate(a.name, a.src, a.dst)
        if a.cmd == "smoke":
            return cmd_smoke(a.bin, a.files)
    except (KustomizeError, OSError, KeyError, IndexError, ValueError, yaml.YAMLError) as e:
        print(f"  FAIL {a.cmd}: {type(e).__name__}: {e}")
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
