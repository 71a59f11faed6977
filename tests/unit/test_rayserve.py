"""Ray Serve's glue without a cluster: TorchServe's settings mapped to Serve's, the warnings for the
rest, the archives a properties file names, the items the ingress rebuilds from HTTP, the key."""

import asyncio
import json
import os
import time

import pytest
import yaml
from starlette.requests import Request

from rayserve import wire
from rayserve.archive import Archive, ArchiveError, Properties, Settings, replica_limit
from rayserve.gate import Keys
from rayserve.node import keep_loopback


def test_settings_map_to_serve_options_one_to_one():
    settings = Settings.of({"batchSize": 32, "maxBatchDelay": 50, "minWorkers": 2, "maxWorkers": 2,
                            "responseTimeout": 90, "deviceType": "gpu"}, "x.mar")
    options = settings.deployment_options(queue=100, num_cpus=0.5)
    # The replica refuses past 2 x 32 + 100 itself, with TorchServe's JSON; Serve's bounds stay above.
    assert replica_limit(32, 100) == 164
    assert options == {"max_ongoing_requests": 328, "max_queued_requests": 100, "num_replicas": 2,
                       "ray_actor_options": {"num_cpus": 0.5, "num_gpus": 1},
                       "user_config": {"batch_size": 32, "max_batch_delay_ms": 50.0}}
    assert settings.response_timeout_s == 90 and settings.warnings("m") == []


