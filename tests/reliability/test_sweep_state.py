"""A sweep's folder, cache and printout under damage and misuse (issue 25): a damaged cache is set aside and the rest
used, a cached row that fails a fresh result's checks is recomputed, a folder is owned by one sweep at a time, a
wide space is refused with its size before it is built, the job is checked once up front, and every command
printed for pasting is one shell word per value."""

from __future__ import annotations

import json
import shlex
import sqlite3
from pathlib import Path

import pytest
import yaml

from perfmodel.api import sweep
from perfmodel.cli import main
from perfmodel.errors import InputError
from perfmodel.files import FolderLock
from perfmodel.inputs.bounds import MAX_SWEEP_CANDIDATES
from perfmodel.report.sweep_data import load_sweep, read_candidates
from perfmodel.sweep.cache import default_cache_path
from perfmodel.sweep.spec import SweepSpec, default_sweep_path

pytestmark = pytest.mark.xdist_group("sweep-cache")


@pytest.fixture(autouse=True)
def _few_odds_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the cache, the folder and the space, not the odds: 4 parameter draws instead of 32
    (the odds' re-pricing was 7 of a small sweep's 8.5 s; tests/sweep/test_odds.py checks the odds)."""
    monkeypatch.setattr("perfmodel.sweep.odds.PARAMETER_DRAWS", 4)


def small_sweep(tmp_path: Path, **space) -> Path:
    """A sweep file of a few dozen candidates (DSV4-Flash, four MI355X nodes)."""
    base = yaml.safe_load(default_sweep_path().read_text())
    base["nodes"] = [4]
    base["space"] = {"tp": [1, 2], "pp": [2, 4], "ep": [4, 8], "recompute": ["full"],
                     "optimizer_offload_fraction": [1.0], "engine_gpus": [8], "engine_ep": ["none"],
                     "rollout_fraction": [0.5]} | space
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def _best(out: Path) -> tuple[int, float]:
    top = json.loads((out / "summary.json").read_text())["top"][0]
    return top["index"], top["step_time_s"]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong shape", "scaled step", "not JSON"])
def test_a_damaged_cache_never_stops_a_sweep_or_ranks_a_wrong_row(damage: str, tmp_path: Path, capsys) -> None:
    spec = small_sweep(tmp_path)
    sweep(spec, out=tmp_path / "first", report=False)
    first = _best(tmp_path / "first")
    db_path = default_cache_path()
    if damage == "truncated":
        db_path.write_bytes(db_path.read_bytes()[: db_path.stat().st_size // 2])
        for side in ("-wal", "-shm"):
            Path(str(db_path) + side).unlink(missing_ok=True)
    elif damage == "garbage":
        db_path.write_bytes(b"not a database" * 300)
    else:
        db = sqlite3.connect(db_path)
        for key, row in db.execute("SELECT key, row FROM results").fetchall():
            r = json.loads(row)
            if damage == "wrong shape":
                text = "[1, 2]"
            elif damage == "not JSON":
                text = "{'step_time_s'"
            else:
                if r["status"] == "ok":  # its breakdown still sums to the true step: caught by the invariant
                    r["step_time_s"] *= 0.01
                text = json.dumps(r)
            db.execute("UPDATE results SET row = ? WHERE key = ?", (text, key))
        db.commit()
        db.close()
    capsys.readouterr()
    again = sweep(spec, out=tmp_path / "again", report=False)
    assert _best(tmp_path / "again") == first  # the damaged rows were recomputed, not ranked
    if damage in ("truncated", "garbage"):
        assert "set aside" in capsys.readouterr().err
        assert list(db_path.parent.glob("results.sqlite.damaged-*"))
    else:
        rejected, ok = again.outcome.rejected_cache_rows, again.outcome.evaluated
        assert rejected == (ok if damage == "scaled step" else again.candidates) and rejected + again.outcome.cached \
            == again.candidates


def test_a_folder_is_written_by_one_sweep_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with FolderLock(out), pytest.raises(InputError, match=r"being written by pid \d+"):
        sweep(small_sweep(tmp_path), out=out, report=False)
    sweep(small_sweep(tmp_path), out=out, report=False)  # released: the folder is free again
    with pytest.raises(InputError, match="earlier sweep"):
        sweep(small_sweep(tmp_path), out=out, report=False)


def test_a_space_past_the_limit_is_refused_with_its_size_and_sampled_on_request(tmp_path: Path) -> None:
    wide = small_sweep(tmp_path, tp=[1, 2, 4, 8], pp=[1, 2, 4, 8, 16], ep=[1, 2, 4, 8, 16, 32, 64],
                       recompute=["none", "selective", "full"], optimizer_offload_fraction=[0.0, 0.5, 1.0],
                       engine_gpus=[1, 2, 4, 8, 16, 32], engine_ep=["none", "full"], dp_attention=[False, True],
                       rollout_fraction=[0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875])
    data = yaml.safe_load(wide.read_text())
    data["nodes"] = [4, 8, 16, 32, 64, 128, 256]
    wide.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"space: [\d,]+ candidate plans, more than one sweep takes") as err:
        sweep(wide, out=tmp_path / "wide", report=False)
    total = int(str(err.value).split("space: ")[1].split(" ")[0].replace(",", ""))
    assert total > MAX_SWEEP_CANDIDATES
    assert not (tmp_path / "wide" / "candidates.csv").exists()
    ranking = sweep(wide, out=tmp_path / "sampled", report=False, sample=40, cache=False)
    indices = [r["index"] for r in read_candidates(tmp_path / "sampled" / "candidates.csv")]
    assert ranking.candidates == len(indices) == 40 and indices == sorted(indices)
    assert len(indices) == 40 and max(indices) < total and len(set(indices)) == 40


def test_a_job_typo_is_the_sweep_files_error_not_a_prune(tmp_path: Path, capsys) -> None:
    spec = small_sweep(tmp_path)
    spec.write_text(spec.read_text().replace("seq_len:", "seq_lenn:"))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "job.train.seq_lenn: unknown key; did you mean 'seq_len'?" in err and "Traceback" not in err


def test_a_sweep_where_nothing_fits_says_why_and_exits_2(tmp_path: Path, capsys) -> None:
    spec = small_sweep(tmp_path)
    spec.write_text(spec.read_text().replace("seq_len: 16384", "seq_len: 4000000"))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-report", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "no candidate plan is feasible" in err and "x " in err
    assert (tmp_path / "o" / "candidates.csv").is_file()  # what was found is kept


def test_printed_commands_paste_as_one_word_per_value(tmp_path: Path, capsys) -> None:
    out = tmp_path / "a $(touch pwned) 'q'"
    assert main(["sweep", str(small_sweep(tmp_path)), "--out", str(out), "--no-report"]) == 0
    lines = [ln.strip().split("  (")[0] for ln in capsys.readouterr().out.splitlines()
             if ln.strip().startswith(("executor launch", "perfmodel simulate"))]
    assert len(lines) == 3  # the settling launch, the best plan's simulate and its dry run
    for line in lines:
        words = shlex.split(line)
        plan = words[words.index("--plan") + 1] if "--plan" in words else words[2]
        assert Path(plan).is_file() and str(out) in plan
    with pytest.raises(InputError, match="control character"):
        sweep(small_sweep(tmp_path), out=tmp_path / "new\nline", report=False)


def test_outputs_that_cannot_be_written_are_refused_before_the_work(tmp_path: Path, capsys) -> None:
    (tmp_path / "afile").write_text("x")
    assert main(["sweep", str(small_sweep(tmp_path)), "--out", str(tmp_path / "afile")]) == 2
    plan = str(Path(__file__).resolve().parents[2] / "examples" / "local-grpo.yaml")
    assert main(["simulate", plan, "--trace", str(tmp_path / "missing" / "t.json")]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "does not exist" in err and "Traceback" not in err


def test_user_strings_print_as_typed_not_as_markup(tmp_path: Path, capsys) -> None:
    repo = Path(__file__).resolve().parents[2]
    text = (repo / "hwprofiles" / "cpu-local.yaml").read_text()
    hw = tmp_path / "hw.yaml"
    hw.write_text("\n".join('id: "cpu[/]x [link=https://e.vil]y"' if ln.startswith("id:") else ln
                            for ln in text.splitlines()))
    assert main(["simulate", str(repo / "examples" / "local-grpo.yaml"), "--hardware", str(hw)]) == 0
    assert "cpu[/]x [link=https://e.vil]y" in capsys.readouterr().out


def test_a_truncated_candidates_csv_is_refused_not_shown_as_the_sweep(tmp_path: Path) -> None:
    sweep(small_sweep(tmp_path), out=tmp_path / "s", report=False)
    csv_path = tmp_path / "s" / "candidates.csv"
    lines = csv_path.read_text().splitlines()
    csv_path.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    with pytest.raises(InputError, match="incomplete"):
        load_sweep(tmp_path / "s")


@pytest.mark.parametrize("space, field", [({"tp": [0]}, "space.tp"), ({"rollout_fraction": [float("nan")]},
                                                                      "space.rollout_fraction"),
                                          ({"engine_gpus": [2**40]}, "space.engine_gpus")])
def test_space_values_are_range_checked(space: dict, field: str) -> None:
    base = yaml.safe_load(default_sweep_path().read_text())
    base["space"] = space
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        from perfmodel.inputs.loading import parse

        parse(SweepSpec, base, "s.yaml")
