"""Whether pip has anything to do for the test suite. Exit 0 when every requirement of the package and of its test,
exec, report, ray and kernels extras is installed at a version that fits, with what each of those needs in turn
(their extras included), and perfmodel is installed editable from this clone with the console scripts
pyproject.toml names: scripts/install-test-deps.sh then skips pip, which takes about 25 s here to say it has
nothing to do. Exit 3 when only perfmodel's own install is off (another clone's, say): pip installs it alone
(--no-deps, 10 s). Exit 1, naming the first thing missing, otherwise: pip installs everything, so the repo's own
files still install what it needs."""

from __future__ import annotations

import json
import sys
import tomllib
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXTRAS = ("test", "exec", "report", "ray", "kernels")  # what install-test-deps.sh installs


def first_missing(repo: Path = REPO) -> tuple[str, bool] | None:
    """The first requirement not met, as a phrase, and whether it is perfmodel's own install (the rest in place);
    None when pip has nothing to do."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return "packaging (to read the requirements)", False
    project = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    todo += [Requirement(r) for extra in EXTRAS for r in project.get("optional-dependencies", {}).get(extra, [])]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        if str(req) in seen:
            continue
        seen.add(str(req))
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            return str(req), False
        if not req.specifier.contains(dist.version, prereleases=True):
            return f"{req} (installed: {dist.version})", False
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(sub)
    try:
        ours = metadata.distribution(project["name"])
    except metadata.PackageNotFoundError:
        return project["name"], True
    origin = json.loads(ours.read_text("direct_url.json") or "{}")
    if not origin.get("dir_info", {}).get("editable") or origin.get("url") != repo.as_uri():
        return f"{project['name']} installed editable from {repo}", True
    scripts = {ep.name: ep.value for ep in ours.entry_points if ep.group == "console_scripts"}
    if scripts != project.get("scripts", {}):
        return f"{project['name']}'s console scripts {sorted(project.get('scripts', {}))}", True
    return None


def main() -> int:
    missing = first_missing()
    if missing is None:
        return 0
    what, ours_only = missing
    print(f"    to install: {what}")
    return 3 if ours_only else 1


if __name__ == "__main__":
    sys.exit(main())
