"""The docs name only what exists, and reference docs speak in the present tense.

Every repository path (`dlcp/transport/core/`, `emulation/emulated_run.py`, `experiments/ps-incast.toml`,
a relative `builtin_switch/process.py` or a bare `udpio.py`), every module reference in the dotted form
(`dlcp.wire.header.values_per_pkt_for_mtu`: the module must exist and define the name) and every
relative Markdown link in README.md and docs/**/*.md must resolve in this tree. A file rename that
forgets a doc fails here, with the doc, its line and the name.

docs/notes/ are dated studies: they describe the tree at the commit they name, so their code paths
are not checked (a later rename must not rewrite history); their Markdown links are, because those
point at the docs and notes of today. Reference docs (README.md, docs/*.md) carry no dated
measurement: no calendar date and no commit hash; those live in docs/notes/ (docs/notes/README.md).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTES = Path("docs") / "notes"
# Trees that are not part of the repository's content (build outputs, environments, results)
SKIP_DIRS = {".git", ".venv", "venv", "build", "results", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
# Extensions of files a doc may name without a directory (`udpio.py`, `dlcp_rx.h`, `design.md`)
CODE_EXT = (".py", ".h", ".c", ".cpp", ".cc", ".p4", ".md", ".toml", ".sh")
# Last parts that make a dotted name a file name (`dlcp.p4info.txtpb`, `dlcp.p4`), not a module
DATA_EXT = {"json", "jsonl", "txtpb", "csv", "html", "png", "log", "txt", "toml", "md", "py", "p4", "h", "c"}
# File names of a run or results directory (docs/runs.md, docs/reports.md), not of the repository
RUN_OUTPUTS = {"config.toml", "report.md", "compare.md"}
PYTHON_TOPS = ("dlcp", "dlcp_cli", "emulation", "simulation", "agents")

CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^\s*```")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path-like token: word characters, dots, dashes, slashes, globs
TOKEN = re.compile(r"(?<![\w./<>-])([\w.*-]+(?:/[\w.*-]*)*)")
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(PYTHON_TOPS) + r")(?:\.\w+)+)")
NOTE_NAME = re.compile(r"(?:docs/)?notes/[\w.-]+\.md")
DATE = re.compile(r"(?<!\d)20\d\d-[01]\d-[0-3]\d(?!\d)")
# A commit hash: 7-40 lower-case hex digits with at least one digit and one letter, not 0x-prefixed
HASH = re.compile(r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


@dataclass(frozen=True)
class Ref:
    doc: str
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.name} ({self.why})"


@functools.cache
def tree_files(root: Path) -> tuple[str, ...]:
    """Every file and directory under root, as a/b/c posix paths (directories with a trailing /)."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        base = Path(dirpath).relative_to(root)
        out += [(base / d).as_posix() + "/" for d in dirnames]
        out += [(base / f).as_posix() for f in filenames]
    return tuple(sorted(out))


def tops(root: Path) -> set[str]:
    return {p.split("/")[0] for p in tree_files(root)} - {"README.md"}


def doc_files(root: Path) -> list[Path]:
    docs = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [d for d in docs if d.is_file()]


def is_note(root: Path, doc: Path) -> bool:
    return (root / NOTES) in doc.parents


def config_keys(root: Path) -> set[str]:
    """The experiment's keys (docs/experiments.md, "Every key"): `dlcp.policy` is a key, not a module."""
    text = (root / "docs" / "experiments.md").read_text() if (root / "docs" / "experiments.md").exists() else ""
    return set(re.findall(r"^\| `([\w.\[\]]+)` \|", text, re.M))


def _strip_punct(tok: str) -> str:
    return tok.rstrip(".,;:").lstrip("(")


def _exists(root: Path, path: str, anchored: bool) -> bool:
    """Does `path` name a file or directory here? Anchored: from the root; else as the tail of one."""
    files = tree_files(root)
    want = path.rstrip("/")
    is_dir = path.endswith("/")
    if any(ch in want for ch in "*?["):
        pat = want if anchored else "*/" + want
        return any(
            fnmatch.fnmatch(f.rstrip("/"), pat) or (not anchored and fnmatch.fnmatch(f.rstrip("/"), want))
            for f in files
        )
    for f in files:
        if is_dir and not f.endswith("/"):
            continue
        g = f.rstrip("/")
        if g == want or (not anchored and g.endswith("/" + want)):
            return True
    return False


