"""The package's shape, kept by a test: the import graph of draftguard/ (read with ast, so imports
inside functions count too) has no circle, the core never imports a surface, and no module grows
past 500 lines."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "draftguard"
MAX_LINES = 500
# The resolver runs in environments that hold nothing but transformers (the version matrix).
STANDALONE = "draftguard.check.resolver"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The draftguard module an import names: itself, or the package holding the imported name."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _type_only(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: never run, but still a dependency of the module's
    annotations (the import graph counts them); only what a module loads leaves them out."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def import_graph(*, type_only: bool = True) -> dict[str, set[str]]:
    """Each draftguard module -> the draftguard modules it imports (at the top or in a function, and,
    unless ``type_only=False``, under ``if TYPE_CHECKING:``: a type-only circle is still a circle)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        skipped = set() if type_only else _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                found = _resolve(target, modules) if target.startswith("draftguard") else None
                if found and found != name and not name.startswith(found + "."):
                    edges.add(found)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_circle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "draftguard.snapshot" in graph["draftguard.check.light"]
    assert graph["draftguard.errors"] == set()


def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    global PACKAGE
    root = tmp_path / "draftguard"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    saved, PACKAGE = PACKAGE, root
    try:
        return import_graph()
    finally:
        PACKAGE = saved


def test_the_graph_counts_imports_made_for_type_checking_only(tmp_path):
    """An import under ``if TYPE_CHECKING:`` is an edge: it closes a circle as surely as a run-time
    one (audit/run -> report -> html -> run had hidden one there)."""
    graph = _graph_of(tmp_path, {
        "__init__.py": "",
        "a.py": "from draftguard.b import B\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from draftguard.a import A\n",
    })
    assert graph["draftguard.b"] == {"draftguard.a"}
    assert find_cycle(graph) == ["draftguard.a", "draftguard.b", "draftguard.a"]


def test_the_import_graph_has_no_circle():
    assert find_cycle(import_graph()) is None


def test_the_check_core_never_imports_a_surface():
    graph = import_graph()
    surfaces = ("draftguard.report", "draftguard.bot", "draftguard.action", "draftguard.runner", "draftguard.cli")
    wrong = {(mod, dep) for mod, deps in graph.items() if mod.startswith("draftguard.check")
             for dep in deps if dep.startswith(surfaces)}
    assert not wrong


def test_the_report_views_import_no_surface_above_them():
    """report/ renders the check's Report and the JSON a GPU worker sends back; the runner, the bots and
    the Action sit above it and use it, never the other way round."""
    graph = import_graph()
    above = ("draftguard.runner", "draftguard.bot", "draftguard.action")
    wrong = {(mod, dep) for mod, deps in graph.items() if mod.startswith("draftguard.report")
             for dep in deps if dep.startswith(above)}
    assert not wrong


def test_the_audit_and_the_bot_import_nothing_of_each_other():
    """The queue both use sits below them (draftguard.jobs); each surface's Jobs are served by a
    worker that draftguard.cli hands the audit's handler."""
    graph = import_graph()
    pairs = (("draftguard.audit", "draftguard.bot"), ("draftguard.bot", "draftguard.audit"))
    wrong = {(mod, dep) for here, there in pairs for mod, deps in graph.items() if mod.startswith(here)
             for dep in deps if dep.startswith(there)}
    assert not wrong


def test_the_host_clients_import_nothing_of_the_comments_rendering():
    """A host finds its sticky comment by the marker (draftguard.markers); how the comment renders is
    report/'s business, which the clients must not load to talk to GitHub or the Hub."""
    graph = import_graph()
    wrong = {(mod, dep) for mod, deps in graph.items() if mod.startswith("draftguard.hosts")
             for dep in deps if dep.startswith("draftguard.report")}
    assert not wrong


def test_the_action_imports_nothing_from_the_bot():
    graph = import_graph()
    wrong = {(mod, dep) for mod, deps in graph.items() if mod.startswith("draftguard.action")
             for dep in deps if dep.startswith("draftguard.bot")}
    assert not wrong


def test_no_module_is_over_500_lines():
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long


# The errors defined outside errors.py on purpose: the resolver package runs standalone, without
# draftguard. BudgetSpent (a BaseException, so the tracing loops' ``except Exception`` lets it through)
# and BadBudget never leave the resolver or check/budget.py: they become ResolveError or CheckOverBudget.
OUTSIDE_THE_TREE = {"draftguard.check.resolver.classes.ResolveError", "draftguard.check.resolver.budget.BudgetSpent",
                    "draftguard.check.resolver.budget.BadBudget"}


def test_every_error_is_in_the_one_tree():
    """An exception class that derives from a builtin exception anywhere but errors.py is outside the
    tree that DraftguardError and its hints hold together (subclasses of the tree's errors are in it)."""
    import builtins

    builtin_errors = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}
    outside = set()
    for name, path in _modules().items():
        if name == "draftguard.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base).rpartition(".")[2] for base in node.bases}
                if bases & builtin_errors:
                    outside.add(f"{name}.{node.name}")
    assert outside == OUTSIDE_THE_TREE


