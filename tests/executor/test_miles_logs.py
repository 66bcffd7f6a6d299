"""The Miles perf-log parser on lines shaped like a real Ray job log of Miles.

Formats (radixark/miles 31f1ca961): `miles/utils/train_metric_utils.py` and `miles/ray/rollout/metrics.py` log
`perf {rollout_id}: {log_dict}`; `miles/backends/megatron_utils/model.py` logs `step {id}: {log_dict}`; the logger
prefix is `[%(asctime)s.%(msecs)03d {name}] %(filename)s:%(lineno)d - ` and Ray adds `(Actor pid=..)` in colour.
The values below are the GB300 warm step of bobboli/miles RESULTS_2026-08-09.md.
"""

from __future__ import annotations

import math

import pytest

from executor.backends.miles.logs import MilesLogParser, clean_line, parse_metric_line, parse_miles_log

ROLLOUT_0 = (
    "\x1b[36m(RolloutManager pid=2210)\x1b[0m [2026-08-09 10:01:02.123 rollout_manager] metrics.py:89 - perf 0: "
    "{'rollout/response_len/mean': 3020.41, 'rollout/response_len/median': 4096.0, 'rollout/response_len/max': 4096.0, "
    "'rollout/response_len/min': 212.0, 'rollout/zero_std/count_0.0': 3, 'rollout/repetition_frac': 0.0390625, "
    "'rollout/truncated_ratio': 0.6015625, 'perf/rollout_time': 71.48, 'perf/tokens_per_gpu_per_sec': 338.02, "
    "'perf/longest_sample_tokens_per_sec': 57.30, 'perf/effective_tokens_per_gpu_per_sec': 338.02, "
    "'passrate/pass@1': 0.39}"
)
TRAIN_0 = (
    "\x1b[36m(MegatronTrainRayActor pid=4121, ip=10.0.0.2)\x1b[0m [2026-08-09 10:06:36.001 actor-0] "
    "train_metric_utils.py:56 - perf 0: {'perf/update_weights_time': 63.1, 'perf/sleep_time': 3.2, "
    "'perf/wake_up_time': 3.01, 'perf/train_wait_time': 157.55, 'perf/data_preprocess_time': 0.41, "
    "'perf/log_probs_time': 76.22, 'perf/actor_train_time': 100.45, 'perf/train_time': 177.15, "
    "'perf/actor_train_tflops': 101.3, 'perf/actor_train_tok_per_s': 8059.86, 'perf/mfu_peak_tflops': 2500.0, "
    "'perf/actor_train_mfu': 0.04052, 'perf/step_time': 334.7, 'perf/wait_time_ratio': 0.4707}"
)
STEP_0 = (
    "(MegatronTrainRayActor pid=4121, ip=10.0.0.2) [2026-08-09 10:06:35.800 actor-0] model.py:854 - step 0: "
    "{'train/loss': -0.0123, 'train/pg_loss': -0.0123, 'train/train_rollout_logprob_abs_diff': 0.0217681, "
    "'train/train_rollout_kl': 0.0023359, 'train/grad_norm': 0.31, 'train/lr-pg_0': 1e-06, 'train/step': 0}"
)
EVAL_0 = ("(RolloutManager pid=2210) [2026-08-09 10:00:01.000 rollout_manager] metrics.py:53 - eval 0: "
          "{'eval/aime': 0.39, 'eval/aime-truncated_ratio': 0.6, 'eval/aime-pass@8': 0.53}")


def test_parse_rollout_line():
    m = parse_metric_line(ROLLOUT_0)
    assert m is not None and m.tag == "perf" and m.index == 0
    assert m.metrics["perf/rollout_time"] == 71.48
    assert m.metrics["rollout/zero_std/count_0.0"] == 3.0


