"""Argument type checks for the public functional API.

``batchaug.functional`` shares many names with ``torchvision.transforms.v2.functional`` but not its
contract: a random quantity is a per-sample tensor (``angle`` of shape ``(N,)``), not a Python
number for the whole batch. A Python number or list where a tensor belongs would otherwise fail
deep inside a kernel (``'float' object has no attribute 'to'``); :func:`checked` turns that into
a ``TypeError`` naming the argument. The check reads the kernel's own annotations, so a kernel
gets it by being exported. It runs only in eager Python: under TorchScript the original kernel
is compiled (the hooks below), and under ``torch.compile``/``torch.export`` it is skipped.
"""
from __future__ import annotations

import functools
import inspect
import numbers
import typing
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

_Check = Tuple[Tuple[type, ...], str, bool]  # accepted, description, None allowed


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _check_for(annotation: Any) -> Optional[_Check]:
    """What a parameter of this annotation accepts, or None for no check."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) != 1:
            return None
        annotation = args[0]
        origin = typing.get_origin(annotation)
    if annotation is Tensor:
        return (Tensor,), "a tensor", optional
    if origin in (list, tuple, typing.List, typing.Tuple):
        return (list, tuple), "a list", optional
    if origin in (dict, typing.Dict):
        return (dict,), "a dict", optional
    if annotation is bool:
        return (bool,), "a bool", optional
    if annotation is int:
        return (numbers.Integral,), "an int", optional
    if annotation is float:
        return (numbers.Real,), "a number", optional
    if annotation is str:
        return (str,), "a str", optional
    if annotation is torch.dtype:
        return (torch.dtype,), "a torch.dtype", optional
    return None


def checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a ``TypeError`` naming the argument when one has the wrong kind of value."""
    hints = typing.get_type_hints(fn)
    signature = inspect.signature(fn)
    checks: Dict[str, _Check] = {}
    for name in signature.parameters:
        check = _check_for(hints.get(name))
        if check is not None:
            checks[name] = check
    qualname = f"batchaug.functional.{fn.__name__}"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        try:  # partial first: a wrong kind of value is named before a missing argument
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{qualname}{signature}: {exc}") from None
        for name, value in bound.arguments.items():
            check = checks.get(name)
            if check is None:
                continue
            accepted, what, optional = check
            if value is None and optional:
                continue
            if isinstance(value, accepted) and not (what == "a number" and isinstance(value, bool)):
                continue
            if what == "a tensor":
                hint = ("a per-sample parameter tensor, one value per image (shape (N,) or "
                        "(N, k), on the images' device), e.g. torch.full((x.shape[0],), v) "
                        "for the same value on every image")
            else:
                hint = what
            raise TypeError(f"{qualname}: argument '{name}' must be {hint}, got "
                            f"{_describe(value)}")
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{qualname}{signature}: {exc}") from None
        return fn(*args, **kwargs)

    # torch.jit.script compiles the unchecked kernel (directly, and when a scripted function
    # calls this one): the same hooks torch.jit uses for its own decorated functions.
    setattr(wrapper, "__original_fn", fn)
    setattr(wrapper, "__script_if_tracing_wrapper", True)
    setattr(wrapper, "__prepare_scriptable__", lambda: fn)
    return wrapper
