"""Symbolic dimensions: integer expressions over named unknown sizes, for Rank and Dimension Propagation
(model/symbolic.py, SoD²'s RDP).

A dimension is a Python `int` when it is known and a `Dim` when it is not. A Dim is a polynomial with integer
coefficients over atoms: symbols (a model's -1 dimensions, named), floor divisions by a constant (conv / pool
output sizes, ceil-divisions are written as floor((a + k - 1) / k)) and maxima. The form is canonical (terms
sorted, constants folded, (k*a + b) // k = a + b // k), so two equal expressions compare equal with `==`, and
arithmetic that ends in a constant gives back a plain int: the concrete shape rules of model/families/ run on
Dims unchanged wherever they only add, multiply, divide and compare them.

Comparisons are decided from bounds (every symbol >= 1 unless bounded otherwise); one the bounds cannot decide
raises `Undecidable`, a TypeError, as int() of a symbolic Dim does: a rule that needs a number it cannot have
fails instead of guessing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

INF = math.inf


class Undecidable(TypeError):
    """A question about a symbolic dimension its bounds cannot answer (a comparison, int(), a remainder)."""


@dataclass(frozen=True, order=True)
class Symbol:
    """A named unknown size (>= 1)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class FloorDiv:
    """floor(num / den), den a positive constant, num not divisible by it term by term."""

    num: Dim
    den: int

    def __str__(self) -> str:
        rest = self.num - (self.den - 1)
        if isinstance(rest, Dim) and len(rest.terms) < len(self.num.terms):  # written as floor((a + k - 1) / k)
            return f"ceil({rest}/{self.den})"
        return f"floor({self.num}/{self.den})"


@dataclass(frozen=True)
class Maximum:
    """max(args), at least one arg symbolic."""

    args: tuple[DimLike, ...]

    def __str__(self) -> str:
        return f"max({', '.join(str(a) for a in self.args)})"


Atom = Symbol | FloorDiv | Maximum
Monomial = tuple[Atom, ...]  # atoms multiplied, sorted by their text; () is the constant term


def _key(atom: Atom) -> str:
    return str(atom)


