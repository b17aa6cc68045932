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
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
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
