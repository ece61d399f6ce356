#!/usr/bin/env python3
"""Evaluate `irc layout` expressions with the C++ CuTe itself (a developer tool, not run by tests).

The expected values in `crates/layout/tests/cute_cases.rs` were produced by this script: each
expression is translated to C++ over static integers (`Int<4>{}`), compiled with g++ against the
CUTLASS headers on the host, run, and printed in our notation. An expression that fails to compile
(a `static_assert` of the algebra, e.g. "Stride Divisibility Condition") answers `error: <first
assertion message>`.

Usage: oracle.py CUTLASS_INCLUDE CUDA_INCLUDE < exprs > answers
  CUTLASS_INCLUDE: `include/` of a CUTLASS checkout (header-only; cute/ and cutlass/)
  CUDA_INCLUDE:    a CUDA toolkit include dir with cccl/ (pip: nvidia-cuda-runtime,
                   nvidia-cuda-crt, nvidia-cuda-cccl, all 13.0.*; `.../nvidia/cu13/include`)
Each input line is one expression; each output line is `expr<TAB>answer`.
"""

import os
import re
import subprocess
import sys
import tempfile

TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|([()\[\],:<>\-@]))")


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


def cint(v):
    return f"Int<{v}>{{}}"


class Parser:
    """Our grammar, translated to C++ text as it is parsed. Each node is (kind, cpp)."""

    def __init__(self, src):
        self.toks, self.i = tokenize(src), 0

    def peek(self, k=0):
        return self.toks[min(self.i + k, len(self.toks) - 1)]

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
            raise ParseError(f"expected {c} at {self.peek()}")

    def whole(self):
        e = self.expr()
        if self.peek()[0] != "end":
            raise ParseError("trailing text")
        return e

    def expr(self):
        e = self.primary()
        while self.peek() == ("punct", "("):
            self.bump()
            args = self.items(")")
            e = ("value", f"{as_layout(e)}({', '.join(coord(a) for a in args)})")
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

    def leaf(self):
        """INT ['@' INT]* -> C++ (a scaled basis prints innermost mode first)."""
        v = self.integer()
        modes = []
        while self.eat("@"):
            modes.append(self.integer())
        if not modes:
            return cint(v)
        return f"({cint(v)} * E<{','.join(str(m) for m in reversed(modes))}>{{}})"

    def lit(self):
        if self.peek() == ("ident", "_"):
            self.bump()
            return "_"
        if self.eat("("):
            out = []
            if not self.eat(")"):
                while True:
                    out.append(self.lit())
                    if self.eat(")"):
                        break
                    self.expect(",")
            return f"cute::make_tuple({', '.join(out)})"
        return self.leaf()

    def primary(self):
        kind, v = self.peek()
        if kind == "int" or (kind, v) == ("punct", "-"):
            n = self.leaf()
            if self.eat(":"):
                return ("layout", f"make_layout({n}, {self.lit()})")
            return ("int", n)
        if (kind, v) == ("punct", "("):
            shape = self.lit()
            if self.eat(":"):
                return ("layout", f"make_layout({shape}, {self.lit()})")
            return ("tuple", shape)
        if (kind, v) == ("punct", "["):
            self.bump()
            return ("tiler", f"make_tile({', '.join(tiler(x) for x in self.items(']'))})")
        if kind == "ident" and v == "_":
            self.bump()
            return ("all", "_")
        if kind == "ident" and v == "Sw":
            return self.swizzle()
        if kind == "ident":
            self.bump()
            args = self.items(")") if self.eat("(") else []
            return call(v, args)
        raise ParseError("expected a primary expression")

    def swizzle(self):
        self.bump()
        self.expect("<")
        b = self.integer(); self.expect(",")
        m = self.integer(); self.expect(",")
        s = self.integer(); self.expect(">")
        sw = f"Swizzle<{b},{m},{s}>{{}}"
        if self.peek() != ("ident", "o"):
            return ("swizzle", sw)
        self.bump()
        offset = "Int<0>{}"
        if self.peek()[0] == "int" and self.peek(1) == ("ident", "o"):
            offset = cint(self.bump()[1])
            self.bump()
        inner = self.primary()
        return ("value", f"make_composed_layout({sw}, {offset}, {as_layout(inner)})")


