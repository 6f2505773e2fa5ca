"""The .pyi stubs type-check the README's usage under mypy --strict (Debian's python3-mypy).

mypy reads the stubs from the source tree (MYPYPATH=python), before any installed copy. Its
cache lives in the temporary directory across runs: the first run analyses torch's own type
hints (mmnpz.torch's stub uses them) and takes a while, later runs take seconds.
"""

import os
import pathlib
import subprocess
import tempfile

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
        "names: int = mmnpz.load('a.npz').files\n"
        "mmnpz.Sampler(mmnpz.Dataset('a.npz'), 'weighted', length='100')\n")
    result = mypy(wrong)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ('wrong_usage.py:2: error: Incompatible types in assignment (expression has type '
            '"List[str]", variable has type "int")') in result.stdout, result.stdout
    assert 'wrong_usage.py:3: error: Argument "length" to "Sampler" has incompatible type "str"' \
        in result.stdout, result.stdout
    assert "Found 2 errors in 1 file" in result.stdout, result.stdout
