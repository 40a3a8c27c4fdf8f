"""The package's shape, read from its source: packages by stage, each importing only what its
`__init__.py` docstring's "May import:" line allows, no import cycle between modules, no module over
600 lines and no folder of more than 15 modules.

Every import counts, at the top of a module or inside a function, under TYPE_CHECKING or not: a
function-level import is still a dependency, and a cycle hidden in one is still a cycle.
"""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "amp_tui"
MAX_LINES = 600
MAX_MODULES_PER_FOLDER = 15


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = ["amp_tui", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(root: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    """Module name -> (source, whether it is a package's __init__)."""
    return {module_name(path, root): (path.read_text(), path.name == "__init__.py")
            for path in sorted(root.rglob("*.py"))}


def imported(module: str, source: str, is_package: bool) -> set[str]:
    """Every amp_tui name an import statement of `source` names (module, or module.attribute)."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[:len(here) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.update(f"{base}.{alias.name}" for alias in node.names)
            names.add(base)
    return {name for name in names if name == "amp_tui" or name.startswith("amp_tui.")}


def resolve(name: str, modules: set[str]) -> str | None:
    """The module an imported name lives in (`amp_tui.core.spec.model.Model` -> its module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(code: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    modules = set(code)
    graph = {}
    for module, (source, is_package) in code.items():
        targets = {resolve(name, modules) for name in imported(module, source, is_package)}
        # `from amp_tui.core.search import partition` names the package first: the package's own
        # __init__ importing its submodules is how a package presents itself, not a dependency.
        graph[module] = {t for t in targets if t and t != module and not (is_package and t.startswith(module + "."))}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def declarations(code: dict[str, tuple[str, bool]]) -> dict[str, list[str]]:
    """Package -> what its docstring's "May import:" line allows ("nothing of amp_tui": nothing)."""
    out = {}
    for module, (source, is_package) in code.items():
        doc = ast.get_docstring(ast.parse(source)) or ""
        match = re.search(r"^May import:(.*)", doc, re.M | re.S)
        if is_package and match:
            text = re.sub(r"\([^)]*\)", "", match.group(1))       # a parenthetical says why
            out[module] = [] if "nothing" in text else re.findall(r"amp_tui[\w.]*", text)
    return out


def violations(code: dict[str, tuple[str, bool]]) -> list[str]:
    """Each import a module's package does not allow, as 'module -> target (package allows ...)'."""
    declared = declarations(code)
    out = []
    for module, targets in import_graph(code).items():
        owner = max((p for p in declared if module == p or module.startswith(p + ".")), key=len, default=None)
        if owner is None:
            out.append(f"{module}: in no package that declares what it may import")
            continue
        allowed = declared[owner]
        for target in sorted(targets):
            inside = target == owner or target.startswith(owner + ".")
            # `amp_tui` in a declaration is the root package itself (its version), not everything
            # under it: as a prefix it would let serving import the cost model unseen.
            if not inside and not any(target == a or (a != "amp_tui" and target.startswith(a + "."))
                                      for a in allowed):
                out.append(f"{module} -> {target} ({owner} may import: {', '.join(allowed) or 'nothing'})")
    return out


CODE = sources()


def test_no_import_cycles():
    assert cycles(import_graph(CODE)) == []


def test_every_import_is_one_its_package_allows():
    assert violations(CODE) == []


def test_the_stages_of_the_core_are_declared_in_order():
    """Each stage may import the stages before it and none after: the declarations form a chain."""
    declared = declarations(CODE)
    order = ["base", "spec", "costmodel", "search", "calibration", "validation", "plans"]
    for i, stage in enumerate(order):
        allowed = {a.removeprefix("amp_tui.core.") for a in declared[f"amp_tui.core.{stage}"] if a != "amp_tui"}
        later = set(order[i + 1:]) - ({"calibration"} if stage == "validation" else set())
        assert not allowed & later, (stage, allowed & later)
    assert declared["amp_tui.serving"] == ["amp_tui", "amp_tui.core.base", "amp_tui.core.spec"]
    # Profiling measures and reads scenarios; it writes measurements files calibrate reads, and never
    # reaches the cost model or the search (predictions stay with the commands that print them).
    assert declared["amp_tui.profiling"] == ["amp_tui.core.base", "amp_tui.core.spec", "amp_tui.core.calibration"]


def test_a_planted_upward_import_and_a_planted_cycle_are_caught():
    """The checks fail when the code breaks the rules (here on copies of two modules' source)."""
    planted = dict(CODE)
    source, is_package = planted["amp_tui.core.base.units"]
    planted["amp_tui.core.base.units"] = (source + "\nfrom amp_tui.core.search.search import search\n", is_package)
    assert violations(planted) == [
        "amp_tui.core.base.units -> amp_tui.core.search.search (amp_tui.core.base may import: nothing)"]
    assert any("amp_tui.core.base.units" in component for component in cycles(import_graph(planted)))
    serving = dict(CODE)      # serving declares the root package `amp_tui`: that is not all of it
    source, is_package = serving["amp_tui.serving.spec"]
    serving["amp_tui.serving.spec"] = (source + "\nfrom amp_tui.core.costmodel.cost import CostModel\n", is_package)
    assert violations(serving) == ["amp_tui.serving.spec -> amp_tui.core.costmodel.cost (amp_tui.serving may "
                                   "import: amp_tui, amp_tui.core.base, amp_tui.core.spec)"]
    inside = dict(CODE)
    source, is_package = inside["amp_tui.core.spec.layers"]
    inside["amp_tui.core.spec.layers"] = (source + "\ndef f():\n    from amp_tui.core.spec.model import Model\n",
                                          is_package)
    assert violations(inside) == []          # allowed (same package) ...
    assert any({"amp_tui.core.spec.layers", "amp_tui.core.spec.model"} <= set(component)     # ... but a cycle
               for component in cycles(import_graph(inside)))


def test_no_module_over_600_lines():
    long = {name: source.count("\n") + 1 for name, (source, _) in CODE.items() if source.count("\n") + 1 > MAX_LINES}
    assert long == {}


def test_no_folder_holds_more_than_15_modules():
    crowded = {str(folder.relative_to(PACKAGE.parent)): count for folder in [PACKAGE, *PACKAGE.rglob("*")]
               if folder.is_dir() and (count := len(list(folder.glob("*.py")))) > MAX_MODULES_PER_FOLDER}
    assert crowded == {}
