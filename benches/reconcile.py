#!/usr/bin/env python3
"""Reconcile benchmark (issue: reconcile and sweep-orphans).

In a directory of N applied instances (default 1,000, `terraform_data`, local state), times a
`infrakit-tf reconcile` with nothing to do against one bare `terraform plan` (which refreshes,
like reconcile's single plan). Runs alternate after a warm-up; medians and their ratio are
reported, with the number of terraform runs reconcile made. Target: ratio <= 1.15.

  python3 benches/reconcile.py [--instances N] [--repeat R] [--terraform PATH] [--bin PATH]
"""
import json
import subprocess
import sys
import tempfile
import time

from common import alternate, parse, parser, scratch


def main():
    ap = parser(__doc__)
    ap.add_argument("--instances", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = parse(ap)
    with tempfile.TemporaryDirectory() as tmp:
        d, env, spec = scratch(tmp, args.terraform)
        quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
        for _ in range(args.instances):
            subprocess.run([args.bin, "--dir", d, "-q", "provision", spec, "--no-apply"], **quiet)
        t0 = time.perf_counter()
        subprocess.run([args.bin, "--dir", d, "-q", "reconcile"], **quiet)
        setup = time.perf_counter() - t0
        ours = [args.bin, "--dir", d, "-q", "reconcile", "--output", "json"]
        bare = [args.terraform, "plan", "-input=false"]
        runs = json.loads(subprocess.run(ours, check=True, capture_output=True, env=env, cwd=d).stdout)["terraform_runs"]
        subprocess.run(bare, **quiet)
        mo, mb = alternate((ours, quiet), (bare, quiet), args.repeat)
    ratio = mo / mb
    print(f"{args.instances} applied instances (first apply took {setup:.1f} s), median of {args.repeat} runs ({args.terraform})")
    print(f"  reconcile  {mo * 1000:8.1f} ms   nothing to do; terraform runs per reconcile: {runs}")
    print(f"  plan       {mb * 1000:8.1f} ms   bare `terraform plan`")
    print(f"  reconcile / plan = {ratio:.2f} (target <= 1.15) {'ok' if ratio <= 1.15 else 'MISSED'}")
    return 0 if ratio <= 1.15 else 1


if __name__ == "__main__":
    sys.exit(main())
