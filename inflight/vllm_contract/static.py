"""Read the Prometheus metrics a vLLM release registers from its source, without importing it.

vLLM needs torch and a GPU stack to import, so the release is read as text: every call of a
``prometheus_client`` metric class (``Gauge``, ``Counter``, ``Histogram``, ``Summary``,
``Info``, ``Enum``) found by ``ast``, whether called by its imported name
(``Gauge(...)``, ``prometheus_client.Gauge(...)``) or through a class attribute that holds
one (vLLM's ``PrometheusStatLogger._gauge_cls = Gauge`` then ``self._gauge_cls(...)``).

What static reading resolves: string constants, f-strings and ``+`` of resolvable parts,
list and tuple literals, names bound once or on each branch of an ``if`` in the enclosing
function, module constants (also imported from another module of the release), loop
variables over literal sequences (``for name, doc in [("vllm:a", "A"), ...]``), and vLLM's
default histogram bucket families (``histogram_buckets("time_to_first_token")``).

What it cannot see, and reports as ``Unresolved`` rather than guessing: values passed in
by a caller (a ``labelnames`` parameter), values computed at run time (``dict.keys()``,
``max_model_len``), attributes set in ``__init__``, and whether the code path that
registers a metric runs at all (the enclosing ``if`` tests are recorded as ``only_if``;
an early ``return`` before the call is not).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import Histogram as _PromHistogram

# prometheus_client class → the type it exposes (the ``# TYPE`` line).
METRIC_CLASSES = {
    "Gauge": "gauge",
    "Counter": "counter",
    "Histogram": "histogram",
    "Summary": "summary",
    "Info": "info",
    "Enum": "stateset",
}
# prometheus_client's own bounds when a Histogram is given no ``buckets`` (+Inf left out).
DEFAULT_BUCKETS = tuple(b for b in _PromHistogram.DEFAULT_BUCKETS if b != float("inf"))
# vLLM's histogram bucket families: ``histogram_buckets(family, ...)`` reads its defaults
# from this dict in the function's module (vllm/v1/metrics/buckets.py since 0.2x).
BUCKET_FUNCTION = "histogram_buckets"
BUCKET_DEFAULTS = "_STATIC_FAMILY_DEFAULTS"
QUOTED_METRIC_NAME = re.compile(r"""["'](vllm:[a-z_][a-z0-9_]*)["']""")
_POSITIONAL = ("name", "documentation", "labelnames")
_MAX_ALTERNATIVES = 64


@dataclass(frozen=True)
class Metric:
    """One registration: ``name`` as vLLM passes it; ``labels`` None when not resolved."""

    name: str
    type: str
    labels: tuple[str, ...] | None
    help: str | None
    buckets: tuple[float, ...] | None  # finite upper bounds; histograms only
    where: str  # "vllm/v1/metrics/loggers.py:527"
    scope: str  # "PrometheusStatLogger.__init__", or "<module>"
    only_if: tuple[str, ...]  # the enclosing ``if`` tests, outermost first

    @property
    def family(self) -> str:
        """The name on the ``# TYPE`` line: prometheus_client drops a counter's ``_total``."""
        return self.name.removesuffix("_total") if self.type == "counter" else self.name

    @property
    def series(self) -> str:
        """The name a query uses: a counter's sample is ``<family>_total``."""
        return self.family + "_total" if self.type == "counter" else self.family


@dataclass(frozen=True)
class Unresolved:
    """Something a registration passes that static reading cannot determine, and why."""

    where: str
    scope: str
    type: str
    what: str  # "name", "labels", "help" or "buckets"
    expr: str  # the source expression, as written
    reason: str
    name: str | None = None  # the metric's name when only its labels/buckets are unknown


@dataclass(frozen=True)
class Reading:
    metrics: tuple[Metric, ...]
    unresolved: tuple[Unresolved, ...]
    # vLLM metric-like strings in the source that are no listed metric's name, with where
    # the first one is: names of registrations static reading could not follow.
    other_names: tuple[tuple[str, str], ...] = ()


class _Unresolvable(Exception):
    """An expression whose value static reading cannot determine; the message says why."""


def module_of(path: str) -> str:
    """``vllm/v1/engine/__init__.py`` → ``vllm.v1.engine``."""
    mod = path.removesuffix(".py").replace("/", ".")
    return mod.removesuffix(".__init__")


class _Module:
    """One parsed source file: its constants, imports and parent links."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.tree = ast.parse(text, filename=path)
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.constants: dict[str, ast.expr] = {}
        self.imported: dict[str, tuple[str, str]] = {}  # local name → (module, name)
        self.module_aliases: dict[str, str] = {}  # local name → module
        for stmt in self.tree.body:
            for target, value in _assignments(stmt):
                self.constants[target] = value
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.imported[a.asname or a.name] = (node.module, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    self.module_aliases[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0]
                    )

    def prometheus_class(self, func: ast.expr) -> str | None:
        """The prometheus_client class ``func`` names directly, or None."""
        if isinstance(func, ast.Name):
            mod, name = self.imported.get(func.id, ("", ""))
            if mod.startswith("prometheus_client") and name in METRIC_CLASSES:
                return name
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            mod = self.module_aliases.get(func.value.id, "")
            if mod.startswith("prometheus_client") and func.attr in METRIC_CLASSES:
                return func.attr
        return None

    def enclosing(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node


def _assignments(stmt: ast.stmt) -> Iterator[tuple[str, ast.expr]]:
    if isinstance(stmt, ast.Assign) and stmt.value is not None:
        for t in stmt.targets:
            if isinstance(t, ast.Name):
                yield t.id, stmt.value
    elif (
        isinstance(stmt, ast.AnnAssign)
        and stmt.value is not None
        and isinstance(stmt.target, ast.Name)
    ):
        yield stmt.target.id, stmt.value


class _Reader:
    def __init__(self, sources: Mapping[str, str]) -> None:
        # Parsed on first use: a release has ~2,000 files and few register metrics.
        self.sources = {module_of(p): (p, t) for p, t in sorted(sources.items())}
        self._parsed: dict[str, _Module] = {}
        self.class_attrs = self._metric_class_attributes()
        self._resolving: set[tuple[str, str, int]] = set()

    def _metric_class_attributes(self) -> dict[str, str]:
        """Class attributes that hold a metric class (``_gauge_cls = Gauge``), by name.

        One attribute name across the release maps to one class; a name bound to two
        different classes in different places is left out (ambiguous).
        """
        seen: dict[str, set[str]] = {}
        for mod in self._importing_prometheus():
            for cls in ast.walk(mod.tree):
                if not isinstance(cls, ast.ClassDef):
                    continue
                for stmt in cls.body:
                    for target, value in _assignments(stmt):
                        kind = mod.prometheus_class(value)
                        if kind:
                            seen.setdefault(target, set()).add(kind)
        return {attr: kinds.pop() for attr, kinds in seen.items() if len(kinds) == 1}

    def module(self, name: str) -> _Module | None:
        if name not in self._parsed and name in self.sources:
            self._parsed[name] = _Module(*self.sources[name])
        return self._parsed.get(name)

    def _importing_prometheus(self) -> Iterator[_Module]:
        for name, (_, text) in self.sources.items():
            if "prometheus_client" in text:
                mod = self.module(name)
                assert mod is not None
                yield mod

    def metric_class(self, mod: _Module, func: ast.expr) -> str | None:
        direct = mod.prometheus_class(func)
        if direct:
            return direct
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
        ):
            return self.class_attrs.get(func.attr)
        return None

    # --- reading ------------------------------------------------------------------------
    def read(self) -> Reading:
        metrics: list[Metric] = []
        unresolved: list[Unresolved] = []
        mentioned: dict[str, str] = {}
        for name, (path, text) in self.sources.items():
            for number, line in enumerate(text.splitlines(), 1):
                for found in QUOTED_METRIC_NAME.findall(line):
                    mentioned.setdefault(found, f"{path}:{number}")
            # A file registers a metric only by naming prometheus_client or a class
            # attribute that holds one of its classes.
            if "prometheus_client" not in text and not any(a in text for a in self.class_attrs):
                continue
            mod = self.module(name)
            assert mod is not None
            for node in ast.walk(mod.tree):
                if isinstance(node, ast.Call):
                    kind = self.metric_class(mod, node.func)
                    if kind:
                        self._registration(mod, node, kind, metrics, unresolved)
                    else:
                        self._dynamic_registration(mod, node, unresolved)
        read = {n for m in metrics for n in (m.name, m.family, m.series)}
        return Reading(
            tuple(sorted(set(metrics), key=lambda m: (m.name, m.where, repr(m)))),
            tuple(sorted(set(unresolved), key=lambda u: (u.where, u.what, u.name or "", u.expr))),
            tuple(sorted((n, w) for n, w in mentioned.items() if n not in read)),
        )

    def _dynamic_registration(
        self, mod: _Module, call: ast.Call, unresolved: list[Unresolved]
    ) -> None:
        """A call of a local bound to a metric class (``metric_cls = self._counter_cls``)."""
        if not isinstance(call.func, ast.Name):
            return
        func = next(
            (
                n
                for n in mod.enclosing(call)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ),
            None,
        )
        if func is None:
            return
        kinds = sorted(
            {
                METRIC_CLASSES[kind]
                for node in ast.walk(func)
                if isinstance(node, ast.stmt)
                for target, value in _assignments(node)
                if target == call.func.id and (kind := self.metric_class(mod, value))
            }
        )
        if kinds:
            unresolved.append(
                Unresolved(
                    f"{mod.path}:{call.lineno}",
                    _scope(mod, call),
                    "|".join(kinds),
                    "name",
                    ast.unparse(call),
                    f"the metric class ({call.func.id}) and its arguments are chosen at run time",
                )
            )

    def _registration(
        self,
        mod: _Module,
        call: ast.Call,
        kind: str,
        metrics: list[Metric],
        unresolved: list[Unresolved],
    ) -> None:
        args = {k: v for k, v in zip(_POSITIONAL, call.args, strict=False)}
        args.update({kw.arg: kw.value for kw in call.keywords if kw.arg})
        where = f"{mod.path}:{call.lineno}"
        scope = _scope(mod, call)
        mtype = METRIC_CLASSES[kind]
        only_if = _conditions(mod, call)

        def unknown(what: str, expr: ast.expr, why: str, name: str | None = None) -> None:
            unresolved.append(Unresolved(where, scope, mtype, what, ast.unparse(expr), why, name))

        if "name" not in args:
            why = "passed in **kwargs" if any(k.arg is None for k in call.keywords) else "absent"
            unresolved.append(Unresolved(where, scope, mtype, "name", ast.unparse(call), why))
            return
        try:
            envs = self._loop_bindings(mod, call)
        except _Unresolvable as e:
            unknown("name", args["name"], str(e))
            return
        for env in envs:
            try:
                names = self._strings(mod, call, args["name"], env)
                names = [self._full_name(mod, call, n, args, env) for n in names]
            except _Unresolvable as e:
                unknown("name", args["name"], str(e))
                continue
            for name in names:
                labels = self._one(mod, call, args, "labelnames", env, (), unknown, name)
                doc = self._one(mod, call, args, "documentation", env, None, unknown, name)
                buckets = None
                if mtype == "histogram":
                    buckets = self._one(
                        mod, call, args, "buckets", env, DEFAULT_BUCKETS, unknown, name
                    )
                metrics.append(
                    Metric(
                        name=name,
                        type=mtype,
                        labels=None if labels is None else tuple(str(x) for x in labels),
                        help=doc,
                        buckets=None
                        if buckets is None
                        else tuple(float(b) for b in buckets if b != float("inf")),
                        where=where,
                        scope=scope,
                        only_if=only_if,
                    )
                )

    def _one(
        self,
        mod: _Module,
        call: ast.Call,
        args: dict[str, ast.expr],
        key: str,
        env: dict[str, Any],
        default: Any,
        unknown: Any,
        name: str,
    ) -> Any:
        """The single value of argument ``key``; None (and an Unresolved) when not known."""
        if key not in args:
            return default
        what = {"labelnames": "labels", "documentation": "help"}.get(key, key)
        try:
            values = self._resolve(mod, call, args[key], env)
        except _Unresolvable as e:
            unknown(what, args[key], str(e), name)
            return None
        distinct = {repr(v) for v in values}
        if len(distinct) != 1:
            unknown(what, args[key], f"{len(distinct)} possible values", name)
            return None
        return values[0]

    def _full_name(
        self, mod: _Module, call: ast.Call, name: str, args: dict[str, ast.expr], env: Any
    ) -> str:
        """prometheus_client's ``namespace_subsystem_name_unit`` composition."""
        parts = {}
        for key in ("namespace", "subsystem", "unit"):
            if key in args:
                values = self._strings(mod, call, args[key], env)
                if len(values) != 1:
                    raise _Unresolvable(f"{key} has {len(values)} possible values")
                parts[key] = values[0]
        full = "_".join(p for p in (parts.get("namespace"), parts.get("subsystem"), name) if p)
        unit = parts.get("unit")
        if unit and not full.endswith("_" + unit):
            full += "_" + unit
        return full

    def _strings(self, mod: _Module, at: ast.AST, expr: ast.expr, env: Any) -> list[str]:
        values = self._resolve(mod, at, expr, env)
        if not all(isinstance(v, str) for v in values):
            raise _Unresolvable(f"not a string: {ast.unparse(expr)}")
        return values

    # --- values -------------------------------------------------------------------------
    def _loop_bindings(self, mod: _Module, call: ast.Call) -> list[dict[str, Any]]:
        """Every binding of the loop variables around ``call`` whose loop runs over a literal.

        A loop over something else leaves its variables unbound (an expression that uses
        one is then unresolved, naming the loop).
        """
        envs: list[dict[str, Any]] = [{}]
        for node in mod.enclosing(call):
            loops: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(node, ast.For):
                loops.append((node.target, node.iter))
            elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
                loops.extend((g.target, g.iter) for g in node.generators)
            for target, it in loops:
                try:
                    seqs = self._resolve(mod, node, it, {})
                except _Unresolvable as e:
                    names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
                    why = f"a loop variable over {ast.unparse(it)} ({e})"
                    envs = [{**env, **dict.fromkeys(names, _Loop(why))} for env in envs]
                    continue
                items = [item for seq in seqs for item in seq]
                envs = [{**env, **_bind(target, item)} for env in envs for item in items]
        return envs

    def _resolve(self, mod: _Module, at: ast.AST, expr: ast.expr, env: Any) -> list[Any]:
        """Every value ``expr`` may have at ``at`` (one per branch); raises _Unresolvable."""
        if isinstance(expr, ast.Constant):
            return [expr.value]
        if isinstance(expr, ast.JoinedStr):
            parts: list[list[str]] = []
            for v in expr.values:
                if isinstance(v, ast.Constant):
                    parts.append([str(v.value)])
                elif isinstance(v, ast.FormattedValue) and v.conversion == -1 and not v.format_spec:
                    parts.append([str(x) for x in self._resolve(mod, at, v.value, env)])
                else:
                    raise _Unresolvable(f"an f-string with a format: {ast.unparse(expr)}")
            return _capped(["".join(p) for p in itertools.product(*parts)])
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left = self._resolve(mod, at, expr.left, env)
            right = self._resolve(mod, at, expr.right, env)
            try:
                return _capped([a + b for a, b in itertools.product(left, right)])
            except TypeError as e:
                raise _Unresolvable(f"cannot add: {ast.unparse(expr)}") from e
        if isinstance(expr, ast.List | ast.Tuple):
            elems = [self._resolve(mod, at, e, env) for e in expr.elts]
            return _capped([list(p) for p in itertools.product(*elems)])
        if isinstance(expr, ast.Name):
            return self._name(mod, at, expr.id, env)
        if isinstance(expr, ast.Call):
            return self._call(mod, at, expr, env)
        raise _Unresolvable(f"computed at run time: {ast.unparse(expr)}")

    def _call(self, mod: _Module, at: ast.AST, call: ast.Call, env: Any) -> list[Any]:
        func = call.func
        if isinstance(func, ast.Name) and func.id in ("list", "tuple") and len(call.args) == 1:
            return [list(v) for v in self._resolve(mod, at, call.args[0], env)]
        if isinstance(func, ast.Name) and func.id == BUCKET_FUNCTION and call.args:
            return self._bucket_family(mod, at, call, env)
        raise _Unresolvable(f"computed at run time: {ast.unparse(call)}")

    def _bucket_family(self, mod: _Module, at: ast.AST, call: ast.Call, env: Any) -> list[Any]:
        """vLLM's default bounds of a bucket family (its ``--custom-histogram-buckets``
        flag may replace them at run time)."""
        home, _ = mod.imported.get(BUCKET_FUNCTION, (module_of(mod.path), ""))
        source = self.module(home)
        table = source.constants.get(BUCKET_DEFAULTS) if source else None
        if source is None or not isinstance(table, ast.Dict):
            raise _Unresolvable(f"no {BUCKET_DEFAULTS} dict in {home}")
        out = []
        for family in self._strings(mod, at, call.args[0], env):
            for k, v in zip(table.keys, table.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == family:
                    out.extend(self._resolve(source, source.tree, v, {}))
                    break
            else:
                raise _Unresolvable(
                    f"bucket family {family!r} has no static default in {home} "
                    "(computed at run time)"
                )
        return out

    def _name(self, mod: _Module, at: ast.AST, name: str, env: Any) -> list[Any]:
        key = (mod.path, name, id(at))
        if key in self._resolving:
            raise _Unresolvable(f"{name} is defined in terms of itself")
        self._resolving.add(key)
        try:
            return self._lookup(mod, at, name, env)
        finally:
            self._resolving.discard(key)

    def _lookup(self, mod: _Module, at: ast.AST, name: str, env: Any) -> list[Any]:
        if name in env:
            bound = env[name]
            if isinstance(bound, _Loop):
                raise _Unresolvable(bound.why)
            return [bound]
        func = next(
            (n for n in mod.enclosing(at) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
            None,
        )
        if func is not None:
            params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
            params += [a.arg for a in func.args.kwonlyargs]
            if name in params:
                raise _Unresolvable(
                    f"{name} is a parameter of {_scope(mod, func)}: the caller's value"
                )
            local = [
                value
                for node in ast.walk(func)
                if isinstance(node, ast.stmt)
                for target, value in _assignments(node)
                if target == name
            ]
            if local:
                return _capped([v for value in local for v in self._resolve(mod, at, value, env)])
        if name in mod.constants:
            return self._resolve(mod, mod.tree, mod.constants[name], {})
        if name in mod.imported:
            home, original = mod.imported[name]
            source = self.module(home)
            if source is not None and original in source.constants:
                return self._resolve(source, source.tree, source.constants[original], {})
            raise _Unresolvable(f"{name} is imported from {home}, which defines no such constant")
        raise _Unresolvable(f"{name} is not a constant here")


@dataclass(frozen=True)
class _Loop:
    why: str


def _bind(target: ast.expr, value: Any) -> dict[str, Any]:
    if isinstance(target, ast.Name):
        return {target.id: value}
    if (
        isinstance(target, ast.Tuple | ast.List)
        and isinstance(value, list | tuple)
        and len(target.elts) == len(value)
    ):
        out: dict[str, Any] = {}
        for t, v in zip(target.elts, value, strict=True):
            out.update(_bind(t, v))
        return out
    raise _Unresolvable(f"cannot unpack into {ast.unparse(target)}")


def _capped(values: list[Any]) -> list[Any]:
    if len(values) > _MAX_ALTERNATIVES:
        raise _Unresolvable(f"more than {_MAX_ALTERNATIVES} possible values")
    return values


def _scope(mod: _Module, node: ast.AST) -> str:
    names = [
        n.name
        for n in (node, *mod.enclosing(node))
        if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    return ".".join(reversed(names)) or "<module>"


def _conditions(mod: _Module, call: ast.Call) -> tuple[str, ...]:
    """The tests of the ``if`` statements around ``call``, outermost first."""
    out = []
    child: ast.AST = call
    for node in mod.enclosing(call):
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            out.append(test if child not in node.orelse else f"not ({test})")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            break
        child = node
    return tuple(reversed(out))


def read_metrics(sources: Mapping[str, str]) -> Reading:
    """Every metric registration in ``sources`` (path inside the wheel → Python text)."""
    return _Reader(sources).read()


def read_constant(sources: Mapping[str, str], module: str, name: str) -> Any:
    """The value of module constant ``module.name`` (e.g. ``vllm.v1.engine``,
    ``FINISH_REASON_STRINGS``); raises ValueError naming what could not be read."""
    reader = _Reader({p: t for p, t in sources.items() if module_of(p) == module})
    mod = reader.module(module)
    if mod is None or name not in mod.constants:
        raise ValueError(f"{module}.{name}: no such module constant in the release")
    try:
        values = reader._resolve(mod, mod.tree, mod.constants[name], {})
    except _Unresolvable as e:
        raise ValueError(f"{module}.{name}: {e}") from e
    if len(values) != 1:
        raise ValueError(f"{module}.{name}: {len(values)} possible values")
    return values[0]
