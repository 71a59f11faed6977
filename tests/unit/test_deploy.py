"""deploy/: every manifest validated offline against schemas, and cross-checked with the repo.

Core kinds use the Kubernetes schemas shipped in `kubernetes-validate`; custom resources use the
reduced schemas vendored in deploy/schemas/. Ports, sizes, paths and archive names are read from
config.properties, never written down here.
"""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
SCHEMAS = DEPLOY / "schemas"
KUBERNETES_VERSION = "1.30.0"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
    ("ray.io/v1", "RayService"): "rayservice-ray-v1.json",
}


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = _module(DEPLOY / "container" / "healthcheck.py")


def properties(text: str) -> dict[str, str]:
    """A Java properties text parsed by the container's one reader (healthcheck.properties)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.properties"
        path.write_text(text)
        return healthcheck.properties(path)


BASE_TEXT = (ROOT / "config.properties").read_text()
BASE = properties(BASE_TEXT)
MANIFESTS = sorted(K8S.glob("*.yaml"))


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1].strip("/"))


def _host(address: str) -> str:
    return address.split("://", 1)[1].rsplit(":", 1)[0]


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all_docs() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for p in MANIFESTS for d in _docs(p)}


DOCS = _all_docs()
DEPLOYMENT = DOCS["Deployment", "video-torchserve"]
POD = DEPLOYMENT["spec"]["template"]["spec"]
CONTAINERS = {c["name"]: c for c in POD["containers"]}
PROXY_CONF = DOCS["ConfigMap", "video-torchserve-auth-proxy"]["data"]["video.conf.template"]
ADAPTER = yaml.safe_load(DOCS["ConfigMap", "video-torchserve-adapter-rules"]["data"]["config.yaml"])
DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
MODELS = json.loads(BASE["models"])
ARCHIVES = BASE["load_models"].split(",")


def _overlaid(overlay: Path) -> dict[str, str]:
    return properties(BASE_TEXT + "\n" + overlay.read_text())


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_is_valid_against_its_schema(path):
    docs = _docs(path)
    assert docs, f"{path} holds no manifest"
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        if key in CRD_SCHEMAS:
            schema = json.loads((SCHEMAS / CRD_SCHEMAS[key]).read_text())
            jsonschema.validate(doc, schema, cls=jsonschema.Draft7Validator)
        else:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_rejects_a_broken_manifest():
    broken = json.loads(json.dumps(DOCS["PodMonitor", "video-torchserve"]))
    broken["spec"]["podMetricsEndpoints"][0]["interval"] = "five seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, json.loads((SCHEMAS / CRD_SCHEMAS["monitoring.coreos.com/v1",
                                                                      "PodMonitor"]).read_text()))
    deployment = json.loads(json.dumps(DEPLOYMENT))
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_adapter_rules_are_valid_and_serve_the_metrics_the_hpa_uses():
    jsonschema.validate(ADAPTER, json.loads((SCHEMAS / "prometheus-adapter-config.json").read_text()))
    served = {rule["name"]["as"] for rule in ADAPTER["rules"]}
    hpa = DOCS["HorizontalPodAutoscaler", "video-torchserve"]
    wanted = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    assert wanted <= served, f"HPA metrics {wanted - served} are not served by the adapter rules"
    assert hpa["spec"]["scaleTargetRef"]["name"] == DEPLOYMENT["metadata"]["name"]
    # Every series the rules query is declared in the metrics YAML TorchServe loads.
    declared = set(re.findall(r"name: (\w+)", (ROOT / BASE["metrics_config"]).read_text()))
    queried = {name for rule in ADAPTER["rules"]
               for name in re.findall(r"\b((?:ts|video)_\w+)\{", rule["metricsQuery"] + rule["seriesQuery"])}
    assert queried and queried <= declared, queried - declared


def test_the_hpa_scales_before_the_queue_latency_alert_fires():
    alerts = ROOT / "monitoring" / "alerts.yml"
    [rule] = [r for g in yaml.safe_load(alerts.read_text())["groups"] for r in g["rules"]
              if r.get("alert") == "TorchServeQueueLatencyHigh"]
    alert_ms = float(re.search(r">\s*([0-9.e+]+)\s*$", rule["expr"].strip())[1]) / 1000
    hpa = DOCS["HorizontalPodAutoscaler", "video-torchserve"]
    [target] = [m["pods"]["target"]["averageValue"] for m in hpa["spec"]["metrics"]
                if m["pods"]["metric"]["name"] == "video_queue_latency_ms"]
    assert float(target) < alert_ms


def test_the_prometheus_rule_carries_the_alerts_of_monitoring_alerts_yml():
    alerts = ROOT / "monitoring" / "alerts.yml"
    source = yaml.safe_load(alerts.read_text())["groups"]
    rule = DOCS["PrometheusRule", "video-torchserve"]["spec"]["groups"]

    def names(groups):
        return [(r["alert"], r["expr"].strip()) for g in groups for r in g["rules"]]

    assert names(rule) == names(source), "run deploy/kubernetes/gen_prometheusrule.py"
    assert rule == source, "run deploy/kubernetes/gen_prometheusrule.py"


def test_the_docker_overlay_only_opens_the_inference_and_metrics_addresses():
    overlay = properties((DEPLOY / "container" / "docker.properties").read_text())
    assert set(overlay) == {"inference_address", "metrics_address"}
    effective = _overlaid(DEPLOY / "container" / "docker.properties")
    for key in overlay:
        assert _port(effective[key]) == _port(BASE[key]) and _host(effective[key]) == "0.0.0.0"
    assert {k: v for k, v in effective.items() if k not in overlay} == \
        {k: v for k, v in BASE.items() if k not in overlay}
    assert effective["disable_token_authorization"] == "false"
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", DOCKERFILE, re.M)[1].split()}
    assert exposed == {_port(BASE["inference_address"]), _port(BASE["metrics_address"])}


def test_the_image_keeps_the_repo_layout_config_and_archive_names():
    assert "COPY --chown=model-server:model-server config.properties ./config.properties" in DOCKERFILE
    assert f"handler/metrics.yaml ./{BASE['metrics_config']}" in DOCKERFILE
    assert f"/build/model_store/ ./{BASE['model_store']}/" in DOCKERFILE
    assert sorted(re.findall(r"test -f model_store/(\S+\.mar)", DOCKERFILE)) == sorted(ARCHIVES)
    archive_sh = (ROOT / "archive.sh").read_text()
    assert sorted(f"{n}.mar" for n in re.findall(r"^\s*package (\w+) ", archive_sh, re.M)) == sorted(ARCHIVES)
    assert sorted(v["1.0"]["marName"] for v in MODELS.values()) == sorted(ARCHIVES)
    assert re.search(r"FROM pytorch/torchserve:\$\{TORCHSERVE_VERSION\}-\$\{VARIANT\}", DOCKERFILE)
    assert "ARG TORCHSERVE_VERSION=0.12.0" in DOCKERFILE and "pyyaml" in DOCKERFILE
    assert re.search(r"^USER model-server$", DOCKERFILE, re.M) and "HEALTHCHECK" in DOCKERFILE
    for overlay in re.findall(r"deploy/container/(\w+\.properties)", DOCKERFILE):
        assert (DEPLOY / "container" / overlay).is_file()


def test_the_pod_uses_the_kubernetes_overlay_and_the_repo_ports():
    torchserve, proxy = CONTAINERS["torchserve"], CONTAINERS["auth-proxy"]
    env = {e["name"]: e for e in torchserve["env"]}
    overlay_file = DEPLOY / "container" / f"{env['VIDEO_TS_OVERLAY']['value']}.properties"
    effective = _overlaid(overlay_file)
    # Inference stays on loopback behind the proxy; only metrics open; token check moves to proxy.
    assert effective["inference_address"] == BASE["inference_address"]
    assert _host(BASE["inference_address"]) == "127.0.0.1"
    assert effective["management_address"] == BASE["management_address"]
    assert _host(effective["metrics_address"]) == "0.0.0.0"
    assert effective["disable_token_authorization"] == "true"
    ports = {p["name"]: p["containerPort"] for c in POD["containers"] for p in c.get("ports", [])}
    assert ports["metrics"] == _port(BASE["metrics_address"])
    assert f"server 127.0.0.1:{_port(BASE['inference_address'])};" in PROXY_CONF
    assert f"listen {ports['http']};" in PROXY_CONF
    assert ports["http"] not in {_port(BASE[k]) for k in ("inference_address", "management_address")}
    assert f"client_max_body_size {BASE['max_request_size']};" in PROXY_CONF
    timeout = max(v["responseTimeout"] for m in MODELS.values() for v in m.values())
    assert int(re.search(r"proxy_read_timeout (\d+)s;", PROXY_CONF)[1]) > timeout
    assert POD["terminationGracePeriodSeconds"] > timeout
    # The token comes from a Secret, and reaches the template the proxy renders.
    assert proxy["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "video-inference-token"
    assert "${" + proxy["env"][0]["name"] + "}" in PROXY_CONF
    # One GPU per replica; probes run the image's /ping check.
    for kind in ("requests", "limits"):
        assert str(torchserve["resources"][kind]["nvidia.com/gpu"]) == "1"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert torchserve[probe]["exec"]["command"] == ["/usr/local/bin/video-healthcheck"]
    assert "/usr/local/bin/video-healthcheck" in DOCKERFILE
    assert POD["securityContext"]["runAsNonRoot"] is True


def test_the_gpu_image_and_pod_get_the_video_driver_libraries_and_the_jpeg_decoder():
    # Without `video` in the capabilities the container has no libnvcuvid: NVDEC cannot open.
    pod = {e["name"]: e.get("value") for e in CONTAINERS["torchserve"]["env"]}
    assert set(pod["NVIDIA_DRIVER_CAPABILITIES"].split(",")) >= {"compute", "utility", "video"}
    assert "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility,video" in DOCKERFILE
    assert "simplejpeg>=1.7" in _image_installs()[0]  # the JPEG-into-pinned-slot path runs in the image


def _image_installs() -> list[list[str]]:
    """The requirements of each `python -m pip install` of the image's base stage, in order."""
    base = DOCKERFILE.split(" AS base", 1)[1].split("\nFROM ", 1)[0]
    return [re.findall(r'"([^"]+)"', command.split("&& python -c", 1)[0])
            for command in re.findall(r"^RUN python -m pip install --no-cache-dir (.*?)(?:\n(?! )|$)",
                                      base.replace("\\\n", " "), re.M | re.S)]


