#!/usr/bin/env python3
"""Healing benchmark (issue 31: health-based repair): what the health checks add to a
no-op reconcile of a converged group of M members (default 100, then 1,000; VM-only
`terraform_data`), with a check that takes 100 ms (`--heal-cmd 'sleep 0.1'`):

  healed   `infrakit-tf reconcile --group g.json --heal-cmd 'sleep 0.1'` (every member checked)
  plain    `infrakit-tf reconcile --group g.json`

The checks run 8 at a time, so their floor is ceil(M / 8) x 100 ms. Runs alternate; medians of
REPEAT (default 3). Usage:

  python3 benches/heal.py [--members M ...] [--repeat R] [--terraform PATH] [--bin PATH]
"""
import json
import math
import os
import subprocess
import sys
import tempfile

from common import alternate, fresh, parse, parser


def group_spec(path, size):
    spec = {
        "ID": "bench",
        "Properties": {
            "Allocation": {"Size": size},
            "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {"terraform_data": {"vm": {"input": {"size": "small"}}}}}},
        },
    }
    with open(path, "w") as f:
        json.dump(spec, f)


def converged(args, members):
    """Medians (seconds) of a healed and a plain no-op reconcile of `members`."""
    with tempfile.TemporaryDirectory() as tmp:
        d, quiet = fresh(tmp, args.terraform)
        spec = os.path.join(tmp, "g.json")
        group_spec(spec, members)
        plain = [args.bin, "--dir", d, "-q", "reconcile", "--group", spec]
        healed = plain + ["--heal-cmd", "sleep 0.1"]
        subprocess.run(plain, **quiet)  # creates the members
        subprocess.run(healed, **quiet)  # warm-up: the health record written once
        return alternate((healed, quiet), (plain, quiet), args.repeat)


def main():
    ap = parser(__doc__)
    ap.add_argument("--members", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    args = parse(ap)
    for m in args.members:
        healed, plain = converged(args, m)
        floor = math.ceil(m / 8) * 0.1
        print(f"converged group of {m}, 100 ms check, median of {args.repeat}")
        print(f"  plain reconcile    {plain:8.2f} s")
        print(f"  healed reconcile   {healed:8.2f} s   checks cost {healed - plain:.2f} s (floor, 8 at a time: {floor:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
