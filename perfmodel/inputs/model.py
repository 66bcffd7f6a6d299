"""Model input: a model by catalogue id or by path to a Hugging Face `config.json`, as a ModelSpec.

The spec types live in model_spec.py and the family parsers in model_families.py; this module is the one callers
import them from.
"""

from __future__ import annotations

from pathlib import Path

from perfmodel.catalogue import catalogue_ids, load_catalogue_config
from perfmodel.errors import InputError
from perfmodel.inputs.loading import did_you_mean, read_mapping
from perfmodel.inputs.model_families import SUPPORTED_FAMILIES, model_from_hf_config
from perfmodel.inputs.model_spec import AttentionKind, AttentionSpec, FFNKind, FFNSpec, LayerSpec, ModelSpec

__all__ = [
    "SUPPORTED_FAMILIES", "AttentionKind", "AttentionSpec", "FFNKind", "FFNSpec", "LayerSpec", "ModelSpec",
    "load_model", "model_from_hf_config",
]


def load_model(ref: str, source: str = "", field: str = "model") -> ModelSpec:
    """A model by catalogue id (`deepseek-v4-flash`) or by path to a Hugging Face config.json."""
    if ref.endswith(".json") or "/" in ref:
        path = Path(ref)
        model_id = path.parent.name if path.name == "config.json" else path.stem
        return model_from_hf_config(read_mapping(path), model_id=model_id, source=str(path))
    try:
        config = load_catalogue_config(ref)
    except KeyError:
        ids = catalogue_ids()
        message = (f"unknown model id {ref!r}{did_you_mean(ref, ids)}; valid: {', '.join(ids)}, or a path to a "
                   "config.json")
        raise InputError(source, field, message) from None
    return model_from_hf_config(config, model_id=ref, source=f"perfmodel/catalogue/{ref}.json")
