"""A schedule is one module of perfmodel/schedules/: the registry finds it, and nothing else in the package
compares its name (the input schemas and the CLI list the registry)."""

from __future__ import annotations

import pkgutil
import re

import perfmodel.schedules as pkg
from perfmodel.schedules import SCHEDULES, Schedule, default_schedule
from tests.conftest import REPO


def test_every_schedule_module_registers_its_class() -> None:
    modules = {m.name for m in pkgutil.iter_modules(pkg.__path__)} - {"base"}
    assert {cls.__module__.rsplit(".", 1)[1] for cls in SCHEDULES.values()} == modules
    assert all(issubclass(cls, Schedule) and cls.name == name for name, cls in SCHEDULES.items())


def test_defaults_follow_vpp() -> None:
    assert default_schedule(1) == "1f1b" and default_schedule(4) == "interleaved"


def test_a_schedule_name_is_written_in_at_most_two_files() -> None:
    for name in SCHEDULES:
        quoted = re.compile(rf"""["']{re.escape(name)}["']""")
        files = [p for p in (REPO / "perfmodel").rglob("*.py") if quoted.search(p.read_text(encoding="utf-8"))]
        assert len(files) <= 2, (name, [str(p.relative_to(REPO)) for p in files])
