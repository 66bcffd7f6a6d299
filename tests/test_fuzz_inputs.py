"""Property: random or corrupted inputs never raise anything but the project's own InputError."""

from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.errors import InputError
from perfmodel.inputs.case import load_case
from perfmodel.inputs.hardware import load_hardware_file
from perfmodel.inputs.scenario import build_scenario
from tests.conftest import CASES_DIR, REPO

BASE_CASES = [yaml.safe_load(p.read_text()) for p in sorted(CASES_DIR.glob("*.yaml"))]
BASE_HW = yaml.safe_load((REPO / "hwprofiles" / "mi355x.yaml").read_text())

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.just([]), st.just({}),
)
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c,
                                                                                                  max_size=3)),
                      max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _mutate(doc, data):
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = data.draw(values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=8))] = data.draw(values)
    return doc


def _load_and_resolve(path):
    case = load_case(path)
    build_scenario(case, source=str(path))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), base=st.sampled_from(BASE_CASES))
def test_corrupted_cases_raise_only_input_error(tmp_path, data, base):
    doc = _mutate(base, data)
    p = tmp_path / "case.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        _load_and_resolve(p)
    except InputError as err:
        assert "\n" not in str(err)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_random_text_files_raise_only_input_error(tmp_path, text):
    p = tmp_path / "case.yaml"
    p.write_text(text)
    try:
        _load_and_resolve(p)
    except InputError as err:
        assert "\n" not in str(err)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_hardware_profiles_raise_only_input_error(tmp_path, data):
    doc = _mutate(BASE_HW, data)
    p = tmp_path / "hw.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        load_hardware_file(p)
    except InputError as err:
        assert "\n" not in str(err)
