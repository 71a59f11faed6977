"""Class names: a `labels:` file packed beside the model-config YAML, or the names an Ultralytics
TorchScript file carries; an id without a name is answered with its number."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from handler.config import ClassKey
from handler.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Labels:
    """Class id -> name; `name` answers an unknown id with the id itself."""

    names: Mapping[int, str] = field(default_factory=dict)

    def name(self, class_id: int) -> str:
        return self.names.get(class_id, str(class_id))

    def __len__(self) -> int:
        return len(self.names)

    def ids(self, keys: Sequence[ClassKey], setting: str) -> list[int]:
        """Class ids for a setting's ids or labels.

        Raises:
            ConfigError: a label that no class has, naming the setting and the known labels.
        """
        by_name = {name: i for i, name in self.names.items()}
        ids = []
        for key in keys:
            if isinstance(key, int):
                ids.append(key)
            elif key.isdigit():
                ids.append(int(key))
            elif key in by_name:
                ids.append(by_name[key])
            else:
                known = sorted(by_name)[:20]
                raise ConfigError(f"handler.{setting}: no class is labelled {key!r} (labels: {known}"
                                  f"{' ...' if len(by_name) > 20 else ''}); use a label from the labels file or a class id")
        return ids


def check_ids(ids: Sequence[int], classes: int, setting: str) -> None:
    """Every id is one of the model's `classes` (found at the dummy run).

    Raises:
        ConfigError: naming the setting, the id and the model's range.
    """
    for class_id in ids:
        if not 0 <= class_id < classes:
            raise ConfigError(f"handler.{setting}: class id {class_id} is not one of the model's {classes} classes "
                              f"(0 to {classes - 1}): it would never match; use an id in that range or a label")


def read_labels(path: str | pathlib.Path) -> Labels:
    """A labels file: TorchServe's `index_to_name.json` (string keys; a list value names its
    class by the last element; an `object_type_names` list) or a text file, one name per line.

    Raises:
        ConfigError: the file is missing or does not hold labels, saying which form to use.
    """
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"handler.labels: cannot read {path.name} ({err.strerror}); pack it beside "
                          "the model-config YAML (./archive.sh does)") from None
    if path.suffix != ".json":
        return Labels({i: line.strip() for i, line in enumerate(text.splitlines()) if line.strip()})
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"handler.labels: {path.name} is not JSON ({err})") from None
    return Labels(_from_json(raw, path.name))


def _from_json(raw: object, name: str) -> dict[int, str]:
    if isinstance(raw, Mapping) and isinstance(raw.get("object_type_names"), list):
        raw = raw["object_type_names"]
    if isinstance(raw, list):
        return {i: str(v) for i, v in enumerate(raw)}
    if isinstance(raw, Mapping) and all(str(k).lstrip("-").isdigit() for k in raw):
        return {int(k): str(v[-1] if isinstance(v, list) and v else v) for k, v in raw.items()}
    raise ConfigError(f"handler.labels: {name} holds no labels: use {{\"0\": \"person\", ...}} "
                      "(index_to_name.json), a list, or a labels.txt with one name per line")


def from_names(names: object) -> Labels:
    """Labels from an Ultralytics `names` value (`{0: "person", ...}` or a list); empty if neither."""
    if isinstance(names, list):
        return Labels({i: str(v) for i, v in enumerate(names)})
    if isinstance(names, Mapping):
        try:
            return Labels({int(k): str(v) for k, v in names.items()})
        except (TypeError, ValueError):
            return Labels()
    return Labels()
