"""The code a run executes: the definitions its recipe reaches, wherever they live.

From a root definition (a part's recipe: a module-level function of a claim's folder or of the library) every
name it uses is followed to the definition it denotes: a function, a class (whole, methods included) or a
module-level constant of the same module, of a library module through `from .x import y`, `from tfclaims.x
import y` or `x.y`, or of a module of a claim's folder through `from .x import y` or `from experiments.<id>.x
import y` (re-exports followed), lazy imports inside functions included. What is
reached is hashed definition by definition, normalised (no comments, docstrings, import statements or
layout) and keyed by its own name, not by its module: moving a definition to another module changes no hash,
and editing a definition that no run reaches (analysis, plotting, the command line) reruns nothing. The
statements a reached module runs at import (other than definitions and imports) count too: they could set
global state. Names the walk cannot see (a definition looked up by a string at run time) are not followed;
tests/test_reach.py traces every part of every claim and fails on an executed definition outside its closure.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from .folders import CLAIM_FILE, experiments_dir
from .folders import PACKAGE as CLAIMS  # the claims' folders, imported as experiments.<id>.<module>

PKG_DIR = Path(__file__).resolve().parents[1]  # the tfclaims package
PKG = PKG_DIR.name


@dataclass(frozen=True)
class Definition:
    module: str  # a library module ("nn.attention"), or the path of a file outside it (a claim's module)
    name: str
    text: str  # normalised source

    @property
    def qualname(self) -> str:
        """For messages: "nn.positions.apply_rope", or a claim folder's "kv_cache.recipes.run_steps"."""
        if not self.module.endswith(".py"):
            return f"{self.module}.{self.name}"
        path = Path(self.module)
        where = f"{path.parent.name}.{path.stem}" if (path.parent / CLAIM_FILE).is_file() else path.stem
        return f"{where}.{self.name}"

    @property
    def digest(self) -> str:
        return sha(f"{self.name}\n{self.text}")


