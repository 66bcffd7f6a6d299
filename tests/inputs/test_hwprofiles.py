"""Hardware profiles: every profile loads, every number names its source, and the numbers hang together."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from perfmodel.errors import InputError
from perfmodel.inputs.hardware import known_hardware_ids, load_hardware
from tests.conftest import REPO

PROFILES = REPO / "hwprofiles"
SOURCES_DOC = REPO / "docs" / "hardware-sources.md"

IDS = [
    "mi355x",
    "mi350x",
    "mi325x",
    "mi300x",
    "a100-80gb",
    "h100-sxm",
    "h200",
    "h800",
    "b200",
    "gb200",
    "gb300",
]
NVIDIA_SWITCH = {
    # id: (links per GPU, per-direction GB/s per GPU)
    "a100-80gb": (12, 300e9),
    "h100-sxm": (18, 450e9),
    "h200": (18, 450e9),
    "b200": (18, 900e9),
    "gb200": (18, 900e9),
    "gb300": (18, 900e9),
}
# Maximum Achievable Matmul FLOPS (BF16 TFLOP/s) as measured in the reference (docs/reference/hardware.md 2a, S2 MAMF
# table).
MAMF_BF16_TFLOPS = {
    "mi355x": 1565.0,
    "mi325x": 784.9,
    "mi300x": 668.4,
    "h100-sxm": 794.5,
    "b200": 1745.0,
    "gb200": 1822.0,
}


def _raw(hw_id: str) -> dict:
    return yaml.safe_load((PROFILES / f"{hw_id}.yaml").read_text(encoding="utf-8"))


def _walk(node, path=""):
    """Yield (path, node) for every mapping in the tree, and fail on numbers outside a {value, source} mapping."""
    if isinstance(node, dict):
        yield path, node
        if "value" in node:
            return
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        raise AssertionError(f"{path}: bare number {node!r} without {{value, source}}")


def test_all_ids_present():
    assert set(IDS) <= set(known_hardware_ids())
    for hw_id in IDS:
        assert (PROFILES / f"{hw_id}.yaml").is_file()


@pytest.mark.parametrize("hw_id", IDS)
def test_loads_and_id_matches_stem(hw_id):
    hw = load_hardware(hw_id)
    assert hw.id == hw_id
    assert _raw(hw_id)["id"] == hw_id


@pytest.mark.parametrize("hw_id", IDS)
def test_every_value_has_a_source_in_the_yaml(hw_id):
    n = 0
    for path, node in _walk(_raw(hw_id)):
        if "value" in node:
            n += 1
            src = node.get("source")
            assert isinstance(src, str) and len(src.strip()) >= 3, f"{hw_id}: {path} has no source"
    assert n >= 25, f"{hw_id}: only {n} sourced numbers"


@pytest.mark.parametrize("hw_id", IDS)
def test_every_loaded_field_has_a_source(hw_id):
    hw = load_hardware(hw_id)
    for must in ("peak_tflops.bf16", "hbm_bytes", "scale_up.gpu_bandwidth_bytes_per_s", "host.memory_bytes",
                 "efficiency.gemm.bf16.max", "efficiency.all_to_all_bus.scale_up"):
        assert must in hw.sources, f"{hw_id}: {must} missing from sources"
    for field, src in hw.sources.items():
        assert len(src.strip()) >= 3, f"{hw_id}: {field} has an empty source"


@pytest.mark.parametrize("hw_id", IDS)
def test_source_keys_resolve_in_docs(hw_id):
    doc = SOURCES_DOC.read_text(encoding="utf-8")
    known = set(re.findall(r"^\| (S\d+) \|", doc, flags=re.M))
    assert {f"S{i}" for i in range(1, 31)} <= known
    hw = load_hardware(hw_id)
    for field, src in hw.sources.items():
        for key in re.findall(r"\bS\d+\b", src):
            assert key in known, f"{hw_id}: {field} cites {key}, not in docs/hardware-sources.md"


@pytest.mark.parametrize("hw_id", IDS)
def test_fp8_is_twice_bf16(hw_id):
    hw = load_hardware(hw_id)
    if "fp8" in hw.peak_flops:  # every dense FP8 spec in the reference is 2 x BF16
        assert hw.peak_flops["fp8"] == pytest.approx(2 * hw.peak_flops["bf16"], rel=2e-3)
    if "fp4" in hw.peak_flops:
        assert hw.peak_flops["fp4"] >= hw.peak_flops["fp8"]


@pytest.mark.parametrize("hw_id", IDS)
def test_fabric_sanity(hw_id):
    hw = load_hardware(hw_id)
    assert hw.scale_up_gpu_bytes_per_s >= hw.scale_up_link_bytes_per_s
    assert hw.scale_up_gpu_bytes_per_s == pytest.approx(
        hw.scale_up_links_per_gpu * hw.scale_up_link_bytes_per_s, rel=0.01
    )
    assert hw.scale_up_domain_gpus >= hw.gpus_per_node
    assert hw.scale_up_domain_gpus % hw.gpus_per_node == 0
    # one NIC per GPU is far slower than the scale-up fabric, and HBM is faster still
    assert hw.nic_bytes_per_s < hw.scale_up_gpu_bytes_per_s < hw.hbm_bandwidth_bytes_per_s
    assert hw.host_link_bytes_per_s <= hw.scale_up_gpu_bytes_per_s
    assert 0 < hw.scale_up_latency_s < hw.scale_out_latency_s < 1e-3
    assert 0 < hw.collective_latency_scale_up_s <= hw.collective_latency_scale_out_s < 1e-3
    if hw.scale_up_topology == "full_mesh":
        assert hw.scale_up_links_per_gpu == hw.scale_up_domain_gpus - 1


@pytest.mark.parametrize("hw_id", IDS)
def test_efficiencies_in_unit_interval(hw_id):
    hw = load_hardware(hw_id)
    effs = {
        "hbm": hw.hbm_efficiency,
        "collective_up": hw.collective_bus_efficiency_scale_up,
        "collective_out": hw.collective_bus_efficiency_scale_out,
        "a2a_up": hw.all_to_all_efficiency_scale_up,
        "a2a_out": hw.all_to_all_efficiency_scale_out,
        "optimizer_hbm": hw.optimizer_hbm_efficiency,
        "host_link": hw.host_link_efficiency,
    }
    for dtype, curve in hw.gemm.items():
        effs[f"gemm_{dtype}"] = curve.max_efficiency
        assert curve.half_flops > 0
        assert dtype in hw.peak_flops, f"{hw_id}: GEMM curve for {dtype} without a {dtype} peak"
    for name, v in effs.items():
        assert 0.0 < v <= 1.0, f"{hw_id}: {name} = {v}"
    assert hw.optimizer_hbm_efficiency <= hw.hbm_efficiency


@pytest.mark.parametrize("hw_id", sorted(NVIDIA_SWITCH))
def test_nvidia_switch_fabrics(hw_id):
    hw = load_hardware(hw_id)
    links, gpu_bw = NVIDIA_SWITCH[hw_id]
    assert hw.vendor == "nvidia"
    assert hw.scale_up_topology == "switch"
    assert hw.scale_up_links_per_gpu == links
    assert hw.scale_up_gpu_bytes_per_s == pytest.approx(gpu_bw)


def test_nvl72_domains():
    for hw_id in ("gb200", "gb300"):
        hw = load_hardware(hw_id)
        assert hw.scale_up_domain_gpus == 72
        assert hw.gpus_per_node == 4
        assert hw.host_link_bytes_per_s == pytest.approx(450e9)  # NVLink-C2C, per direction
        assert hw.host_memory_bytes == pytest.approx(960e9)  # 2 Grace x 480 GB per 4-GPU tray
    assert load_hardware("gb300").nic_bytes_per_s == pytest.approx(2 * load_hardware("gb200").nic_bytes_per_s)


def test_h800_nvlink_matches_deepseek():
    """DeepSeek-V3 (S13 3.2.2) quotes NVLink 160 GB/s and IB 50 GB/s for H800: the achievable rates."""
    hw = load_hardware("h800")
    assert hw.nic_bytes_per_s == pytest.approx(50e9)
    achievable = hw.scale_up_gpu_bytes_per_s * hw.collective_bus_efficiency_scale_up
    assert achievable == pytest.approx(160e9, rel=0.05)
    # DeepEP V1 EP8 intranode dispatch 153 GB/s (S11)
    assert hw.scale_up_gpu_bytes_per_s * hw.all_to_all_efficiency_scale_up == pytest.approx(153e9, rel=0.01)
    assert hw.scale_up_gpu_bytes_per_s < load_hardware("h100-sxm").scale_up_gpu_bytes_per_s


def test_a100_selene_nic():
    hw = load_hardware("a100-80gb")
    assert hw.nic_bytes_per_s == pytest.approx(25e9)  # 8 x 200 Gb/s HDR per 8-GPU node (S15)
    assert hw.host_link_bytes_per_s == pytest.approx(32e9)  # PCIe Gen4 x16
    assert "fp8" not in hw.peak_flops


def test_generational_ordering():
    assert load_hardware("mi355x").peak_flops["bf16"] > load_hardware("mi300x").peak_flops["bf16"]
    assert load_hardware("mi355x").peak_flops["bf16"] > load_hardware("mi350x").peak_flops["bf16"]
    assert load_hardware("gb300").peak_flops["fp4"] > load_hardware("gb200").peak_flops["fp4"]
    assert load_hardware("gb300").hbm_bytes > load_hardware("gb200").hbm_bytes
    assert load_hardware("h200").hbm_bandwidth_bytes_per_s > load_hardware("h100-sxm").hbm_bandwidth_bytes_per_s
    assert load_hardware("b200").peak_flops["bf16"] > load_hardware("h100-sxm").peak_flops["bf16"]
    assert load_hardware("mi325x").hbm_bytes > load_hardware("mi300x").hbm_bytes


def test_memory_is_what_the_driver_reports_and_what_the_runtime_holds_is_below_it(tmp_path):
    """hbm_bytes is the runtime-visible total (not the marketed GB read as 1e9 bytes); runtime_reserved_bytes is
    what the runtime holds when an engine starts (S51); a negative one is one line naming the field."""
    assert load_hardware("h200").hbm_bytes == 143_317 * 2**20  # nvidia-smi 143,771 MiB less the Hopper reserve
    assert load_hardware("mi355x").hbm_bytes == 309_220_868_096  # torch's 287.98 GiB
    for hw_id in known_hardware_ids():
        hw = load_hardware(hw_id)
        assert 0 <= hw.runtime_reserved_bytes < 0.05 * hw.hbm_bytes, hw_id
    assert load_hardware("cpu-local").runtime_reserved_bytes == 0.0  # not stated: nothing held
    data = _raw("h200")
    data["id"], data["runtime_reserved_bytes"]["value"] = "broken", -1
    with pytest.raises(InputError) as exc:
        load_hardware(str(_write(tmp_path, data)))
    assert exc.value.field.startswith("runtime_reserved_bytes")


@pytest.mark.parametrize("hw_id", sorted(MAMF_BF16_TFLOPS))
def test_gemm_efficiency_reproduces_mamf(hw_id):
    hw = load_hardware(hw_id)
    achieved = hw.gemm["bf16"].max_efficiency * hw.peak_flops["bf16"] / 1e12
    assert achieved == pytest.approx(MAMF_BF16_TFLOPS[hw_id], rel=0.01)


def _write(tmp_path: Path, data: dict, name: str = "broken.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return p


def test_missing_source_is_refused(tmp_path):
    data = _raw("mi355x")
    data["id"] = "broken"
    del data["hbm_bytes"]["source"]
    with pytest.raises(InputError) as exc:
        load_hardware(str(_write(tmp_path, data)))
    assert exc.value.field == "hbm_bytes.source"
    assert "hbm_bytes" in str(exc.value)


@pytest.mark.parametrize("bad", ["", "  ", "   "])
def test_empty_source_is_refused(tmp_path, bad):
    data = _raw("h100-sxm")
    data["efficiency"]["gemm"]["bf16"]["max"]["source"] = bad
    with pytest.raises(InputError) as exc:
        load_hardware(str(_write(tmp_path, data)))
    assert exc.value.field == "efficiency.gemm.bf16.max.source"


def test_bare_number_is_refused(tmp_path):
    data = _raw("b200")
    data["hbm_bandwidth_bytes_per_s"] = 8.0e12
    with pytest.raises(InputError) as exc:
        load_hardware(str(_write(tmp_path, data)))
    assert exc.value.field.startswith("hbm_bandwidth_bytes_per_s")


def test_efficiency_above_one_is_refused(tmp_path):
    data = _raw("gb200")
    data["efficiency"]["hbm"]["value"] = 1.2
    with pytest.raises(InputError) as exc:
        load_hardware(str(_write(tmp_path, data)))
    assert exc.value.field == "efficiency.hbm.value"
