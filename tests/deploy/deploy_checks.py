#!/usr/bin/python3
"""Checks of Ballast's operations artifacts (dashboards/, deploy/, docs/operations.md)
against the code, shared by the shell tests in this directory.

One file past ~600 lines on purpose: every check reads the same inventory of metric
names, flags and runbook anchors parsed from the code below, and each shell test runs
one subcommand of it.

  deploy_checks.py metrics SRC                 exported metric names, from the code
  deploy_checks.py dashboards SRC              dashboards: JSON, uids, variables, metric names
  deploy_checks.py rules SRC                   rules: each alert tested, runbook anchors, names
  deploy_checks.py docs SRC                    docs/operations.md lists every exported metric
  deploy_checks.py live SRC URL DEADLINE_S     every panel query returns data from Prometheus
  deploy_checks.py flags NAME BINARY FILE...   documented flags == the binary's flags
  deploy_checks.py k8s-policy SRC              manifests: labels, hardening, probes, wiring
  deploy_checks.py systemd-parse FILE...       a unit file's syntax, where systemd-analyze cannot

Each prints one line per problem, naming the file and the item, and exits 1 on any.
Needs only Debian's python3 and python3-yaml.
"""
import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import yaml

# The dashboards, by file, with the uid each must keep: links and bookmarks use the uid,
# so changing one is a breaking change and must be done here on purpose.
DASHBOARD_UIDS = {
    "ballast-cluster-overview.json": "ballast-cluster-overview",
    "ballast-job.json": "ballast-job",
    "ballast-control-plane.json": "ballast-control-plane",
}
# Series Prometheus adds to every target; queries may use them besides Ballast's.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                     "scrape_samples_post_metric_relabeling", "scrape_series_added"}
METRIC_SOURCES = ("coordinator/metrics.cc", "agent/metrics.cc")

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "atan2", "inf", "nan",
}

problems = []


def problem(text):
    problems.append(text)
    print(f"FAIL: {text}", file=sys.stderr)


def finish(ok_text):
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print(ok_text)


# ---------------------------------------------------------------- metric names

# The series a family of each prometheus-cpp kind exposes, by suffix.
SERIES_SUFFIXES = {"Histogram": ("_bucket", "_sum", "_count"), "Summary": ("", "_sum", "_count")}


def metric_families(src):
    """{name: kind} of the families the code registers: every .Name("ballast_...") in the
    metrics files, kind from the prometheus::Build<Kind>() before it ('' when elsewhere)."""
    families = {}
    for rel in METRIC_SOURCES:
        with open(os.path.join(src, rel)) as f:
            text = f.read()
        for m in re.finditer(r'(?:Build(\w+)\(\)\s*)?\.Name\("([a-zA-Z_:][a-zA-Z0-9_:]*)"\)', text):
            families[m.group(2)] = families.get(m.group(2)) or m.group(1) or ""
    if not families:
        problem(f"no metric names found in {', '.join(METRIC_SOURCES)}: has registration changed?")
    return families


def exported_metrics(src):
    """Series names the code exports: a histogram's as its _bucket, _sum and _count series
    (a summary's: itself, _sum, _count), every other family's as its name."""
    return {name + suffix for name, kind in metric_families(src).items()
            for suffix in SERIES_SUFFIXES.get(kind, ("",))}


def promql_metric_names(expr):
    """Metric names a PromQL expression reads (no parser here: strip what is not a name).

    Removes strings, label matchers {...}, ranges [...], and the label lists of
    by/without/on/ignoring/group_left/group_right; what remains that is an identifier not
    followed by '(' and not a keyword is a metric name.
    """
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def check_names(where, expr, known):
    for name in sorted(promql_metric_names(expr)):
        if name not in known and name not in PROMETHEUS_SERIES:
            problem(f"{where}: metric {name} is not exported by the code "
                    f"({', '.join(METRIC_SOURCES)}); query: {expr}")


# ---------------------------------------------------------------- dashboards

def load_dashboards(src):
    out = {}
    for path in sorted(glob.glob(os.path.join(src, "dashboards", "*.json"))):
        with open(path) as f:
            try:
                out[os.path.basename(path)] = json.load(f)
            except json.JSONDecodeError as e:
                problem(f"{path}: invalid JSON: {e}")
    return out