class _Module:
    """One parsed source file: its top-level definitions, import-time statements and imported names."""

    def __init__(self, key: str, source: str, package_dir: Path):
        tree = ast.parse(source)
        self.key, self.package_dir = key, package_dir
        self._texts: dict[int, str] = {}
        self.defs: dict[str, ast.AST] = {}
        self.side: list[ast.AST] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for n in (n for t in targets for n in ast.walk(t)):
                    if isinstance(n, ast.Name):
                        self.defs.setdefault(n.id, node)
            elif not (
                isinstance(node, (ast.Import, ast.ImportFrom)) or _is_docstring(node) or _typing_only(node)
            ):
                self.side.append(node)
        # local name -> ("def", module, name) for `from M import name`, ("mod", module) for a module
        self.imports: dict[str, tuple] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level and key.endswith(".py"):
                self._folder_import(node, _relative_dir(Path(key), node))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == CLAIMS:
                self._folder_import(node, experiments_dir().joinpath(*node.module.split(".")[1:]))
            elif isinstance(node, ast.ImportFrom):
                base = self._library_module(node)
                if base is None:
                    continue
                for a in node.names:
                    local = a.asname or a.name
                    if base == "" or _exists(package_dir, _join(base, a.name)):
                        self.imports[local] = ("mod", _join(base, a.name))
                    else:
                        self.imports[local] = ("def", base, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(PKG + ".") and a.asname:
                        self.imports[a.asname] = ("mod", a.name.split(".", 1)[1])

    def text(self, node: ast.AST) -> str:
        """A top-level node's normalised source (computed once: modules are parsed once per source text)."""
        if id(node) not in self._texts:
            self._texts[id(node)] = normalise(node)
        return self._texts[id(node)]

    def _folder_import(self, node: ast.ImportFrom, base: Path) -> None:
        """An import from a claim's folder (`from experiments.<id>.grid import x`, or relative in a file
        there): its modules are files keyed by path, like the file itself."""
        for a in node.names:
            local = a.asname or a.name
            sub, module = _file_module(base / a.name), _file_module(base)
            if sub is not None:
                self.imports[local] = ("mod", sub)
            elif module is not None:
                self.imports[local] = ("def", module, a.name)

    def _library_module(self, node: ast.ImportFrom) -> str | None:
        """The library module (dotted, relative to the package; "" for the package) an import names."""
        if node.level:
            if self.key.endswith(".py"):
                return None  # a relative import in a file outside the package
            parts = self.key.split(".")[: -node.level] if node.level <= self.key.count(".") + 1 else []
            return _join(".".join(parts), node.module or "")
        mod = node.module or ""
        if mod == PKG or mod.startswith(PKG + "."):
            return mod[len(PKG) + 1 :]
        return None


def _join(a: str, b: str) -> str:
    return ".".join(p for p in (a, b) if p)


def _relative_dir(path: Path, node: ast.ImportFrom) -> Path:
    """The folder (or module, less its suffix) a relative import in the file at `path` names."""
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    return base.joinpath(*node.module.split(".")) if node.module else base


def _file_module(path: Path) -> str | None:
    """The key of the module at `path` (less its suffix): `path.py`, or a package's `__init__.py`."""
    for f in (path.with_suffix(".py"), path / "__init__.py"):
        if f.is_file():
            return str(f.resolve())
    return None


def _exists(package_dir: Path, dotted: str) -> bool:
    path = package_dir.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _typing_only(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` holding imports only: it never runs."""
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
        and not node.orelse
        and all(isinstance(c, (ast.Import, ast.ImportFrom)) for c in node.body)
    )


if sys.version_info >= (3, 12):

    class _Unparser311(ast._Unparser):
        """Python 3.12's unparser writing f-strings as 3.10 and 3.11 write them, so that a definition's text
        (and every run id) does not depend on the interpreter. PEP 701 let 3.12 reuse the enclosing quote
        inside a replacement field, and its unparser does (f'{', '.join(x)}' where 3.11 wrote
        f"{', '.join(x)}"): here the quote is again chosen to appear in no part, constant or replacement
        field, and a replacement field's expression is written avoiding backslashes, as 3.11 did."""

        def __init__(self, *, _avoid_backslashes: bool = False):
            super().__init__()
            self._avoid_backslashes = _avoid_backslashes  # 3.13 dropped the flag; 3.11 set it for fields

        def _write_constant(self, value):
            if self._avoid_backslashes and isinstance(value, str):
                self._write_str_avoiding_backslashes(value)
            else:
                super()._write_constant(value)

        def visit_JoinedStr(self, node):
            self.write("f")
            if self._avoid_backslashes:  # an f-string inside a replacement field
                with self.buffered() as buf:
                    self._write_fstring_inner(node)
                self._write_str_avoiding_backslashes("".join(buf))
                return
            parts = []
            for value in node.values:
                with self.buffered() as buf:
                    self._write_fstring_inner(value)
                parts.append(("".join(buf), isinstance(value, ast.Constant)))
            quotes, out = list(ast._ALL_QUOTES), []
            for text, constant in parts:  # every part narrows the quotes the literal may use
                text, quotes = self._str_literal_helper(
                    text, quote_types=quotes, escape_special_whitespace=constant
                )
                out.append(text)
            self.write(f"{quotes[0]}{''.join(out)}{quotes[0]}")

        def _write_fstring_inner(self, node, scape_newlines=False):
            if isinstance(node, ast.JoinedStr):  # the f-string itself, or a format spec
                for value in node.values:
                    self._write_fstring_inner(value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                self.write(node.value.replace("{", "{{").replace("}", "}}"))
            elif isinstance(node, ast.FormattedValue):
                self.visit_FormattedValue(node)
            else:
                raise ValueError(f"Unexpected node inside JoinedStr, {node!r}")

        def visit_FormattedValue(self, node):
            inner = type(self)(_avoid_backslashes=True)
            inner.set_precedence(ast._Precedence.TEST.next(), node.value)
            expr = inner.visit(node.value)
            if "\\" in expr:
                raise ValueError("Unable to avoid backslash in f-string expression part")
            with self.delimit("{", "}"):
                self.write((" " if expr.startswith("{") else "") + expr)
                if node.conversion != -1:
                    self.write(f"!{chr(node.conversion)}")
                if node.format_spec:
                    self.write(":")
                    self._write_fstring_inner(node.format_spec)

    def unparse(node: ast.AST) -> str:
        """`ast.unparse` with Python 3.11's f-string output (see `_Unparser311`)."""
        return _Unparser311().visit(node)

else:
    unparse = ast.unparse


def normalise(node: ast.AST) -> str:
    """Source regenerated from the syntax tree less docstrings and import statements: comments, blank lines,
    layout and where a name is imported from drop out. The same text on every supported Python (`unparse`)."""
    node = ast.parse(unparse(node))  # a copy
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if isinstance(body, list):
            kept = [c for c in body if not (_is_docstring(c) or isinstance(c, (ast.Import, ast.ImportFrom)))]
            n.body = kept or [ast.Pass()]
    return unparse(node)


def sha(data: bytes | str, n: int = 16) -> str:
    """The project's short hash: the first n hex digits of SHA-256."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:n]


@functools.lru_cache(maxsize=512)
def _parse(key: str, source: str, package_dir: Path) -> _Module:
    return _Module(key, source, package_dir)


def module_file(dotted: str, package_dir: Path = PKG_DIR) -> Path:
    """The source file of a library module named relative to the package ("claims.kv_cache")."""
    path = package_dir.joinpath(*dotted.split(".")).with_suffix(".py")
    return path if path.exists() else package_dir.joinpath(*dotted.split("."), "__init__.py")


def _read(key: str, package_dir: Path) -> str | None:
    """The source of a library module by dotted name, or of a file by path; None where there is none."""
    path = Path(key) if key.endswith(".py") else module_file(key, package_dir)
    return _source(path) if path.exists() else None


def _load(key: str, package_dir: Path, read: dict | None = None) -> _Module | None:
    """A library module by dotted name, or a file by path; `read` collects each key's source (or None)."""
    source = _read(key, package_dir)
    if read is not None:
        read[key] = source
    return None if source is None else _parse(key, source, package_dir)


def _source(path: Path) -> str:
    return path.read_text()


# reached() per (file, root, package): the sources it read (key -> text or None) and what it found. A hit
# rereads those sources and stands only if every one is as it was: a walk is many thousand AST nodes, a
# reread a few dozen small files, and a process (a sweep, `check-results`) asks for the same roots often.
_REACHED: dict[tuple[Path, str, Path], tuple[dict[str, str | None], list[Definition]]] = {}


def _resolve(
    mod: _Module, name: str, package_dir: Path, read: dict, depth: int = 0
) -> tuple[_Module, str] | None:
    """The module and definition a name denotes as seen from `mod`, through re-exports."""
    if name in mod.defs:
        return mod, name
    imp = mod.imports.get(name)
    if imp is None or imp[0] != "def" or depth > 20:
        return None
    target = _load(imp[1], package_dir, read)
    return None if target is None else _resolve(target, imp[2], package_dir, read, depth + 1)


def reached(path: Path | str, root: str, package_dir: Path = PKG_DIR) -> list[Definition]:
    """Every definition `root` (a top-level name of the file at `path`) reaches, and the import-time
    statements of the modules they live in, as `Definition`s in a stable order."""
    path = Path(path).resolve()
    memo = _REACHED.get((path, root, package_dir))
    if memo is not None and all(_read(k, package_dir) == text for k, text in memo[0].items()):
        return list(memo[1])
    read: dict[str, str | None] = {}
    found = _walk(path, root, package_dir, read)
    _REACHED[path, root, package_dir] = (read, found)
    return list(found)


def _walk(path: Path, root: str, package_dir: Path, read: dict) -> list[Definition]:
    """`reached` without its memo; `read` collects the sources the walk read."""
    key = (
        ".".join(path.relative_to(package_dir).with_suffix("").parts)
        if path.is_relative_to(package_dir)
        else str(path)
    )
    start = _load(key, package_dir, read)
    if start is None or root not in start.defs:
        raise KeyError(f"{root!r} is not a top-level definition of {path}")
    seen: dict[tuple[str, str], Definition] = {}
    modules: dict[str, _Module] = {}
    todo = [(start, root)]
    while todo:
        mod, name = todo.pop()
        if (mod.key, name) in seen:
            continue
        node = mod.defs[name]
        seen[(mod.key, name)] = Definition(mod.key, name, mod.text(node))
        modules[mod.key] = mod
        for n in ast.walk(node):
            found = None
            if isinstance(n, ast.Name):
                found = _resolve(mod, n.id, package_dir, read)
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                imp = mod.imports.get(n.value.id)
                if imp is not None and imp[0] == "mod":
                    target = _load(imp[1], package_dir, read)
                    found = None if target is None else _resolve(target, n.attr, package_dir, read)
            if found is not None and (found[0].key, found[1]) not in seen:
                todo.append(found)
    side = [Definition(m.key, "<import-time>", m.text(s)) for m in modules.values() for s in m.side]
    return sorted([*seen.values(), *side], key=lambda d: (d.name, d.text))


def top_level_functions(path: Path) -> frozenset[str]:
    """The names of a source file's module-level functions, read without importing it."""
    tree = ast.parse(Path(path).read_text())
    return frozenset(n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def imported_modules(module: str, package_dir: Path = PKG_DIR) -> set[str]:
    """The library modules a library module imports (lazy imports inside functions included)."""
    mod = _load(module, package_dir)
    return {imp[1] for imp in mod.imports.values()} - {module} if mod is not None else set()


def code_digest(defs: list[Definition]) -> str:
    """One hash for a set of definitions: their names and normalised texts, not their modules."""
    return sha("\n\0".join(sorted({d.digest for d in defs})))
