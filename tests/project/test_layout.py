"""The layout follows the pipeline: load → model → match → diagnosis → conclusion → pipeline →
replay → render → cli.

Each stage imports only the stages below it (`STAGES`, lowest first); the renderers side by
side import none of one another, and what they share lives in `render.renderer` (the one
renderer contract and its registry), `render.presentation` (sentences, records, next steps),
`render.tables` (the database's one schema) and `render.output` (atomic writes). The command
modules of `cli/` import none of one another: what they share lives in `cli.app`,
`cli.options`, `cli.outputs` and `cli.terminal`. No module imports another module's private
names.

`load` has a face: no module outside `load/` imports anything under it, only `fr_analyzer.load`
(its `__init__`), which re-exports what the other stages need. Behind the face, its three wings
(`LOAD_WINGS`) each say in their `__init__` what they hold, and `safety/` has a README that says
it is safety-critical. The wings import one another freely (the door's decoders read the entry
schema of `formats`; `formats.traces` parses through the door), so no order among them is kept.

The tests mirror the package: every test module lives in the folder of the stage it specifies
(`STAGE_TEST_FOLDERS`, load's wings each a folder of their own) or of an area that crosses the
stages (`AREA_TEST_FOLDERS`), never at the top of `tests/`, which keeps the shared helpers; and
`tests/README.md` maps every folder.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fr_analyzer"
TESTS = PACKAGE.parent / "tests"

# lowest first: a module may import its own stage and the stages before it, never one after
STAGES: tuple[tuple[str, ...], ...] = (
    ("errors", "memory"),  # the error hierarchy; the collector and huge pages, for big tables
    ("model",),  # records, the entry table, the group builder, rank lists
    ("load",),  # sources, discovery, the sandbox, the readers: files into the model
    ("match",),  # collectives and send/recv across ranks, and the findings
    ("diagnosis",),  # who waits for whom, ages, the root-cause rules
    ("conclusion",),  # the one answer every output renders
    ("pipeline", "kept"),  # the stages wired together (`kept`: where the rows stay in a cluster)
    ("cluster",),  # the same stages with the ranks read on a Ray cluster (`--engine ray`)
    ("replay",),  # the recorded collectives run again with torch; its dumps through the pipeline
    ("render",),  # text, JSON, HTML, entries, timeline, traces, databases
    ("cli", "__main__", "__init__"),  # the front door: the command line and its commands
)
LOAD_WINGS = {"sources", "safety", "formats"}
"""The folders of `load/`: where bytes come from, the door to objects, what the objects mean."""
COMMANDS = {"analyze", "live", "timeline", "merge_traces", "replay"}
"""The modules of `cli/` that each hold one command."""
STAGE_TEST_FOLDERS = {
    "model",
    "load",
    "load/sources",
    "load/safety",
    "load/formats",
    "match",
    "diagnosis",
    "conclusion",
    "cluster",
    "replay",
    "render",
    "cli",
}
"""The folders of `tests/` that mirror a stage (or a wing of `load`): each holds its specs."""
AREA_TEST_FOLDERS = {
    "live",  # `fr-analyze live`: snapshots of a running job, and a real torch job
    "hostile",  # hostile and messy input, at every stage
    "frsim",  # the recorder simulator (tools/frsim) and its fault campaign
    "end_to_end",  # every sample set's answer and golden report; PyTorch's analyzer's specs
    "project",  # this layout, the README and docs, `make run`
}
"""The folders of `tests/` for what crosses the stages."""
RENDERERS = {
    "report",
    "report_json",
    "report_html",
    "entries_view",
    "timeline",
    "traces",
    "database",
    "database_sqlite",
    "database_parquet",
}


def module_of(path: Path) -> list[str]:
    """The dotted name of the file at `path` under the package, as parts (`__init__` kept)."""
    return list(path.relative_to(PACKAGE).with_suffix("").parts)


def imports(path: Path) -> list[tuple[list[str], list[str]]]:
    """Every package-internal import of the file at `path`, at any depth of its code: the
    imported module as parts under the package, and the names taken from it."""
    own = module_of(path)
    found: list[tuple[list[str], list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = own[: len(own) - node.level]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "fr_analyzer":
                target = node.module.split(".")[1:]
            else:
                continue
            found.append((target, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "fr_analyzer":
                    found.append((alias.name.split(".")[1:], []))
    return found


def stage_of(parts: list[str]) -> int:
    """The index in `STAGES` of the stage a module (as parts under the package) belongs to."""
    top = parts[0] if parts else "__init__"
    for index, names in enumerate(STAGES):
        if top in names:
            return index
    raise AssertionError(f"fr_analyzer/{'/'.join(parts)} belongs to no stage: add it to STAGES")


def test_every_module_belongs_to_a_stage() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        stage_of(module_of(path))


def test_each_stage_imports_only_the_stages_below_it() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = stage_of(module_of(path))
        for target, _ in imports(path):
            if target and stage_of(target) > own:
                wrong.append(f"{path.relative_to(PACKAGE)} imports {'.'.join(target)}")
    assert not wrong, "\n".join(wrong)


def test_no_renderer_imports_another() -> None:
    for module in sorted(RENDERERS):
        path = PACKAGE / "render" / f"{module}.py"
        others = {
            target[1]
            for target, names in imports(path)
            if target[:1] == ["render"] and len(target) > 1
        } | {name for target, names in imports(path) if target == ["render"] for name in names}
        assert not others & (RENDERERS - {module}), f"{module} imports {sorted(others)}"


def test_every_command_module_is_listed() -> None:
    shared = {"__init__", "app", "compat", "options", "outputs", "terminal"}
    found = {path.stem for path in (PACKAGE / "cli").glob("*.py")} - shared
    assert found == COMMANDS, "a new module of cli/: a command (COMMANDS) or shared?"


def test_no_command_module_imports_another() -> None:
    wrong = []
    for module in sorted(COMMANDS):
        path = PACKAGE / "cli" / f"{module}.py"
        for target, names in imports(path):
            others = set(target[1:2]) if target[:1] == ["cli"] else set()
            if target == ["cli"]:
                others |= set(names)
            if others & (COMMANDS - {module}):
                wrong.append(f"cli/{module}.py imports {'.'.join(target)} {names}")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_another_modules_private_names() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for target, names in imports(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(PACKAGE)}: {'.'.join(target)} {private}")
    assert not wrong, f"{len(wrong)} cross-module private imports:\n" + "\n".join(wrong)


def test_a_module_over_600_lines_says_why_in_its_docstring() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > 600 and "over 600 lines because" not in " ".join(doc.split()):
            long.append(f"{path.relative_to(PACKAGE)} ({lines} lines)")
    assert not long, "modules over 600 lines whose docstring does not say why: " + ", ".join(long)


def test_other_stages_import_load_through_its_face() -> None:
    inner = {path.stem for path in (PACKAGE / "load").iterdir() if path.stem != "__init__"}
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if module_of(path)[0] == "load":
            continue
        for target, names in imports(path):
            deep = target[:1] == ["load"] and len(target) > 1
            if deep or (target == ["load"] and set(names) & inner):
                wrong.append(f"{path.relative_to(PACKAGE)} imports {'.'.join(target)} {names}")
    assert not wrong, "import these from `fr_analyzer.load` (its face):\n" + "\n".join(wrong)


def test_the_wings_of_load_say_what_they_hold() -> None:
    folders = {p.name for p in (PACKAGE / "load").iterdir() if (p / "__init__.py").exists()}
    assert folders == LOAD_WINGS, "a new folder of load/: a wing (LOAD_WINGS)?"
    for wing in sorted(LOAD_WINGS):
        doc = ast.get_docstring(ast.parse((PACKAGE / "load" / wing / "__init__.py").read_text()))
        assert doc and f"The {wing} wing of `load`" in doc, f"load/{wing}/__init__.py"
    readme = (PACKAGE / "load" / "safety" / "README.md").read_text()
    assert "safety-critical" in readme and "tests/load/safety/test_door.py" in readme


def test_every_test_module_lives_in_the_folder_of_its_stage_or_area() -> None:
    folders = STAGE_TEST_FOLDERS | AREA_TEST_FOLDERS
    wrong = [
        path.relative_to(TESTS).as_posix()
        for path in sorted(TESTS.rglob("test_*.py"))
        if path.parent.relative_to(TESTS).as_posix() not in folders
    ]
    assert not wrong, (
        "move these into the folder of the stage they specify (or add an area to "
        "AREA_TEST_FOLDERS and tests/README.md): " + ", ".join(wrong)
    )


def test_each_stage_folder_of_the_tests_is_a_stage_of_the_package() -> None:
    stages = {name for names in STAGES for name in names}
    for folder in sorted(STAGE_TEST_FOLDERS):
        stage, *wing = folder.split("/")
        assert stage in stages, f"tests/{folder}: no stage of the package is named {stage}"
        assert not wing or set(wing) <= LOAD_WINGS, f"tests/{folder}: no wing of load"


def test_each_test_folder_is_a_package_the_tests_readme_names() -> None:
    readme = (TESTS / "README.md").read_text()
    for folder in sorted(STAGE_TEST_FOLDERS | AREA_TEST_FOLDERS):
        assert (TESTS / folder / "__init__.py").exists(), f"tests/{folder}/__init__.py"
        assert f"`{folder}/`" in readme, f"tests/README.md does not name {folder}/"


def test_the_version_is_written_once_and_the_installed_package_says_it() -> None:
    """pyproject.toml reads the version from `fr_analyzer.__version__` (a command does not ask
    `importlib.metadata`, 25 ms of every start), and the installed metadata agrees."""
    import importlib.metadata
    import tomllib

    import fr_analyzer

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "fr_analyzer.__version__"
    }
    assert importlib.metadata.version("fr-analyze") == fr_analyzer.__version__
