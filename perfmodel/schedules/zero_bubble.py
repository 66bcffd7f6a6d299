"""ZB-H1 (Qi et al. 2024, arXiv 2401.10241): 1F1B order with B and W split; W fills the waits, which cuts the 1F1B
bubble to (p-1)(F+B-2W) at 1F1B's activation memory (docs/reference/hardware.md section 4: "activation x PP,
same as 1F1B"), so the base class's in-flight count holds."""

from __future__ import annotations

from perfmodel.schedules.base import Schedule


class ZeroBubbleH1(Schedule):
    name = "zb-h1"
    split_backward = True
    defer_w = True