class Dim:
    """A symbolic integer: sum of coefficient * monomial. Build with `symbol`, arithmetic, `ceil_div`, `maximum`."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int]) -> None:
        self.terms: tuple[tuple[Monomial, int], ...] = tuple(
            sorted(((m, c) for m, c in terms.items() if c), key=lambda mc: [_key(a) for a in mc[0]]))
        self._hash = hash(self.terms)

    # -- construction helpers ----------------------------------------------------------------------------------
    @staticmethod
    def of(value: DimLike) -> Dim:
        if isinstance(value, Dim):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(value)  # numpy integers
            except (TypeError, ValueError):
                raise TypeError(f"not a dimension: {value!r}") from None
        return Dim({(): int(value)})

    def simplified(self) -> DimLike:
        """A plain int when the expression is constant."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return self

    @property
    def constant(self) -> int:
        return dict(self.terms).get((), 0)

    # -- arithmetic ------------------------------------------------------------------------------------------------
    def __add__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        out = dict(self.terms)
        for m, c in Dim.of(other).terms:  # type: ignore[arg-type]
            out[m] = out.get(m, 0) + c
        return Dim(out).simplified()

    __radd__ = __add__

    def __neg__(self) -> DimLike:
        return Dim({m: -c for m, c in self.terms}).simplified()

    def __sub__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        return self + (-Dim.of(other))  # type: ignore[arg-type, operator]

    def __rsub__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        return Dim.of(other) + (-self)  # type: ignore[arg-type, operator]

    def __mul__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in Dim.of(other).terms:  # type: ignore[arg-type]
                m = tuple(sorted(m1 + m2, key=_key))
                out[m] = out.get(m, 0) + c1 * c2
        return Dim(out).simplified()

    __rmul__ = __mul__

    def __floordiv__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        return floordiv(self, other)  # type: ignore[arg-type]

    def __rfloordiv__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        return floordiv(other, self)  # type: ignore[arg-type]

    def __mod__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        q = floordiv(self, other)  # type: ignore[arg-type]
        rest = self - q * other  # type: ignore[operator]
        if isinstance(rest, Dim):
            raise Undecidable(f"{self} % {other} depends on the symbols' values")
        return rest

    def __rmod__(self, other: object) -> DimLike:
        if not _is_dim_like(other):
            return NotImplemented
        return Dim.of(other) % self  # type: ignore[arg-type]

    # -- questions -------------------------------------------------------------------------------------------------
    def bounds(self, ranges: Mapping[str, tuple[float, float]] | None = None) -> tuple[float, float]:
        """The smallest and largest value over the symbols' ranges (default [1, inf))."""
        lo = hi = 0.0
        for m, c in self.terms:
            mlo, mhi = 1.0, 1.0
            for atom in m:
                alo, ahi = _atom_bounds(atom, ranges)
                mlo, mhi = _mul_interval((mlo, mhi), (alo, ahi))
            tlo, thi = (c * mlo, c * mhi) if c > 0 else (c * mhi, c * mlo)
            lo, hi = lo + tlo, hi + thi
        return lo, hi

    def _compare(self, other: object, op: str) -> bool:
        if not _is_dim_like(other):
            raise TypeError(f"cannot compare a dimension with {other!r}")
        diff = self - other  # type: ignore[operator]
        if not isinstance(diff, Dim):
            return {"<": diff < 0, "<=": diff <= 0, ">": diff > 0, ">=": diff >= 0}[op]
        lo, hi = diff.bounds()
        answers = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0), ">=": (lo >= 0, hi < 0)}
        yes, no = answers[op]
        if yes:
            return True
        if no:
            return False
        raise Undecidable(f"whether {self} {op} {other} depends on the symbols' values")

    def __lt__(self, other: object) -> bool:
        return self._compare(other, "<")

    def __le__(self, other: object) -> bool:
        return self._compare(other, "<=")

    def __gt__(self, other: object) -> bool:
        return self._compare(other, ">")

    def __ge__(self, other: object) -> bool:
        return self._compare(other, ">=")

    def __eq__(self, other: object) -> bool:
        """Structural: the same expression (a symbol is not equal to a constant it might take at run time)."""
        if isinstance(other, Dim):
            return self.terms == other.terms
        return False

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        lo, hi = self.bounds()
        if lo > 0 or hi < 0:
            return True
        raise Undecidable(f"whether {self} is 0 depends on the symbols' values")

    def __int__(self) -> int:
        raise Undecidable(f"{self} is symbolic")

    def __index__(self) -> int:
        raise Undecidable(f"{self} is symbolic")

    def __float__(self) -> float:
        raise Undecidable(f"{self} is symbolic")

    @property
    def symbols(self) -> set[str]:
        out: set[str] = set()
        for m, _ in self.terms:
            for atom in m:
                out |= _atom_symbols(atom)
        return out

    def subs(self, env: Mapping[str, DimLike]) -> DimLike:
        """The expression with symbols replaced (by ints or other expressions)."""
        total: DimLike = 0
        for m, c in self.terms:
            term: DimLike = c
            for atom in m:
                term = term * _atom_subs(atom, env)
            total = total + term
        return total

    def __str__(self) -> str:
        parts = []
        for m, c in self.terms:
            body = "*".join(_paren(a) for a in m)
            if not body:
                text = str(abs(c))
            elif abs(c) == 1:
                text = body
            else:
                text = f"{abs(c)}*{body}"
            parts.append(("-" if c < 0 else "+", text))
        # constants last reads better: H + 1, not 1 + H
        parts.sort(key=lambda p: p[1].isdigit())
        out = ("-" if parts[0][0] == "-" else "") + parts[0][1]
        for sign, text in parts[1:]:
            out += f" {sign} {text}"
        return out

    __repr__ = __str__


DimLike = int | Dim


def _is_dim_like(value: object) -> bool:
    if isinstance(value, (Dim, int)) and not isinstance(value, bool):
        return True
    return hasattr(value, "__index__") and not isinstance(value, (float, bool))


def _paren(atom: Atom) -> str:
    return str(atom)


