"""`perfmodel kernels check` and `show`: tables read (the project's CSV and an aiconfigurator-core excerpt), every
row priced by the functions a step uses, bad rows named without stopping the rest."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.cost.comm import GroupPlacement, collective_s
from perfmodel.cost.compute import gemm_time_s
from perfmodel.inputs.hardware import load_hardware
from perfmodel.kernels.check import check_rows
from perfmodel.kernels.price import LANES, explain, lanes_for, regime
from perfmodel.kernels.table import KernelRow, read_table, write_table
from tests.conftest import REPO

EXCERPT = REPO / "tests" / "data" / "kernels" / "aiconfigurator"
AMD = REPO / "studies" / "kernels" / "amd"
HEADER = "op,shape,dtype,backend,world_size,latency_us,hardware,source\n"


def _row(op: str, shape: dict[str, int], dtype: str = "bf16", world: int = 1, us: float = 10.0,
         hw: str = "h100-sxm", variant: str = "") -> KernelRow:
    return KernelRow(op, shape, dtype, "test", world, us * 1e-6, hw, "test", variant=variant)


def test_an_engine_gemm_row_is_priced_as_the_engine_prices_its_linears() -> None:
    from perfmodel.cost.compute import engine_gemm_time_s

    hw = load_hardware("h100-sxm")
    for dtype, recipe in (("bf16", "bf16"), ("fp8", "fp8"), ("fp8_block", "fp8_block"), ("mxfp8", "fp8_block")):
        row = _row("gemm", {"m": 64, "n": 4096, "k": 4096}, dtype, variant="engine")
        (lane,) = lanes_for(row)
        assert lane.name == f"gemm {recipe} engine"
        assert lane.price(row, hw) == pytest.approx(engine_gemm_time_s(hw, 64, 4096, 4096, recipe))


def test_a_gemm_row_is_priced_by_the_training_gemm_function() -> None:
    hw = load_hardware("h100-sxm")
    row = _row("gemm", {"m": 4096, "n": 8192, "k": 8192})
    (lane,) = lanes_for(row)
    assert lane.name == "gemm bf16"
    assert lane.price(row, hw) == pytest.approx(gemm_time_s(hw, 4096, 8192, 8192, "bf16", quantize=False))
    terms = dict((t, v) for t, v, _ in explain(lane, row, hw))
    fixed = terms["fixed time (half_flops at the large-GEMM rate)"]
    assert terms["price"] == pytest.approx(fixed + max(terms["compute time"], terms["memory time"]))


def test_an_attention_backward_row_is_priced_as_a_training_step_times_its_core_backward() -> None:
    """The lane is the step's own backward: the training core attention's Kernel (Builder.attn over flash_core)
    timed backward by cost/train/timing.py, at the profile's backward efficiency: FLOPs x 2.5 over the forward's."""
    from perfmodel.cost.train.attention import flash_core
    from perfmodel.cost.train.timing import _kernel_time
    from perfmodel.cost.train.work import ATTN_BWD_FACTOR, Builder

    hw = load_hardware("mi355x")
    b, s, h, kv, d = 8, 8192, 64, 8, 128
    row = _row("attention_backward", {"batch": b, "seq": s, "heads": h, "kv_heads": kv, "head_dim": d}, hw="mi355x")
    (lane,) = lanes_for(row)
    assert lane.name == "attention_backward train" and regime(row) == "bulk"
    builder = Builder()
    flops, nbytes = flash_core(b * s, b * s, s, h, kv, d, d)
    builder.attn("core_attention", flops, nbytes, scores=b * s * (s + 1) / 2 * h)
    (core,) = builder.build().kernels
    assert lane.price(row, hw) == pytest.approx(_kernel_time(hw, core, backward=True))
    # compute-bound at this size: the backward's time over the forward's is its FLOPs' over their efficiencies'
    fwd = _kernel_time(hw, core, backward=False)
    ratio = ATTN_BWD_FACTOR * hw.attention_fwd_rel_efficiency / hw.attention_bwd_rel_efficiency
    assert lane.price(row, hw) / fwd == pytest.approx(ratio, rel=0.05)
    terms = dict((t, v) for t, v, _ in explain(lane, row, hw))
    assert terms["time per query row and head"] == 0.0  # measured on forwards only: a backward pays none
    assert terms["price"] == pytest.approx(lane.price(row, hw) * 1e6)


def test_a_collective_row_is_priced_by_the_step_collective_and_explained() -> None:
    hw = load_hardware("h100-sxm")
    row = _row("all_reduce", {"bytes": 2**26}, world=8)
    (lane,) = lanes_for(row)
    t = lane.price(row, hw)
    assert t == pytest.approx(collective_s(hw, "all_reduce", 2.0**26, GroupPlacement(8, 8)))
    terms = dict((t, v) for t, v, _ in explain(lane, row, hw))
    assert terms["per-call latency floor"] + terms["bytes moved / bus bandwidth"] == pytest.approx(terms["price"])


def test_regimes_follow_the_issue_definitions() -> None:
    assert regime(_row("gemm", {"m": 16, "n": 4096, "k": 4096})) == "small"
    assert regime(_row("gemm", {"m": 4096, "n": 4096, "k": 4096})) == "bulk"
    assert regime(_row("gemm", {"m": 512, "n": 4096, "k": 4096})) == "large"
    assert regime(_row("all_reduce", {"bytes": 2**19}, world=8)) == "small"
    assert regime(_row("all_reduce", {"bytes": 2**27}, world=8)) == "bulk"


def test_every_lane_prices_a_row_of_its_op_positive() -> None:
    hw = load_hardware("h200")
    shapes = {"gemm": {"m": 128, "n": 4096, "k": 4096},
              "grouped_gemm": {"tokens": 512, "hidden": 4096, "inter": 1024, "experts": 64, "topk": 8, "ep": 8,
                               "tp": 1},
              "attention_prefill": {"batch": 2, "seq": 2048, "heads": 32, "kv_heads": 8, "head_dim": 128,
                                    "cached": 0, "window": 0},
              "attention_decode": {"batch": 64, "kv_len": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
                                   "window": 0},
              "attention_backward": {"batch": 2, "seq": 2048, "heads": 32, "kv_heads": 8, "head_dim": 128,
                                     "window": 0},
              "ep_dispatch": {"tokens": 128, "hidden": 7168, "topk": 8, "experts": 256, "nodes": 1, "units": 0},
              "ep_combine": {"tokens": 128, "hidden": 7168, "topk": 8, "experts": 256, "nodes": 1, "units": 0}}
    for lane in LANES:
        shape = shapes.get(lane.op, {"bytes": 2**20, "nodes": 1})
        dtype = lane.name.split()[1] if lane.op == "gemm" else "bf16"
        variant = lane.variants[-1]
        t = lane.price(_row(lane.op, shape, dtype, world=8, hw="h200", variant=variant), hw)
        assert t > 0 and math.isfinite(t), lane.name


def test_bad_rows_are_named_and_the_rest_is_read(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(HEADER
                 + "gemm,m=128 n=256 k=512,bf16,torch,1,12.5,h100-sxm,me\n"
                 + "gemm,m=128 n=256,bf16,torch,1,12.5,h100-sxm,me\n"  # k missing
                 + "gemm,m=128 n=256 k=512,bf17,torch,1,12.5,h100-sxm,me\n"  # unknown dtype
                 + "warp,m=1,bf16,torch,1,12.5,h100-sxm,me\n"  # unknown op
                 + "gemm,m=128 n=256 k=512,bf16,torch,1,-3,h100-sxm,me\n"  # negative latency
                 + "gemm,m=128 n=256 k=512,bf16,torch,1,12.5,tpu-v9,me\n")  # no such profile
    rows, problems = read_table(f)
    assert len(rows) == 2 and len(problems) == 4
    assert any(":3: shape:" in p and "missing k" in p for p in problems)
    assert any(":4: dtype:" in p for p in problems) and any(":5: op:" in p for p in problems)
    assert any(":6: latency_us:" in p for p in problems)
    res = check_rows(rows)
    assert len(res.priced) == 1 and res.skipped == {"no hardware profile 'tpu-v9'": 1}


def test_a_missing_column_names_the_file_and_column(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("op,shape,dtype,backend,world_size,hardware,source\n")
    rows, problems = read_table(f)
    assert rows == [] and problems == [f"{f}: header: missing column(s) latency_us (docs/kernels.md lists them)"]


def test_written_rows_read_back(tmp_path: Path) -> None:
    f = tmp_path / "out.csv"
    row = _row("gemm", {"m": 1, "n": 2, "k": 3}, us=7.25)
    write_table(f, [row], comment="a test")
    write_table(f, [row])  # appended, header once
    rows, problems = read_table(f)
    assert problems == [] and len(rows) == 2 and rows[0].latency_s == pytest.approx(7.25e-6)


def test_the_shipped_amd_tables_read_clean() -> None:
    for f in sorted(AMD.glob("*.csv")):
        rows, problems = read_table(f)
        assert rows and problems == [], (f, problems[:3])
        assert all(r.hardware in {"mi300x", "mi325x", "mi350x", "mi355x"} and r.source.startswith("http")
                   for r in rows)


def test_check_end_to_end_on_the_excerpt_and_the_amd_tables(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow")
    assert main(["kernels", "check", str(EXCERPT), str(AMD), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pooled = {(s["lane"], s["hardware"], s["regime"]): s for s in out["stats"]}
    for lane in ("gemm bf16", "gemm bf16 engine", "all_reduce nccl", "all_reduce graph", "attention_decode engine",
                 "grouped_gemm engine", "attention_prefill train"):
        assert pooled[lane, "all", "all"]["n"] > 0, lane
    assert {"h200", "h100-sxm", "mi300x", "mi355x"} <= {s["hardware"] for s in out["stats"]}
    assert all(s["p10"] <= s["median"] <= s["p90"] for s in out["stats"])
    assert out["problems"] == []
    outside = {(s["lane"], s["hardware"], s["regime"]) for s in out["outside_targets"]}
    assert outside and all(r in {"bulk", "small"} for _, _, r in outside)
    assert all(not 0.87 <= pooled[k]["median"] <= 1.15 for k in outside if k[2] == "bulk" and "ep_" not in k[0])


def test_targets_lists_the_cells_outside_their_bands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "check", str(AMD), "--targets", "--worst", "0"]) == 0
    out = capsys.readouterr().out
    assert "outside its target: grouped_gemm train bulk mi355x" in out
    assert "lane cells (pooled and per GPU, bulk and small) within their target bands" in out


def test_check_prints_a_table_and_exits_1_when_nothing_could_be_checked(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "check", str(AMD / "gemm.csv")]) == 0
    out = capsys.readouterr().out
    assert "gemm bf16" in out and "mi355x" in out and "worst gemm" in out
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "gemm,m=1,bf16,torch,1,1,h100-sxm,me\n")
    assert main(["kernels", "check", str(bad)]) == 1
    assert f"{bad}:2: shape:" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["kernels", "check", "--lane", "gemm bf99"], "--lane: gemm bf99: no such lane"),
    (["kernels", "check", "--hardware", "tpu-v9"], "--hardware: tpu-v9: no such hardware profile"),
    (["kernels", "show", "gemm", "m=1 n=2", "--hardware", "h100-sxm"], "shape: missing k"),
    (["kernels", "show", "warp", "m=1", "--hardware", "h100-sxm"], "unknown op 'warp'"),
    (["kernels", "show", "grouped_gemm", "tokens=4 hidden=8 inter=8 experts=4 topk=2 random_routing=yes",
      "--hardware", "h100-sxm"], "shape: random_routing=yes is not a non-negative integer"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], needle: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err


def test_show_prints_the_terms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "show", "gemm", "m=64 n=7168 k=2048", "--hardware", "mi355x", "--dtype", "fp8"]) == 0
    out = capsys.readouterr().out
    for term in ("gemm fp8 on mi355x", "curve half_flops", "fixed time", "memory time", "price"):
        assert term in out
    assert main(["kernels", "show", "reduce_scatter", "bytes=268435456", "--hardware", "h100-sxm",
                 "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "share of the 8-GPU bus efficiency (peer ramp)       0.777778" in out  # 1 (7 + 0.35) / (7 (1 + 0.35))


def test_a_grouped_gemm_row_faster_than_the_peak_as_read_is_skipped_with_its_reason() -> None:
    """Physics guards the reading of a table: 131k expert rows of 6144 x 2048 in 290 us would be 33 PFLOP/s on one
    B200 (its token count is another group's); the same row at 29 ms is kept and priced."""
    shape = {"tokens": 4194304, "hidden": 6144, "inter": 2048, "experts": 256, "topk": 8, "ep": 256, "tp": 1}
    fast = _row("grouped_gemm", shape, "bf16", world=256, us=290.0, hw="b200", variant="engine")
    slow = _row("grouped_gemm", shape, "bf16", world=256, us=29000.0, hw="b200", variant="engine")
    res = check_rows([fast, slow], {"grouped_gemm engine"})
    assert [p.row for p in res.priced] == [slow]
    (why,) = res.skipped
    assert "faster than the GPU's peak" in why and res.skipped[why] == 1


def test_show_lists_a_grouped_gemms_tiles_by_its_routing(capsys: pytest.CaptureFixture[str]) -> None:
    """At 256 rows an expert, random routing fills about 2.49 tiles of 128 rows an expert; balanced, exactly 2."""
    from perfmodel.cost.compute import expected_tiles

    shape = "tokens=4096 hidden=2048 inter=768 experts=128 topk=8"
    assert main(["kernels", "show", "grouped_gemm", shape + " random_routing=1", "--hardware", "h200"]) == 0
    out = capsys.readouterr().out
    random_rows = 128 * expected_tiles(256, 128, 128) * 128
    assert "rows in whole tiles (random routing)" in out and f"{random_rows:14.6g}" in out
    assert main(["kernels", "show", "grouped_gemm", shape, "--hardware", "h200"]) == 0
    assert f"{32768:14.6g}" in capsys.readouterr().out.split("rows in whole tiles (balanced routing)")[1]
