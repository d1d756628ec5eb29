"""``python -m tests.api_coverage [--missing] [--update]``: print torchlean's API coverage figure."""

import argparse

from . import KNOWN_MISSING_FILE, coverage, figure

parser = argparse.ArgumentParser(prog="python -m tests.api_coverage")
parser.add_argument("--missing", action="store_true", help="list the missing names")
parser.add_argument("--update", action="store_true", help="rewrite known_missing.txt from today's torchlean")
args = parser.parse_args()

present, missing = coverage("torchlean")
print(figure(present, missing))
if args.missing:
    print("\n".join(missing))
if args.update:
    with open(KNOWN_MISSING_FILE, "w") as f:
        f.write("# Everyday PyTorch names torchlean does not provide yet (tests/api_coverage/torch_names.txt).\n")
        f.write("# Kept exact by tests/test_api_coverage.py: delete a line when the name lands.\n")
        f.write("".join(name + "\n" for name in missing))
    print(f"wrote {len(missing)} names to {KNOWN_MISSING_FILE}")
