"""Bundled Hugging Face `config.json` files of the models we plan for, keyed by id (the file stem).

Each file is a public config, unchanged except for a `_source` key naming where it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_DIR = Path(__file__).parent


def catalogue_ids() -> list[str]:
    """Ids of the bundled configs, sorted."""
    return sorted(p.stem for p in _DIR.glob("*.json"))


def load_catalogue_config(model_id: str) -> dict[str, Any]:
    """The config dict of a bundled model; KeyError for an unknown id."""
    path = _DIR / f"{model_id}.json"
    if model_id not in catalogue_ids():
        raise KeyError(model_id)
    return json.loads(path.read_text(encoding="utf-8"))
