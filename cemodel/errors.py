"""Error types shared by every stage.

A user's mistake and a compiler bug are different types (STYLE.md, habit 4):
``CemError`` and its subclasses are the user's, shown without a traceback;
``CemInternalError`` is ours and says how to report it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A region of a source file: 1-based line and column of its first character."""

    line: int
    column: int
    end_line: int
    end_column: int

    def describe(self, filename: str) -> str:
        return f"{filename}:{self.line}:{self.column}"


NO_SPAN = Span(0, 0, 0, 0)
WIDEST_LINE = 160  # a longer source line is shown as a window around the caret


@dataclass(frozen=True)
class Source:
    """The text of a .cem file and the name it is reported under."""

    filename: str
    text: str

    def line_text(self, line: int) -> str:
        # lines end at "\n" only, as the parser counts them (str.splitlines would also split
        # at form feeds, lone carriage returns and U+2028, and show the wrong line)
        lines = self.text.split("\n")
        return lines[line - 1].removesuffix("\r") if 0 < line <= len(lines) else ""


class CemError(Exception):
    """A mistake in the user's model, data or command line."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def __str__(self) -> str:
        return self.render()


class CemSourceError(CemError):
    """A mistake located in .cem source: rendered as file:line:col, the line, a caret."""

    def __init__(
        self, message: str, span: Span, source: Source | None = None, *, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.span = span
        self.source = source

    def with_source(self, source: Source) -> CemSourceError:
        return type(self)(self.message, self.span, source, hint=self.hint)

    def render(self) -> str:
        filename = self.source.filename if self.source else "<model>"
        head = f"{self.span.describe(filename)}: error: {self.message}"
        parts = [head]
        if self.source is not None and self.span.line > 0:
            line = self.source.line_text(self.span.line)
            width = 1
            if self.span.end_line == self.span.line and self.span.end_column > self.span.column:
                width = self.span.end_column - self.span.column
            column = self.span.column - 1
            if len(line) > WIDEST_LINE:  # a window of the line around the caret
                start = max(0, column - 20)
                shown = line[start:start + WIDEST_LINE]
                line = ("..." if start else "") + shown + (
                    "..." if start + WIDEST_LINE < len(line) else "")
                column = column - start + (3 if start else 0)
                width = min(width, len(shown) - (column - (3 if start else 0)))
            parts.append(f"    {line}")
            # the line's own tabs before the caret, so that it lines up wherever tabs stop
            pad = "".join(c if c == "\t" else " " for c in line[:column])
            parts.append("    " + pad + "^" * max(width, 1))
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


class CemSyntaxError(CemSourceError):
    """The source does not follow the grammar."""


class CemModelError(CemSourceError):
    """The source parses but does not describe a valid model (names, shapes, plates)."""


class CemConjugacyError(CemSourceError):
    """The model is valid but not conditionally conjugate where it must be."""


class CemDataError(CemError):
    """Data that does not fit the model: names the variable, the expected and the found."""


class CemOptionError(CemDataError):
    """An option or setting outside what it takes (``max_iter=0``, ``--tau -20``, ``--set
    K=nan``): names the option, the values it takes and the value found
    (``cemodel.runtime.options``)."""


class CemInternalError(Exception):
    """A bug in cemodel, not in the user's input."""

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message}\nThis is a bug in cemodel. Please report it with the model file and the "
            "command that triggered it."
        )


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """A 'did you mean' hint when one candidate is close to ``word``."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None
