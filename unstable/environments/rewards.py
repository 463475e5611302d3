"""Reward functions: plain callables that score completions, with dataset fields injected by parameter name.

For example::

    @reward_function(weight=0.5)                       # completion kind: gets prompt and completion
    def exact(completion: str, answer: str) -> float:  # `answer` is the dataset item's field
        return float(completion.strip() == answer)

A completion function is offered ``prompt`` and ``completion`` (str); a conversation function
(``@conversation_reward_function``) ``conversation`` (``{"role", "name", "content"}`` dicts) and
``actor_name``. Its other parameters are dataset fields of the same name. It is passed, by keyword,
only the parameters it declares (everything with ``**kwargs``). A batched function is called once,
each argument a list over the items, and returns one value per item. Values must be finite real
numbers: an item's total is ``sum(weight * value)``, its components (metric ``reward/<name>``) the
unweighted values. Environments call ``check_reward_functions`` when built, so a missing field fails
then, not mid-run.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import math
import numbers
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

Kind = Literal["completion", "conversation"]
PROVIDED: dict[str, tuple[str, ...]] = {
    "completion": ("prompt", "completion"),
    "conversation": ("conversation", "actor_name"),
}
RewardFn = Callable[..., Any]
Decorator = Callable[[RewardFn], "RewardFunction"]
_DECORATOR = {"completion": "@reward_function", "conversation": "@conversation_reward_function"}
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class RewardFunctionError(RuntimeError):
    """A reward function returned something that is not a finite real number (or not one per item)."""


@dataclass(frozen=True, slots=True)
class RewardScores:
    """One item's rewards: the weighted ``total`` and the unweighted value of each function by name.

    :func:`score` returns one per item; an environment that scores itself makes its own
    (``RewardScores(total=1.0, components={"solved": 1.0})``) and hands them to ``TaskEnvironment.record``,
    which makes ``total`` the seat's final reward and logs each component as ``.../reward/<name>``."""

    total: float
    components: dict[str, float]


@dataclass(frozen=True, slots=True)
class RewardFunction:
    """A reward callable with its name, weight and kind; the fields it reads come from its signature.

    ``fields`` are the dataset fields it requires, ``optional_fields`` those with a default (used when
    the item lacks them), ``takes_any`` says it has ``**kwargs`` and so receives every field.
    Still callable like the function it wraps.
    """

    fn: RewardFn
    name: str
    weight: float = 1.0
    kind: Kind = "completion"
    batched: bool = False
    is_async: bool = field(init=False)
    fields: tuple[str, ...] = field(init=False)
    optional_fields: tuple[str, ...] = field(init=False)
    takes_any: bool = field(init=False)
    params: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Every parameter it names, provided ones included: what it is passed (without ``**kwargs``)."""
    required: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The parameters without a default: an item must have each of them."""

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ValueError(f"a reward function must be callable, got {self.fn!r}")
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"reward function name must be a non-empty string of letters, digits, '_', '.' or '-' "
                f"(it becomes the metric key reward/<name>), got {self.name!r}"
            )
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise ValueError(f"reward function {self.name!r}: weight must be a finite number, got {weight!r}")
        if self.kind not in PROVIDED:
            raise ValueError(f"reward function {self.name!r}: kind must be 'completion' or 'conversation'")
        if not isinstance(self.batched, bool):
            raise ValueError(f"reward function {self.name!r}: batched must be True or False, got {self.batched!r}")
        set_ = object.__setattr__
        set_(self, "weight", float(weight))
        set_(self, "is_async", _is_async(self.fn))
        params, required, optional, takes_any = [], [], [], False
        for p in inspect.signature(self.fn).parameters.values():
            if p.kind is p.POSITIONAL_ONLY or p.kind is p.VAR_POSITIONAL:
                shown = f"*{p.name}" if p.kind is p.VAR_POSITIONAL else f"positional-only '{p.name}'"
                raise ValueError(
                    f"reward function {self.name!r} takes {shown}, but its arguments are passed by keyword: "
                    f"name each field it reads as a parameter (or take **kwargs for all of them)"
                )
            if p.kind is p.VAR_KEYWORD:
                takes_any = True
                continue
            params.append(p.name)
            if p.default is p.empty:
                required.append(p.name)
            elif p.name not in PROVIDED[self.kind]:
                optional.append(p.name)
        set_(self, "params", tuple(params))
        set_(self, "required", tuple(required))
        set_(self, "fields", tuple(n for n in required if n not in PROVIDED[self.kind]))
        set_(self, "optional_fields", tuple(optional))
        set_(self, "takes_any", takes_any)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _is_async(fn: RewardFn) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _decorate(
    fn: RewardFn | None, kind: Kind, name: str | None, weight: float, batched: bool
) -> RewardFunction | Decorator:
    def wrap(f: RewardFn) -> RewardFunction:
        label = name
        if label is None and callable(f):
            label = getattr(f, "__name__", None)
            if label is None or label == "<lambda>":
                raise ValueError(
                    f"reward function {f!r} has no name to report its reward under: "
                    f"give one with {_DECORATOR[kind][1:]}(fn, name='...')"
                )
        return RewardFunction(f, label, weight, kind, batched)  # type: ignore[arg-type]

    return wrap if fn is None else wrap(fn)


