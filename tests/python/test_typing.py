"""The .pyi stubs type-check the README's usage under mypy --strict (Debian's python3-mypy),
and declare every public name of the package.

mypy reads the stubs from the source tree (MYPYPATH=python), before any installed copy. Its
cache lives in the temporary directory across runs: the first run analyses torch's own type
hints (mmnpz.torch's stub uses them) and takes a while, later runs take seconds.
"""

import ast
import importlib
import inspect
import os
import pathlib
import subprocess
import sys
import tempfile
import types

HERE = pathlib.Path(__file__).resolve().parent
STUBS = HERE.parent.parent / "python"
CACHE = pathlib.Path(tempfile.gettempdir()) / f"mmnpz-mypy-cache-{os.getuid()}"


def mypy(*files):
    env = dict(os.environ, MYPYPATH=str(STUBS))
    env.pop("PYTHONPATH", None)  # the stubs, not the built package's copies, are checked
    return subprocess.run(
        ["/usr/bin/python3", "-m", "mypy", "--strict", "--no-color-output",
         f"--cache-dir={CACHE}", *map(str, files)],
        env=env, cwd=HERE, capture_output=True, text=True, timeout=1800)


def test_readme_usage_passes_mypy_strict():
    result = mypy(HERE / "typing_usage.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found in 1 source file" in result.stdout


def test_stubs_are_what_mypy_checks_against(tmp_path):
    # A misuse the stubs forbid: were mmnpz untyped (Any), these lines would pass.
    wrong = tmp_path / "wrong_usage.py"
    wrong.write_text(
        "import mmnpz\n"
        "names: int = mmnpz.NpzReader('a.npz').files\n"
        "mmnpz.Sampler(mmnpz.Dataset('a.npz'), 'weighted', length='100')\n")
    result = mypy(wrong)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ('wrong_usage.py:2: error: Incompatible types in assignment (expression has type '
            '"List[str]", variable has type "int")') in result.stdout, result.stdout
    assert 'wrong_usage.py:3: error: Argument "length" to "Sampler" has incompatible type "str"' \
        in result.stdout, result.stdout
    assert "Found 2 errors in 1 file" in result.stdout, result.stdout


# ---- the stubs declare every public name of the package ---------------------------------------

STUB_FILES = {"mmnpz": "__init__.pyi", "mmnpz.data": "data.pyi", "mmnpz.shards": "shards.pyi",
              "mmnpz.pack": "pack.pyi", "mmnpz.torch": "torch.pyi"}
PROTOCOL = {"__len__", "__iter__", "__getitem__", "__contains__", "__enter__", "__exit__"}


def stub_names(body):
    """{name: None, or for a class {member: ...}} declared by a stub's statements."""
    names = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = stub_names(node.body)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, ast.Assign):
            names.update((t.id, None) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):  # explicit re-exports: "import X as X"
            names.update((a.name, None) for a in node.names if a.asname == a.name)
    return names


def public_names(module):
    """__all__, or else what the module itself defines without a leading underscore."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [n for n, v in vars(module).items()
            if not n.startswith("_") and not isinstance(v, types.ModuleType)
            and getattr(v, "__module__", module.__name__) == module.__name__]


def undeclared():
    package = stub_names(ast.parse((STUBS / "mmnpz" / "__init__.pyi").read_text()).body)
    missing = []
    for module_name, stub in STUB_FILES.items():
        module = importlib.import_module(module_name)
        declared = stub_names(ast.parse((STUBS / "mmnpz" / stub).read_text()).body)
        if module_name == "mmnpz.data":  # re-exports what the package stub declares
            declared = {name: package.get(name) for name in declared}
        for name in public_names(module):
            if name not in declared:
                missing.append(f"{module_name}.{name}")
                continue
            obj, members = getattr(module, name), declared[name]
            if not inspect.isclass(obj) or members is None:
                continue
            for attr in vars(obj):
                if ((not attr.startswith("_") or attr in PROTOCOL) and attr not in members
                        and attr not in getattr(obj, "_fields", ())):
                    missing.append(f"{module_name}.{name}.{attr}")
    return missing


def test_stubs_declare_every_public_name():
    assert undeclared() == []


def test_an_undeclared_name_is_found(monkeypatch):
    real = stub_names

    def forgetful(body):  # the stubs as if NpzReader.verify and pack.parse_size were missing
        return {k: v for k, v in real(body).items() if k not in ("verify", "parse_size")}

    monkeypatch.setattr(sys.modules[__name__], "stub_names", forgetful)
    assert undeclared() == ["mmnpz.NpzReader.verify", "mmnpz.pack.parse_size"]
