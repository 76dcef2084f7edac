"""The one base of every error that is the user's to fix, in the leaf layer so that any module can raise one.

Why a base class: the CLI maps an exception to its exit status by type (docs/architecture.md, "Errors and exits": 2 = bad input),
not by the module it came from or the words of its message; a new kind of user error is one subclass with an `error_kind`,
and the CLI knows it without a list to extend.
"""

from __future__ import annotations

from typing import ClassVar


class UserError(Exception):
    """A mistake in what the user gave or asked for: reported as bad input (exit 2) with its message, never a
    traceback. `error_kind` names it in a `--json` error document."""

    error_kind: ClassVar[str] = "bad_input"