@overload
def reward_function(
    fn: RewardFn, *, name: str | None = ..., weight: float = ..., batched: bool = ...
) -> RewardFunction: ...
@overload
def reward_function(
    fn: None = None, *, name: str | None = ..., weight: float = ..., batched: bool = ...
) -> Decorator: ...
def reward_function(
    fn: RewardFn | None = None, *, name: str | None = None, weight: float = 1.0, batched: bool = False
) -> RewardFunction | Decorator:
    """Make ``fn`` a completion reward function (given ``prompt``, ``completion`` and the fields it names).

    Use bare (``@reward_function``) or with arguments (``@reward_function(name=..., weight=...)``).
    Returns a ``RewardFunction``, or a decorator that makes one when ``fn`` is not given.
    """
    return _decorate(fn, "completion", name, weight, batched)


@overload
def conversation_reward_function(
    fn: RewardFn, *, name: str | None = ..., weight: float = ..., batched: bool = ...
) -> RewardFunction: ...
@overload
def conversation_reward_function(
    fn: None = None, *, name: str | None = ..., weight: float = ..., batched: bool = ...
) -> Decorator: ...
def conversation_reward_function(
    fn: RewardFn | None = None, *, name: str | None = None, weight: float = 1.0, batched: bool = False
) -> RewardFunction | Decorator:
    """Make ``fn`` a conversation reward function (given ``conversation``, ``actor_name`` and its fields)."""
    return _decorate(fn, "conversation", name, weight, batched)


def as_reward_function(obj: RewardFunction | RewardFn) -> RewardFunction:
    """A ``RewardFunction`` as is; a plain callable as a completion reward function of weight 1."""
    if isinstance(obj, RewardFunction):
        return obj
    return reward_function(obj)


def _checked_list(functions: Iterable[RewardFunction | RewardFn], where: str) -> list[RewardFunction]:
    if isinstance(functions, str) or not isinstance(functions, Iterable):
        raise ValueError(f"{where} takes a list of reward functions, got {functions!r}")
    out = []
    for obj in functions:
        if not callable(obj):
            raise ValueError(f"{where}: reward function {obj!r} is not callable")
        out.append(as_reward_function(obj))
    names = [f.name for f in out]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ValueError(
            f"{where}: two reward functions are named {twice!r}; give each its own name=... "
            f"(the name is its metric key reward/<name>)"
        )
    return out


def check_reward_functions(
    functions: Iterable[RewardFunction | RewardFn],
    fields: Iterable[str],
    *,
    kinds: Iterable[Kind] = ("completion", "conversation"),
    where: str,
) -> list[RewardFunction]:
    """Check the reward functions an environment was given against the fields its items have.

    ``where`` names the environment in the messages. Raises ``ValueError`` for an empty list, a
    non-callable, two functions of one name, a kind the environment does not take, or a required
    field its items lack. Returns the functions as ``RewardFunction`` objects.
    """
    out = _checked_list(functions, where)
    if not out:
        raise ValueError(f"{where} needs at least one reward function")
    if isinstance(fields, str):
        raise ValueError(f"{where}: fields must be a list of field names, got the string {fields!r}")
    fields = list(dict.fromkeys(fields))
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    for f in out:
        if f.kind not in kinds:
            taken = " or ".join(f"{k} ({_DECORATOR[k]})" for k in kinds)
            raise ValueError(
                f"reward function {f.name!r} is a {f.kind} reward function, but {where} takes only {taken} "
                f"reward functions"
            )
        missing = next((n for n in f.fields if n not in fields), None)
        if missing is not None:
            close = difflib.get_close_matches(missing, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"reward function {f.name!r} needs the field {missing!r}, which {where} does not have; "
                f"its fields are: {', '.join(fields) or '(none)'}{hint}"
            )
    return out


