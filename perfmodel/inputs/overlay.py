"""The calibration overlay file (`perfmodel calibrate --out`, read by `--calibration`): its schema, so a hand-edited
or truncated overlay is refused with one line naming the field, as every other input is.

{stack, hardware, stack_params, hardware_params, uncertainty: {sigma_log, covariance_log: {names, matrix},
residual_sigma_log}, refused, fit, provenance, source}; the one-hardware format of earlier releases ({hardware,
params}) still loads. Parameter values are finite positive numbers; which names are valid is checked where they
apply (perfmodel/calibration.py: stack knobs, the hardware profile's calibratable names).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Assumption: a run's figures scatter about 10% around what the fitted parameters explain (weights the data
# against the prior in perfmodel/calibration.py; an overlay states the spread its fit actually left)
RUN_SIGMA_LOG = 0.10


class _Covariance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    names: list[str] = Field(default_factory=list)
    matrix: list[list[float]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _square(self) -> _Covariance:
        n = len(self.names)
        if self.matrix and (len(self.matrix) != n or any(len(row) != n for row in self.matrix)):
            raise ValueError(f"matrix must be {n} x {n}, one row and column per name")
        return self


class _Uncertainty(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sigma_log: dict[str, float] = Field(default_factory=dict)
    covariance_log: _Covariance = Field(default_factory=_Covariance)
    residual_sigma_log: float = Field(RUN_SIGMA_LOG, gt=0, allow_inf_nan=False)


class OverlayFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stack: str | None = None
    hardware: str | None = None
    stack_params: dict[str, float] = Field(default_factory=dict)
    hardware_params: dict[str, float] = Field(default_factory=dict)
    uncertainty: _Uncertainty = Field(default_factory=_Uncertainty)
    refused: dict[str, Any] = Field(default_factory=dict)
    fit: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _earlier_format(cls, data: Any) -> Any:
        if isinstance(data, dict) and "params" in data and "hardware_params" not in data:
            data = {**data, "hardware_params": data["params"]}
            del data["params"]
        return data

    @model_validator(mode="after")
    def _values_and_owners(self) -> OverlayFile:
        for key in ("stack_params", "hardware_params"):
            for name, value in getattr(self, key).items():
                if not (value > 0 and value < float("inf")):
                    raise ValueError(f"{key}.{name}: a parameter is a finite positive number, got {value}")
        if self.stack_params and not self.stack:
            raise ValueError("an overlay with stack_params names its stack id (stack: ...)")
        if self.hardware_params and not self.hardware:
            raise ValueError("an overlay with hardware_params names its hardware id (hardware: ...)")
        return self
