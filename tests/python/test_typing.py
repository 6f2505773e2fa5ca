"""The .pyi stubs type-check the README's usage under mypy --strict (Debian's python3-mypy),
declare every public name of the package, and give its Python functions their parameters.

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


# ---- the stubs give each Python function its parameters, kinds and defaults ----------------------

def stub_functions(body, prefix=""):
    """{qualified name: FunctionDef, or None where overloaded or a property} of a stub."""
    found = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            found.update(stub_functions(node.body, prefix + node.name + "."))
        elif isinstance(node, ast.FunctionDef):
            name = prefix + node.name
            special = any(isinstance(d, ast.Name) and d.id in ("overload", "property")
                          for d in node.decorator_list)
            found[name] = None if special or name in found else node
    return found


def stub_parameters(node):
    """[(name, kind, default as an ast node or None)] of a stub's function."""
    a, kind = node.args, inspect.Parameter
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [(arg.arg, kind.POSITIONAL_ONLY if k < len(a.posonlyargs)
            else kind.POSITIONAL_OR_KEYWORD, defaults[k]) for k, arg in enumerate(positional)]
    if a.vararg:
        out.append((a.vararg.arg, kind.VAR_POSITIONAL, None))
    out += [(arg.arg, kind.KEYWORD_ONLY, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, kind.VAR_KEYWORD, None))
    return out


def defined(module, name):
    """What ``name`` ("function" or "Class.method") is in ``module``, or None. The package's
    private helper classes (such as _MemberStream) live in mmnpz._npz."""
    head, *rest = name.split(".")
    obj = getattr(module, head, None)
    if obj is None and hasattr(module, "_npz"):
        obj = getattr(module._npz, head, None)
    for part in rest:
        obj = None if obj is None else inspect.getattr_static(obj, part, None)
    return getattr(obj, "__func__", obj)  # a staticmethod's or classmethod's function


def signature_mismatches(texts=None):
    """Where a stub's function differs from the Python function it declares: parameter names
    and kinds, whether each has a default, and literal defaults. ``texts`` replaces stubs."""
    found = []
    for module_name, stub in STUB_FILES.items():
        module = importlib.import_module(module_name)
        text = (texts or {}).get(stub) or (STUBS / "mmnpz" / stub).read_text()
        for name, node in stub_functions(ast.parse(text).body).items():
            if node is None:
                continue
            obj = defined(module, name)
            if not inspect.isfunction(obj):
                if obj is None:
                    found.append(f"{module_name}.{name}: declared, not defined")
                continue  # C++ (pybind11) functions have no Python signature to compare
            real = list(inspect.signature(obj).parameters.values())
            mine = stub_parameters(node)
            if [(p.name, p.kind) for p in real] != [(n, k) for n, k, _ in mine]:
                found.append(f"{module_name}.{name}: ({', '.join(n for n, _, _ in mine)}) in "
                             f"the stub, ({', '.join(p.name for p in real)}) in the code")
                continue
            for p, (_, _, default) in zip(real, mine):
                if (p.default is inspect.Parameter.empty) != (default is None):
                    found.append(f"{module_name}.{name}: {p.name} has a default in one of them")
                elif default is not None:
                    try:
                        value = ast.literal_eval(default)
                    except ValueError:  # a name, such as a module constant
                        continue
                    if value is not ... and (value != p.default or
                                             type(value) is not type(p.default)):
                        found.append(f"{module_name}.{name}: {p.name} defaults to {value!r} in "
                                     f"the stub, {p.default!r} in the code")
    return found


def test_the_stubs_give_each_python_function_its_parameters_and_defaults():
    assert signature_mismatches() == []


def test_a_stub_parameter_missing_or_with_another_default_is_found():
    torch_stub = (STUBS / "mmnpz" / "torch.pyi").read_text()
    package_stub = (STUBS / "mmnpz" / "__init__.pyi").read_text()
    assert ', io: str = "auto") -> None: ...' in torch_stub
    assert "preload: bool = False, recover: bool = False) -> Any: ..." in package_stub
    texts = {"torch.pyi": torch_stub.replace(', io: str = "auto") -> None: ...', ") -> None: ..."),
             "__init__.pyi": package_stub.replace("preload: bool = False, recover: bool = False",
                                                  "preload: bool = True, recover: bool = False")}
    found = signature_mismatches(texts)
    assert found[0] == "mmnpz.load: preload defaults to True in the stub, False in the code"
    assert found[1].startswith("mmnpz.torch.ExcerptBatches.__init__: (self, source, length, ")
    assert found[1].endswith(", threads) in the stub, (self, source, length, batch_size, kind, "
                             "seed, hop, shuffle_windows, random_crop, num_samples, "
                             "drop_remainder, rank, world_size, pad, fill, drop_last, select, "
                             "order, fields, threads, io) in the code")
    assert len(found) == 2