def test_the_image_installs_the_base_install_and_the_ingest_extra_exactly_as_pyproject_lists_them():
    """TorchServe and torch come with the base image; the rest of the base install serves the handler
    and video-keys, the ingest extra video-ingest: nothing a command of the image does not run."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    in_base_image = ("torch>=", "torchserve==", "torch-model-archiver==")
    base = [r for r in project["dependencies"] if not r.startswith(in_base_image)]
    assert _image_installs() == [base, project["optional-dependencies"]["ingest"]]


def test_service_podmonitor_and_networkpolicy_point_at_the_pod_ports():
    labels = DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
    service = DOCS["Service", "video-torchserve"]
    assert service["spec"]["selector"].items() <= labels.items()
    [port] = service["spec"]["ports"]
    assert port["port"] == _port(BASE["inference_address"]) and port["targetPort"] == "http"
    monitor = DOCS["PodMonitor", "video-torchserve"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    names = {p["name"] for c in POD["containers"] for p in c.get("ports", [])}
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= names
    policy = DOCS["NetworkPolicy", "video-torchserve"]
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == names


def test_the_healthcheck_reads_the_effective_ports(tmp_path):
    text = BASE_TEXT + "\n" + (DEPLOY / "container" / "docker.properties").read_text()
    (tmp_path / "config.properties").write_text(text)
    parsed = healthcheck.properties(tmp_path / "config.properties")
    assert healthcheck.local(parsed["inference_address"]) == \
        f"http://127.0.0.1:{_port(BASE['inference_address'])}"
    assert healthcheck.expired({"expiration time": "2000-01-01T00:00:00.123456789Z"})
    assert not healthcheck.expired({"expiration time": "2999-01-01T00:00:00Z"})


def test_the_auth_proxy_configuration_is_accepted_by_nginx(tmp_path):
    if not (shutil.which("nginx") and shutil.which("envsubst")):
        pytest.fail("needs nginx and envsubst: apt-get install nginx-light gettext-base (.ci/run does)")
    rendered = subprocess.run(["envsubst", "${INFERENCE_TOKEN}"], input=PROXY_CONF, text=True,
                              capture_output=True, check=True, env={"INFERENCE_TOKEN": "t0ken"}).stdout
    (tmp_path / "video.conf").write_text(rendered)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{ client_body_temp_path {tmp_path}/b; proxy_temp_path {tmp_path}/p;\n"
        f"include {tmp_path}/video.conf; }}\n")
    result = subprocess.run(["nginx", "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert '"Bearer t0ken" 1;' in rendered


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Upstream(http.server.BaseHTTPRequestHandler):
    """TorchServe's stand-in: answers 200 and records what reached it."""

    seen: list[tuple[str, str, str | None, bytes]] = []

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def auth_proxy(tmp_path):
    """The auth proxy's nginx configuration, rendered with a token, in front of a stub upstream:
    `(send(method, path, token) -> (status, body), requests the upstream saw)`."""
    if not (shutil.which("nginx") and shutil.which("envsubst")):
        pytest.fail("needs nginx and envsubst: apt-get install nginx-light gettext-base (.ci/run does)")
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    listen = _free_port()
    rendered = subprocess.run(["envsubst", "${INFERENCE_TOKEN}"], input=PROXY_CONF, text=True,
                              capture_output=True, check=True, env={"INFERENCE_TOKEN": "t0ken"}).stdout
    assert rendered.count("listen 8090;") == 1 and rendered.count("server 127.0.0.1:8080;") == 1
    rendered = rendered.replace("listen 8090;", f"listen 127.0.0.1:{listen};").replace(
        "server 127.0.0.1:8080;", f"server 127.0.0.1:{upstream.server_address[1]};")
    (tmp_path / "video.conf").write_text(rendered)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{ access_log off; client_body_temp_path {tmp_path}/b; proxy_temp_path {tmp_path}/p;\n"
        f"include {tmp_path}/video.conf; }}\n")
    nginx = subprocess.Popen(["nginx", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path),
                              "-g", "daemon off; master_process off;"], stderr=subprocess.PIPE)
    _Upstream.seen = []

    def send(method: str, path: str, token: str | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", listen, timeout=30)
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        connection.request(method, path, body=b"frame" if method == "POST" else None, headers=headers)
        response = connection.getresponse()
        answer = (response.status, json.loads(response.read()))
        connection.close()
        return answer

    try:
        for _ in range(300):  # until nginx listens (or has exited)
            if nginx.poll() is not None:
                pytest.fail(f"nginx exited: {nginx.stderr.read().decode()}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", listen)) == 0:
                    break
            time.sleep(0.05)
        yield send, _Upstream.seen
    finally:
        nginx.terminate()
        nginx.wait(timeout=30)
        upstream.shutdown()
        upstream.server_close()


