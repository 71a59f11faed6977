"""tskeys: reading key_file.json, the retry-once rule, and the rotator against a simulated TorchServe."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tskeys import (
    Key,
    KeyFileError,
    is_grpc_invalid_key,
    is_invalid_key,
    read_key,
    read_key_file,
)
from tskeys.keyfile import parse_expiration
from tskeys.rotate import Policy, Rotator
from tskeys.settings import Settings, read_properties

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
REFUSED = (400, b'{"code": 400, "type": "InvalidKeyException", "message": "Token Authorization failed."}')


def _write(path: Path, inference: str = "inf1", management: str = "man1", api: str = "api1",
           expires: datetime = T0) -> None:
    stamp = expires.strftime("%Y-%m-%dT%H:%M:%S.123456789Z")
    path.write_text(json.dumps({"management": {"key": management, "expiration time": stamp},
                                "inference": {"key": inference, "expiration time": stamp},
                                "API": {"key": api}}))


def test_reads_every_key_and_java_instants_with_nanoseconds(tmp_path):
    path = tmp_path / "key_file.json"
    _write(path)
    keys = read_key_file(path)
    assert (keys.inference.key, keys.management.key, keys.api.key) == ("inf1", "man1", "api1")
    assert keys.inference.expires == T0.replace(microsecond=123456)
    assert keys.api.expires is None
    assert read_key(path, "management") == "man1"
    assert parse_expiration("2026-11-30T08:10:05Z") == datetime(2026, 11, 30, 8, 10, 5, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match="not an ISO-8601"):
        parse_expiration("tomorrow")


def test_missing_or_broken_file_names_the_file(tmp_path):
    with pytest.raises(KeyFileError, match="missing.json"):
        read_key(tmp_path / "missing.json", settle_s=0)
    (tmp_path / "bad.json").write_text('{"inference": {}}')
    with pytest.raises(KeyFileError, match="bad.json"):
        read_key(tmp_path / "bad.json", settle_s=0)
    with pytest.raises(ValueError, match="key kind 'admin'"):
        Key(tmp_path / "bad.json", kind="admin")


def test_a_file_that_appears_while_being_read_is_waited_for(tmp_path):
    path = tmp_path / "key_file.json"
    path.write_text("")  # TorchServe truncates before it writes
    writer = threading.Timer(0.2, _write, (path,))
    writer.start()
    assert read_key(path, settle_s=30) == "inf1"
    writer.join()


def test_invalid_key_answers_are_recognised():
    assert is_invalid_key(*REFUSED)
    assert is_invalid_key(400, REFUSED[1].decode())
    assert not is_invalid_key(400, b'{"code": 400, "type": "CorruptFrame"}')
    assert not is_invalid_key(200, REFUSED[1])

    class Code:
        name = "CANCELLED"

    details = "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
    assert is_grpc_invalid_key(Code(), details) and is_grpc_invalid_key("PERMISSION_DENIED", details)
    assert not is_grpc_invalid_key(Code(), "call already cancelled")
    assert not is_grpc_invalid_key("UNAVAILABLE", details)


def test_call_retries_once_with_the_key_re_read_from_the_file(tmp_path):
    path = tmp_path / "key_file.json"
    _write(path, inference="old")
    key = Key(path)
    _write(path, inference="new")
    sent = []

    def send(value):
        sent.append(value)
        return REFUSED if value == "old" else (200, b"ok")

    assert key.call(send, lambda a: is_invalid_key(*a)) == (200, b"ok")
    assert sent == ["old", "new"] and key.value() == "new"
    assert key.headers() == {"Authorization": "Bearer new"}
    assert key.metadata("x") == (("authorization", "Bearer x"),)
    # Refused twice: no third try.
    sent.clear()
    assert key.call(lambda v: sent.append(v) or REFUSED, lambda a: is_invalid_key(*a)) == REFUSED
    assert len(sent) == 2


def test_refresh_waits_for_torchserve_to_write_the_key_it_already_swapped(tmp_path):
    path = tmp_path / "key_file.json"
    _write(path, inference="old")
    key = Key(path)
    writer = threading.Timer(0.3, _write, (path,), {"inference": "new"})
    writer.start()
    assert key.refresh(refused="old", wait_s=30) == "new"
    writer.join()
    # A sender whose key was refused after another sender already picked up the new one.
    assert key.refresh(refused="old", wait_s=30) == "new"
    # An expired key with nothing rotating it: returned after the wait, no error.
    assert key.refresh(refused="new", wait_s=0.05) == "new"
    fixed = Key(token="t")
    assert fixed.refresh(refused="t") == "t" and Key().headers() == {}


def test_settings_from_config_properties(tmp_path):
    config = tmp_path / "config.properties"
    config.write_text("inference_address=http://0.0.0.0:8080\nmanagement_address=http://127.0.0.1:9081/\n"
                      "models={\\\n  \"a\": 1}\ntoken_expiration_min=1\ntoken_expiration_min=2\n")
    assert read_properties(config)["models"] == '{"a": 1}'
    settings = Settings.read(config)
    assert settings == Settings("http://127.0.0.1:8080", "http://127.0.0.1:9081", 120.0, True)
    assert Settings.from_properties({"disable_token_authorization": "true"}).token_auth is False
    assert Settings.from_properties({}).lifetime_s == 3600
    with pytest.raises(ValueError, match="token_expiration_min = '0'"):
        Settings.from_properties({"token_expiration_min": "0"})


class FakeTorchServe:
    """TorchServe 0.12's key behaviour: one key per kind, replaced at once, file rewritten."""

    def __init__(self, path: Path, clock: list[float], lifetime_s: float = 60.0, wall_skew_s: float = 0.0) -> None:
        self.path, self.clock, self.lifetime_s, self.skew = path, clock, lifetime_s, wall_skew_s
        self.up = True
        self.issued = 0
        self.calls: list[tuple[str, str]] = []
        self.start()

    def start(self) -> None:
        self.api = f"api{self.clock[0]}"
        self.keys = {kind: self._issue(kind) for kind in ("inference", "management")}
        self._write()

    def _issue(self, kind: str) -> tuple[str, float]:
        self.issued += 1
        return f"{kind}-{self.issued}", self.clock[0] + self.lifetime_s

    def _write(self) -> None:
        def stamp(expiry: float) -> str:
            return (T0 + timedelta(seconds=expiry + self.skew)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

        self.path.write_text(json.dumps({kind: {"key": k, "expiration time": stamp(e)}
                                         for kind, (k, e) in self.keys.items()} | {"API": {"key": self.api}}))

    def valid(self, kind: str, key: str) -> bool:
        value, expiry = self.keys[kind]
        return key == value and self.clock[0] < expiry

    def http(self, method: str, url: str, key: str):
        if not self.up:
            return None
        self.calls.append((method, url.split("/", 3)[3]))
        if "/token?type=" in url:
            if key != self.api:
                return REFUSED
            kind = url.rsplit("=", 1)[1]
            self.keys[kind] = self._issue(kind)
            self._write()
            return 200, b"\n"
        kind = "inference" if url.endswith("/ping") else "management"
        return (200, b"{}") if self.valid(kind, key) else REFUSED


def _rotator(tmp_path, lifetime_s=60.0, skew_s=0.0):
    clock = [0.0]
    server = FakeTorchServe(tmp_path / "key_file.json", clock, lifetime_s, skew_s)
    rotator = Rotator(server.path, Settings("http://i", "http://m", lifetime_s), Policy.for_lifetime(lifetime_s),
                      http=server.http, clock=lambda: clock[0],
                      wall=lambda: T0 + timedelta(seconds=clock[0]))
    return clock, server, rotator


def _run(clock, rotator, until_s, step_s):
    renewals = []
    while clock[0] < until_s:
        renewals += [(clock[0], kind) for kind in rotator.check()]
        clock[0] += step_s
    return renewals


def test_rotator_renews_each_key_at_half_its_life_so_the_file_always_holds_valid_keys(tmp_path):
    clock, server, rotator = _rotator(tmp_path)
    checked = []
    while clock[0] < 300:
        rotator.check()
        keys = read_key_file(server.path)
        checked.append(server.valid("inference", keys.inference.key) and server.valid("management", keys.management.key))
        clock[0] += rotator.policy.check_s
    assert rotator.policy.check_s == 3.0 and all(checked)
    tokens = [path for method, path in server.calls if method == "POST"]
    # Renewed at 30, 60, ... s: management first, so the inference rewrite is the last one.
    assert tokens == ["token?type=management", "token?type=inference"] * 9
    assert rotator.renewals == 18


def test_rotator_waits_out_a_restart_and_takes_the_new_keys_as_fresh(tmp_path):
    clock, server, rotator = _rotator(tmp_path)
    assert _run(clock, rotator, 20, 3) == []
    server.up = False
    server.path.unlink()  # TorchServe deletes the file at stop
    assert _run(clock, rotator, 40, 3) == []
    server.up = True
    server.start()  # new keys, new API key
    # Fresh keys from the restart at 42 s are renewed 30 s later, not at the old schedule.
    assert _run(clock, rotator, 80, 3) == [(72.0, "management"), (72.0, "inference")]


def test_rotator_renews_at_once_a_key_torchserve_refuses(tmp_path):
    _clock, server, rotator = _rotator(tmp_path)
    server.keys["inference"] = ("someone-else", 1e9)  # the file still holds the old key
    assert rotator.check() == ["inference"]
    assert server.valid("inference", read_key(server.path))


def test_a_skewed_torchserve_clock_causes_no_renewal_storm(tmp_path):
    # TorchServe's clock runs 10 min behind: every expiry it writes looks long past.
    clock, _server, rotator = _rotator(tmp_path, skew_s=-600)
    renewals = _run(clock, rotator, 120, 3)
    # Once after min age (6 s) for the keys it found, then on its own schedule only.
    assert [t for t, kind in renewals if kind == "inference"] == [6.0, 36.0, 66.0, 96.0]


def test_policy_checks_its_values():
    assert Policy.for_lifetime(3600).check_s == 15.0 and Policy.for_lifetime(3600).renew_after_s == 1800
    with pytest.raises(ValueError, match="renew_at = 1.5"):
        Policy(60, 1.5)
    with pytest.raises(ValueError, match="lifetime"):
        Policy(0)


def test_video_keys_stops_cleanly_on_sigterm(tmp_path):
    import signal
    import subprocess
    import sys

    config = tmp_path / "config.properties"
    config.write_text("management_address=http://127.0.0.1:9\ninference_address=http://127.0.0.1:9\n"
                      "token_expiration_min=1\n")
    pid_file = tmp_path / "keys.pid"
    process = subprocess.Popen([sys.executable, "-m", "tskeys.rotate", "--config", str(config),
                                "--key-file", str(tmp_path / "key_file.json"), "--pid-file", str(pid_file)],
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert int(pid_file.read_text()) == process.pid
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0 and not pid_file.exists()
    assert "waiting for" in err and "key_file.json" in err and "stopped after 0 renewals" in err
