#!/usr/bin/env python3
"""Evaluate `irc layout` expressions with pycute, the reference CuTe implementation.

Reads one expression per line on stdin (plain text, or a JSON object with an "expr" field per
line) and prints one line per input line: the value in our notation (CuTe notation without
spaces, e.g. `(2,3):(2,8)`), or `error: <reason>`. The Rust differential test
(crates/layout/tests/pycute_diff.rs) runs this once per batch and compares line by line.

pycute ships in the `nvidia-cutlass` wheel (`pip install --no-deps nvidia-cutlass==4.2.0.0`).
This is a translator only: it parses our expression language and calls pycute's functions by
the same names; it implements no layout algebra of its own beyond printing and `depth`.
"""

import json
import re
import sys

from pycute import (ComposedLayout, Layout, Swizzle, coalesce, complement, composition,
                    cosize, crd2idx, filter, idx2crd, is_int, is_layout, is_tuple, left_inverse,
                    logical_divide, logical_product, make_layout, right_inverse, size,
                    slice_and_offset, tiled_divide, tiled_product, zipped_divide, zipped_product)
from pycute import flatten as flatten_tuple

TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|([()\[\],:<>\-]))")

ALL = object()  # `_`, None in pycute coordinates and tilers


class ParseError(Exception):
    pass


def tokenize(src):
    toks, pos = [], 0
    src = src.rstrip()
    while pos < len(src):
        m = TOKEN.match(src, pos)
        if not m:
            raise ParseError(f"unexpected character at {pos}")
        pos = m.end()
        if m.group(1):
            toks.append(("int", int(m.group(1))))
        elif m.group(2):
            toks.append(("ident", m.group(2)))
        else:
            toks.append(("punct", m.group(3)))
    toks.append(("end", None))
    return toks


class Parser:
    """Recursive descent over the grammar of our expression language, building tuples:
    ("int", v) ("lit", shape, stride|None) ("call", name, args) ("apply", target, args)
    ("tiler", items) ("all",) ("sw", b, m, s, offset|None, inner|None)."""

    def __init__(self, src):
        self.toks, self.i = tokenize(src), 0

    def peek(self):
        return self.toks[self.i]

    def bump(self):
        t = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return t

    def eat(self, c):
        if self.peek() == ("punct", c):
            self.bump()
            return True
        return False

    def expect(self, c):
        if not self.eat(c):
            raise ParseError(f"expected {c}")

    def whole(self):
        e = self.expr()
        if self.peek()[0] != "end":
            raise ParseError("trailing text")
        return e

    def expr(self):
        e = self.primary()
        while self.peek() == ("punct", "("):
            self.bump()
            e = ("apply", e, self.items(")"))
        return e

    def items(self, close):
        out = []
        if self.eat(close):
            return out
        while True:
            out.append(self.expr())
            if self.eat(close):
                return out
            self.expect(",")

    def integer(self):
        neg = self.eat("-")
        kind, v = self.bump()
        if kind != "int":
            raise ParseError("expected an integer")
        return -v if neg else v

    def lit(self):
        if self.peek() == ("ident", "_"):
            self.bump()
            return ALL
        if self.eat("("):
            out = []
            if not self.eat(")"):
                while True:
                    out.append(self.lit())
                    if self.eat(")"):
                        break
                    self.expect(",")
            return tuple(out)
        return self.integer()

    def primary(self):
        kind, v = self.peek()
        if kind == "int" or (kind, v) == ("punct", "-"):
            n = self.integer()
            return ("lit", n, self.lit()) if self.eat(":") else ("int", n)
        if (kind, v) == ("punct", "("):
            shape = self.lit()
            return ("lit", shape, self.lit() if self.eat(":") else None)
        if (kind, v) == ("punct", "["):
            self.bump()
            return ("tiler", self.items("]"))
        if kind == "ident" and v == "_":
            self.bump()
            return ("all",)
        if kind == "ident" and v == "Sw":
            return self.swizzle()
        if kind == "ident":
            self.bump()
            return ("call", v, self.items(")") if self.eat("(") else [])
        raise ParseError("expected a primary expression")

    def swizzle(self):
        self.bump()
        self.expect("<")
        b = self.integer(); self.expect(",")
        m = self.integer(); self.expect(",")
        s = self.integer(); self.expect(">")
        if self.peek() != ("ident", "o"):
            return ("sw", b, m, s, None, None)
        self.bump()
        offset = 0
        if self.peek()[0] == "int" and self.toks[self.i + 1] == ("ident", "o"):
            offset = self.bump()[1]
            self.bump()
        return ("sw", b, m, s, offset, self.primary())


def coord(c):
    """A literal with `_` as a pycute coordinate (None for `_`)."""
    if c is ALL:
        return None
    if isinstance(c, tuple):
        return tuple(coord(x) for x in c)
    return c


def coord_arg(ast):
    if ast[0] == "lit" and ast[2] is None:
        return coord(ast[1])
    if ast[0] == "all":
        return None
    return value(ast)


def as_layout(v):
    """Our rule: an integer n where a layout is expected is n:1; a tuple is its compact layout."""
    if is_layout(v):
        return v
    if is_int(v) or is_tuple(v):
        return Layout(v)
    raise TypeError(f"not a layout: {v}")