def test_clean_line_strips_colour_and_dedup():
    line = "\x1b[36m(pid=1)\x1b[0m perf 2: {'perf/rollout_time': 1.0} [repeated 3x across cluster]"
    assert clean_line(line) == "(pid=1) perf 2: {'perf/rollout_time': 1.0}"
    assert parse_metric_line(line).metrics == {"perf/rollout_time": 1.0}


def test_full_step_measurement():
    steps = parse_miles_log([EVAL_0, ROLLOUT_0, "Timer actor_train end (elapsed: 100.4s)", STEP_0, TRAIN_0])
    assert len(steps) == 1
    s = steps[0]
    assert s["step"] == 0 and s["complete"]
    assert s["rollout_time_s"] == 71.48
    assert s["log_probs_time_s"] == 76.22
    assert s["train_time_s"] == 100.45
    assert s["weight_update_time_s"] == pytest.approx(63.1 + 3.2 + 3.01)  # sleep + update + wake = 69.31
    assert s["update_weights_time_s"] == 63.1
    assert s["step_time_s"] == 334.7
    assert s["train_wait_time_s"] == 157.55
    assert s["rollout_tokens_per_gpu_s"] == 338.02
    assert s["train_tokens_per_s"] == 8059.86
    assert s["tflops_per_gpu"] == 101.3
    assert s["mfu"] == 0.04052
    assert s["response_len_mean"] == 3020.41
    assert s["truncated_ratio"] == 0.6015625
    assert s["train_rollout_logprob_abs_diff"] == 0.0217681
    assert s["train_rollout_kl"] == 0.0023359
    assert s["perf"]["perf/data_preprocess_time"] == 0.41


def test_ref_log_probs_count_as_log_probs():
    line = "perf 4: {'perf/log_probs_time': 10.0, 'perf/ref_log_probs_time': 9.0, 'perf/actor_train_time': 20.0}"
    (s,) = parse_miles_log([line])
    assert s["log_probs_time_s"] == 19.0 and s["ref_log_probs_time_s"] == 9.0
    assert not s["complete"]  # no rollout-side line, still reported


def test_a_negative_figure_is_not_a_measurement():
    """A damaged line (the fuzz test found `'perf/train_time': -177.15`) gives no negative duration: the figure is
    dropped, the others kept."""
    line = TRAIN_0.replace("'perf/train_time': 177.15", "'perf/train_time': -177.15").replace(
        "'perf/sleep_time': 3.2", "'perf/sleep_time': -3.2")
    (s,) = parse_miles_log([ROLLOUT_0, line])
    assert "train_phase_time_s" not in s and s["step_time_s"] == 334.7
    assert s["weight_update_time_s"] == pytest.approx(63.1 + 3.01)


def test_async_order_and_incremental_emission():
    """train_async.py: rollout N+1 is logged before training N finishes; records complete in step order."""
    p = MilesLogParser()
    lines = [
        "[t] metrics.py:89 - perf 0: {'perf/rollout_time': 50.0}",
        "[t] metrics.py:89 - perf 1: {'perf/rollout_time': 40.0}",
        "[t] train_metric_utils.py:56 - perf 0: {'perf/actor_train_time': 30.0, 'perf/step_time': 80.0}",
        "[t] metrics.py:89 - perf 2: {'perf/rollout_time': 41.0}",
        "[t] train_metric_utils.py:56 - perf 1: {'perf/actor_train_time': 31.0, 'perf/step_time': 45.0}",
    ]
    emitted = [[m["step"] for m in p.feed_line(x)] for x in lines]
    assert emitted == [[], [], [0], [], [1]]
    assert p.finish() == []  # rollout 2 was never trained: not a step
    assert [m["step"] for m in p.measurements()] == [0, 1]


def test_chunks_split_mid_line():
    text = "\n".join([ROLLOUT_0, STEP_0, TRAIN_0]) + "\n"
    p = MilesLogParser()
    got = []
    for i in range(0, len(text), 37):
        got += p.feed(text[i:i + 37])
    got += p.finish()
    assert [m["step"] for m in got] == [0]
    assert got[0]["train_time_s"] == 100.45