def _mul_interval(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    products = [x * y for x in a for y in b if not (math.isinf(x) and y == 0) and not (math.isinf(y) and x == 0)]
    products = products or [0.0]
    return min(products), max(products)


def _atom_bounds(atom: Atom, ranges: Mapping[str, tuple[float, float]] | None) -> tuple[float, float]:
    if isinstance(atom, Symbol):
        return (ranges or {}).get(atom.name, (1, INF))
    if isinstance(atom, FloorDiv):
        lo, hi = atom.num.bounds(ranges)
        return math.floor(lo / atom.den) if not math.isinf(lo) else lo, \
            math.floor(hi / atom.den) if not math.isinf(hi) else hi
    bounds = [Dim.of(a).bounds(ranges) for a in atom.args]
    return max(b[0] for b in bounds), max(b[1] for b in bounds)


def _atom_symbols(atom: Atom) -> set[str]:
    if isinstance(atom, Symbol):
        return {atom.name}
    if isinstance(atom, FloorDiv):
        return atom.num.symbols
    return set().union(*(a.symbols for a in atom.args if isinstance(a, Dim)))


def _atom_subs(atom: Atom, env: Mapping[str, DimLike]) -> DimLike:
    if isinstance(atom, Symbol):
        return env[atom.name] if atom.name in env else Dim({(atom,): 1})
    if isinstance(atom, FloorDiv):
        return floordiv(atom.num.subs(env), atom.den)
    return maximum(*(a.subs(env) if isinstance(a, Dim) else a for a in atom.args))


def symbol(name: str) -> Dim:
    """The unknown size `name`."""
    return Dim({(Symbol(name),): 1})


def floordiv(a: DimLike, b: DimLike) -> DimLike:
    """floor(a / b): b a positive constant, or an expression dividing a exactly (a monomial's factor)."""
    if isinstance(b, Dim):
        q = _exact_quotient(Dim.of(a), b)
        if q is None:
            raise Undecidable(f"({a}) // ({b}) is not an exact division")
        return q
    b = int(b)
    if not isinstance(a, Dim):
        return int(a) // b
    if b <= 0:
        raise Undecidable(f"division of {a} by {b}")
    if b == 1:
        return a
    whole: dict[Monomial, int] = {}
    rest: dict[Monomial, int] = {}
    for m, c in a.terms:  # (k*A + B) // k = A + B // k, B the terms k does not divide
        if c % b == 0:
            whole[m] = c // b
        else:
            whole[m] = c // b
            rest[m] = c % b
    rest_dim = Dim(rest).simplified()
    whole_dim = Dim(whole).simplified()
    if not isinstance(rest_dim, Dim):
        return whole_dim + rest_dim // b
    lo, hi = rest_dim.bounds()
    if 0 <= lo and hi < b:
        return whole_dim
    return whole_dim + Dim({(FloorDiv(rest_dim, b),): 1}).simplified()


def ceil_div(a: DimLike, b: int) -> DimLike:
    """ceil(a / b) for a positive constant b."""
    return floordiv(a + (b - 1), b)


def maximum(*args: DimLike) -> DimLike:
    """max(args): folded when the bounds decide it."""
    flat: list[DimLike] = []
    for a in args:
        if a not in flat:
            flat.append(a)
    consts = [a for a in flat if not isinstance(a, Dim)]
    syms = [a for a in flat if isinstance(a, Dim)]
    if consts:
        syms.append(max(consts))  # type: ignore[arg-type]
    keep = []
    for i, a in enumerate(syms):  # drop what another arg is known to be at least
        dominated = False
        for j, b in enumerate(syms):
            if i == j:
                continue
            diff = Dim.of(b) - a
            lo = diff.bounds()[0] if isinstance(diff, Dim) else diff
            if lo >= 0 and (lo > 0 or j < i):
                dominated = True
                break
        if not dominated:
            keep.append(a)
    if len(keep) == 1:
        return keep[0]
    return Dim({(Maximum(tuple(sorted(keep, key=str))),): 1})


def _exact_quotient(a: Dim, b: Dim) -> DimLike | None:
    """a / b when b is one monomial (with its coefficient) dividing every term of a."""
    if len(b.terms) != 1:
        return None
    (bm, bc), = b.terms
    out: dict[Monomial, int] = {}
    for m, c in a.terms:
        rest = list(m)
        for atom in bm:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % bc:
            return None
        out[tuple(rest)] = c // bc
    return Dim(out).simplified()


def is_symbolic(value: object) -> bool:
    return isinstance(value, Dim)


def free_symbols(dims: Iterable[DimLike]) -> set[str]:
    out: set[str] = set()
    for d in dims:
        if isinstance(d, Dim):
            out |= d.symbols
    return out


def substitute(value: DimLike, env: Mapping[str, DimLike]) -> DimLike:
    return value.subs(env) if isinstance(value, Dim) else value


def solve(lhs: DimLike, rhs: DimLike, prefer: Mapping[str, int] | None = None) -> tuple[str, DimLike] | None:
    """A binding symbol := expression making lhs == rhs, when lhs - rhs is linear in some symbol with a
    coefficient dividing every other term (2*s + 4 == 10 -> s := 3; a + b == a + c -> c := b). `prefer`:
    a rank per symbol, the highest bound first (the later-made symbol is expressed by the earlier). None when
    the equation holds already or has no such solution."""
    diff = Dim.of(lhs) - rhs
    if not isinstance(diff, Dim):
        return None
    candidates = []
    for m, c in diff.terms:
        if len(m) == 1 and isinstance(m[0], Symbol):
            name = m[0].name
            others = [(m2, c2) for m2, c2 in diff.terms if m2 != m]
            if any(name in _monomial_symbols(m2) for m2, _ in others):
                continue
            if any(c2 % c for _, c2 in others):
                continue
            value = Dim({m2: -c2 // c for m2, c2 in others}).simplified()
            if isinstance(value, int) and value < 1:
                continue  # a size is >= 1: no solution here (the shapes disagree)
            candidates.append(((prefer or {}).get(name, 0), name, value))
    if not candidates:
        return None
    _, name, value = max(candidates, key=lambda c: (c[0], c[1]))
    return name, value


def _monomial_symbols(m: Monomial) -> set[str]:
    out: set[str] = set()
    for atom in m:
        out |= _atom_symbols(atom)
    return out


__all__ = ["Dim", "DimLike", "Undecidable", "ceil_div", "floordiv", "free_symbols", "is_symbolic", "maximum",
           "solve", "substitute", "symbol"]
