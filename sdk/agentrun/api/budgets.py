"""A run's budget: what it may spend on model calls (``spec.budget``), and the budget in
force (``status.budget``): docs/design/usage.md."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from agentrun.api import bounds, modelusage
from agentrun.api.models import Model
from agentrun.api.modelusage import ModelUsage

BUDGET_KEPT: JsonDict = {
    "rule": "has(self.budget) == has(oldSelf.budget)",
    "message": "spec.budget is set when a run is created and never after: raise it with "
               "kubectl agentrun budget <run> --add ... --reason R",
}


class Budget(Model):
    """What a run may spend on model calls: ``tokens`` (input and output together) and/or
    ``cost`` (a decimal amount of ``currency``, the run's price table's). Read when the run
    is pinned; raised only by the budget command (the ledger says who and why), so it is
    immutable here."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "has(self.tokens) || has(self.cost)",
         "message": "a budget names tokens, cost or both"},
        {"rule": "!has(self.cost) || double(self.cost) > 0.0",
         "message": "spec.budget.cost is more than 0"}]})

    tokens: int | None = Field(default=None, ge=1, le=modelusage.MAX_TOKENS,
                               description="model tokens, input and output together")
    cost: str | None = Field(default=None, max_length=16,
                             pattern=modelusage.BUDGET_COST_PATTERN,
                             description="a decimal amount of the currency, e.g. 12.50")
    currency: str | None = Field(
        default=None, json_schema_extra={"enum": modelusage.CURRENCY_ENUM},
        description="ISO 4217; the run's price table's (bindings prices.currency), its "
        "default")

    @model_validator(mode="after")
    def _bounded(self) -> Budget:
        """The CRD's rules, for a budget read elsewhere (a namespace's default)."""
        if self.tokens is None and self.cost is None:
            raise ValueError("a budget names tokens, cost or both")
        if self.cost is not None and modelusage.micros(self.cost) == 0:
            raise ValueError("spec.budget.cost is more than 0")
        if self.currency is not None:
            modelusage.check_currency(self.currency)
        return self


class BudgetStatus(Model):
    """The run's budget in force: ``spec.budget`` as read when the run was pinned (its cost
    in micro-units of ``currency``, the price table's), plus every accepted raise."""

    tokens: int | None = Field(default=None, ge=0, le=modelusage.MAX_TOKENS,
                               description="model tokens, input and output together; "
                               "absent: no token limit")
    cost_micros: int | None = Field(default=None, ge=0, le=modelusage.MAX_COST_MICROS,
                                    description="in millionths of the currency; absent: no "
                                    "cost limit")
    currency: str = Field(default=modelusage.DEFAULT_CURRENCY, pattern=r"^[A-Z]{3}$",
                          description="ISO 4217 code of the cost (the price table's)")
    raises: int = Field(default=0, ge=0, le=bounds.MAX_REVISION,
                        description="accepted raises (kubectl agentrun budget)")

    def limits(self) -> modelusage.Limits:
        """The budget as the bounds the SDK checks (on each attempt's Lease)."""
        return modelusage.Limits(tokens=self.tokens, cost_micros=self.cost_micros,
                                 currency=self.currency)

    def left(self, used: ModelUsage | None) -> modelusage.Limits:
        """What it leaves after ``used``."""
        return modelusage.remaining(tokens=self.tokens, cost_micros=self.cost_micros,
                                    currency=self.currency, used=used)