def test_last_line_without_newline_is_parsed_by_finish():
    p = MilesLogParser()
    assert p.feed("perf 0: {'perf/rollout_time': 5.0}\nperf 0: {'perf/actor_train_time': 2.0}") == []
    (m,) = p.finish()
    assert m["complete"] and m["train_time_s"] == 2.0


def test_numpy_and_tensor_reprs_and_nan():
    line = ("perf 3: {'perf/rollout_time': np.float64(12.5), 'perf/actor_train_time': tensor(7.25, device='cuda:0'), "
            "'perf/wait_time_ratio': nan, 'perf/step_time': -inf, 'flag': True, 'name': 'x', 'list': [1, 2]}")
    m = parse_metric_line(line)
    assert m.metrics["perf/rollout_time"] == 12.5
    assert m.metrics["perf/actor_train_time"] == 7.25
    assert math.isnan(m.metrics["perf/wait_time_ratio"])
    assert "flag" not in m.metrics and "name" not in m.metrics and "list" not in m.metrics
    (s,) = parse_miles_log([line])
    assert "wait_time_ratio" not in s and "step_time_s" not in s  # non-finite values are not measurements


def test_unparseable_repr_falls_back_to_number_pairs():
    line = "perf 5: {'perf/rollout_time': 1.5, 'obj': <Foo object at 0x7f>, 'perf/actor_train_time': 2.5e1}"
    m = parse_metric_line(line)
    assert m.metrics == {"perf/rollout_time": 1.5, "perf/actor_train_time": 25.0}


def test_multi_step_rollout_maps_optimizer_steps_to_rollouts():
    p = MilesLogParser(num_steps_per_rollout=2)
    for x in ["step 2: {'train/train_rollout_logprob_abs_diff': 0.1}",
              "step 3: {'train/train_rollout_logprob_abs_diff': 0.3}",
              "perf 1: {'perf/rollout_time': 1.0}", "perf 1: {'perf/actor_train_time': 2.0}"]:
        p.feed_line(x)
    (m,) = p.measurements()
    assert m["step"] == 1 and m["train_rollout_logprob_abs_diff"] == pytest.approx(0.2)


@pytest.mark.parametrize("line", [
    "",
    "Timer train end (elapsed: 177.2s)",
    "perf 0: not a dict",
    "[CPU memory] after_train: 812.00 GB (rollout_id=0, step=0)",
    "superperf 1: {'perf/rollout_time': 1.0}",
    "eval 0 skipped: no_snapshot",
])
def test_non_metric_lines(line):
    assert parse_metric_line(line) is None


def test_eval_lines_are_kept_apart():
    p = MilesLogParser()
    p.feed_line(EVAL_0)
    assert p.eval == {0: {"eval/aime": 0.39, "eval/aime-truncated_ratio": 0.6, "eval/aime-pass@8": 0.53}}
    assert p.measurements() == []


def test_a_rollout_only_run_records_a_step_per_rollout_line():
    """--debug-rollout-only logs no training side: its parser records each rollout as a step (the rollout's time,
    nothing else); a whole run's parser still waits for the training side."""
    lines = ["[t] metrics.py:89 - perf 0: {'perf/rollout_time': 50.0}",
             "[t] metrics.py:89 - perf 1: {'perf/rollout_time': 40.0}"]
    alone, whole = MilesLogParser(rollout_only=True), MilesLogParser()
    assert [[m["step"] for m in alone.feed_line(x)] for x in lines] == [[0], [1]]
    assert [m.get("rollout_time_s") for m in alone.measurements()] == [50.0, 40.0]
    assert all("step_time_s" not in m and "train_time_s" not in m for m in alone.measurements())
    assert [whole.feed_line(x) for x in lines] == [[], []] and whole.finish() == []
    late = MilesLogParser(rollout_only=True)
    late.feed(lines[0])  # no newline yet: the line is whole only when the log ends
    assert [m["step"] for m in late.finish()] == [0]
