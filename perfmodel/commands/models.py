"""`perfmodel models`: list the model catalogue, or summarize one model."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    mo = sub.add_parser("models", help="list the model catalogue, or summarize one model",
                        description="Summarize catalogue models: layers, attention kinds, MoE shape, parameters.")
    mo.add_argument("id", nargs="?", help="a catalogue id or a path to a Hugging Face config.json")
    mo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.catalogue import catalogue_ids
    from perfmodel.inputs.model import load_model

    ids = [args.id] if args.id else catalogue_ids()
    for model_id in ids:
        m = load_model(model_id, field="id")
        print(m.describe())
        if len(ids) > 1:
            print()
    return 0
