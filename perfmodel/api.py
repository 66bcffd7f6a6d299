"""The Python API: what the `perfmodel` commands do, as typed functions. The commands are a thin layer of flags
and printing over these; a notebook or a script calls them directly.

    import perfmodel
    from perfmodel.api import sweep                                  # perfmodel.sweep is the package
    result = perfmodel.simulate("examples/local-grpo.yaml")          # a case, plan or run file, a dict or a RunSpec
    result.metrics()["step_time_s"]
    ranking = sweep(out="sweeps/try1")                               # the embedded default sweep
    ranking.top[0]["plan_path"]                                      # what `executor launch --plan` takes
    report = perfmodel.validate()                                    # the bundled public cases
    cal = perfmodel.calibrate(["runs/case1.yaml", "runs/case2.yaml"], out="cal.yaml")

Bad input raises `perfmodel.errors.InputError` (file, field, what to fix), as the CLI prints it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from perfmodel.errors import InputError
from perfmodel.kernels.load import DEFAULT_ROWS_PER_TABLE

if TYPE_CHECKING:
    from perfmodel.calibration import Calibration
    from perfmodel.inputs.hardware import HardwareProfile
    from perfmodel.inputs.model import ModelSpec
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.serve import ServeRun
    from perfmodel.results import RunResult
    from perfmodel.sim.serving import ServeResult
    from perfmodel.sweep.run import SweepOutcome
    from perfmodel.sweep.spec import SweepSpec

RunLike: TypeAlias = "RunSpec | Mapping[str, Any] | str | PathLike"
CalibrationLike: TypeAlias = "Calibration | str | PathLike | None"
PathsLike: TypeAlias = "str | PathLike | Sequence[str | PathLike] | None"


def load_run(run: RunLike, source: str = "") -> tuple[RunSpec | ServeRun, str]:
    """A run from a file (case, plan, serving benchmark or run YAML/JSON), a mapping or a RunSpec; returns it with
    its source name."""
    from perfmodel.inputs.loading import parse
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.run_file import load_run_file
    from perfmodel.inputs.serve import ServeRun

    if isinstance(run, (RunSpec, ServeRun)):
        return run, source or "<run>"
    if isinstance(run, Mapping):
        model = ServeRun if run.get("kind") == "serve" else RunSpec
        return parse(model, dict(run), source or "<dict>"), source or "<dict>"
    path = str(run)
    return load_run_file(path), path


def _calibration(cal: CalibrationLike) -> Calibration | None:
    from perfmodel.calibration import load_calibration

    if cal is None or not isinstance(cal, (str, PathLike)):
        return cal
    return load_calibration(str(cal))


def simulate(run: RunLike, *, calibration: CalibrationLike = None, trace: bool = False, source: str = "",
             ) -> RunResult | ServeResult:
    """One step of the run (training, or an RL step with every phase): `.metrics()`, `.to_json()`, and with
    `trace=True` `.spans()` for a Perfetto trace (perfmodel.trace.write_trace); a serving benchmark (`kind: serve`)
    is run whole on the engine model (perfmodel/sim/serving.py: its metrics, and `.decode_step()`). `source` names
    the run in errors."""
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.predict import simulate_scenario

    spec, source = load_run(run, source)
    base = build_scenario(spec, source=source)
    cal = _calibration(calibration)
    if cal is not None:
        cal.check(base, source)
    if spec.kind == "serve" and trace:
        raise InputError(source, "--trace", "a serving benchmark has no step to trace; drop --trace")
    return simulate_scenario(cal.apply(base) if cal else base, record_trace=trace)  # a serving one: its ServeResult


@dataclass
class Ranking:
    """A sweep's result: the top rows (plans predicting the same grouped: `equal_plans`, `equal_knobs`), each with
    its `plan_path`; the counts (`outcome`: every candidate's row is in OUT/candidates.csv) and the files written."""

    spec: SweepSpec
    out: Path
    candidates: int
    outcome: SweepOutcome
    top: list[dict[str, Any]]
    report: Path | None = None
    files: list[Path] = field(default_factory=list)
    odds: dict[str, Any] | None = None  # how the top plans' p_best was drawn (summary.json's "odds")
    settle: dict[str, Any] | None = None  # the short run that would best settle the choice (perfmodel/sweep/settle.py)


def _sweep_inputs(spec: SweepSpec | str | PathLike | None, spec_path: str, calibration: CalibrationLike,
                  ) -> tuple[SweepSpec, str, HardwareProfile, Calibration | None, ModelSpec]:
    """The sweep file read (or the embedded default), its hardware and model, and a calibration applied: hardware
    parameters into the profile, stack parameters into every candidate's stack."""
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import check_moe_dispatchers, check_recompute_modules, resolve_model
    from perfmodel.inputs.stack import StackOptions, resolve_stack
    from perfmodel.sweep.spec import SweepSpec, default_sweep_path, load_sweep_spec, recompute_choice

    if isinstance(spec, SweepSpec):
        spec_path = spec_path or "<sweep spec>"
    else:
        spec_path = str(spec) if spec is not None else str(default_sweep_path())
        spec = load_sweep_spec(spec_path)
    hw = load_hardware(spec.hardware, source=spec_path)
    cal = _calibration(calibration)
    if cal is not None:
        hw = cal.hardware_profile(hw)
        stack = resolve_stack(spec.stack, StackOptions(**spec.stack_options) if spec.stack_options else None)
        options = cal.as_stack_options(stack.id, spec.stack_options, spec_path)
        if options:
            spec = spec.model_copy(update={"stack_options": options})
    model = resolve_model(RunSpec.model_construct(model=spec.model), spec_path)
    for choice in spec.space.recompute:  # a module the model lacks is the sweep file's error, not every plan's
        modules = recompute_choice(choice)[1]
        if modules:
            check_recompute_modules(modules, model, spec_path, "space.recompute")
    check_moe_dispatchers(spec.space.moe_dispatcher, hw, spec_path, "space.moe_dispatcher")  # likewise
    return spec, spec_path, hw, cal, model


def sweep(spec: SweepSpec | str | PathLike | None = None, *, spec_path: str = "", out: str | PathLike | None = None,
          top: int = 5,
          workers: int | None = None, ray_address: str | None = None, cache: bool = True,
          calibration: CalibrationLike = None, band: bool = False, report: bool = True, sample: int | None = None,
          progress: Callable[[int, int], None] | None = None, on_start: Callable[[int, Path], None] | None = None,
          ) -> Ranking:
    """Enumerate, prune and simulate every candidate plan of the sweep (a file, a SweepSpec, or None for the
    embedded default; `spec_path` names a given SweepSpec's file in messages), rank them, and write OUT (default
    sweeps/<time stamp>): candidates.csv, summary.json, plans/rank*.yaml, best_trace.json and report.html, each
    file atomically, the folder locked while written. `sample`: evaluate that many candidates drawn at random (a
    space too wide to sweep whole). `progress(done, total)` is called as candidates finish; `on_start(candidates,
    out)` once they are enumerated. Interrupted (Ctrl-C, SIGTERM), it writes what was evaluated, marked so."""
    from perfmodel.files import FolderLock, writable_folder
    from perfmodel.signals import HeldSignals
    from perfmodel.sweep.cache import ResultCache, default_cache_path
    from perfmodel.sweep.folder import write_sweep_folder
    from perfmodel.sweep.run import evaluate_candidates
    from perfmodel.sweep.space import check_job, enumerate_candidates, select_candidates

    spec, spec_path, hw, cal, model = _sweep_inputs(spec, spec_path, calibration)
    moe = [layer.ffn for layer in model.layers if layer.ffn.kind == "moe"]
    out_dir = writable_folder(out or Path("sweeps") / time.strftime("%Y%m%d-%H%M%S"), "--out")
    with FolderLock(out_dir):
        if (out_dir / "candidates.csv").exists():  # never overwrite an earlier sweep's results
            raise InputError(str(out_dir), "--out", "holds an earlier sweep's results; choose another folder")
        sizes = (hw.gpus_per_node, moe[0].num_experts if moe else 0, model.num_layers)
        total, candidates = select_candidates(spec, spec_path, *sizes, sample)
        check_job(next(enumerate_candidates(spec, *sizes)).run, spec_path)
        if on_start:
            on_start(total, out_dir)
        result_cache = ResultCache(default_cache_path()) if cache else None
        model_key = json.dumps(spec.model.model_dump(), sort_keys=True)
        with HeldSignals() as held:  # from the end of evaluation (or its interrupt) until the folder is written
            try:
                outcome = evaluate_candidates(spec, candidates, hw, model, model_key, workers=workers,
                                              ray_address=ray_address, cache=result_cache, progress=progress,
                                              on_evaluated=held.hold, total=total)
            finally:
                if result_cache:
                    result_cache.close()
            try:
                top_rows, files, said = write_sweep_folder(out_dir, spec, spec_path, outcome, hw, cal, top=top,
                                                           band=band)
            finally:
                outcome.rows.close()
        html = None
        if report and top_rows and not outcome.interrupted:
            from perfmodel.report.capacity import build_report

            html = Path(build_report(out_dir, out_html=out_dir / "report.html"))
            files.append(html)
    return Ranking(spec, out_dir, outcome.candidates, outcome, top_rows, html, files, said["odds"], said["settle"])


@dataclass
class ValidationReport:
    """Every scored figure (`rows`: id, metric, measured, predicted, rel_error[, p10, p90]), the cases the model
    could not predict with why (`failed`), the error statistics (`summary`, with `by_kind`), and how the
    predictions order measured pairs (`pairs`, validation_pairs.py)."""

    rows: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    summary: dict[str, Any]
    stacks: dict[str, Any]
    pairs: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"cases": self.rows, "failed": self.failed, "stacks": self.stacks, "summary": self.summary,
                "pairs": self.pairs}


