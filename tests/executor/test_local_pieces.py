"""Small pieces of the local backend: tokenizer assets, tasks and rewards, the HF name mapping, the trace file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from executor.backends.local import tokenizer as tok
from executor.backends.local.task import make_prompt, reward, sample_prompts
from executor.backends.local.tiny_model import TinyArch, is_quantizable
from executor.trace import TraceWriter


def test_shipped_tokenizer_matches_its_builder() -> None:
    pytest.importorskip("tokenizers")
    shipped = json.loads((tok.ASSETS_DIR / "tokenizer.json").read_text())
    assert shipped == json.loads(tok.build_tokenizer_json())
    assert len(shipped["model"]["vocab"]) == tok.VOCAB_SIZE == 64


def test_hf_tokenizer_is_character_level() -> None:
    transformers = pytest.importorskip("transformers")
    t = transformers.AutoTokenizer.from_pretrained(str(tok.ASSETS_DIR))
    assert t("3+4=").input_ids == tok.encode("3+4=")
    assert t.decode(tok.encode("ab c")) == "ab c"
    assert (t.bos_token_id, t.eos_token_id, t.pad_token_id) == (tok.BOS_ID, tok.EOS_ID, tok.PAD_ID)


@pytest.mark.parametrize("task", ["add", "add_mod", "copy", "reverse"])
def test_task_answers_are_exact(task: str) -> None:
    rng = random.Random(0)
    for p in sample_prompts(task, rng, 50):  # type: ignore[arg-type]
        assert reward(p.answer, p.answer) == 1.0
        assert reward(p.answer + "xyz", p.answer) == 1.0  # text after the answer is ignored
        assert reward("", p.answer) == 0.0
        assert p.token_ids[0] == tok.BOS_ID


def test_add_task_values() -> None:
    p = make_prompt("add", random.Random(3))
    a, b = p.text.rstrip("=").split("+")
    assert int(p.answer) == int(a) + int(b) <= 9
    assert reward("7", "7") == 1.0 and reward("8", "7") == 0.0 and reward("17", "7") == 0.0


def test_arch_from_hf_config_and_quantizable_names() -> None:
    cfg = {"architectures": ["MixtralForCausalLM"], "vocab_size": 64, "hidden_size": 128, "intermediate_size": 256,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4}
    arch = TinyArch.from_hf_config(cfg)
    assert arch.is_moe and arch.head_dim == 32 and arch.hf_config()["model_type"] == "mixtral"
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        TinyArch.from_hf_config({**cfg, "tie_word_embeddings": True})
    assert is_quantizable("model.layers.0.self_attn.q_proj.weight")
    assert is_quantizable("model.layers.1.block_sparse_moe.experts.3.w2.weight")
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                 "model.layers.0.input_layernorm.weight", "model.layers.0.block_sparse_moe.gate.weight"):
        assert not is_quantizable(name)


def test_trace_is_chrome_json(tmp_path: Path) -> None:
    tw = TraceWriter(tmp_path / "trace.json", origin_s=100.0)
    tw.span("rollout", 100.5, 0.25, pid=0, lane="rollout")
    tw.span("train", 100.75, 0.5, pid=1, lane="train")
    tw.flush()
    data = json.loads((tmp_path / "trace.json").read_text())
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    process = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    assert {(e["name"], e["ts"], e["dur"], process[e["pid"]]) for e in spans} == {
        ("rollout", 500000.0, 250000.0, "rank 0"), ("train", 750000.0, 500000.0, "rank 1")}
    assert all({"name", "ph", "ts", "dur", "pid", "tid"} <= set(e) for e in spans)
