"""`video-keys`: keeps TorchServe's `key_file.json` holding valid keys, by renewing them early.

TorchServe 0.12 issues a new inference or management key on `POST :8081/token?type=...` with the
never-expiring `API` key and rewrites `key_file.json`; the key it replaces is refused from that
instant (it keeps no old key), and every key dies `token_expiration_min` after it was issued.
So this renews each key once `--renew-at` of its lifetime has passed (half, by default), which
leaves the other half as margin for a TorchServe that is restarting or busy. Producers keep their
key until it is refused, then re-read the file and retry once (`tskeys.keyfile.Key.call`).

How old a key is comes from this process's monotonic clock (from when it issued or first saw the
key), so a wall clock that jumps does not matter; a key first seen here is also judged by the
expiry TorchServe wrote, but never renewed within `--min-age` of being seen (a skewed clock then
cannot cause a renewal storm). Each check also sends the keys once (`/ping`, `/models`): a key
that is refused is renewed at once. A key file that is absent or unreadable (TorchServe stopped or
restarting), or a management port that does not answer, is waited out and logged once.

Stops cleanly on SIGTERM or SIGINT (exit status 0).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tskeys.keyfile import (
    KeyEntry,
    KeyFile,
    KeyFileError,
    is_invalid_key,
    read_key_file,
)
from tskeys.settings import Settings

logger = logging.getLogger("tskeys.rotate")

KINDS = ("management", "inference")  # inference last: its rewrite is the one producers re-read


@dataclass(frozen=True, slots=True)
class Policy:
    """When keys are renewed.

    Attributes:
        lifetime_s: how long TorchServe lets a key live (`token_expiration_min` * 60).
        renew_at: renew once this fraction of the lifetime has passed (0 < renew_at < 1).
        check_s: seconds between checks.
        min_age_s: a key seen for less than this is renewed only if TorchServe refuses it.
    """

    lifetime_s: float
    renew_at: float = 0.5
    check_s: float = 0.0
    min_age_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.lifetime_s > 0:
            raise ValueError(f"lifetime = {self.lifetime_s} s: use more than 0")
        if not 0 < self.renew_at < 1:
            raise ValueError(f"renew_at = {self.renew_at}: use a fraction between 0 and 1, e.g. 0.5")
        if self.check_s < 0 or self.min_age_s < 0:
            raise ValueError("check_s and min_age_s must not be negative")

    @classmethod
    def for_lifetime(cls, lifetime_s: float, renew_at: float = 0.5) -> Policy:
        """Checks 20 times per lifetime (1 to 15 s apart); min age: a tenth of the lifetime."""
        return cls(lifetime_s, renew_at, min(15.0, max(1.0, lifetime_s / 20)), lifetime_s / 10)

    @property
    def renew_after_s(self) -> float:
        return self.lifetime_s * self.renew_at


@dataclass(frozen=True, slots=True)
class Seen:
    """A key as this process knows it: when it was first seen (monotonic) and whether it issued it."""

    key: str
    since: float
    issued_here: bool


# (method, url, key) -> (status, body); None when the server did not answer.
Http = Callable[[str, str, str], "tuple[int, bytes] | None"]


def urllib_http(method: str, url: str, key: str, timeout_s: float = 10.0) -> tuple[int, bytes] | None:
    """One request with `Authorization: Bearer key`; None when nothing answered."""
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, OSError):
        return None


class Rotator:
    """Renews the keys of one TorchServe; `check()` is one pass, `run()` loops until stopped."""

    def __init__(self, key_file: Path, settings: Settings, policy: Policy, http: Http = urllib_http,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.key_file = Path(key_file)
        self.settings = settings
        self.policy = policy
        self._http = http
        self._clock = clock
        self._wall = wall
        self._seen: dict[str, Seen] = {}
        self._waiting: str | None = None  # what we last logged as waiting for (logged once)
        self.renewals = 0

    def check(self) -> list[str]:
        """One pass: renews what is due; returns the kinds renewed."""
        try:
            keys = read_key_file(self.key_file, settle_s=0.5)
        except KeyFileError:
            self._wait_for(f"{self.key_file} (TorchServe not started, stopped or restarting)")
            return []
        renewed = []
        for kind in KINDS:
            entry = keys.entry(kind)
            seen = self._observe(kind, entry)
            reason = self._due(kind, entry, seen)
            if reason and self._renew(kind, keys, reason):
                renewed.append(kind)
                keys = self._reread() or keys
        return renewed

    def run(self, stop: threading.Event) -> None:
        """Checks every `policy.check_s` seconds until `stop` is set."""
        logger.info("renewing the keys of %s every %.0f s of their %.0f s lifetime (checks every %.1f s)",
                    self.key_file, self.policy.renew_after_s, self.policy.lifetime_s, self.policy.check_s)
        while not stop.is_set():
            try:
                self.check()
            except Exception:  # one bad pass must not end key renewal for the deployment
                logger.exception("key check failed; trying again in %.1f s", self.policy.check_s)
            stop.wait(self.policy.check_s)
        logger.info("stopped after %d renewals", self.renewals)

    def _observe(self, kind: str, entry: KeyEntry) -> Seen:
        seen = self._seen.get(kind)
        if seen is None or seen.key != entry.key:
            seen = self._seen[kind] = Seen(entry.key, self._clock(), False)
            logger.info("found a new %s key (TorchServe says it expires at %s)", kind, _stamp(entry.expires))
        return seen

    def _due(self, kind: str, entry: KeyEntry, seen: Seen) -> str | None:
        """Why `kind`'s key must be renewed now, or None."""
        age = self._clock() - seen.since
        if age >= self.policy.renew_after_s:
            return f"{age:.0f} s old"
        if not seen.issued_here and entry.expires is not None and age >= self.policy.min_age_s:
            left = (entry.expires - self._wall()).total_seconds()
            if left <= self.policy.lifetime_s - self.policy.renew_after_s:
                return f"{left:.0f} s left by TorchServe's clock"
        if self._refused(kind, entry.key):
            return "TorchServe refused it"
        return None

    def _refused(self, kind: str, key: str) -> bool:
        url = (f"{self.settings.inference_url}/ping" if kind == "inference"
               else f"{self.settings.management_url}/models?limit=1")
        answer = self._http("GET", url, key)
        if answer is None:
            self._wait_for(f"TorchServe at {url}")
            return False
        self._answered()
        return is_invalid_key(*answer)

    def _renew(self, kind: str, keys: KeyFile, reason: str) -> bool:
        url = f"{self.settings.management_url}/token?type={kind}"
        answer = self._http("POST", url, keys.api.key)
        if answer is None:
            self._wait_for(f"TorchServe's management API at {self.settings.management_url}")
            return False
        self._answered()
        status, body = answer
        if status != 200:
            # 400 InvalidKeyException here: TorchServe restarted since the file was read (new API key).
            logger.warning("renewing the %s key (%s): %s %s", kind, reason, status,
                           body[:200].decode("utf-8", "replace").strip())
            return False
        fresh = self._reread()
        entry = fresh.entry(kind) if fresh else None
        if entry is None or entry.key == keys.entry(kind).key:
            logger.warning("renewed the %s key (%s) but %s does not show a new one yet", kind, reason,
                           self.key_file)
            return False
        self._seen[kind] = Seen(entry.key, self._clock(), True)
        self.renewals += 1
        logger.info("renewed the %s key (%s); the new one expires at %s, renewal due in %.0f s",
                    kind, reason, _stamp(entry.expires), self.policy.renew_after_s)
        return True

    def _reread(self) -> KeyFile | None:
        try:
            return read_key_file(self.key_file)
        except KeyFileError:
            return None

    def _wait_for(self, what: str) -> None:
        if self._waiting != what:
            logger.warning("waiting for %s", what)
            self._waiting = what

    def _answered(self) -> None:
        if self._waiting is not None:
            logger.info("TorchServe answers again")
            self._waiting = None