def test_workers_that_differ_autoscale_and_defaults_are_torchserves():
    options = Settings.of({"minWorkers": 1, "maxWorkers": 3, "batchSize": 4}, "x.mar").deployment_options(10, 1)
    assert options["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 4}
    assert "num_replicas" not in options and options["max_ongoing_requests"] == 2 * (8 + 10)
    default = Settings.of({}, "x.mar")
    assert (default.batch_size, default.max_batch_delay_ms, default.min_workers, default.response_timeout_s,
            default.gpu) == (1, 100, 1, 120, False)
    assert default.deployment_options(10, 1)["max_ongoing_requests"] == 2 * (5 + 10)  # at least 5, as Serve's


def test_every_setting_without_a_ray_meaning_is_named():
    settings = Settings.of({"batchSize": 8, "sequenceBatching": True, "maxNumSequence": 4, "myKnob": 1}, "x.mar")
    assert settings.warnings("cam") == [
        "cam: sequenceBatching has no Ray Serve meaning and is ignored (TorchServe's stream lane (gRPC "
        "StreamPredictions2); Ray batches requests only)",
        "cam: maxNumSequence has no Ray Serve meaning and is ignored (sequence batching)",
        "cam: myKnob has no Ray Serve meaning and is ignored (not a Ray Serve setting)"]


@pytest.mark.parametrize(("entry", "message"), [
    ({"batchSize": "lots"}, "batchSize = 'lots' is not a number"),
    ({"batchSize": 0}, "batchSize must be >= 1"),
    ({"minWorkers": 3, "maxWorkers": 2}, "0 <= minWorkers <= maxWorkers"),
])
def test_bad_settings_fail_naming_the_key(entry, message):
    with pytest.raises(ArchiveError, match=message):
        Settings.of(entry, "x.mar")


def _mar(folder, name, config):
    import zipfile

    path = folder / f"{name}.mar"
    with zipfile.ZipFile(path, "w") as mar:
        mar.writestr("MAR-INF/MANIFEST.json", json.dumps({"model": {
            "modelName": name, "serializedFile": f"{name}.pt", "modelVersion": "2.0", "configFile": "c.yaml"}}))
        mar.writestr("c.yaml", yaml.safe_dump(config))
    return path


def test_the_archives_yaml_wins_over_config_properties_and_load_models_picks(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    _mar(store, "a", {"batchSize": 16, "handler": {"model_max_batch": 4}})
    _mar(store, "b", {})
    props = tmp_path / "config.properties"
    props.write_text(f"model_store={store}\nload_models=a.mar\njob_queue_size=7\n"
                     'models={"a": {"1.0": {"defaultVersion": true, "batchSize": 2, "maxBatchDelay": 9}}}\n')
    read = Properties.read(props)
    [archive] = read.archives()
    assert (archive.name, archive.version, read.job_queue_size) == ("a", "2.0", 7)
    settings = archive.settings(read.entries["a"])
    assert (settings.batch_size, settings.max_batch_delay_ms) == (16, 9)  # YAML's batchSize, models=' delay
    assert [a.name for a in read.archives(("b", "a"))] == ["b", "a"]
    with pytest.raises(ArchiveError, match=r"no archive for c in .* \(it holds a, b\): run ./archive.sh"):
        read.archives(("c",))
    (store / "broken.mar").write_bytes(b"not a zip")
    with pytest.raises(ArchiveError, match="broken.mar: not a model archive"):
        Archive.read(store / "broken.mar")


def _request(path, body, headers):
    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    return Request(scope, receive)


def _item(path, body, headers, predictions=True):
    async def run():
        request = _request(path, body, headers)
        return await wire.item(request, await request.body(), predictions)

    return asyncio.run(run())


def test_a_body_arrives_as_torchserve_hands_it():
    item, headers = _item("/predictions/m", b"\xff\xd8jpeg", {"Content-Type": "image/jpeg", "X-Frame-Id": "7"})
    assert item == {"body": b"\xff\xd8jpeg"}
    assert headers == {"body": {"content-type": "image/jpeg"}, "content-type": "image/jpeg", "x-frame-id": "7",
                       "url_path": "/predictions/m"}
    item, headers = _item("/v2/models/m/infer", b'{"inputs": []}', {"Content-Type": "application/json"},
                          predictions=False)
    assert item == {"body": {"inputs": []}} and "url_path" not in headers
    item, _ = _item("/predictions/m", b"{broken", {"Content-Type": "application/json"})
    assert item == {"body": b"{broken"}  # TorchServe forwards what does not parse


def test_a_form_keeps_the_first_place_and_last_value_of_a_repeated_name():
    boundary = "b0"
    parts = [("data", "a.jpg", "image/jpeg", b"first"), ("stream_id", None, None, b"cam-2"),
             ("data", "b.jpg", "image/png", b"second"), ("next", "c.jpg", "image/jpeg", b"third")]
    body = b""
    for name, filename, kind, value in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        body += (f"Content-Type: {kind}\r\n" if kind else "").encode() + b"\r\n" + value + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    item, headers = _item("/predictions/m", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert list(item.items()) == [("data", b"second"), ("stream_id", b"cam-2"), ("next", b"third")]
    assert headers["data"] == {"content-type": "image/png"} and headers["stream_id"] == {"content-type": ""}


def test_the_key_is_read_again_when_the_file_changes(tmp_path):
    path = tmp_path / "key_file.json"
    path.write_text(json.dumps({"inference": {"key": "one"}}))
    keys = Keys(str(path))
    assert keys.accepts("one") and not keys.accepts("two") and not keys.accepts(None)
    path.write_text(json.dumps({"inference": {"key": "two-longer"}}))
    os.utime(path, ns=(1, 1))  # a rewrite within the same clock tick still changes size or time
    assert keys.accepts("two-longer") and not keys.accepts("one")
    path.unlink()
    assert not keys.accepts("two-longer")  # no file: every request refused, never let through
    assert Keys(None).accepts(None)  # token authorization off by the operator
    assert wire.bearer({"authorization": "Bearer  abc "}) == "abc" and wire.bearer({"authorization": "Basic x"}) is None


def test_drivers_and_nodes_keep_a_loopback_address(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    from ray._private import services

    original = services.resolve_ip_for_localhost
    try:
        keep_loopback()
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
        assert os.environ["RAY_AUTH_MODE"] == "token"
        from ray._private.authentication.authentication_token_setup import AuthenticationTokenLoader

        assert AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)  # made the first time
    finally:
        services.resolve_ip_for_localhost = original


def test_stop_takes_only_the_node_start_made_and_its_children(tmp_path):
    """`video-ray stop` stops the processes that name its session or its GCS address, and their
    children, never another Ray on the machine (`ray stop` would stop them all)."""
    import subprocess
    import sys

    import psutil

    from rayserve.node import stop_session

    parent = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = [subprocess.Popen([sys.executable, "-c", parent, "--session-name=session_ours"]),
            subprocess.Popen([*sleep, "--gcs-address=127.0.0.1:6390"])]
    theirs = [subprocess.Popen([*sleep, "--session-name=session_theirs"]),
              subprocess.Popen([*sleep, "--address=127.0.0.1:16390"])]
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(ours[0].pid).children():  # its child has started
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [child] = psutil.Process(ours[0].pid).children()
        assert stop_session("session_ours", "127.0.0.1:6390", grace_s=5) == 3
        for process in ours:
            process.wait(timeout=10)  # (stop_session reaped them: their status is gone with it)
        assert not child.is_running()
        assert [p.poll() for p in theirs] == [None, None]
    finally:
        for process in ours + theirs:
            process.kill()
            process.wait()


def test_the_state_keeps_the_started_node_across_tunings(tmp_path):
    from rayserve import deploy

    state = tmp_path / "video-ray.json"
    assert deploy.started_node(state) is None
    deploy.save({"config": "c"}, {}, state, node={"session": "session_x", "address": "127.0.0.1:6390"})
    deploy.save({"config": "c"}, {"m": {"batch_size": 4}}, state)  # what `tune` writes
    assert deploy.started_node(state) == {"session": "session_x", "address": "127.0.0.1:6390"}
    assert deploy.load(state) == ({"config": "c"}, {"m": {"batch_size": 4}})
    assert deploy.deployed_to(state) is None
    # `start --address`: no node of its own, and the cluster `tune` and `stop` find again
    deploy.save({"config": "c"}, {}, tmp_path / "joined.json", address="192.0.2.2:6379")
    deploy.save({"config": "c"}, {"m": {"batch_size": 2}}, tmp_path / "joined.json")
    assert deploy.started_node(tmp_path / "joined.json") is None
    assert deploy.deployed_to(tmp_path / "joined.json") == "192.0.2.2:6379"


#: TorchServe 0.12's bytes for a refused key, as a real one answered (`curl -H "Authorization: Bearer wrong"`).
TORCHSERVE_INVALID_KEY = (b'{\n  "code": 400,\n  "type": "InvalidKeyException",\n  "message": "Token Authorization '
                          b'failed. Token either incorrect, expired, or not provided correctly"\n}\n')


def test_the_engines_own_answers_are_torchserves_bytes():
    assert wire.invalid_key().body.encode() == TORCHSERVE_INVALID_KEY
    assert wire.model_not_found("nope").body == ('{\n  "code": 404,\n  "type": "ModelNotFoundException",\n  '
                                                 '"message": "Model not found: nope"\n}\n')
    assert wire.healthy().body == '{\n  "status": "Healthy"\n}\n'
    assert wire.too_large() == wire.Answer(413, "")  # TorchServe's 413 has no body
    # Gson escapes HTML's characters, and leaves other non-ASCII as it is.
    assert wire.torchserve_json({"m": "a=b 'c' <d> & é"}) == '{\n  "m": "a\\u003db \\u0027c\\u0027 \\u003cd\\u003e \\u0026 é"\n}\n'


def test_a_relative_model_store_is_the_properties_folders_wherever_it_is_read(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "model_store").mkdir(parents=True)
    _mar(project / "model_store", "a", {})
    (project / "config.properties").write_text("model_store=model_store\nload_models=all\n")
    monkeypatch.chdir(tmp_path)  # elsewhere, as Serve's controller on the head is
    read = Properties.read(project / "config.properties")
    assert read.store == project / "model_store" and [a.name for a in read.archives()] == ["a"]
    assert Properties.read(project / "config.properties", tmp_path / "other").store == tmp_path / "other"


def test_the_extras_an_archive_needs_come_from_its_model_file(tmp_path, capsys):
    from rayserve.plan import extras

    store = tmp_path / "store"
    store.mkdir()
    _mar(store, "a", {})
    (tmp_path / "config.properties").write_text(f"model_store={store}\nload_models=all\n")
    assert extras({"config": str(tmp_path / "config.properties")}) == []
    import zipfile

    with zipfile.ZipFile(store / "d.mar", "w") as mar:
        mar.writestr("MAR-INF/MANIFEST.json", json.dumps({"model": {"modelName": "d", "serializedFile": "d.onnx"}}))
    assert extras({"config": str(tmp_path / "config.properties")}) == ["onnx"]
    assert extras({"config": str(tmp_path / "config.properties"), "models": ["a"]}) == []
    from rayserve import cli

    assert cli.main(["extras", "--config", str(tmp_path / "config.properties")]) == 0  # what serve.sh installs
    assert capsys.readouterr().out == "onnx\n"


def _nodes(*cpus):
    from rayserve.cluster import Node

    return [Node(f"10.0.0.{i}", {"CPU": float(c), "memory": 1e9, f"node:10.0.0.{i}": 1.0}) for i, c in enumerate(cpus)]


def test_the_node_joined_is_the_one_on_this_machine_whatever_its_address():
    from rayserve.cluster import JoinError, Node, local_node

    nodes = [Node("192.0.2.7", {}), Node("192.0.2.2", {}), Node("127.0.0.1", {})]
    assert local_node("h:1", nodes, local={"127.0.0.1", "192.0.2.2"}) == "192.0.2.2"
    with pytest.raises(JoinError, match=r"has no node on this machine \(its nodes: 192.0.2.7\): run video-ray on one "
                                        r"of them \(the head\), or make this machine a node first: `ray start "
                                        r"--address h:1`"):
        local_node("h:1", nodes[:1], local={"127.0.0.1"})


def test_replicas_that_no_node_holds_are_named_with_the_cpus_that_would_fit():
    """The issue's cluster: a head without CPUs and two workers of 2; five archives of one replica."""
    from rayserve.cluster import JoinError, check_room, unplaced
    from rayserve.plan import Demand

    five = [Demand(f"m{i}", 1, {"CPU": 1.0}) for i in range(5)] + [Demand("doors", 1, {})]
    nodes = _nodes(0, 2, 2)
    assert unplaced(five, nodes) == {"m4": 1}
    with pytest.raises(JoinError) as refused:
        check_room(five, nodes, replica_cpus=1.0)
    assert str(refused.value) == (
        "the replicas do not all fit on the cluster's nodes, no room for: m4 (1 of 1). They ask for m0 1 x 1 CPU, "
        "m1 1 x 1 CPU, m2 1 x 1 CPU, m3 1 x 1 CPU, m4 1 x 1 CPU, doors 1 x nothing (5 CPU in all); the nodes have "
        "10.0.0.0: 0 CPU, 10.0.0.1: 2 CPU, 10.0.0.2: 2 CPU. Fix: --replica-cpus 0.66 fits every replica (now 1); "
        "add nodes, lower minWorkers, or serve fewer models (--models a,b)")
    check_room([Demand(d.name, 1, {"CPU": 0.66} if d.resources else {}) for d in five], nodes, 0.66)
    assert unplaced([Demand("m", 3, {"CPU": 1.5})], _nodes(2, 2)) == {"m": 1}  # one replica a node, never split


def test_a_gpu_replica_on_a_cluster_without_gpus_says_so():
    from rayserve.cluster import JoinError, check_room
    from rayserve.plan import Demand

    with pytest.raises(JoinError, match="deviceType: gpu holds a GPU and the nodes have 0"):
        check_room([Demand("m", 1, {"CPU": 1.0, "GPU": 1.0})], _nodes(4), replica_cpus=1.0)


def test_joining_nothing_says_so_at_once():
    from rayserve.cluster import JoinError, nodes_at

    with pytest.raises(JoinError, match=r"no Ray cluster answers at 127.0.0.1:1 .*leave out --address"):
        nodes_at("127.0.0.1:1")
    with pytest.raises(JoinError, match="is not HOST:PORT"):
        nodes_at("ray-head")
