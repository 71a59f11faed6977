"""What the key tools need from TorchServe's `config.properties`: addresses and key lifetime."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tsutil import properties

# TorchServe's own defaults (ConfigManager) for keys not in the file.
DEFAULT_LIFETIME_MIN = 60.0
DEFAULT_INFERENCE = "http://127.0.0.1:8080"
DEFAULT_MANAGEMENT = "http://127.0.0.1:8081"


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file (continuations, comments, later keys win), as TorchServe reads it.

    Raises:
        OSError: the file cannot be read.
    """
    return properties.read(Path(path))


def local(address: str) -> str:
    """An address as a client on the same host reaches it (`0.0.0.0` -> `127.0.0.1`), no trailing /."""
    return address.replace("://0.0.0.0", "://127.0.0.1").rstrip("/")


@dataclass(frozen=True, slots=True)
class Settings:
    """The parts of a TorchServe configuration the key tools use.

    Attributes:
        inference_url, management_url: where to reach the two APIs from this host.
        lifetime_s: how long an issued key lives (`token_expiration_min`).
        token_auth: whether token authorization is on.
    """

    inference_url: str = DEFAULT_INFERENCE
    management_url: str = DEFAULT_MANAGEMENT
    lifetime_s: float = DEFAULT_LIFETIME_MIN * 60
    token_auth: bool = True

    @classmethod
    def from_properties(cls, values: dict[str, str]) -> Settings:
        """From parsed properties; a bad `token_expiration_min` raises a ValueError naming it."""
        text = values.get("token_expiration_min", str(DEFAULT_LIFETIME_MIN))
        try:
            minutes = float(text)
        except ValueError:
            minutes = -1.0
        if not minutes > 0:
            raise ValueError(f"token_expiration_min = {text!r}: use a number of minutes above 0")
        return cls(local(values.get("inference_address", DEFAULT_INFERENCE)),
                   local(values.get("management_address", DEFAULT_MANAGEMENT)),
                   minutes * 60,
                   values.get("disable_token_authorization", "false").strip().lower() != "true")

    @classmethod
    def read(cls, path: Path) -> Settings:
        """From a `config.properties` file."""
        return cls.from_properties(read_properties(path))
