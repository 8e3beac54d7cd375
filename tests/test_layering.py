"""The layering contract, checked over the source's ``ast`` (every import, module level or inside a
function): no import cycles; ``jenga`` imports nothing of ``harness``, ``jenga_vllm`` or ``vllm``;
``harness.config`` no backend; reports and analysis read records only (no ``harness.config``,
``harness.workloads``, ``harness.run`` or ``harness.models``); the backends sit side by side (``sim``
and ``vllm`` do not import each other; the step-time model is ``harness.backends.cost``); nothing
below the study package imports it. Each rule is also run on a small broken tree (the negative
controls), so a checker that finds nothing cannot pass."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "jenga", "jenga_vllm")

# (importer pattern, imported pattern, why) — a module matching the first may not import one
# matching the second. Patterns are regular expressions over dotted module names.
FORBIDDEN = [
    (r"jenga(\..*)?$", r"(harness|jenga_vllm|vllm)(\..*)?$", "jenga/ is a library: no harness, plugin or vLLM"),
    (r"harness\.config$", r"harness\.backends(\..*)?$", "config validates names without importing backends"),
    (r"harness\.(analysis|plots|study\.(report|stats|kinds(\..*)?))$",
     r"harness\.(config|workloads|run|models)(\..*)?$", "reports and analysis read records only"),
    (r"harness\.backends\.sim(\..*)?$", r"harness\.backends\.vllm(\..*)?$", "backends side by side"),
    (r"harness\.backends\.vllm(\..*)?$", r"harness\.backends\.sim(\..*)?$", "backends side by side"),
    (r"harness\.(config|models|records|run|workloads|backends|tools|analysis|plots|profile)(\..*)?$",
     r"harness\.study(\..*)?$", "nothing below the study package imports it"),
]
# Third-party modules whose import may sit inside a function (optional or heavy dependencies).
OPTIONAL = ("vllm", "torch", "submitit", "transformers", "datasets", "joblib", "scipy", "matplotlib",
            "hydra_plugins", "nbformat", "papermill", "hypothesis")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (root / pkg).rglob("*.py"):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """``(imported name, line, inside a function)`` of every import in one module; a name inside
    our packages resolves to the longest known module (``from pkg import sub`` is ``pkg.sub``)."""
    tree = ast.parse(path.read_text())
    func_lines = {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    out = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets = subs + ([base] if len(subs) < len(node.names) else [])
        for t in targets:
            while t.split(".")[0] in PACKAGES and t not in known and "." in t:
                t = t.rpartition(".")[0]
            out.append((t, node.lineno, node.lineno in func_lines))
    return out


def graph(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> the modules of ours it imports, every import line as text for the rules)."""
    known = modules(root)
    edges: dict[str, set[str]] = defaultdict(set)
    lines = []
    for name, path in known.items():
        for t, line, _ in imports(name, path, known):
            if t != name and t in known:
                edges[name].add(t)
            lines.append((name, t, f"{path.relative_to(root)}:{line}"))
    return edges, lines


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def violations(root: Path) -> list[str]:
    edges, lines = graph(root)
    out = [f"import cycle: {' <-> '.join(c)}" for c in cycles(edges)]
    for src, dst, where in lines:
        for a, b, why in FORBIDDEN:
            if re.match(a, src) and re.match(b, dst) and not dst.startswith(src + "."):
                out.append(f"{where}: {src} imports {dst} ({why})")
    return out


def test_the_project_keeps_its_layering():
    assert violations(ROOT) == []


def needs_optional(root: Path) -> set[str]:
    """Our modules that import an optional third-party dependency (:data:`OPTIONAL`) at module level,
    directly or through another of ours: importing one late is how a module stays usable without it."""
    known = modules(root)
    top: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        names = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        top[name] = names
    heavy = {n for n, names in top.items() if any(x.split(".")[0] in OPTIONAL for x in names)}
    grew = True
    while grew:
        grew = False
        for n, names in top.items():
            if n not in heavy and any(x in heavy for x in names):
                heavy.add(n)
                grew = True
    return heavy


def test_imports_inside_functions_are_optional_dependencies_only():
    """A function-level import of our own code was a way to dodge a cycle; it stays only where the
    imported module needs an optional or heavy dependency (vLLM, torch, submitit, ...), so that the
    importer works without it, or in a registry that loads its entries when one is picked."""
    known, heavy = modules(ROOT), needs_optional(ROOT)
    registries = ("harness/backends/__init__.py", "harness/study/kinds/__init__.py")
    late = [f"{p.relative_to(ROOT)}:{line} {t}" for name, p in known.items() for t, line, inner in imports(name, p, known)
            if inner and t.split(".")[0] in PACKAGES and t not in heavy
            and not str(p.relative_to(ROOT)).startswith(registries)]
    assert late == [], "\n".join(late)


def test_backend_names_in_config_match_the_backend_registry():
    """config reads the backend names from harness/conf/backend; they must be the registry's."""
    from harness.backends import REGISTRY
    from harness.config import options

    assert set(options("backend")) == set(REGISTRY)


# -- negative controls: the checker finds what it is meant to find ----------------------------------
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


@pytest.mark.parametrize("files,needle", [
    ({"harness/a.py": "from harness import b\n", "harness/b.py": "def f():\n    from harness.a import x\n"},
     "import cycle: harness.a <-> harness.b"),
    ({"jenga/pool.py": "from harness.records import X\n", "harness/records.py": ""}, "jenga/ is a library"),
    ({"jenga/pool.py": "def f():\n    import vllm\n"}, "jenga/ is a library"),
    ({"harness/config.py": "from harness.backends import REGISTRY\n", "harness/backends/__init__.py": ""},
     "config validates names"),
    ({"harness/study/kinds/mix.py": "def f():\n    from harness.config import compose_cell\n",
      "harness/config.py": "", "harness/study/__init__.py": "", "harness/study/kinds/__init__.py": ""},
     "reports and analysis read records only"),
    ({"harness/backends/vllm/sched.py": "from harness.backends.sim.cost import C\n",
      "harness/backends/sim/cost.py": "", "harness/backends/__init__.py": "", "harness/backends/sim/__init__.py": "",
      "harness/backends/vllm/__init__.py": ""}, "backends side by side"),
    ({"harness/config.py": "from harness.study import kinds\n", "harness/study/__init__.py": "",
      "harness/study/kinds.py": ""}, "nothing below the study package"),
])
def test_each_rule_catches_its_violation(tmp_path, files, needle):
    found = violations(_tree(tmp_path, files))
    assert any(needle in v for v in found), found


def test_a_clean_tree_has_no_violation(tmp_path):
    files = {"harness/config.py": "from jenga import spec\n", "jenga/spec.py": "import math\n",
             "harness/study/__init__.py": "", "harness/study/run.py": "from harness import config\n"}
    assert violations(_tree(tmp_path, files)) == []
