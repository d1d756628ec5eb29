"""Run one training program in this process and write its losses as JSON.

    python tests/programs/_run.py NAME --out result.json [--steps N] [--seed S]

The framework comes from TORCHLEAN_PROGRAMS_FRAMEWORK ("torch" or "torchlean", the default), the
device from TORCHLEAN_PROGRAMS_DEVICE. The program runs twice: as written (framework RNG), then
in comparison mode (NumPy weights, data and noise; no dropout). The JSON holds
``{"normal": [...], "deterministic": [...]}``, or, when a run raises, ``{"error": ..., "traceback": ...}``
where ``error`` is the exception and the program line that raised it.

    python tests/programs/_run.py --table

prints, for every program, the first error it raises under the chosen framework (the source of
the xfail table in tests/test_programs.py).
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))

PROGRAMS = [
    "mnist_cnn", "vae", "dcgan", "word_lstm_lm", "char_gru", "nanogpt", "mingpt_trainer",
    "mamba_minimal", "resnet_cifar", "vit", "unet", "transformer_seq2seq",
    "fourier_1d", "fourier_2d", "fourier_3d",
]


def describe(exc):
    """``Type: message (program.py:line)``, one line, naming the program line that raised."""
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if os.path.dirname(os.path.abspath(frame.filename)) == HERE and not frame.filename.endswith("_run.py"):
            where = f" ({os.path.basename(frame.filename)}:{frame.lineno})"
            break
    message = " ".join(str(exc).split())
    if len(message) > 160:
        message = message[:157] + "..."
    return f"{type(exc).__name__}: {message}{where}"


def run_one(name, steps, seed):
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    try:
        program = importlib.import_module(name)
        kwargs = {} if steps is None else {"steps": steps}
        result = {"normal": [float(v) for v in program.main(seed=seed, **kwargs)]}
        result["deterministic"] = [float(v) for v in program.main(seed=seed, deterministic=True, **kwargs)]
        return result
    except Exception as exc:  # the runner reports every failure the same way
        return {"error": describe(exc), "traceback": traceback.format_exc()}


def table():
    framework = os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean")
    print(f"first error of each program under {framework}:")
    for name in PROGRAMS:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.json")
            subprocess.run([sys.executable, os.path.join(HERE, "_run.py"), name, "--out", out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            try:
                with open(out) as f:
                    result = json.load(f)
            except (OSError, ValueError):
                result = {"error": "the runner wrote no result (crashed?)"}
        print(f'    "{name}": {json.dumps(result.get("error", "passes"))},')


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("name", nargs="?", choices=PROGRAMS)
    parser.add_argument("--out")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if args.table:
        table()
        sys.exit(0)
    if args.name is None or args.out is None:
        parser.error("NAME and --out are required (or --table)")
    result = run_one(args.name, args.steps, args.seed)
    with open(args.out, "w") as f:
        json.dump(result, f)
    if "error" in result:
        print(result["traceback"], file=sys.stderr)
        sys.exit(1)