def test_every_name_in_all_is_defined_where_it_is_listed():
    """``__all__`` may only list what its module binds at the top (a def, a class, an assignment or an
    import): a name left there after a move breaks ``from module import *``."""
    missing = set()
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(), str(path))
        bound: set[str] = set()
        listed: list[str] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(alias.asname or alias.name).partition(".")[0] for alias in node.names}
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    bound |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                    if isinstance(target, ast.Name) and target.id == "__all__":
                        # A starred entry (check.drafter's lazy names) is served by the module's __getattr__.
                        listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        missing |= {f"{name}.{item}" for item in listed if item not in bound}
    assert not missing


def test_the_resolver_imports_only_the_standard_library_transformers_and_itself():
    # Anything else would be missing where the matrix runs it: draftguard is not installed there.
    allowed = set(sys.stdlib_module_names) | {"__future__", "transformers"}
    wrong = []
    for name, path in _modules().items():
        if name != STANDALONE and not name.startswith(STANDALONE + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wrong += [(name, a.name) for a in node.names if a.name.split(".")[0] not in allowed]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                if (node.module or "").split(".")[0] not in allowed:
                    wrong.append((name, node.module))
    assert not wrong
    assert any(n.startswith(STANDALONE + ".") for n in _modules())  # the check looks at the package


# Modules whose docstrings may leave out In/Out lines: none.
IN_OUT_WAITING: tuple[str, ...] = ()


def _in_out_missing(modules: dict[str, Path]) -> dict[str, list[str]]:
    """Each module whose docstring lacks a line starting ``In:`` or ``Out:`` -> the ones it lacks."""
    missing: dict[str, list[str]] = {}
    for name, path in modules.items():
        if name in IN_OUT_WAITING or name.startswith(tuple(w + "." for w in IN_OUT_WAITING)):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
        starts = {line.strip().split(":", 1)[0] for line in doc.splitlines() if ":" in line}
        lacking = [label for label in ("In", "Out") if label not in starts]
        if lacking:
            missing[name] = lacking
    return missing


def test_the_docstring_check_sees_a_missing_line(tmp_path):
    (tmp_path / "both.py").write_text('"""Both.\n\nIn: a path.\nOut: its bytes.\n"""\n')
    (tmp_path / "inline.py").write_text('"""Inline.\n\nIn: a path. Out: its bytes.\n"""\n')
    (tmp_path / "none.py").write_text("x = 1\n")
    modules = {path.stem: path for path in sorted(tmp_path.glob("*.py"))}
    assert _in_out_missing(modules) == {"inline": ["Out"], "none": ["In", "Out"]}


def test_every_module_says_what_comes_in_and_what_goes_out():
    assert _in_out_missing(_modules()) == {}


# --- imports inside functions ------------------------------------------------------------------------
# Third-party packages that a module may import inside a function rather than at its top: an optional
# extra that the base install lacks (torch, vllm, safetensors: runner/vllm; huey, starlette, uvicorn,
# redis, PyGithub: bot/action; matplotlib: plot), or a base dependency that costs the cold check tenths
# of a second (transformers, huggingface_hub, numpy).
HEAVY = {"torch", "vllm", "safetensors", "huey", "starlette", "uvicorn", "redis", "github", "matplotlib",
         "transformers", "huggingface_hub", "numpy"}
# Modules whose lazy imports need not say why: none (the resolver package says why too).
SAYS_WHY_EXEMPT: tuple[str, ...] = ()


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The absolute names an import statement loads (for ``from X import a``: X and X.a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _function_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run inside a function (not under ``if TYPE_CHECKING:``)."""
    type_only = _type_only(tree)
    found = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in type_only:
                    found[(node.lineno, node.col_offset)] = node
    return [found[key] for key in sorted(found)]


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported: its body, and the bodies of its
    module-level if/try/with/class blocks, but not functions nor ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.append(stmt)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            elif isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                visit(stmt.orelse)
            else:
                for field in ("body", "orelse", "finalbody"):
                    visit([s for s in getattr(stmt, field, []) if isinstance(s, ast.stmt)])
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)
    visit(tree.body)
    return found


def heavy_at_import(module: str, modules: dict[str, Path], seen: set[str] | None = None) -> set[str]:
    """The HEAVY packages that importing ``module`` loads: through its top-level imports, and those of
    every package above it and every draftguard module they import in turn."""
    seen = set() if seen is None else seen
    heavy: set[str] = set()
    chain = [module[: i] for i in range(len(module) + 1) if i == len(module) or module[i] == "."]
    for name in chain:
        if name not in modules or name in seen:
            continue
        seen.add(name)
        path = modules[name]
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            for target in _imported_names(node, _package_of(name, path)):
                if target.startswith("draftguard"):
                    found = _resolve(target, modules)
                    if found:
                        heavy |= heavy_at_import(found, modules, seen)
                elif target.split(".")[0] in HEAVY:
                    heavy.add(target.split(".")[0])
    return heavy


def test_heavy_at_import_follows_top_level_imports_only():
    modules = _modules()
    assert heavy_at_import("draftguard.runner.reference", modules) >= {"torch"}
    assert heavy_at_import("draftguard.bot.app", modules) >= {"starlette"}
    assert heavy_at_import("draftguard.check.resolver", modules) == set()  # transformers: inside functions
    assert heavy_at_import("draftguard.cli", modules) == set()


def test_own_modules_are_imported_inside_a_function_only_to_spare_a_heavy_package():
    """An import of a draftguard module sits at the top of the file, where it shows in the graph,
    unless importing that module loads a HEAVY package the caller must not pay for."""
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        package = _package_of(name, path)
        for node in _function_imports(ast.parse(path.read_text(), str(path))):
            owned = {_resolve(t, modules) for t in _imported_names(node, package) if t.startswith("draftguard")}
            target = max(owned - {None}, key=len, default=None)
            if target and not heavy_at_import(target, modules):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {target}")
    assert not wrong, "move these to the top of their module:\n" + "\n".join(wrong)


def _says_why(comment: str) -> bool:
    """A comment that gives a reason, not only a linter's pragma."""
    text = comment.lstrip("#").strip()
    for pragma in ("noqa", "type: ignore", "pragma"):
        if text.startswith(pragma):
            text = text.split("(", 1)[1] if "(" in text else ""
    return bool(text.strip(" )"))


def test_every_import_inside_a_function_says_why():
    """Each import left inside a function carries its reason (heavy, an extra, ...): on its own
    line(s), on the line above, or on another import of the run of imports it belongs to."""
    wrong = []
    for name, path in _modules().items():
        if name.startswith(SAYS_WHY_EXEMPT):
            continue
        lines = path.read_text().splitlines()
        nodes = _function_imports(ast.parse("\n".join(lines), str(path)))
        span_of_end = {node.end_lineno: node for node in nodes}

        def commented(first: int, last: int) -> bool:
            return any("#" in lines[i - 1] and _says_why(lines[i - 1][lines[i - 1].index("#"):])
                       for i in range(first, last + 1))

        for node in nodes:
            first, last, ok = node.lineno, node.end_lineno, False
            while not ok:
                ok = commented(first, last)
                above = first - 1
                if ok or above < 1:
                    break
                if lines[above - 1].strip().startswith("#"):
                    ok = _says_why(lines[above - 1].strip())
                    break
                if above not in span_of_end:  # not part of a run of imports: nothing more to read
                    break
                first, last = span_of_end[above].lineno, span_of_end[above].end_lineno
            if not ok:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not wrong, "say why each of these is inside a function (or move it to the top):\n" + "\n".join(wrong)


def test_the_reason_check_reads_comments_not_pragmas():
    assert _says_why("# torch: the runner extra only")
    assert _says_why("# noqa: F401 (the runs, importable from here as before)")
    assert not _says_why("# noqa: F401")
    assert not _says_why("# type: ignore[import]")


# --- layers ------------------------------------------------------------------------------------------
# The README's Layout, top to bottom. A module imports only from its own layer or the layers below it.
LAYERS = [
    ("draftguard.cli", "draftguard.cli_settings", "draftguard.__main__", "draftguard.action", "draftguard.bot", "draftguard.audit"),
    ("draftguard.hosts", "draftguard.pr_verdict", "draftguard.pr_suggestions", "draftguard.jobs",
     "draftguard.queue_waits", "draftguard.queue_store", "draftguard.payloads", "draftguard.locks"),
    ("draftguard.runner",),
    ("draftguard.report",),
    ("draftguard.fix",),
    ("draftguard.check",),
    ("draftguard.settings",),
    ("draftguard.snapshot", "draftguard.secrets", "draftguard.hub_access", "draftguard.markers", "draftguard.bounded",
     "draftguard.forking", "draftguard.retry_after"),
    ("draftguard.capped",),
    ("draftguard.errors",),
]


def _layer(module: str) -> int | None:
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports that point up the layers, and modules the layers do not place."""
    wrong = []
    for module, deps in sorted(graph.items()):
        if module == "draftguard":
            continue
        here = _layer(module)
        if here is None:
            wrong.append(f"{module} is in no layer: add it to LAYERS and to the README's Layout")
            continue
        wrong += [f"{module} -> {dep}" for dep in sorted(deps) if (_layer(dep) or 0) < here and dep != "draftguard"]
    return wrong


def test_the_layer_check_sees_an_import_that_points_up():
    graph = {"draftguard.check.light": {"draftguard.report.json"}, "draftguard.report.json": {"draftguard.errors"},
             "draftguard.errors": set(), "draftguard.extra": set()}
    assert upward_imports(graph) == ["draftguard.check.light -> draftguard.report.json",
                                     "draftguard.extra is in no layer: add it to LAYERS and to the README's Layout"]


def test_imports_point_down_the_readmes_layers():
    assert upward_imports(import_graph()) == []