def _stamp(when: datetime | None) -> str:
    return "never" if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="video-keys", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=Path("config.properties"),
                   help="TorchServe's config.properties: addresses and token_expiration_min (default %(default)s)")
    p.add_argument("--key-file", type=Path, default=Path("key_file.json"),
                   help="the key_file.json in TorchServe's working directory (default %(default)s)")
    p.add_argument("--renew-at", type=float, default=0.5,
                   help="renew a key once this fraction of its lifetime has passed (default %(default)s)")
    p.add_argument("--check-s", type=float, help="seconds between checks (default: lifetime / 20, 1 to 15 s)")
    p.add_argument("--pid-file", type=Path, help="write this process's id here (removed at exit)")
    p.add_argument("--once", action="store_true", help="one check, then exit (0: nothing failed)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s video-keys: %(message)s")
    try:
        settings = Settings.read(args.config)
        policy = Policy.for_lifetime(settings.lifetime_s, args.renew_at)
        if args.check_s is not None:
            policy = Policy(policy.lifetime_s, policy.renew_at, args.check_s, policy.min_age_s)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    if not settings.token_auth:
        logger.info("token authorization is off in %s: no keys to renew", args.config)
        return 0
    rotator = Rotator(args.key_file, settings, policy)
    if args.once:
        rotator.check()
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.pid_file:
        args.pid_file.write_text(f"{os.getpid()}\n")
    try:
        rotator.run(stop)
    finally:
        if args.pid_file:
            args.pid_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
