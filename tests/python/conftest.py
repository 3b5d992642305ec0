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
    """Tiny checkpoints of each dense architecture, made once per session."""
    base = tmp_path_factory.mktemp("models")
    out = {}
    for arch in ("llama", "qwen2", "qwen3"):
        d = base / f"{arch}-tiny"
        run(["make-model", "--arch", arch, "--preset", "tiny", "--seed", "1", "--out", str(d)])
        out[arch] = d
    return out