def panels_of(dash):
    """Every panel, rows' collapsed panels included, in order."""
    for p in dash.get("panels", []):
        yield p
        for inner in p.get("panels", []):
            yield inner


def queries_of(dash):
    """(panel title, target refId, expr) for every query of every panel."""
    for p in panels_of(dash):
        for t in p.get("targets", []):
            if t.get("expr"):
                yield p.get("title", f"panel {p.get('id')}"), t.get("refId", "?"), t["expr"]


def variable_query(v):
    q = v.get("query")
    return q.get("query", "") if isinstance(q, dict) else (q or "")


def cmd_dashboards(src):
    known = exported_metrics(src)
    dashboards = load_dashboards(src)
    if set(dashboards) != set(DASHBOARD_UIDS):
        problem(f"dashboards/: files {sorted(dashboards)} != expected {sorted(DASHBOARD_UIDS)} "
                "(a new dashboard needs its uid pinned in tests/deploy/deploy_checks.py)")
    uids = {}
    for name, dash in dashboards.items():
        where = f"dashboards/{name}"
        uid = dash.get("uid")
        if name in DASHBOARD_UIDS and uid != DASHBOARD_UIDS[name]:
            problem(f"{where}: uid {uid!r} changed from {DASHBOARD_UIDS[name]!r}")
        if uid in uids:
            problem(f"{where}: uid {uid!r} also used by {uids[uid]}")
        uids[uid] = name
        if not dash.get("title"):
            problem(f"{where}: no title")
        variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
        ds = variables.get("datasource")
        if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
            problem(f"{where}: needs a `datasource` variable of type datasource, query prometheus")
        for vname, v in variables.items():
            if v.get("type") == "query":
                if (v.get("datasource") or {}).get("uid") != "${datasource}":
                    problem(f"{where}: variable {vname} does not use ${{datasource}}")
                m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable_query(v).strip())
                if not m:
                    problem(f"{where}: variable {vname}: query {variable_query(v)!r} is not "
                            "label_values(selector, label)")
                else:
                    check_names(f"{where} variable {vname}", m.group(1), known)
        ids = set()
        for p in panels_of(dash):
            pid = p.get("id")
            if pid in ids:
                problem(f"{where}: panel id {pid} used twice")
            ids.add(pid)
            if "gridPos" not in p:
                problem(f"{where}: panel {p.get('title')!r} has no gridPos")
            if p.get("type") == "row":
                continue
            if (p.get("datasource") or {}).get("uid") != "${datasource}":
                problem(f"{where}: panel {p.get('title')!r} does not use ${{datasource}}")
            if not p.get("targets"):
                problem(f"{where}: panel {p.get('title')!r} has no query")
            for t in p.get("targets", []):
                if (t.get("datasource") or {}).get("uid") not in (None, "${datasource}"):
                    problem(f"{where}: panel {p.get('title')!r} query {t.get('refId')} names a "
                            "datasource other than ${datasource}")
                if not t.get("expr"):
                    problem(f"{where}: panel {p.get('title')!r} query {t.get('refId')} is empty")
        for title, ref, expr in queries_of(dash):
            used = set(re.findall(r"\$\{?(\w+)", expr)) - {"__rate_interval", "__interval", "__range"}
            for u in sorted(used - set(variables)):
                problem(f"{where}: panel {title!r} uses ${u}, which is no variable of the dashboard")
            check_names(f"{where} panel {title!r} {ref}", expr, known)
    # Provisioning files parse and point at the dashboards' folder.
    for path in glob.glob(os.path.join(src, "dashboards", "provisioning", "*", "*.yaml")):
        with open(path) as f:
            doc = yaml.safe_load(f)
        if doc.get("apiVersion") != 1 or not (doc.get("providers") or doc.get("datasources")):
            problem(f"{path}: not a Grafana provisioning file (apiVersion 1, providers/datasources)")
    n = sum(1 for d in dashboards.values() for _ in queries_of(d))
    finish(f"dashboards: {len(dashboards)} dashboards, {n} queries, all metric names exported")