def case_inputs(paths: PathsLike) -> list[str]:
    """Case files or folders as given, or the bundled public cases for None."""
    from perfmodel.validation import default_cases_dir

    if paths is None:
        d = default_cases_dir()
        if d is None:
            raise InputError("", "PATH", "give case files or folders (no bundled cases found)")
        return [str(d)]
    if isinstance(paths, (str, PathLike)):
        return [str(paths)]
    return [str(p) for p in paths]


def validate(cases: PathsLike = None, *, calibration: Sequence[str | PathLike] = (),
             band: bool = False) -> ValidationReport:
    """Score the model on measured runs (case files or folders; None: the bundled public cases), each overlay
    applied to the cases of its stack (and hardware)."""
    from perfmodel.validation import run_validation

    report = run_validation(case_inputs(cases), [str(c) for c in calibration], band=band)
    return ValidationReport(report["cases"], report["failed"], report["summary"], report["stacks"], report["pairs"])


def calibrate(cases: PathsLike, *, params: Sequence[str] | None = None, stack: str | None = None,
              hardware: str | None = None, hardware_params: Sequence[str] = (), out: str | PathLike | None = None,
              command: str = "") -> Calibration:
    """Fit one stack's knobs (default: every knob the runs' figures depend on) and optionally named hardware
    parameters (on `hardware`) to measured runs; parameters the runs do not inform are refused (`.refused`).
    Writes the overlay to `out` when given (simulate, sweep and validate take it as `calibration`)."""
    from perfmodel.calibration import fit_calibration, write_calibration
    from perfmodel.inputs.case import case_paths, load_case
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.inputs.stack import NUMERIC_KNOBS, TRAIN_FIT_KNOBS, resolve_stack

    given = case_inputs(cases)
    hw = load_hardware(hardware, field="--hardware") if hardware else None
    if hardware_params and hw is None:
        raise InputError("--hardware-params", "--hardware", "hardware parameters are fitted on one hardware: add "
                         "--hardware <id>")
    loaded = [(load_case(p), str(p)) for p in case_paths(given)]
    loaded = [(c, p) for c, p in loaded if hw is None or c.hardware == hw.id]
    stack_of = {p: resolve_stack(c.stack, c.stack_options, p).id for c, p in loaded}
    stacks = sorted(set(stack_of.values()))
    if stack:
        loaded = [(c, p) for c, p in loaded if stack_of[p] == stack]
    elif len(stacks) > 1:
        raise InputError(", ".join(given), "stack", f"the runs are priced with {len(stacks)} stacks "
                         f"({', '.join(stacks)}); choose one with --stack")
    if not loaded:
        where = f" on {hw.id}" if hw else ""
        raise InputError(", ".join(given), "stack", f"no measured run of stack {stack or stacks}{where} "
                         f"among the given cases (stacks there: {', '.join(stacks) or 'none'})")
    names = list(params or (NUMERIC_KNOBS if any(c.rl for c, _ in loaded) else TRAIN_FIT_KNOBS))
    cal = fit_calibration([c for c, _ in loaded], names, list(hardware_params), hardware=hw,
                          sources=[p for _, p in loaded], command=command)
    if out is not None:
        write_calibration(str(out), cal)
    return cal


def calibrate_kernels(tables: PathsLike, *, hardware: str, hardware_params: Sequence[str] = (),
                      out: str | PathLike | None = None, command: str = "",
                      rows_per_table: int | None = DEFAULT_ROWS_PER_TABLE) -> Calibration:
    """Fit `hardware`'s kernel parameters (default: those the tables' rows are priced with) to measured kernel
    tables (`executor bench-kernels` output, the project's CSV format, or aiconfigurator-core's folder, of which an
    evenly spaced sample of `rows_per_table` rows per table is read; None: every row); the usual overlay, written
    to `out` when given."""
    from perfmodel.calibration import write_calibration
    from perfmodel.calibration_kernels import fit_kernel_calibration
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.kernels.load import load_tables

    hw = load_hardware(hardware, field="--hardware")
    paths = [Path(p) for p in ([tables] if isinstance(tables, (str, PathLike)) else tables)]
    rows, problems = load_tables(paths, {hw.id}, rows_per_table)
    for line in problems:
        print(f"skipped: {line}", file=sys.stderr)
    cal = fit_kernel_calibration(rows, hw, list(hardware_params) or None, [str(p) for p in paths], command)
    if out is not None:
        write_calibration(str(out), cal)
    return cal
