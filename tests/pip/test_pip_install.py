"""`pip install .` builds and installs the Python package (README: Python package), here
offline: --no-build-isolation takes scikit-build-core and nanobind from the project's
.venv and --no-index keeps pip off the network. The installed package must generate what
the command line generates."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GANNET = os.environ.get("GANNET_BIN", str(ROOT / "build" / "gannet"))


def test_pip_install_builds_a_working_package(tmp_path):
    target = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-build-isolation",
           "--no-deps", "--no-index", "--target", str(target),
           "-C", f"build-dir={os.environ.get('GANNET_PIP_BUILD_DIR', str(tmp_path / 'build'))}",
           "-C", f"cmake.define.GANNET_WERROR={os.environ.get('GANNET_WERROR', 'OFF')}", str(ROOT)]
    env = dict(os.environ)
    if os.environ.get("GANNET_CXX"):  # this build's compiler, so that the compiler cache hits
        env["CXX"] = os.environ["GANNET_CXX"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3000, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    modules = list((target / "gannet").glob("_core*.so"))
    assert len(modules) == 1, sorted(str(x) for x in target.rglob("*"))
    assert (target / "gannet" / "llm.py").is_file()

    model = tmp_path / "model"
    subprocess.run([GANNET, "make-model", "--arch", "llama", "--preset", "tiny", "--seed", "7", "--out", str(model)],
                   check=True, capture_output=True)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "installed package", "max_tokens": 8, "temperature": 0.9, "seed": 21})
                       + "\n")
    cli = subprocess.run([GANNET, "generate", "--model", str(model), "--prompts", str(prompts), "--json"],
                         check=True, capture_output=True, text=True)
    want = json.loads(cli.stdout)["token_ids"]

    script = (
        "import json, sys, gannet\n"
        "llm = gannet.LLM(model=sys.argv[1], quiet=True)\n"
        "o = llm.generate('installed package', gannet.SamplingParams(max_tokens=8, temperature=0.9, seed=21),"
        " use_tqdm=False)\n"
        "print(json.dumps({'file': gannet.__file__, 'ids': o[0].outputs[0].token_ids}))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", script, str(model)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert pathlib.Path(got["file"]).parent == target / "gannet"
    assert got["ids"] == want