def as_layout(node):
    kind, cpp = node
    if kind == "int":
        return f"make_layout({cpp})"
    if kind == "tuple":
        return f"make_layout({cpp})"
    return cpp


def coord(node):
    return node[1]


def tiler(node):
    if node[0] == "all":
        return "_"
    if node[0] == "tiler":
        return node[1]
    return as_layout(node)


def static_int(node):
    m = re.fullmatch(r"Int<(-?\d+)>\{\}", node[1])
    if not m:
        raise ParseError(f"expected an integer literal, got {node[1]}")
    return int(m.group(1))


def call(name, a):
    L = lambda i: as_layout(a[i])
    T = lambda i: tiler(a[i])
    C = lambda i: coord(a[i])
    simple1 = {"size", "cosize", "rank", "depth", "shape", "stride", "flatten", "right_inverse",
               "left_inverse", "nullspace", "make_layout_like", "max_alignment", "coprofile",
               "coshape"}
    if name in simple1 and len(a) == 1:
        return ("value", f"{name}({L(0)})")
    if name in ("coalesce", "filter"):
        return ("value", f"{name}({L(0)}{', ' + C(1) if len(a) > 1 else ''})")
    if name in ("composition", "logical_divide", "zipped_divide", "tiled_divide", "flat_divide",
                "logical_product", "zipped_product", "tiled_product", "flat_product"):
        return ("value", f"{name}({L(0)}, {T(1)})")
    if name in ("blocked_product", "raked_product", "max_common_vector", "max_common_layout",
                "append", "prepend"):
        return ("value", f"{name}({L(0)}, {L(1)})")
    if name == "complement":
        return ("value", f"complement({L(0)}{', ' + C(1) if len(a) > 1 else ''})")
    if name == "make_layout":
        return ("layout", f"make_layout({', '.join(L(i) for i in range(len(a)))})")
    if name == "get":
        return ("value", f"get<{','.join(str(static_int(x)) for x in a[1:])}>({L(0)})")
    if name == "crd2idx":
        return ("value", f"crd2idx({C(0)}, shape({L(1)}), stride({L(1)}))")
    if name == "idx2crd":
        return ("value", f"idx2crd({C(0)}, shape({L(1)}))")
    if name in ("slice_and_offset", "dice", "slice"):
        return ("value", f"{name}({C(0)}, {L(1)})")
    if name == "group_modes":
        return ("value", f"group<{static_int(a[1])},{static_int(a[2])}>({L(0)})")
    if name in ("upcast", "downcast"):
        return ("value", f"{name}<{static_int(a[1])}>({L(0)})")
    if name == "recast_layout":
        return ("value", f"recast_layout<uint_bit_t<{static_int(a[1])}>, uint_bit_t<{static_int(a[2])}>>({L(0)})")
    if name == "tile_to_shape":
        extra = f", {C(2)}" if len(a) > 2 else ""
        return ("value", f"tile_to_shape({L(0)}, {C(1)}{extra})")
    if name in ("shape_div", "ceil_div", "elem_scale", "shape_mod"):
        return ("value", f"{name}({C(0)}, {C(1)})")
    if name in ("make_identity_layout",):
        return ("value", f"make_identity_layout({C(0)})")
    if name == "make_ordered_layout":
        return ("value", f"make_ordered_layout({C(0)}, {C(1)})")
    if name == "domain_distribute":
        return ("value", f"domain_distribute({C(0)}, {C(1)})")
    if name == "product_each":
        return ("value", f"product_each({C(0)})")
    if name == "zip":
        return ("value", f"zip({L(0)})")
    raise ParseError(f"unknown function {name}")


