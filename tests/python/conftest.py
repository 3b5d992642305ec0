"""Shared fixtures for command-line tests: the gannet binary and tiny checkpoints."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gannet_bin() -> str:
    return os.environ.get("GANNET_BIN", str(ROOT / "build" / "gannet"))


def run(args, input=None, check=True):
    """Runs gannet with args; returns the CompletedProcess (text mode)."""
    p = subprocess.run([gannet_bin(), *args], input=input, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"gannet {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


@pytest.fixture(scope="session")
def gannet():
    return run


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Tiny checkpoints of each dense architecture (read only): under ctest the ones its
    py_models fixture made for every test file (tests/make_test_models.sh, the same
    make-model arguments), otherwise made once per session."""
    archs = ("llama", "qwen2", "qwen3")
    shared = os.environ.get("GANNET_TEST_MODELS")
    if shared and (pathlib.Path(shared) / "complete").is_file():
        return {arch: pathlib.Path(shared) / f"{arch}-tiny" for arch in archs}
    base = tmp_path_factory.mktemp("models")
    out = {}
    for arch in archs:
        d = base / f"{arch}-tiny"
        run(["make-model", "--arch", arch, "--preset", "tiny", "--seed", "1", "--out", str(d)])
        out[arch] = d
    return out