@pytest.mark.parametrize("path", ["/predictions/frame_quality", "/predictions/frame_quality/1.0",
                                  "/v2/models/x/infer", "/v2/models/frame_quality/versions/1/infer"])
def test_the_auth_proxy_forwards_inference_paths_with_the_token_only(auth_proxy, path):
    send, seen = auth_proxy
    assert send("POST", path, "t0ken") == (200, {})
    assert seen == [("POST", path, None, b"frame")]  # the token is not passed on
    for token in (None, "wrong", ""):
        status, body = send("POST", path, token)
        assert (status, body["code"], body["type"]) == (401, 401, "Unauthorized")
    assert len(seen) == 1


def test_the_auth_proxy_serves_ping_and_refuses_other_paths(auth_proxy):
    send, seen = auth_proxy
    assert send("GET", "/ping") == (200, {})
    for path in ("/models", "/v2/health/ready", "/v2", "/metrics", "/predictionsx/m"):
        status, body = send("GET", path, "t0ken")
        assert (status, body["type"]) == (404, "NotFound"), path
        assert "/v2/models/{model}/infer" in body["message"]
    assert [s[1] for s in seen] == ["/ping"]


# video-ingest (docs/ingest.md): the StatefulSet, its camera list, its Secret, its metrics.
INGEST = DOCS["StatefulSet", "video-ingest"]
INGEST_POD = INGEST["spec"]["template"]["spec"]
[INGEST_CONTAINER] = INGEST_POD["containers"]
INGEST_ARGS = dict(a.removeprefix("--").split("=", 1) for a in INGEST_CONTAINER["args"])


