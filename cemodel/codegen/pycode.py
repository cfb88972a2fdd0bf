"""A small immutable IR for generated Python, and its printer.

Statements are nodes; expressions are plain strings built by the emitters.
The printer dispatches ``_print_<Node>`` (as SymPy's printers do) and owns
indentation, so emitters never concatenate indented text.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    text: str
    comment: str = ""


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Blank:
    pass


@dataclass(frozen=True)
class Block:
    """``header:`` followed by an indented body (for, if, with, else ...)."""

    header: str
    body: tuple[Node, ...]
    comment: str = ""


@dataclass(frozen=True)
class Shares:
    """A kernel over items that runs shares of them (``share_start`` to ``share_stop`` of
    ``n_threads``, its first three parameters): ``cemodel.runtime.run_shares`` runs every
    share (all in one call, or one call per share on the threads), then sums each
    of ``sums`` (accumulators) over the shares' own copies (``<acc>_threads``) in share
    order. ``count``: the per-thread array whose first dimension is the number of shares
    (None: ``rt.share_count(bound)``); ``hoist``: the kernel run once before the shares."""

    count: str | None
    sums: tuple[str, ...] = ()
    hoist: str | None = None


@dataclass(frozen=True)
class Function:
    name: str
    args: tuple[str, ...]
    body: tuple[Node, ...]
    doc: str = ""
    decorator: str | None = None
    returns: str | None = None
    supplied: tuple[str, ...] = ()  # the args a caller passes itself (a kernel's; not printed)
    shares: Shares | None = None  # a kernel run in shares of its items (not printed)


@dataclass(frozen=True)
class Module:
    doc: str
    imports: tuple[str, ...]
    body: tuple[Node, ...]


Node = Line | Comment | Blank | Block | Function


class PythonPrinter:
    indent = "    "
    width = 99

    def print(self, node: Module | Node) -> str:
        return "\n".join(self._print(node, 0)) + "\n"

    def _print(self, node, depth: int) -> list[str]:
        return getattr(self, f"_print_{type(node).__name__}")(node, depth)

    def _pad(self, depth: int) -> str:
        return self.indent * depth

    def _print_Module(self, node: Module, depth: int) -> list[str]:
        lines = ['"""' + node.doc.rstrip("\n") + '\n"""', ""]
        lines += list(node.imports)
        if node.imports:
            lines.append("")
        previous = None
        for child in node.body:
            # two blank lines around a top-level function (PEP 8); a comment right above one
            # belongs to it
            if isinstance(child, Function) and not isinstance(previous, Comment) or (
                    isinstance(previous, Function)):
                lines += ["", ""]
            lines += self._print(child, depth)
            previous = child
        return lines

    def _print_Line(self, node: Line, depth: int) -> list[str]:
        text = self._pad(depth) + node.text
        if node.comment:
            if len(text) + len(node.comment) + 4 <= self.width:
                return [f"{text}  # {node.comment}"]
            return [self._pad(depth) + "# " + node.comment, text]
        return [text]

    def _print_Comment(self, node: Comment, depth: int) -> list[str]:
        return [self._pad(depth) + "# " + part for part in node.text.split("\n")]

    def _print_Blank(self, node: Blank, depth: int) -> list[str]:
        return [""]

    def _print_Block(self, node: Block, depth: int) -> list[str]:
        lines = self._print(Line(node.header + ":", node.comment), depth)
        body = node.body or (Line("pass"),)
        for child in body:
            lines += self._print(child, depth + 1)
        return lines

    def _print_Function(self, node: Function, depth: int) -> list[str]:
        lines = []
        if node.decorator:
            lines.append(self._pad(depth) + "@" + node.decorator)
        returns = f" -> {node.returns}" if node.returns else ""
        head = f"def {node.name}({', '.join(node.args)}){returns}:"
        if len(self._pad(depth) + head) > self.width:
            lines.append(self._pad(depth) + f"def {node.name}(")
            for arg in node.args:
                lines.append(self._pad(depth + 2) + arg + ",")
            lines.append(self._pad(depth) + f"){returns}:")
        else:
            lines.append(self._pad(depth) + head)
        if node.doc:
            doc_lines = node.doc.strip("\n").split("\n")
            if len(doc_lines) == 1:
                lines.append(self._pad(depth + 1) + '"""' + doc_lines[0] + '"""')
            else:
                lines.append(self._pad(depth + 1) + '"""' + doc_lines[0])
                lines += [(self._pad(depth + 1) + d).rstrip() for d in doc_lines[1:]]
                lines.append(self._pad(depth + 1) + '"""')
        for child in node.body:
            lines += self._print(child, depth + 1)
        return lines


def print_module(module: Module) -> str:
    return PythonPrinter().print(module)
