"""`perfmodel sweep`: enumerate candidate plans, prune by rules and memory, simulate, rank, emit plans.

The package is also the API's `perfmodel.sweep(spec, ...)`: calling it runs perfmodel.api.sweep (a package and
a function cannot share the name `perfmodel.sweep` otherwise; its modules import as usual).
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from perfmodel.api import sweep

        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
