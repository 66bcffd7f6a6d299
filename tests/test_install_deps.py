"""scripts/deps_installed.py: when install-test-deps.sh may skip pip, and that anything missing makes it run."""

from __future__ import annotations

from pathlib import Path

from scripts.deps_installed import REPO, first_missing


def _project(tmp_path: Path, dependencies: list[str], extras: str = "") -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "perfmodel"\ndependencies = [' + ", ".join(f'"{d}"' for d in dependencies) + "]\n"
        + extras + '[project.scripts]\nperfmodel = "perfmodel.cli:main"\nexecutor = "executor.cli:main"\n')
    return tmp_path


def test_this_clone_as_installed_needs_no_pip() -> None:
    assert first_missing(REPO) is None  # the suite runs here, after install-test-deps.sh


def test_a_version_that_does_not_fit_or_a_package_not_there_makes_pip_run(tmp_path: Path) -> None:
    what, ours_only = first_missing(_project(tmp_path, ["numpy>=999"]))
    assert what.startswith("numpy>=999 (installed: ") and not ours_only
    assert first_missing(_project(tmp_path, ["simpy", "no-such-package-xyz==1.0"])) == ("no-such-package-xyz==1.0",
                                                                                          False)
    extras = '[project.optional-dependencies]\ntest = ["pytest<1"]\n'
    assert first_missing(_project(tmp_path, ["simpy"], extras))[0].startswith("pytest<1 ")


def test_perfmodel_installed_from_another_folder_makes_pip_run(tmp_path: Path) -> None:
    # every dependency in place: pip installs perfmodel alone
    assert first_missing(_project(tmp_path, ["simpy"])) == (f"perfmodel installed editable from {tmp_path}", True)