def test_the_ingest_shard_is_the_pod_index_and_counts_the_replicas():
    from ingest.shard import Shard

    env = {e["name"]: e for e in INGEST_CONTAINER["env"]}
    assert env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    index, count = INGEST_ARGS["shard"].split("/")
    assert index == "$(POD_INDEX)" and int(count) == INGEST["spec"]["replicas"]
    for k in range(int(count)):
        assert Shard.parse(f"{k}/{count}")
    assert INGEST["spec"]["serviceName"] == DOCS["Service", "video-ingest"]["metadata"]["name"]
    assert DOCS["Service", "video-ingest"]["spec"]["clusterIP"] == "None"


def test_the_ingest_camera_list_parses_with_the_secret_as_its_environment():
    from ingest import config

    volumes = {v["name"]: v for v in INGEST_POD["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in INGEST_CONTAINER["volumeMounts"]}
    directory, _, file = INGEST_ARGS["config"].rpartition("/")
    configmap = DOCS["ConfigMap", volumes[mounts[directory]]["configMap"]["name"]]
    [secret_ref] = INGEST_CONTAINER["envFrom"]
    secret = DOCS["Secret", secret_ref["secretRef"]["name"]]
    cameras = config.parse(yaml.safe_load(configmap["data"][file]), file, environ=secret["stringData"])
    assert [c.name for c in cameras] == ["gate-1", "gate-2", "lobby", "dock"]
    used = set(re.findall(r"\$\{(\w+)\}", configmap["data"][file]))
    assert used == set(secret["stringData"])  # every ${VAR} has its key, no key is unused
    assert all("change-me" not in c.display_url for c in cameras)


def test_ingest_sends_to_the_torchserve_service_with_the_proxy_token():
    service = DOCS["Service", "video-torchserve"]
    [port] = service["spec"]["ports"]
    assert INGEST_ARGS["url"] == f"http://{service['metadata']['name']}:{port['port']}"
    volumes = {v["name"]: v for v in INGEST_POD["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in INGEST_CONTAINER["volumeMounts"]}
    directory, _, key = INGEST_ARGS["token-file"].rpartition("/")
    proxy = CONTAINERS["auth-proxy"]
    token = proxy["env"][0]["valueFrom"]["secretKeyRef"]
    assert volumes[mounts[directory]]["secret"]["secretName"] == token["name"] and key == token["key"]
    assert INGEST_ARGS["model"] in MODELS


def test_ingest_runs_from_the_image_and_exposes_the_metrics_the_podmonitor_scrapes():
    assert INGEST_CONTAINER["command"] == ["video-ingest"]
    assert "/usr/local/bin/video-ingest" in DOCKERFILE and "COPY ingest/" in DOCKERFILE
    # with jemalloc (installed, and preloaded by the wrapper): glibc's malloc lets its memory creep
    [wrapper] = re.findall(r"^RUN printf '#!/bin/sh\\n(.*?)\\n' > /usr/local/bin/video-ingest", DOCKERFILE, re.M)
    assert wrapper.startswith("LD_PRELOAD=libjemalloc.so.2 ") and "exec python -m ingest.cli" in wrapper
    assert re.search(r"apt-get install [^&]*\blibjemalloc2\b", DOCKERFILE)
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for copied in re.findall(r"^COPY (?:--\S+ )*(\w+)/ ", DOCKERFILE, re.M):
        assert f"!{copied}/" in ignore, f"{copied}/ is copied but not in the build context"
    [port] = INGEST_CONTAINER["ports"]
    assert port["containerPort"] == int(INGEST_ARGS["metrics-port"]) and INGEST_ARGS["metrics-address"] == "0.0.0.0"
    monitor = DOCS["PodMonitor", "video-ingest"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= INGEST["spec"]["template"]["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == [port["name"]]
    assert INGEST_POD["terminationGracePeriodSeconds"] > 10  # the bridge's clean exit takes at most 10 s
    assert INGEST_POD["securityContext"]["runAsNonRoot"] is True



# The Ray way (docs/scaling.md): the RayService, its NetworkPolicy and PodMonitor, its alerts.
RAY = DOCS["RayService", "video-ray"]
RAY_CLUSTER = RAY["spec"]["rayClusterConfig"]
RAY_GROUPS = [RAY_CLUSTER["headGroupSpec"], *RAY_CLUSTER["workerGroupSpecs"]]
[RAY_WORKERS] = RAY_CLUSTER["workerGroupSpecs"]
SERVE = yaml.safe_load(RAY["spec"]["serveConfigV2"])
RAY_APPS = {app["name"]: app for app in SERVE["applications"]}
RAY_DOORS = RAY_APPS.pop("video")  # the rest: one application per model
IMAGE_HOME = re.search(r"^WORKDIR (/home/model-server)$", DOCKERFILE, re.M)[1]
RESPONSE_TIMEOUT = max(v["responseTimeout"] for m in MODELS.values() for v in m.values())


def _ray_container(group: dict) -> dict:
    [container] = group["template"]["spec"]["containers"]
    return container


def test_the_ray_pods_are_valid_pods_and_the_schema_refuses_a_broken_rayservice():
    for group in RAY_GROUPS:
        template = group["template"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ray", **template["metadata"]},
               "spec": template["spec"]}
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    schema = json.loads((SCHEMAS / CRD_SCHEMAS["ray.io/v1", "RayService"]).read_text())
    for path, value in ((("spec", "rayClusterConfig", "workerGroupSpecs", 0, "minReplicas"), "one"),
                        (("spec", "rayClusterConfig", "headGroupSpec", "rayStartParams", "num-cpus"), 0),
                        (("spec", "serveConfig"), "typo"), (("spec", "serveConfigV2"), {"applications": []})):
        broken = json.loads(json.dumps(RAY))
        node = broken
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema, cls=jsonschema.Draft7Validator)


def test_the_serve_config_is_valid_for_ray_and_serves_the_repo_archives():
    from ray.serve.schema import ServeDeploySchema

    from rayserve import app
    from rayserve.plan import ARGS, app_name

    ServeDeploySchema.model_validate(SERVE)  # Ray's own schema for `serve deploy` / serveConfigV2
    assert RAY_DOORS["import_path"] == "rayserve.app:doors" and RAY_DOORS["route_prefix"] == "/"
    assert callable(app.doors) and callable(app.model)
    # One application per archive of load_models, as rayserve.deploy.config writes them: its model's
    # name, route and builder, and an override naming the deployment model() makes (Serve refuses
    # the app otherwise).
    names = {name for name, versions in MODELS.items()
             for v in versions.values() if v["marName"] in ARCHIVES}
    assert set(RAY_APPS) == {app_name(name) for name in names} and len(names) == len(ARCHIVES)
    for each in RAY_APPS.values():
        model = each["args"]["model"]
        assert each["name"] == app_name(model) and each["route_prefix"] == f"/predictions/{model}"
        assert each["import_path"] == "rayserve.app:model" and [d["name"] for d in each["deployments"]] == [model]
    for args in [RAY_DOORS["args"], *(each["args"] for each in RAY_APPS.values())]:
        assert set(args) <= ARGS
        # The image's copies of config.properties and the archives (deploy/Dockerfile).
        assert args["config"] == f"{IMAGE_HOME}/config.properties"
        assert args["model_store"] == f"{IMAGE_HOME}/{BASE['model_store']}"


def test_the_ray_http_address_ports_and_timeouts_agree():
    http = SERVE["http_options"]
    assert http["host"] == "0.0.0.0" and SERVE["proxy_location"] == "EveryNode"
    for group in RAY_GROUPS:
        ports = {p["name"]: p["containerPort"] for p in _ray_container(group)["ports"]}
        assert ports["serve"] == http["port"]  # KubeRay's serve Service targets this port
        assert ports["metrics"] == int(group["rayStartParams"]["metrics-export-port"])
    head_ports = {p["name"]: p["containerPort"] for p in _ray_container(RAY_CLUSTER["headGroupSpec"])["ports"]}
    assert head_ports["dashboard"] == 8265 and RAY_CLUSTER["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    assert http["request_timeout_s"] > RESPONSE_TIMEOUT
    assert RAY_WORKERS["template"]["spec"]["terminationGracePeriodSeconds"] > RESPONSE_TIMEOUT
    assert RAY_CLUSTER["rayVersion"].startswith("2.60")


def test_the_ray_ingress_reads_its_key_from_the_inference_token_secret():
    [key_file] = {each["args"]["key_file"] for each in [RAY_DOORS, *RAY_APPS.values()]}
    directory, _, file = key_file.rpartition("/")
    token_secret = CONTAINERS["auth-proxy"]["env"][0]["valueFrom"]["secretKeyRef"]["name"]
    for group in RAY_GROUPS:  # the ingress may run on any node
        spec = group["template"]["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in _ray_container(group)["volumeMounts"]}
        secret = volumes[mounts[directory]]["secret"]
        assert secret["secretName"] == token_secret
        assert {item["path"]: item["key"] for item in secret["items"]}[file] == "key_file.json"
        assert spec["securityContext"]["runAsNonRoot"] is True


def test_the_ray_ingress_follows_a_kubelet_rotation_of_the_mounted_key(tmp_path):
    from rayserve.gate import Keys

    # kubelet's layout for a Secret volume: the file is a link into ..data, itself a link that
    # is swapped atomically to a new timestamped folder when the Secret changes.
    def publish(name: str, key: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "key_file.json").write_text(json.dumps({"inference": {"key": key}}))
        os.symlink(name, tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    publish("..2026_01_01", "old-token")
    os.symlink("..data/key_file.json", tmp_path / "key_file.json")
    keys = Keys(str(tmp_path / "key_file.json"))
    assert keys.accepts("old-token") and not keys.accepts("new-token") and not keys.accepts(None)
    publish("..2026_02_01", "new-token-with-another-length")
    assert keys.accepts("new-token-with-another-length") and not keys.accepts("old-token")


def test_one_replica_of_every_model_fits_one_gpu_worker_and_none_runs_on_the_head():
    options = [d["ray_actor_options"] for each in RAY_APPS.values() for d in each["deployments"]]
    resources = _ray_container(RAY_WORKERS)["resources"]
    assert sum(o["num_gpus"] for o in options) <= int(resources["limits"]["nvidia.com/gpu"])
    assert sum(o["num_cpus"] for o in options) <= float(resources["limits"]["cpu"])
    assert all(o["num_gpus"] > 0 for o in options)
    assert RAY_CLUSTER["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert RAY_WORKERS["minReplicas"] <= RAY_WORKERS["replicas"] <= RAY_WORKERS["maxReplicas"]
    env = {e["name"]: e.get("value") for e in _ray_container(RAY_WORKERS).get("env", [])}
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) >= {"compute", "utility", "video"}


def test_the_ray_network_policy_fences_ray_ports_to_the_cluster():
    labels = RAY_CLUSTER["headGroupSpec"]["template"]["metadata"]["labels"]
    for group in RAY_GROUPS:
        assert group["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == labels["app.kubernetes.io/name"]
    policy = DOCS["NetworkPolicy", "video-ray"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    opened = {}
    for rule in policy["spec"]["ingress"]:
        ports = tuple(sorted(p["port"] for p in rule.get("ports", [])))
        if not ports:  # every port: only from this cluster's own pods
            assert rule["from"] == [{"podSelector": policy["spec"]["podSelector"]}]
        opened[ports] = rule.get("from")
    assert set(opened) == {(), ("dashboard",), ("serve",), ("metrics",)}
    assert opened[("serve",)] is None  # the ingress checks the token
    assert opened[("metrics",)] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert opened[("dashboard",)] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "kuberay-operator"}}}]
    names = {p["name"] for group in RAY_GROUPS for p in _ray_container(group)["ports"]}
    assert {"dashboard", "serve", "metrics"} <= names


def test_the_ray_podmonitor_and_prometheus_rule_match_the_pods_and_alerts_ray_yml():
    monitor = DOCS["PodMonitor", "video-ray"]
    for group in RAY_GROUPS:
        assert monitor["spec"]["selector"]["matchLabels"].items() <= group["template"]["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and int(endpoint["interval"].rstrip("s")) <= 5
    alerts = yaml.safe_load((ROOT / "monitoring" / "alerts_ray.yml").read_text())["groups"]
    assert DOCS["PrometheusRule", "video-ray"]["spec"]["groups"] == alerts, "run monitoring/gen_alerts_ray.py"
