"""Model spec: parameter counts against published totals, per-layer structure, and input errors."""

from __future__ import annotations

import json

import pytest

from perfmodel.catalogue import catalogue_ids, load_catalogue_config
from perfmodel.errors import InputError
from perfmodel.inputs.model import SUPPORTED_FAMILIES, load_model, model_from_hf_config

B = 1e9


def close(got: float, published: float, rel: float = 0.02) -> bool:
    return abs(got - published) <= rel * published


# Active-parameter conventions, read off the publishers' own numbers:
# - DeepSeek and OpenAI count the LM head but not the embedding table (a row gather), and no MTP:
#   gpt-oss-120b gives 5.133B against the model card's 5.13B; DeepSeek-V3 36.6B -> "37B".
# - Qwen and Mistral count the embedding table too (Qwen3-30B-A3B: 3.35B -> "3.3B"; without it 3.04B).
# Totals: DeepSeek's exclude the MTP module (V3 README: 671B main + 14B MTP = 685B). For V4-Flash the model
# without MTP is 284.3B and with MTP 290.9B, which is Miles' "291B" for the FP8 repackage that carries it.
PUBLISHED = [
    # id, total, active, include_embedding in active
    ("deepseek-v3", 671e9, 37e9, False),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, True),
    ("qwen3-235b-a22b", 235e9, 22e9, True),
    ("gpt-oss-120b", 116.8e9, 5.1e9, False),
    ("llama3-8b", 8.03e9, 8.03e9, True),
    ("llama3-70b", 70.6e9, 70.6e9, True),
    ("llama3.1-405b", 405.9e9, 405.9e9, True),
]


@pytest.mark.parametrize("model_id,total,active,with_embedding", PUBLISHED)
def test_params_match_published(model_id: str, total: float, active: float, with_embedding: bool) -> None:
    m = load_model(model_id)
    assert close(m.total_params(), total), m.total_params() / B
    assert close(m.active_params(include_embedding=with_embedding), active), m.active_params() / B


def test_deepseek_v4_flash_params() -> None:
    m = load_model("deepseek-v4-flash")
    assert close(m.total_params(), 284e9)  # 284.33B, MTP excluded
    assert close(m.total_params(include_mtp=True), 291e9)  # Miles: "291B" FP8 repackage, MTP included
    # Same convention as V3 (LM head, no embedding table, no MTP) gives 13.27B: +2.1% over "13B", which is
    # published to two significant digits; V4-Pro (49B) and V3 (37B) land within 1% under this convention.
    active = m.active_params()
    assert round(active / B) == 13 and close(active, 13e9, rel=0.025), active / B


def test_deepseek_v3_mtp_module() -> None:
    m = load_model("deepseek-v3")
    # 685B published counts the MTP module's own copies of embedding and head (2 x 0.93B); we share them.
    assert close(m.total_params(include_mtp=True), 685e9)
    assert len(m.mtp_layers) == 1 and m.mtp_layers[0].index == 61 and m.mtp_layers[0].ffn.kind == "moe"


def test_deepseek_v4_flash_structure() -> None:
    m = load_model("deepseek-v4-flash")
    ratios = [layer.attention.compress_ratio for layer in m.layers]
    assert m.num_layers == 43 and all(layer.attention.kind == "dsv4" for layer in m.layers)
    assert ratios[:2] == [0, 0] and ratios.count(4) == 21 and ratios.count(128) == 20 and ratios.count(0) == 2
    assert all(layer.attention.has_indexer == (layer.attention.compress_ratio == 4) for layer in m.layers)
    assert all(layer.attention.sliding_window == 128 and layer.attention.has_sinks for layer in m.layers)
    assert m.num_moe_layers == 43
    assert [layer.ffn.hash_routed for layer in m.layers[:4]] == [True, True, True, False]
    assert sum(layer.ffn.hash_routed for layer in m.layers) == 3
    assert m.hc_mult == 4 and m.hc_sinkhorn_iters == 20
    # hc_{attn,ffn}_fn [24, 16384] + base [24] + scale [3], twice per layer.
    assert m.layers[0].hc_params == 2 * (24 * 4 * 4096 + 24 + 3)
    (mtp,) = m.mtp_layers
    assert mtp.index == 43 and mtp.attention.compress_ratio == 0 and not mtp.attention.has_indexer
    assert not mtp.ffn.hash_routed
    # CSA layers carry compressor + indexer, HCA a smaller compressor, SWA-only neither.
    swa, csa, hca = (m.layers[i].attention.params() for i in (0, 2, 3))
    assert swa < hca < csa
    compressor = 4 * 1024 + 2 * 4096 * 1024 + 512  # ape [4, 2*512], wkv/wgate [2*512, 4096], norm [512]
    indexer = 1024 * 64 * 128 + 4096 * 64 + (4 * 256 + 2 * 4096 * 256 + 128)  # wq_b, weights_proj, compressor
    assert csa - swa == compressor + indexer
    assert hca - swa == 128 * 512 + 2 * 4096 * 512 + 512  # no overlap at ratio 128


