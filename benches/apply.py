#!/usr/bin/env python3
"""Apply benchmark (issue: terraform in one shot).

In a directory of N applied instances (default 200, `terraform_data`, local state), times:

  ours   `infrakit-tf provision vm.json` (write, promote, init check, apply -refresh=false)
  bare   `terraform apply -auto-approve -input=false -refresh=false` after writing the same
         files (written with `provision --no-apply` and promoted by hand, untimed)

Runs alternate (ours, bare, ours, ...) REPEAT times each after a warm-up; the median of each
and their ratio are reported. Target: ours <= 1.15 x bare. Usage:

  python3 benches/apply.py [--instances N] [--repeat R] [--terraform PATH] [--bin PATH]
"""
import glob
import os
import subprocess
import sys
import tempfile

from common import alternate, parse, parser, scratch


def main():
    ap = parser(__doc__)
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=10)
    args = parse(ap)
    with tempfile.TemporaryDirectory() as tmp:
        d, env, spec = scratch(tmp, args.terraform)
        quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
        ours = [args.bin, "--dir", d, "-q", "provision", spec]
        bare = [args.terraform, "apply", "-auto-approve", "-input=false", "-refresh=false"]

        def queue_and_promote():
            subprocess.run(ours + ["--no-apply"], **quiet)
            for p in glob.glob(os.path.join(d, "*.tf.json.new")):
                os.rename(p, p[: -len(".new")])

        # N applied instances, then one warm-up of each.
        for _ in range(args.instances):
            subprocess.run(ours + ["--no-apply"], **quiet)
        subprocess.run(ours, **quiet)
        queue_and_promote()
        subprocess.run(bare, **quiet)

        mo, mb = alternate((ours, quiet), (bare, quiet), args.repeat, between=queue_and_promote)
    ratio = mo / mb
    print(f"{args.instances} applied instances, median of {args.repeat} runs each ({args.terraform})")
    print(f"  ours  {mo * 1000:8.1f} ms   infrakit-tf provision (apply)")
    print(f"  bare  {mb * 1000:8.1f} ms   terraform apply -refresh=false of the same change")
    print(f"  ours / bare = {ratio:.2f} (target <= 1.15) {'ok' if ratio <= 1.15 else 'MISSED'}")
    return 0 if ratio <= 1.15 else 1


if __name__ == "__main__":
    sys.exit(main())