@functools.cache
def _module_names(path: Path) -> frozenset[str]:
    """Top-level names a module defines or imports (its public surface, as far as a doc can name it)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _module_ok(root: Path, dotted: str) -> str | None:
    """None if `a.b.c[.name]` is a module (or a package) here, optionally followed by one name the
    module defines; else why not."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:n])
        module = base.with_suffix(".py")
        package = base / "__init__.py"
        found = module if module.is_file() else package if package.is_file() else None
        if found is None and base.is_dir() and n == len(parts):
            return None  # a namespace directory
        if found is None:
            continue
        rest = parts[n:]
        if not rest:
            return None
        if rest[0] in _module_names(found):
            return None
        return f"{'.'.join(parts[:n])} does not define {rest[0]}"
    return "no such module"


def _scan_lines(text: str):
    """(line number, text, in a code block) for every line."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        yield i, line, fenced


def _skip(tok: str) -> bool:
    """Not a name of this tree: absolute or outside it, a URL, or a placeholder (`NAME.toml`)."""
    return (
        not tok
        or tok.startswith(("/", "../", "~", "http", "$", "-", "."))
        or "..." in tok
        or any(re.fullmatch(r"[A-Z]{2,}", seg.split(".")[0]) for seg in tok.split("/") if seg != "README.md")
    )


def _external(line: str, inside: bool) -> tuple[str, bool]:
    """The line without other projects' code, and whether a tag is still open at its end: a
    `[C: ...]` provenance tag (it may span lines) names files of the repository it was read in
    (docs/schedulers.md), not of this one."""
    out, i = [], 0
    while i < len(line):
        if inside:
            end = line.find("]", i)
            if end < 0:
                return "".join(out), True
            i, inside = end + 1, False
        else:
            start = line.find("[C:", i)
            if start < 0:
                out.append(line[i:])
                break
            out.append(line[i:start] + " ")
            i, inside = start + 3, True
    return "".join(out), inside


def doc_names(root: Path, doc: Path) -> list[tuple[Ref, bool]]:
    """Every name of this tree that `doc` gives (links, paths, modules), each with whether it
    resolves under `root`; a Ref's `why` says what kind of name it is or why it does not resolve."""
    rel = doc.relative_to(root).as_posix() if root in doc.parents else doc.name
    note = is_note(root, doc)
    top = tops(root)
    keys = config_keys(root)
    out: list[tuple[Ref, bool]] = []
    in_tag = False
    for lineno, line, fenced in _scan_lines(doc.read_text()):
        for link in MD_LINK.findall(line):
            target = link.split("#")[0]
            if not target or "://" in target or target.startswith("mailto:"):
                continue
            ok = (doc.parent / target).resolve().exists()
            out.append((Ref(rel, lineno, link, "link" if ok else "link to nothing"), ok))
        if note:
            continue
        line, in_tag = _external(line, in_tag)
        chunks = [(m.group(1), True) for m in CODE_SPAN.finditer(line)] + [(CODE_SPAN.sub(" ", line), fenced)]
        for chunk, code in chunks:
            for m in TOKEN.finditer(chunk):
                tok = _strip_punct(m.group(1))
                if _skip(tok) or chunk[m.end() : m.end() + 1] == "<" or tok in keys:
                    continue
                last = tok.rstrip("/").rsplit("/", 1)[-1]
                if "/" in tok and tok.split("/")[0] in top:
                    # anchored at the root: in code always a path; in prose when it looks like one
                    if code or tok.endswith("/") or "." in last:
                        ok = _exists(root, tok, anchored=True)
                        out.append((Ref(rel, lineno, tok, "path" if ok else "no such path"), ok))
                elif last.endswith(CODE_EXT) and last not in RUN_OUTPUTS:
                    ok = _exists(root, tok, anchored=False)
                    out.append((Ref(rel, lineno, tok, "file" if ok else "no file of that name"), ok))
            for m in DOTTED.finditer(chunk):
                tok = _strip_punct(m.group(1))
                if tok in keys or tok.split(".")[-1] in DATA_EXT:
                    continue  # a config key (`dlcp.policy`) or a file name (`dlcp.p4info.txtpb`)
                why = _module_ok(root, tok)
                out.append((Ref(rel, lineno, tok, why or "module"), why is None))
    return out


def path_problems(root: Path, doc: Path) -> list[Ref]:
    """The names in `doc` that do not resolve under `root`."""
    return [ref for ref, ok in doc_names(root, doc) if not ok]