# ---------------------------------------------------------------- rules

def github_anchors(markdown):
    """Anchors GitHub generates for a Markdown file's headings."""
    anchors = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def cmd_rules(src):
    known = exported_metrics(src)
    rules_path = os.path.join(src, "deploy/prometheus/ballast.rules.yml")
    tests_path = os.path.join(src, "deploy/prometheus/ballast.rules.test.yml")
    with open(rules_path) as f:
        rules = yaml.safe_load(f)
    with open(tests_path) as f:
        tests = yaml.safe_load(f)
    with open(os.path.join(src, "docs/operations.md")) as f:
        anchors = github_anchors(f.read())
    alerts = []
    for group in rules.get("groups", []):
        for rule in group.get("rules", []):
            check_names(f"ballast.rules.yml {rule.get('alert') or rule.get('record')}",
                        rule["expr"], known)
            if "alert" not in rule:
                continue
            name = rule["alert"]
            alerts.append(name)
            ann = rule.get("annotations", {})
            for key in ("summary", "description", "runbook_url"):
                if not ann.get(key):
                    problem(f"ballast.rules.yml {name}: no {key} annotation")
            if "severity" not in rule.get("labels", {}):
                problem(f"ballast.rules.yml {name}: no severity label")
            url = ann.get("runbook_url", "")
            m = re.fullmatch(r"docs/operations\.md#([\w-]+)", url)
            if not m:
                problem(f"ballast.rules.yml {name}: runbook_url {url!r} is not "
                        "docs/operations.md#anchor")
            elif m.group(1) != name.lower():
                problem(f"ballast.rules.yml {name}: runbook anchor #{m.group(1)} should be "
                        f"#{name.lower()} (the alert's name)")
            elif m.group(1) not in anchors:
                problem(f"ballast.rules.yml {name}: docs/operations.md has no heading for "
                        f"#{m.group(1)} (add '### {name}' to the runbook)")
    if len(set(alerts)) != len(alerts):
        problem("ballast.rules.yml: an alert name is used twice")
    firing, silent = set(), set()
    for case in tests.get("tests", []):
        for t in case.get("alert_rule_test", []):
            (firing if t.get("exp_alerts") else silent).add(t["alertname"])
    for name in alerts:
        if name not in firing:
            problem(f"ballast.rules.test.yml: no case where alert {name} fires")
        if name not in silent:
            print(f"note: no case where {name} must stay silent", file=sys.stderr)
    for name in sorted((firing | silent) - set(alerts)):
        problem(f"ballast.rules.test.yml: tests alert {name}, which the rules do not define")
    finish(f"rules: {len(alerts)} alerts, each fires in a test case and has a runbook section")


# ---------------------------------------------------------------- metrics reference

def cmd_docs(src):
    """docs/operations.md's metrics reference lists every family the code registers, with
    its type, and nothing else."""
    families = metric_families(src)
    path = os.path.join(src, "docs/operations.md")
    with open(path) as f:
        text = f.read()
    m = re.search(r"^## Metrics reference\n(.*?)^## ", text, re.S | re.M)
    if not m:
        problem(f"{path}: no '## Metrics reference' section")
        finish("")
    documented = {}
    for row in re.finditer(r"^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \| (\w*) \|", m.group(1), re.M):
        documented.setdefault(row.group(1), set()).add(row.group(2))
    for name in sorted(set(families) - set(documented)):
        problem(f"{path}: the metrics reference does not list {name}, which the code exports")
    for name in sorted(set(documented) - set(families)):
        problem(f"{path}: the metrics reference lists {name}, which the code does not export "
                f"({', '.join(METRIC_SOURCES)})")
    for name in sorted(set(documented) & set(families)):
        kind = families[name].lower()
        if kind and documented[name] != {kind}:
            problem(f"{path}: the metrics reference gives {name} type "
                    f"{'/'.join(sorted(documented[name]))}, the code registers a {kind}")
    finish(f"docs: the metrics reference lists all {len(families)} metric families the code "
           "exports")


# ---------------------------------------------------------------- live Prometheus