def _value(f: RewardFunction, value: Any, index: int) -> float:
    """``value`` as a float, or a RewardFunctionError naming the function and item."""
    scalar = getattr(getattr(value, "dtype", None), "kind", "") in ("b", "i", "u", "f") and value.shape == ()
    if isinstance(value, numbers.Real) or scalar:
        number = float(value)
        if math.isfinite(number):
            return number
    raise RewardFunctionError(
        f"reward function {f.name!r} returned {value!r} for item {index}; a reward must be a finite real number"
    )


def _keys(f: RewardFunction, item: Mapping[str, Any], index: int) -> list[str]:
    """The keys of ``item`` that ``f`` is passed; raises if it lacks one ``f`` requires."""
    for name in f.required:
        if name not in item:
            raise RewardFunctionError(
                f"reward function {f.name!r} needs {name!r}, which item {index} does not have; "
                f"it has: {', '.join(item) or '(nothing)'}"
            )
    return list(item) if f.takes_any else [n for n in f.params if n in item]


async def _call(f: RewardFunction, kwargs: dict[str, Any], where: str) -> Any:
    try:
        result = f.fn(**kwargs)
        return await result if inspect.isawaitable(result) else result
    except Exception as exc:
        exc.add_note(f"raised in reward function {f.name!r} on {where}")
        raise


async def _gather(coros: Sequence[Awaitable[Any]]) -> list[Any]:
    """``asyncio.gather``, but the others are cancelled when one fails (no work left running after we raise)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


async def _values(f: RewardFunction, inputs: Sequence[Mapping[str, Any]]) -> list[float]:
    if f.batched:
        keys = _keys(f, inputs[0], 0)
        for i, item in enumerate(inputs):
            lacking = [k for k in keys if k not in item]
            if lacking:
                raise RewardFunctionError(
                    f"batched reward function {f.name!r} is passed {lacking[0]!r} (item 0 has it), "
                    f"which item {i} does not have"
                )
        batch = {k: [item[k] for item in inputs] for k in keys}
        out = await _call(f, batch, f"a batch of {len(inputs)} items")
        if isinstance(out, str | bytes | Mapping) or not hasattr(out, "__len__") or not hasattr(out, "__iter__"):
            raise RewardFunctionError(
                f"batched reward function {f.name!r} must return a sequence of numbers, one per item, got {out!r}"
            )
        if len(out) != len(inputs):
            raise RewardFunctionError(
                f"batched reward function {f.name!r} returned {len(out)} values for {len(inputs)} items; "
                f"it must return one per item"
            )
        return [_value(f, v, i) for i, v in enumerate(out)]
    kwargs = [{k: item[k] for k in _keys(f, item, i)} for i, item in enumerate(inputs)]
    if f.is_async:
        out = await _gather([_call(f, kw, f"item {i}") for i, kw in enumerate(kwargs)])
    else:
        out = [await _call(f, kw, f"item {i}") for i, kw in enumerate(kwargs)]
    return [_value(f, v, i) for i, v in enumerate(out)]


async def score(
    functions: Iterable[RewardFunction | RewardFn], inputs: Sequence[Mapping[str, Any]]
) -> list[RewardScores]:
    """Score every item with every function; the async ones (and async items of one function) run concurrently.

    ``inputs[i]`` holds item i's provided arguments (prompt and completion, or conversation and
    actor_name) and its dataset fields. Returns one ``RewardScores`` per item, in order.
    """
    fs = _checked_list(functions, "score()")
    if not inputs:
        return []
    per_function = await _gather([_values(f, inputs) for f in fs])
    pairs = list(zip(fs, per_function, strict=True))
    return [
        RewardScores(
            sum((f.weight * values[i] for f, values in pairs), 0.0), {f.name: values[i] for f, values in pairs}
        )
        for i in range(len(inputs))
    ]


def score_sync(
    functions: Iterable[RewardFunction | RewardFn], inputs: Sequence[Mapping[str, Any]]
) -> list[RewardScores]:
    """``score`` for code outside an event loop (inside one, ``await score(...)`` instead)."""
    return asyncio.run(score(functions, inputs))
