"""1F1B (PipeDream-Flush, Narayanan et al. 2021, arXiv 2104.04473 Sec. 2.2.1): the base class's order and
placement; the schedule of a run that names none and has one chunk per rank."""

from __future__ import annotations

from perfmodel.schedules.base import Schedule


class OneFOneB(Schedule):
    name = "1f1b"

    @classmethod
    def default_for(cls, vpp: int) -> bool:
        return vpp == 1
