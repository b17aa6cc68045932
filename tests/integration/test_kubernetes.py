"""The Kubernetes manifests: the PrometheusRule is the shipped rules file (one source),
and the DaemonSet reaches every GPU without taking one from the device plugin."""
import subprocess

import yaml

from deploy_support import KUBERNETES_DIR, RULES_FILE, require_tool


def manifests():
    docs = {}
    for path in sorted(KUBERNETES_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


def test_prometheusrule_is_generated_from_the_rules_file():
    r = subprocess.run([str(KUBERNETES_DIR / "gen-prometheusrule.sh"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    rule = manifests()[("PrometheusRule", "xferd")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())


def test_prometheusrule_spec_passes_promtool(tmp_path):
    tool = require_tool("promtool")
    spec = manifests()[("PrometheusRule", "xferd")]["spec"]
    extracted = tmp_path / "rules.yml"
    extracted.write_text(yaml.safe_dump(spec))
    r = subprocess.run([tool, "check", "rules", str(extracted)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_generator_notices_drift(tmp_path):
    # Copy the tree the script works on, change a rule, and expect --check to fail.
    (tmp_path / "kubernetes").mkdir()
    (tmp_path / "prometheus").mkdir()
    script = tmp_path / "kubernetes/gen-prometheusrule.sh"
    script.write_text((KUBERNETES_DIR / "gen-prometheusrule.sh").read_text())
    script.chmod(0o755)
    (tmp_path / "kubernetes/prometheusrule.yaml").write_text(
        (KUBERNETES_DIR / "prometheusrule.yaml").read_text())
    (tmp_path / "prometheus/xferd.rules.yml").write_text(
        RULES_FILE.read_text().replace("for: 10m", "for: 11m", 1))
    r = subprocess.run([str(script), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "out of date" in r.stderr


def test_daemonset_sees_gpus_without_requesting_one():
    ds = manifests()[("DaemonSet", "xferd")]
    pod = ds["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
    # The node's name on xferd_gpu_info (Hostname), as dcgm-exporter's DaemonSet labels its
    # series: a pod's host name is the pod's.
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    for section in ("requests", "limits"):
        assert not any(k.startswith("nvidia.com/") for k in c["resources"].get(section, {})), \
            "a GPU request would take a GPU out of the device plugin's pool"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_service_and_servicemonitor_select_the_pods():
    docs = manifests()
    labels = docs[("DaemonSet", "xferd")]["spec"]["template"]["metadata"]["labels"]
    svc = docs[("Service", "xferd")]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    (port,) = svc["spec"]["ports"]
    container_ports = {p["name"]: p["containerPort"]
                       for p in docs[("DaemonSet", "xferd")]["spec"]["template"]["spec"]
                       ["containers"][0]["ports"]}
    assert port["targetPort"] in container_ports
    sm = docs[("ServiceMonitor", "xferd")]
    assert all(svc["metadata"]["labels"].get(k) == v
               for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"][0]["port"] == port["name"]


def test_every_namespaced_object_is_in_the_xferd_namespace():
    for (kind, name), doc in manifests().items():
        if kind != "Namespace":
            assert doc["metadata"].get("namespace") == "xferd", f"{kind}/{name}"


def test_node_problem_detector_monitor_covers_every_explaining_cause():
    import json
    import re
    from deploy_support import XFERD_BINARY
    path = KUBERNETES_DIR / "node-problem-detector/xferd-monitor.yaml"
    (cm,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    monitor = json.loads(cm["data"]["xferd-monitor.json"])
    assert monitor["plugin"] == "custom"
    assert monitor["pluginConfig"]["max_output_length"] == 80
    (condition,) = monitor["conditions"]
    assert condition["type"] == "XferdBandwidthDegraded"
    rules = monitor["rules"]
    # One permanent rule for the condition: several would overwrite each other's reason.
    permanent = [r for r in rules if r["type"] == "permanent"]
    assert len(permanent) == 1 and permanent[0]["condition"] == condition["type"]
    assert "--cause" not in permanent[0]["args"]
    # A per-cause event for every cause xferd names that explains a low reading (what
    # `xferd health --cause` accepts, less below_band and below_baseline, and less the
    # notes: causes that are not a fault raise no event).
    r = subprocess.run([str(XFERD_BINARY), "health", "--cause", "?"], capture_output=True,
                       text=True, timeout=30)
    names = re.search(r"use one of (.*?); notes", r.stdout.strip()).group(1).split(", ")
    explaining = set(names) - {"below_band", "below_baseline"}
    by_cause = {}
    for rule in rules:
        if rule["type"] == "temporary":
            cause = rule["args"][rule["args"].index("--cause") + 1]
            by_cause[cause] = rule["reason"]
    assert set(by_cause) == explaining
    for cause, reason in by_cause.items():
        assert reason == "Xferd" + "".join(w.capitalize() for w in cause.split("_")), reason
    # Every rule runs the bundle the patch mounts, within the plugin's timeout.
    patch = yaml.safe_load((KUBERNETES_DIR / "node-problem-detector/daemonset-patch.yaml")
                           .read_text())
    pod = patch["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][-1] == "/opt/xferd/"
    (npd,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in npd["volumeMounts"]}
    assert mounts["xferd-health"] == "/opt/xferd"
    assert {v["name"] for v in pod["volumes"]} == set(mounts)
    config = [v for v in pod["volumes"] if v["name"] == "xferd-monitor"][0]
    assert config["configMap"]["name"] == cm["metadata"]["name"]
    # The health socket first: xferd's state directory (its hostPath) mounted into NPD's pod
    # at the same path, where xferd serves <state_dir>/health.sock.
    xferd_pod = manifests()[("DaemonSet", "xferd")]["spec"]["template"]["spec"]
    state = [v for v in xferd_pod["volumes"] if v["name"] == "state"][0]["hostPath"]["path"]
    (xferd,) = xferd_pod["containers"]
    assert {m["name"]: m["mountPath"] for m in xferd["volumeMounts"]}["state"] == state
    shared = [v for v in pod["volumes"] if v.get("hostPath", {}).get("path") == state]
    assert len(shared) == 1, "NPD's pod mounts xferd's state directory"
    assert mounts[shared[0]["name"]] == state
    for rule in rules:
        assert rule["path"] == "/opt/xferd/lib/ld.so"
        assert rule["args"][:3] == ["--library-path", "/opt/xferd/lib", "/opt/xferd/xferd"]
        assert rule["args"][rule["args"].index("--socket") + 1] == state + "/health.sock"
        url = rule["args"][rule["args"].index("--url") + 1]
        assert url == "http://xferd-local.xferd.svc:9742", url


def test_the_node_local_service_reaches_only_this_nodes_pod():
    docs = manifests()
    svc = docs[("Service", "xferd-local")]
    assert svc["spec"]["internalTrafficPolicy"] == "Local"
    assert svc["spec"].get("clusterIP") != "None"
    labels = docs[("DaemonSet", "xferd")]["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    (port,) = svc["spec"]["ports"]
    assert port["port"] == 9742 and port["targetPort"] == "metrics"