def layout_arg(ast):
    return as_layout(value(ast))


def tiler(ast):
    if ast[0] == "all":
        return None
    if ast[0] == "tiler":
        return tuple(tiler(x) for x in ast[1])
    return layout_arg(ast)


def depth(t):
    return 1 + max((depth(x) for x in t), default=0) if is_tuple(t) else 0


def modes(layout):
    return [layout[i] for i in range(len(layout))]


def flatten_layout(layout):
    if is_int(layout.shape):  # C++ flatten keeps an integer shape an integer
        return layout
    return Layout(flatten_tuple(layout.shape), flatten_tuple(layout.stride))


def get(args):
    layout = layout_arg(args[0])
    for a in args[1:]:
        layout = layout[value(a)]
    return layout


def opt(args, i):
    return coord_arg(args[i]) if len(args) > i else None


CALLS = {
    "size": lambda a: size(value(a[0])) if not is_layout(value(a[0])) else value(a[0]).size(),
    "cosize": lambda a: cosize(layout_arg(a[0])),
    "rank": lambda a: len(layout_arg(a[0])),
    "depth": lambda a: depth(layout_arg(a[0]).shape),
    "shape": lambda a: layout_arg(a[0]).shape,
    "stride": lambda a: layout_arg(a[0]).stride,
    "get": get,
    "flatten": lambda a: flatten_layout(layout_arg(a[0])),
    "coalesce": lambda a: coalesce(layout_arg(a[0]), opt(a, 1)),
    "filter": lambda a: filter(layout_arg(a[0]), opt(a, 1)),
    "composition": lambda a: composition(layout_arg(a[0]), tiler(a[1])),
    "complement": lambda a: complement(layout_arg(a[0]), value(a[1])) if len(a) > 1 else complement(layout_arg(a[0])),
    "right_inverse": lambda a: right_inverse(layout_arg(a[0])),
    "left_inverse": lambda a: left_inverse(layout_arg(a[0])),
    "logical_divide": lambda a: logical_divide(layout_arg(a[0]), tiler(a[1])),
    "zipped_divide": lambda a: zipped_divide(layout_arg(a[0]), tiler(a[1])),
    "tiled_divide": lambda a: tiled_divide(layout_arg(a[0]), tiler(a[1])),
    "logical_product": lambda a: logical_product(layout_arg(a[0]), tiler(a[1])),
    "zipped_product": lambda a: zipped_product(layout_arg(a[0]), tiler(a[1])),
    "tiled_product": lambda a: tiled_product(layout_arg(a[0]), tiler(a[1])),
    "make_layout": lambda a: make_layout(*[layout_arg(x) for x in a]),
    "append": lambda a: make_layout(*modes(layout_arg(a[0])), layout_arg(a[1])),
    "prepend": lambda a: make_layout(layout_arg(a[1]), *modes(layout_arg(a[0]))),
    "crd2idx": lambda a: crd2idx(coord_arg(a[0]), layout_arg(a[1]).shape, layout_arg(a[1]).stride),
    "idx2crd": lambda a: idx2crd(value(a[0]), layout_arg(a[1]).shape),
    "slice_and_offset": lambda a: slice_and_offset(coord_arg(a[0]), layout_arg(a[1])),
}


def value(ast):
    kind = ast[0]
    if kind == "int":
        return ast[1]
    if kind == "lit":
        shape, stride = coord(ast[1]), ast[2]
        return Layout(shape) if stride is None else Layout(shape, coord(stride))
    if kind == "call":
        if ast[1] not in CALLS:
            raise NotImplementedError(f"{ast[1]} is not in pycute")
        return CALLS[ast[1]](ast[2])
    if kind == "apply":
        target = value(ast[1])
        crds = [coord_arg(a) for a in ast[2]]
        return target(*crds)
    if kind == "sw":
        _, b, m, s, offset, inner = ast
        sw = Swizzle(b, m, s)
        return sw if inner is None else ComposedLayout(sw, offset, as_layout(value(inner)))
    raise TypeError(f"{kind} is not a value")


def show(v):
    """Our notation: no spaces, `(4)` for a one-element tuple."""
    if isinstance(v, bool):
        return str(int(v))
    if is_int(v):
        return str(v)
    if isinstance(v, ComposedLayout):
        off = "" if v.offset == 0 else f"{v.offset} o "
        return f"{show(v.layoutB)} o {off}{show(v.layoutA)}"
    if isinstance(v, Swizzle):
        return f"Sw<{v.bits},{v.base},{v.shift}>"
    if is_layout(v):
        return f"{show(v.shape)}:{show(v.stride)}"
    if is_tuple(v):
        return "(" + ",".join(show(x) for x in v) + ")"
    raise TypeError(f"cannot print {v!r}")


def answer(line):
    line = line.strip()
    if line.startswith("{"):
        line = json.loads(line)["expr"]
    try:
        return show(value(Parser(line).whole()))
    except Exception as e:  # pycute signals failures with assertions and type errors
        return f"error: {type(e).__name__}: {e}".replace("\n", " ")


def main():
    out = sys.stdout
    for line in sys.stdin:
        out.write(answer(line) + "\n")
    out.flush()


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    main()