def prom_get(url, path, params):
    q = urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def substitute(expr, values):
    # What Grafana does with its built-in intervals, for a 1s scrape interval.
    builtins = {"__rate_interval": "10s", "__interval": "2s", "__range": "1m"}
    out = expr
    for name, value in sorted({**builtins, **values}.items(), key=lambda kv: -len(kv[0])):
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    return out


def resolve_variables(url, dash, where):
    """Grafana's defaults: a single-value variable takes its first value (sorted), a
    multi/All one the All value. Fails when a variable's query finds nothing."""
    values = {}
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        name = v["name"]
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable_query(v).strip())
        if not m:
            return None, f"{where}: variable {name}: unsupported query"
        selector, label = substitute(m.group(1), values), m.group(2)
        series = prom_get(url, "/api/v1/series", {"match[]": selector,
                                                  "start": time.time() - 300})
        found = sorted({s[label] for s in series if label in s})
        if not found:
            return None, f"{where}: variable {name}: label_values({selector}, {label}) is empty"
        values[name] = v.get("allValue", ".*") if v.get("includeAll") else found[0]
    return values, None


def cmd_live(src, url, deadline_s):
    dashboards = load_dashboards(src)
    deadline = time.monotonic() + float(deadline_s)
    while True:
        missing = []
        for name, dash in dashboards.items():
            where = f"dashboard {dash.get('title')} ({name})"
            try:
                values, err = resolve_variables(url, dash, where)
            except Exception as e:  # Prometheus not answering yet
                values, err = None, f"{where}: {e}"
            if err:
                missing.append(err)
                continue
            for title, ref, expr in queries_of(dash):
                q = substitute(expr, values)
                try:
                    result = prom_get(url, "/api/v1/query", {"query": q})["result"]
                except Exception as e:
                    missing.append(f"{where} panel {title!r} {ref}: query failed: {e}: {q}")
                    continue
                if not result:
                    missing.append(f"{where} panel {title!r} {ref}: no data: {q}")
        # Rules evaluate against the same real series: none may error (many-to-many
        # matches, bad label joins show only here).
        try:
            for g in prom_get(url, "/api/v1/rules", {})["groups"]:
                for r in g["rules"]:
                    if r.get("health") not in ("ok", "unknown"):
                        missing.append(f"rule {r['name']}: health {r.get('health')}: "
                                       f"{r.get('lastError')}")
        except Exception as e:
            missing.append(f"rules API: {e}")
        if not missing:
            n = sum(1 for d in dashboards.values() for _ in queries_of(d))
            print(f"live: all {n} panel queries of {len(dashboards)} dashboards return data")
            return
        if time.monotonic() > deadline:
            for m in missing:
                problem(m)
            finish("")
        time.sleep(1)


# ---------------------------------------------------------------- flags

def binary_flags(binary):
    """{flag: default} of the binary's own flags (not abseil's), from --helpfull."""
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True).stdout
    flags, own = {}, False
    text = out.replace("\n      ", " ")
    for line in text.splitlines():
        m = re.match(r"\s+Flags from (.*):$", line)
        if m:
            own = "absl/" not in m.group(1)
            continue
        m = re.match(r"\s+--(\w+) \(.*\); default: (.*);$", line)
        if m and own:
            default = m.group(2)
            if default.startswith('"') and default.endswith('"'):
                default = default[1:-1]
            flags[m.group(1)] = default
    if not flags:
        problem(f"{binary} --helpfull listed no flags of its own")
    return flags