def test_deepseek_v3_structure() -> None:
    m = load_model("deepseek-v3")
    kinds = [layer.ffn.kind for layer in m.layers]
    assert kinds[:3] == ["dense"] * 3 and kinds[3:] == ["moe"] * 58 and m.num_moe_layers == 58
    assert m.layers[0].ffn.intermediate_size == 18432
    a = m.layers[0].attention
    assert (a.kind, a.q_lora_rank, a.kv_lora_rank, a.head_dim, a.v_head_dim) == ("mla", 1536, 512, 192, 128)
    f = m.layers[3].ffn
    assert (f.num_experts, f.top_k, f.num_shared_experts, f.expert_intermediate_size) == (256, 8, 1, 2048)


def test_gpt_oss_alternating_windows_and_biases() -> None:
    m = load_model("gpt-oss-120b")
    assert [layer.attention.sliding_window for layer in m.layers[:4]] == [128, 0, 128, 0]
    assert sum(layer.attention.sliding_window == 128 for layer in m.layers) == 18
    a, f = m.layers[0].attention, m.layers[0].ffn
    assert a.has_sinks and a.qkv_bias and a.o_bias and (a.num_heads, a.num_kv_heads, a.head_dim) == (64, 8, 64)
    assert f.bias and f.router_params == 128 * 2880 + 128


def test_qwen3_moe_has_qk_norm() -> None:
    a = load_model("qwen3-30b-a3b").layers[0].attention
    assert a.qk_norm and not a.qkv_bias and a.head_dim == 128


def test_gpt2_megatron_1_7b() -> None:
    # Megatron-LM 2021 (Narayanan et al.) 1.7B: hidden 2304, 24 layers, 24 heads, vocab 51200, seq 2048.
    # Their formula P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)) = 1.65B ("1.7B"); we add ln_f (2h).
    config = {"architectures": ["GPT2LMHeadModel"], "n_embd": 2304, "n_layer": 24, "n_head": 24,
              "vocab_size": 51200, "n_positions": 2048}
    m = model_from_hf_config(config, "megatron-1.7b")
    h, n_layer, v, s = 2304, 24, 51200, 2048
    assert m.total_params() == 12 * n_layer * h * h + 13 * n_layer * h + (v + s) * h + 2 * h
    assert close(m.total_params(), 1.7e9, rel=0.04)
    assert m.tie_word_embeddings and m.lm_head_params() == 0 and m.layers[0].ffn.intermediate_size == 4 * h


def test_gpt2_small_matches_hf() -> None:
    config = {"architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}
    assert model_from_hf_config(config).total_params() == 124_439_808  # GPT2LMHeadModel.num_parameters()


def test_mixtral_and_qwen2_inline() -> None:
    mixtral = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
               "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "sliding_window": None}
    m = model_from_hf_config(mixtral)
    assert close(m.total_params(), 46.7e9) and close(m.active_params(include_embedding=True), 12.9e9)
    assert m.layers[0].attention.sliding_window == 0
    qwen2 = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
             "vocab_size": 152064, "use_sliding_window": False, "sliding_window": 131072}
    q = model_from_hf_config(qwen2)
    assert close(q.total_params(), 7.61e9) and q.layers[0].attention.qkv_bias and not q.layers[0].attention.o_bias


def test_describe_summarises() -> None:
    text = load_model("deepseek-v4-flash").describe()
    assert "DeepseekV4ForCausalLM" in text and "43 layers" in text and "dsv4-csa x21" in text
    assert "256 experts top-6" in text and "284.3B total" in text


def test_catalogue() -> None:
    ids = catalogue_ids()
    assert "deepseek-v4-flash" in ids and len(ids) == 8
    assert "_source" in load_catalogue_config("llama3-8b")
    with pytest.raises(KeyError):
        load_catalogue_config("nope")
    for model_id in ids:
        assert load_model(model_id).family in SUPPORTED_FAMILIES


def test_load_model_from_path(tmp_path) -> None:
    d = tmp_path / "my-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(load_catalogue_config("llama3-8b")))
    m = load_model(str(d / "config.json"))
    assert m.id == "my-llama" and m.total_params() == load_model("llama3-8b").total_params()


def test_unknown_architecture() -> None:
    with pytest.raises(InputError) as err:
        model_from_hf_config({"architectures": ["MambaForCausalLM"], "hidden_size": 8}, source="x.json")
    assert err.value.field == "architectures" and "LlamaForCausalLM" in err.value.message
    assert err.value.source == "x.json"


def test_missing_hidden_size() -> None:
    config = load_catalogue_config("llama3-8b")
    del config["hidden_size"]
    with pytest.raises(InputError) as err:
        model_from_hf_config(config, source="cfg.json")
    assert err.value.field == "hidden_size"


def test_bad_values() -> None:
    config = load_catalogue_config("deepseek-v4-flash")
    config["compress_ratios"] = [0, 4]
    with pytest.raises(InputError) as err:
        model_from_hf_config(config)
    assert err.value.field == "compress_ratios"
    config = load_catalogue_config("qwen3-30b-a3b")
    config["num_experts"] = "128"
    with pytest.raises(InputError) as err:
        model_from_hf_config(config)
    assert err.value.field == "num_experts"


def test_unknown_model_id() -> None:
    with pytest.raises(InputError) as err:
        load_model("llama-9000", source="job.yaml", field="model")
    assert err.value.field == "model" and "deepseek-v4-flash" in err.value.message
