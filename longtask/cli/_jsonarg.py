"""JSON given on the command line (``--input``, ``--resume``, ``--context``...): the value
itself or ``@file``, refused with a message naming the option when it is not JSON a thread
can keep."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["ContextOpt", "parse_context", "parse_json"]

ContextOpt = Annotated[
    str | None,
    typer.Option(
        "--context",
        metavar="JSON",
        help="The run context (JSON or @file) a LangGraph graph reads as runtime.context; "
        "kept with the thread.",
    ),
]


def parse_json(value: str | None, option: str) -> Any:
    """JSON from an option value, or from a file with ``@path``."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise typer.BadParameter(
                f"cannot read {path}: {exc.strerror}", param_hint=option
            ) from exc
        except UnicodeDecodeError as exc:
            raise typer.BadParameter(
                f"{path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x}); "
                "give a JSON file in UTF-8",
                param_hint=option,
            ) from None
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON ({exc})", param_hint=option) from None
    except ValueError:
        # Python refuses to turn a very long run of digits into an int (a guard against
        # quadratic-time conversion); the limit is sys.get_int_max_str_digits().
        raise typer.BadParameter(
            f"has a number with more than {sys.get_int_max_str_digits()} digits; pass it as "
            "a JSON string instead",
            param_hint=option,
        ) from None
    except RecursionError:
        raise typer.BadParameter(
            "is nested too deeply (thousands of brackets); flatten the value", param_hint=option
        ) from None
    from longtask.runtime._text import bad_text

    # An invalid byte of an argument (or a "\ud800" escape) is a lone surrogate, which no
    # database can store: refused here, before a thread is touched.
    where = bad_text(found, "the value")
    if where is not None:
        raise typer.BadParameter(
            f"{where} is not valid Unicode text (a lone surrogate or an invalid byte); "
            "give UTF-8 text",
            param_hint=option,
        )
    return found


def parse_context(value: str | None) -> dict[str, Any] | None:
    """``--context``: a JSON object, or None when it is not given."""
    found = parse_json(value, "--context")
    if found is not None and not isinstance(found, dict):
        raise typer.BadParameter(
            "must be a JSON object (the graph's runtime context)", param_hint="--context"
        )
    return found