def flagfile_entries(path):
    """(flag, value, line) of the active --flag=value lines of an abseil flagfile."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.fullmatch(r"--(\w+)(?:=(.*))?", line)
            if not m:
                problem(f"{path}:{n}: not a --flag=value line: {line}")
                continue
            out.append((m.group(1), m.group(2) if m.group(2) is not None else "true", n))
    return out


def same_value(a, b):
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def cmd_flags(name, binary, files):
    """The reference flagfile (first FILE) lists every flag at its default; the other
    files (Kubernetes ConfigMaps, systemd units) may only use flags the binary has."""
    flags = binary_flags(binary)
    reference, others = files[0], files[1:]
    seen = {}
    for flag, value, line in flagfile_entries(reference):
        if flag not in flags:
            problem(f"{reference}:{line}: --{flag} is not a flag of {name}")
            continue
        if flag in seen:
            problem(f"{reference}:{line}: --{flag} set twice")
        seen[flag] = value
        if not same_value(value, flags[flag]):
            problem(f"{reference}:{line}: --{flag}={value} but {name}'s default is "
                    f"{flags[flag]!r} (the reference file lists defaults)")
    for flag in sorted(set(flags) - set(seen)):
        problem(f"{reference}: {name} flag --{flag} is not documented")
    for path in others:
        with open(path) as f:
            # Comments may mention other programs' options (systemctl enable --now).
            text = "\n".join(l for l in f.read().splitlines() if not l.strip().startswith("#"))
        for flag in sorted(set(re.findall(r"(?<![\w-])--([a-z][a-z0-9_]*)\b", text))):
            if flag != "flagfile" and flag not in flags:
                problem(f"{path}: --{flag} is not a flag of {name}")
    finish(f"flags: {name}: {len(flags)} flags, all documented at their defaults")


# ---------------------------------------------------------------- Kubernetes policy

def k8s_docs(src):
    kdir = os.path.join(src, "deploy/kubernetes")
    with open(os.path.join(kdir, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    docs = []
    for res in kust.get("resources", []):
        with open(os.path.join(kdir, res)) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    docs.append((res, doc))
    listed = set(kust.get("resources", []))
    for path in glob.glob(os.path.join(kdir, "*.yaml")):
        base = os.path.basename(path)
        if base != "kustomization.yaml" and base not in listed:
            problem(f"deploy/kubernetes/{base} is not listed in kustomization.yaml")
    return kust, docs


def cmd_k8s_policy(src):
    """What a schema cannot say: our conventions (labels, hardening, probes) and that the
    pieces point at each other (selectors, ports, volumes, ConfigMaps, Secrets)."""
    kust, docs = k8s_docs(src)
    required = ("app.kubernetes.io/name", "app.kubernetes.io/part-of",
                "app.kubernetes.io/component", "app.kubernetes.io/version")
    by_kind = {}
    for res, d in docs:
        kind, name = d.get("kind"), d.get("metadata", {}).get("name")
        where = f"{res} {kind}/{name}"
        by_kind.setdefault(kind, {})[name] = d
        labels = d.get("metadata", {}).get("labels", {})
        for key in required:
            if key not in labels:
                problem(f"{where}: no label {key}")
        if labels.get("app.kubernetes.io/part-of") != "ballast":
            problem(f"{where}: app.kubernetes.io/part-of should be ballast")
    for kind in ("StatefulSet", "Deployment", "DaemonSet"):
        for name, d in by_kind.get(kind, {}).items():
            where = f"{kind}/{name}"
            spec = d["spec"]
            tpl = spec["template"]
            sel = spec["selector"]["matchLabels"]
            tlabels = tpl["metadata"].get("labels", {})
            for k, v in sel.items():
                if tlabels.get(k) != v:
                    problem(f"{where}: selector {k}={v} does not match the pod template")
            for key in required:
                if key not in tlabels:
                    problem(f"{where}: pod template has no label {key}")
            pod = tpl["spec"]
            if pod.get("automountServiceAccountToken") is not False:
                problem(f"{where}: automountServiceAccountToken should be false (no API access)")
            psc = pod.get("securityContext", {})
            if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
                problem(f"{where}: pod seccompProfile should be RuntimeDefault")
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            for c in pod.get("initContainers", []) + pod.get("containers", []):
                cw = f"{where} container {c['name']}"
                sc = c.get("securityContext", {})
                if sc.get("readOnlyRootFilesystem") is not True:
                    problem(f"{cw}: readOnlyRootFilesystem should be true")
                if sc.get("allowPrivilegeEscalation") is not False:
                    problem(f"{cw}: allowPrivilegeEscalation should be false")
                if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                    problem(f"{cw}: should drop ALL capabilities")
                root_ok = c in pod.get("initContainers", []) and sc.get("runAsUser") == 0
                if not root_ok and (sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True):
                    problem(f"{cw}: runAsNonRoot should be true")
                if not c.get("resources", {}).get("limits", {}).get("memory"):
                    problem(f"{cw}: no memory limit")
                for vm in c.get("volumeMounts", []):
                    if vm["name"] not in volumes and not any(
                            t["metadata"]["name"] == vm["name"]
                            for t in spec.get("volumeClaimTemplates", [])):
                        problem(f"{cw}: mounts {vm['name']}, which is no volume")
                if c in pod.get("containers", []):
                    for probe in ("livenessProbe", "readinessProbe"):
                        if probe not in c:
                            problem(f"{cw}: no {probe}")
            for vname, v in volumes.items():
                cm = v.get("configMap", {}).get("name")
                if cm and cm not in by_kind.get("ConfigMap", {}):
                    problem(f"{where}: volume {vname} uses ConfigMap {cm}, which is not defined")
    # Services select pods that exist, on ports the containers declare.
    pods = [(n, d["spec"]["template"]) for k in ("StatefulSet", "Deployment", "DaemonSet")
            for n, d in by_kind.get(k, {}).items()]
    for name, svc in by_kind.get("Service", {}).items():
        sel = svc["spec"].get("selector", {})
        match = [(n, t) for n, t in pods
                 if all(t["metadata"]["labels"].get(k) == v for k, v in sel.items())]
        if not match:
            problem(f"Service/{name}: selector {sel} matches no pod template")
            continue
        ports = {p.get("name"): p["containerPort"] for _, t in match
                 for c in t["spec"]["containers"] for p in c.get("ports", [])}
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            if target not in ports and target not in ports.values():
                problem(f"Service/{name}: port {p.get('name')} targets {target}, which no "
                        "container declares")
    for name, sm in by_kind.get("ServiceMonitor", {}).items():
        sel = sm["spec"]["selector"].get("matchLabels", {})
        svcs = [s for s in by_kind.get("Service", {}).values()
                if all(s["metadata"]["labels"].get(k) == v for k, v in sel.items())]
        if not svcs:
            problem(f"ServiceMonitor/{name}: selects no Service")
        for ep in sm["spec"]["endpoints"]:
            if not any(p.get("name") == ep.get("port") for s in svcs for p in s["spec"]["ports"]):
                problem(f"ServiceMonitor/{name}: endpoint port {ep.get('port')} is on no "
                        "selected Service")
    finish(f"kubernetes policy: {len(docs)} objects follow the conventions and fit together")


# ---------------------------------------------------------------- systemd

SYSTEMD_SECTIONS = {"Unit", "Service", "Install"}


def cmd_systemd_parse(files):
    """A parse check for where systemd-analyze verify cannot run (no systemd as PID 1)."""
    for path in files:
        section = None
        keys = {}
        with open(path) as f:
            lines = f.read().replace("\\\n", " ").splitlines()
        for n, line in enumerate(lines, 1):
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            m = re.fullmatch(r"\[(\w+)\]", s)
            if m:
                section = m.group(1)
                if section not in SYSTEMD_SECTIONS:
                    problem(f"{path}:{n}: unknown section [{section}]")
                continue
            m = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)\s*=\s*(.*)", s)
            if not m or section is None:
                problem(f"{path}:{n}: not a Key=Value line inside a section: {s}")
                continue
            keys.setdefault(section, set()).add(m.group(1))
        for section, key in (("Unit", "Description"), ("Service", "ExecStart"),
                             ("Install", "WantedBy")):
            if key not in keys.get(section, set()):
                problem(f"{path}: [{section}] has no {key}=")
    finish(f"systemd: {len(files)} unit files parse")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "metrics":
        print("\n".join(sorted(exported_metrics(args[0]))))
    elif cmd == "dashboards":
        cmd_dashboards(args[0])
    elif cmd == "rules":
        cmd_rules(args[0])
    elif cmd == "docs":
        cmd_docs(args[0])
    elif cmd == "live":
        cmd_live(args[0], args[1], args[2])
    elif cmd == "flags":
        cmd_flags(args[0], args[1], args[2:])
    elif cmd == "k8s-policy":
        cmd_k8s_policy(args[0])
    elif cmd == "systemd-parse":
        cmd_systemd_parse(args)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