PRELUDE = """#include <cute/layout.hpp>
#include <cute/layout_composed.hpp>
#include <cute/swizzle.hpp>
#include <cute/swizzle_layout.hpp>
#include <cute/numeric/integral_constant.hpp>
#include <iostream>
using namespace cute;
"""


def program(cases):
    body = [PRELUDE]
    for k, cpp in cases:
        body.append(f"void e{k}() {{ std::cout << \"{k}\\t\"; print({cpp}); std::cout << std::endl; }}\n")
    body.append("int main() {\n")
    for k, _ in cases:
        body.append(f"  e{k}();\n")
    body.append("}\n")
    return "".join(body)


def compile_and_run(cases, inc, cuda):
    """{k: printed} for the cases that compile; {k: error} for the ones that do not."""
    out, errors = {}, {}
    pending = list(cases)
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "t.cpp"), os.path.join(d, "t")
        while pending:
            text = program(pending)
            with open(src, "w") as f:
                f.write(text)
            r = subprocess.run(["g++", "-std=c++17", "-O0", "-w", f"-I{inc}", f"-I{cuda}",
                                f"-I{cuda}/cccl", src, "-o", exe], capture_output=True, text=True)
            if r.returncode == 0:
                run = subprocess.run([exe], capture_output=True, text=True)
                for line in run.stdout.splitlines():
                    k, _, v = line.partition("\t")
                    out[int(k)] = v
                return out, errors
            # Map error lines back to the functions e<k> they occur in.
            line_of = {}
            for n, l in enumerate(text.splitlines(), 1):
                m = re.match(r"void e(\d+)\(\)", l)
                if m:
                    line_of[n] = int(m.group(1))
            bad = {}
            for m in re.finditer(r"t\.cpp:(\d+):\d+:\s+(?:required from here|error: (.*))", r.stderr):
                k = line_of.get(int(m.group(1)))
                if k is not None and k not in bad:
                    bad[k] = "compile error"
            for m in re.finditer(r"In function 'void e(\d+)\(\)'|In instantiation of .*|static assertion failed: (.*)", r.stderr):
                pass
            # Find the first static_assert message after each function's first error.
            blocks = re.split(r"(?=t\.cpp: In function .void e\d+\(\).)", r.stderr)
            for b in blocks:
                m = re.match(r"t\.cpp: In function .void e(\d+)\(\).", b)
                if not m:
                    continue
                k = int(m.group(1))
                sa = re.search(r"static assertion failed: ([^\n]*)", b)
                bad[k] = sa.group(1).strip() if sa else (bad.get(k) or "compile error")
            if not bad:
                raise SystemExit("g++ failed without a located error:\n" + r.stderr[:4000])
            for k, why in bad.items():
                errors[k] = why
            pending = [(k, c) for k, c in pending if k not in bad]
    return out, errors


def ours(printed):
    """CuTe's print form in our notation: no `_` before static integers, no spaces."""
    s = re.sub(r"_(-?\d)", r"\1", printed)
    return s.replace(" o 0 o ", " o ")


def main():
    inc, cuda = sys.argv[1], sys.argv[2]
    exprs = [l.rstrip("\n") for l in sys.stdin if l.strip()]
    cases, answers = [], {}
    for k, e in enumerate(exprs):
        try:
            node = Parser(e).whole()
            cpp = node[1] if node[0] not in ("int", "tuple") else as_layout(node)
            cases.append((k, cpp))
        except ParseError as err:
            answers[k] = f"untranslatable: {err}"
    out, errors = compile_and_run(cases, inc, cuda)
    for k, e in enumerate(exprs):
        if k in answers:
            v = answers[k]
        elif k in out:
            v = ours(out[k])
        else:
            v = f"error: {errors.get(k, 'no output')}"
        print(f"{e}\t{v}")


if __name__ == "__main__":
    main()