def dated_lines(root: Path, doc: Path) -> list[Ref]:
    """Lines of a reference doc that carry a date or a commit hash (measurement history)."""
    rel = doc.relative_to(root).as_posix()
    bad = []
    for lineno, line, _ in _scan_lines(doc.read_text()):
        line = NOTE_NAME.sub(" ", line)  # a note's file name carries its date
        for rx, why in ((DATE, "a date"), (HASH, "a commit hash")):
            for m in rx.finditer(line):
                bad.append(Ref(rel, lineno, m.group(0), f"{why}: dated measurements go to docs/notes/"))
    return bad


def _doc_id(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("doc", doc_files(ROOT), ids=_doc_id)
def test_docs_name_only_what_exists(doc: Path) -> None:
    problems = path_problems(ROOT, doc)
    assert not problems, "names that do not resolve:\n" + "\n".join(map(str, problems))


@pytest.mark.parametrize("doc", [d for d in doc_files(ROOT) if not is_note(ROOT, d)], ids=_doc_id)
def test_reference_docs_carry_no_dated_measurements(doc: Path) -> None:
    problems = dated_lines(ROOT, doc)
    assert not problems, "\n".join(map(str, problems))


def _some_module(root: Path) -> tuple[str, str]:
    """A dotted module of this tree and one name it defines (picked from the tree, so a rename
    elsewhere does not break this test)."""
    for path in sorted((root / "dlcp").rglob("*.py")):
        names = sorted(n for n in _module_names(path) if not n.startswith("_"))
        if path.name != "__init__.py" and names:
            return ".".join(path.relative_to(root).with_suffix("").parts), names[0]
    raise AssertionError("no module under dlcp/")


def test_a_doc_naming_what_is_missing_fails(tmp_path: Path) -> None:
    module, name = _some_module(ROOT)
    doc = tmp_path / "stale.md"
    doc.write_text(
        "# A stale doc\n\n"
        "Exists: `tests/unit/test_docs.py`, `tests/unit/`, `test_docs.py`, `unit/test_docs.py`, "
        f"`{module}`, `{module}.{name}`, `dlcp.policy` (a key), [design](../design.md).\n"
        "Missing: `emulation/no_such_runner.py`, the folder dlcp/no_such_package/ and\n"
        "`no_such_helper.py`, `cpp/no_such_header.h`, `dlcp.no_such_module`,\n"
        f"`{module}.no_such_name`, [a link](no-such-note.md).\n"
        "```sh\npython experiments/no-such-experiment.toml\n```\n"
    )
    (tmp_path.parent / "design.md").touch()
    missing = {ref.name for ref in path_problems(ROOT, doc)}
    assert missing == {
        "emulation/no_such_runner.py",
        "dlcp/no_such_package/",
        "no_such_helper.py",
        "cpp/no_such_header.h",
        "dlcp.no_such_module",
        f"{module}.no_such_name",
        "no-such-note.md",
        "experiments/no-such-experiment.toml",
    }


def test_a_reference_doc_with_a_dated_measurement_fails(tmp_path: Path) -> None:
    (tmp_path / "docs" / "notes").mkdir(parents=True)
    doc = tmp_path / "docs" / "ref.md"
    doc.write_text(
        "Measured on 2026-11-24 with main at 2866a04: 0.51.\n"
        "Details: [note](notes/2026-11-24-demo.md); CRC check value 0xBB3D; 1700000000.0; `feedback`.\n"
    )
    found = [(ref.line, ref.name) for ref in dated_lines(tmp_path, doc)]
    assert found == [(1, "2026-11-24"), (1, "2866a04")]


def test_notes_are_exempt_from_code_paths_but_not_links(tmp_path: Path) -> None:
    notes = tmp_path / "docs" / "notes"
    notes.mkdir(parents=True)
    note = notes / "2026-01-01-study.md"
    note.write_text(
        "At that commit `emulation/old_runner.py` ran it; see [the index](README.md) and [gone](gone.md).\n"
    )
    (notes / "README.md").touch()
    assert [ref.name for ref in path_problems(tmp_path, note)] == ["gone.md"]


def test_the_docs_name_many_things() -> None:
    """The scanner sees the docs' names (a regex that matched nothing would pass every doc)."""
    kinds: dict[str, int] = {}
    for doc in doc_files(ROOT):
        for ref, _ in doc_names(ROOT, doc):
            kinds[ref.why] = kinds.get(ref.why, 0) + 1
    assert kinds.get("path", 0) > 100 and kinds.get("file", 0) > 50, kinds
    assert kinds.get("module", 0) > 10 and kinds.get("link", 0) > 20, kinds
