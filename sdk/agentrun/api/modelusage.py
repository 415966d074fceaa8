"""Model usage: the tokens an attempt's model calls used and what they cost, and the price
table that turns tokens into a cost.

*Usage* is what a worker reports of one model call after it returned: the model's name,
input and output tokens, and its cost in the run's currency. The SDK journals each report
as a ``usage`` record with the step it was made in, and keeps the attempt's running sum on
its Lease (:data:`ANNOTATION`) in the very write that makes those records durable, so the
sum is exactly what the journal's head reaches. The operator reads that sum when the
attempt ends and adds it up per attempt, slot and run (docs/design/usage.md).

A cost is kept in *micro-units* of its currency (integers: 1 USD is 1,000,000), so sums are
exact and comparable in CEL. The *price table* (``prices`` in the run's bindings, pinned
with the run like the rest of its configuration) gives each model's price per million
input and output tokens as a decimal string: a price per million units is exactly the
micro-units per token, so a cost is ``tokens * price``, rounded half up to a micro-unit
once per call.

Pure: the worker (to price and report) and the operator (to read and sum) share it.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pydantic import Field, JsonValue, field_validator

from agentrun.api import names
from agentrun.api.models import Model

ANNOTATION: Final = names.MODEL_USAGE_ANNOTATION
MAX_TOKENS: Final = 10**15  # tokens of one kind in one sum: 15 digits, exact in float64
MAX_COST_MICROS: Final = 10**15  # a billion units of a currency, in micro-units
MODEL_CHARS: Final = 128  # a model's name as a provider spells it
MODEL_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"
MAX_MODELS: Final = 64  # models one price table prices
# A price per million tokens: a decimal of at most 9 digits before the point and 6 after.
PRICE_PATTERN: Final = r"^(0|[1-9][0-9]{0,8})([.][0-9]{1,6})?$"
# The annotation: "<n> input tokens, <n> output tokens, <n> micro-<currency>". Admission
# checks the shape (CEL) and compares the numbers as CEL ints: 16 digits fit.
SHAPE: Final = (r"^[0-9]{1,16} input tokens, [0-9]{1,16} output tokens, [0-9]{1,16} "
                r"micro-[A-Z]{3}$")
_TEXT = re.compile(r"(?P<input>[0-9]{1,16}) input tokens, (?P<output>[0-9]{1,16}) output "
                   r"tokens, (?P<cost>[0-9]{1,16}) micro-(?P<currency>[A-Z]{3})")
DEFAULT_CURRENCY: Final = "USD"
# A step's key as a usage record names it: bounds.RECORD_KEY_CHARS, spelt here because the
# bounds import the configuration documents, which import the price table from here.
STEP_CHARS: Final = 63

# The active codes of ISO 4217 (the currencies a price table or a cost may name). A list of
# three-letter codes that changes once in years does not need a library (pycountry ships
# every ISO table, megabytes, to every worker); a code missing here is refused, not guessed.
CURRENCIES: Final = frozenset((
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT",
    "BGN", "BHD", "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD",
    "CDF", "CHF", "CLP", "CNY", "COP", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD",
    "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ",
    "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD", "JOD",
    "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR",
    "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR",
    "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN",
    "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR",
    "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB",
    "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS",
    "VES", "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
))


class UsageError(ValueError):
    """A usage report or a price table out of its bounds; the message says which and why."""


def check_currency(code: str) -> str:
    """``code`` if it is an active ISO 4217 code (``USD``, ``EUR``): else a clear error."""
    if code not in CURRENCIES:
        raise UsageError(f"currency {code!r} is not an ISO 4217 code in use (for example "
                         "USD, EUR, JPY)")
    return code


class ModelUsage(Model):
    """A sum of usage: tokens in and out, and their cost in micro-units of ``currency``.

    The sum of one attempt (on its Lease, and in its record in the slot's status), of a
    slot's attempts, or of a run's slots. Each count is bounded (:data:`MAX_TOKENS`,
    :data:`MAX_COST_MICROS`); a sum that would pass a bound stays at it (:meth:`plus`), so
    a stored sum never grows without bound, and says so (``saturated``).
    """

    input_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS,
                              description="tokens sent to models (prompts)")
    output_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS,
                               description="tokens models returned")
    cost_micros: int = Field(default=0, ge=0, le=MAX_COST_MICROS, description=(
        "the cost in millionths of the currency (1 USD = 1000000)"))
    currency: str = Field(default=DEFAULT_CURRENCY, pattern=r"^[A-Z]{3}$",
                          description="ISO 4217 code of the cost (the run's price table's)")
    saturated: bool | None = Field(default=None, description=(
        "true: a sum reached a bound (10^15) and stopped there"))

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def text(self) -> str:
        """The Lease's annotation (:data:`ANNOTATION`)."""
        return (f"{self.input_tokens} input tokens, {self.output_tokens} output tokens, "
                f"{self.cost_micros} micro-{self.currency}")

    def plus(self, other: ModelUsage) -> ModelUsage:
        """This sum and ``other`` (of the same currency: a caller sums only those)."""
        totals = (self.input_tokens + other.input_tokens,
                  self.output_tokens + other.output_tokens,
                  self.cost_micros + other.cost_micros)
        bounded = (min(totals[0], MAX_TOKENS), min(totals[1], MAX_TOKENS),
                   min(totals[2], MAX_COST_MICROS))
        saturated = True if (self.saturated or other.saturated or bounded != totals) else None
        return ModelUsage(input_tokens=bounded[0], output_tokens=bounded[1],
                          cost_micros=bounded[2], currency=self.currency, saturated=saturated)

    @classmethod
    def parse(cls, text: str) -> ModelUsage | None:
        """The annotation's sum; None when it does not parse (admission keeps it parseable)."""
        found = _TEXT.fullmatch(text)
        if found is None or found["currency"] not in CURRENCIES:
            return None
        numbers = int(found["input"]), int(found["output"]), int(found["cost"])
        if max(numbers) > MAX_TOKENS:
            return None
        return cls(input_tokens=numbers[0], output_tokens=numbers[1], cost_micros=numbers[2],
                   currency=found["currency"])

    @classmethod
    def on_lease(cls, lease: Mapping[str, Any] | None) -> ModelUsage | None:
        """The sum on an attempt's Lease; None when it has none (no usage reported)."""
        text = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
        return None if text is None else cls.parse(str(text))


def total(sums: Iterable[ModelUsage | None], *, currency: str | None = None) -> ModelUsage | None:
    """The sum of ``sums`` in ``currency`` (None: the first one's); a sum in another currency
    (only a worker bypassing the SDK can write one) is left out. None when there is none."""
    found: ModelUsage | None = None
    for usage in sums:
        if usage is None or (currency or (found and found.currency) or usage.currency) != (
                usage.currency):
            continue
        found = usage if found is None else found.plus(usage)
    return found


def growth(old: ModelUsage | None, new: ModelUsage | None) -> ModelUsage | None:
    """What the sum ``new`` adds to the earlier ``old`` of the same thing (an attempt's, a
    slot's); None when it adds nothing, or cannot have grown from it (another currency, a
    count smaller: only a stale read says so)."""
    if new is None or new == old:
        return None
    if old is None:
        return new
    if old.currency != new.currency:
        return None
    added = (new.input_tokens - old.input_tokens, new.output_tokens - old.output_tokens,
             new.cost_micros - old.cost_micros)
    if min(added) < 0 or max(added) == 0:
        return None
    return ModelUsage(input_tokens=added[0], output_tokens=added[1], cost_micros=added[2],
                      currency=new.currency)


class ModelPrice(Model):
    """One model's prices: currency units per million input and output tokens."""

    input_per_million: str = Field(pattern=PRICE_PATTERN, max_length=16)
    output_per_million: str = Field(pattern=PRICE_PATTERN, max_length=16)


class PriceTable(Model):
    """``prices`` in the run's bindings: the currency costs are kept in, and each model's
    prices. Pinned with the run (its bindings' snapshot), so a price change applies to runs
    launched after it, and a cost is never computed from code."""

    currency: str = Field(default=DEFAULT_CURRENCY, pattern=r"^[A-Z]{3}$")
    models: dict[str, ModelPrice] = Field(default_factory=dict, max_length=MAX_MODELS)

    @field_validator("currency")
    @classmethod
    def _known(cls, code: str) -> str:
        return check_currency(code)

    @field_validator("models")
    @classmethod
    def _named(cls, models: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        for name in models:
            check_model(name)
        return models

    def cost_micros(self, *, model: str, input_tokens: int, output_tokens: int) -> int | None:
        """The cost of a call of ``model`` in micro-units (rounded half up); None when the
        table does not price ``model``."""
        price = self.models.get(model)
        if price is None:
            return None
        exact = (decimal.Decimal(input_tokens) * decimal.Decimal(price.input_per_million)
                 + decimal.Decimal(output_tokens) * decimal.Decimal(price.output_per_million))
        return int(exact.quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


def check_model(name: str) -> str:
    """``name`` if it is a model's name within its bounds, else a clear error."""
    if not (0 < len(name) <= MODEL_CHARS and re.fullmatch(MODEL_PATTERN, name)):
        raise UsageError(f"a model's name is 1..{MODEL_CHARS} characters of letters, digits "
                         f"and ._:/@+- starting with a letter or digit, not {name[:80]!r}")
    return name


def micros(amount: decimal.Decimal | str | int | float) -> int:
    """``amount`` of a currency in micro-units (rounded half up). A float is taken by its
    shortest repr (``0.1`` is 100000), never its binary expansion."""
    try:
        exact = decimal.Decimal(repr(amount) if isinstance(amount, float) else amount)
    except decimal.InvalidOperation:
        raise UsageError(f"a cost is a decimal amount of the currency, not {amount!r}") from None
    if not exact.is_finite() or exact < 0:
        raise UsageError(f"a cost is a finite amount of at least 0, not {amount!r}")
    if exact * 1_000_000 > MAX_COST_MICROS:
        raise UsageError(f"a cost is at most {MAX_COST_MICROS // 1_000_000} units, "
                         f"not {amount!r}")
    return int((exact * 1_000_000).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


class Call(Model):
    """One model call's usage as its ``usage`` record holds it (inline): the model, the
    counts, the cost and, when it was made inside one, the step it was made in."""

    model: str = Field(max_length=MODEL_CHARS, pattern=MODEL_PATTERN)
    input_tokens: int = Field(ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(ge=0, le=MAX_TOKENS)
    cost_micros: int = Field(ge=0, le=MAX_COST_MICROS)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    step: str | None = Field(default=None, max_length=STEP_CHARS)

    def usage(self) -> ModelUsage:
        return ModelUsage(input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                          cost_micros=self.cost_micros, currency=self.currency)


def of_record(inline: Any) -> ModelUsage | None:
    """The usage a ``usage`` record's payload reports; None when it is not one (the SDK
    writes only well-formed ones; a stranger's is not counted)."""
    try:
        return Call.model_validate(inline).usage()
    except ValueError:
        return None


# A budget's cost (and a raise's): a positive decimal of at most 9 digits and 6 places.
BUDGET_COST_PATTERN: Final = r"^(0|[1-9][0-9]{0,8})([.][0-9]{1,6})?$"
CURRENCY_ENUM: Final[list[JsonValue]] = [*sorted(CURRENCIES)]


class Limits(Model):
    """Bounds on model usage: ``tokens`` (input and output together) and ``cost_micros``
    (None: that dimension is not bounded), in ``currency``. A run's budget in force, on each
    of its attempts' Leases (:data:`agentrun.api.names.BUDGET_ANNOTATION`, written by the
    operator when it creates one), against which the SDK checks the run's usage before a
    model call or an effect; and what a budget leaves (:func:`remaining`)."""

    tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    cost_micros: int | None = Field(default=None, ge=0, le=MAX_COST_MICROS)
    currency: str = Field(default=DEFAULT_CURRENCY, pattern=r"^[A-Z]{3}$")

    def text(self) -> str:
        return (f"{'none' if self.tokens is None else self.tokens} tokens, "
                f"{'none' if self.cost_micros is None else self.cost_micros} "
                f"micro-{self.currency}")

    @classmethod
    def parse(cls, text: str) -> Limits | None:
        found = _LIMITS.fullmatch(text)
        if found is None:
            return None

        def number(word: str) -> int | None:
            return None if word == "none" else min(int(word), MAX_TOKENS)
        return cls(tokens=number(found["tokens"]), cost_micros=number(found["cost"]),
                   currency=found["currency"])

    def reached(self, used: ModelUsage | None) -> str | None:
        """Why ``used`` is at or past these bounds, or None (a sum in another currency
        counts as nothing: it cannot be compared)."""
        spent = used if used is not None and used.currency == self.currency else ModelUsage(
            currency=self.currency)
        if self.tokens is not None and spent.tokens >= self.tokens:
            return f"{spent.tokens} tokens used of a budget of {self.tokens}"
        if self.cost_micros is not None and spent.cost_micros >= self.cost_micros:
            return (f"{spent.cost_micros / 1e6:.6f} {self.currency} spent of a budget of "
                    f"{self.cost_micros / 1e6:.6f}")
        return None


_LIMITS = re.compile(r"(?P<tokens>none|[0-9]{1,16}) tokens, (?P<cost>none|[0-9]{1,16}) "
                        r"micro-(?P<currency>[A-Z]{3})")


def remaining(*, tokens: int | None, cost_micros: int | None, currency: str,
              used: ModelUsage | None) -> Limits:
    """What a budget (``tokens``, ``cost_micros``; None: not bounded) leaves after ``used``
    (a sum in another currency counts as nothing: it cannot be compared)."""
    spent = used if used is not None and used.currency == currency else ModelUsage(
        currency=currency)
    return Limits(
        tokens=None if tokens is None else max(0, tokens - spent.tokens),
        cost_micros=None if cost_micros is None else max(0, cost_micros - spent.cost_micros),
        currency=currency)
