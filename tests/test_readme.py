"""Every ```python block of README.md runs as written, each in a fresh
interpreter in an empty directory, against the rlx_cpu under test."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rlx_cpu

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M) \
    if README.exists() else []


def test_readme_has_python_snippets():
    assert README.exists(), f"{README} not found (copy README.md next to tests/ when testing a wheel)"
    assert len(BLOCKS) >= 3


def test_readme_command_blocks_install_once():
    """The quick start is two commands; the test one is the one .ci/run runs."""
    text = README.read_text(encoding="utf-8")
    bash = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    assert 'pip install -e ".[test]" && python -m pytest' in bash[1]
    ci = README.parent / ".ci" / "run"
    if ci.exists():
        assert bash[1].strip() in ci.read_text()


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=lambda i: f"block{i}")
def test_readme_python_block_runs(index, tmp_path):
    code = BLOCKS[index]
    for mod in re.findall(r"^\s*(?:import|from)\s+(\w+)", code, re.M):
        if mod != "rlx_cpu" and importlib.util.find_spec(mod) is None:
            pytest.skip(f"README block {index} needs {mod!r} (in the test extra)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(rlx_cpu.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, f"README python block {index} failed:\n{code}\n--- stderr ---\n{res.stderr}"
