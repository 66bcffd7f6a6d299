"""studies/seed-dsv4-mi355x/layer-modules: every item of the model's DeepSeek-V4-Flash layer lands in one of the
trace's modules (a renamed GEMM or kernel in cost/train/layers.py would otherwise drop out of the comparison), and
the comparison reads the shipped trace table."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

SCRIPT = REPO / "studies/seed-dsv4-mi355x/layer-modules/compare.py"


def _compare():
    spec = importlib.util.spec_from_file_location("layer_modules_compare", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_model_item_maps_to_a_trace_module_and_every_layer_kind_is_compared():
    compare = _compare()
    model, a2a = compare.modelled()
    assert not [k for k in model if k[2].startswith("(unmapped)")]
    assert {cr for cr, _, _ in model} == {0, 4, 128} and all(v > 0 for v in a2a.values())
    rows = compare.rows(model)
    traced = {(cr, phase) for cr, phase, _, t_ms, _ in rows if t_ms > 0}
    assert traced == {(cr, phase) for cr in (0, 4, 128) for phase in ("forward", "backward")}
    # the projections' forward GEMMs are priced near the trace: the comparison's anchor (a wrong shard or token
    # count would move every module at once)
    proj = {(cr, phase): m / t for cr, phase, module, t, m in rows if module == "attn.proj"}
    assert all(0.8 < proj[(cr, "forward")] < 1.2 for cr in (0, 4, 128))
