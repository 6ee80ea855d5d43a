#!/usr/bin/env python3
"""Many instances in one apply (issue: faster than running terraform by hand, goal 3).

From an empty directory, N (default 20) instances whose create takes 1 s (a `terraform_data`
VM with a `local-exec` provisioner `sleep 1`):

  count       `infrakit-tf provision SPEC --count N`                target: <= 1.3 x bare
  bare        `terraform apply` of the same N files, written beforehand (untimed)
  provisions  N `infrakit-tf provision SPEC`, one after the other     target: >= 10 x count

Medians of REPEAT (default 3; the N provisions run once). `--parallelism P` is given to both
sides: with terraform's default of 10, 20 creates are two waves of 1 s whatever runs them.

  python3 benches/count.py [--instances N] [--repeat R] [--parallelism P] [--terraform PATH] [--bin PATH]
"""
import json
import sys

from common import many_at_once, parse, parser


def slow_spec(path):
    vm = {"input": {"size": "small"}, "provisioner": [{"local-exec": {"command": "sleep 1"}}]}
    with open(path, "w") as f:
        json.dump({"Properties": {"resource": {"terraform_data": {"vm": vm}}}}, f)


def main():
    ap = parser(__doc__)
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parallelism", type=int)
    args = parse(ap)
    n = args.instances
    mo, mb, provisions = many_at_once(
        args,
        slow_spec,
        lambda spec: ["provision", spec, "--count", str(n)],
        lambda spec: [["provision", spec, "--count", str(n), "--no-apply"]],
        lambda spec: [["provision", spec]] * n,
    )
    r1, r2 = mo / mb, provisions / mo
    par = f"parallelism {args.parallelism}" if args.parallelism else "terraform's default parallelism (10)"
    print(f"{args.instances} instances, 1 s per create, {par}, median of {args.repeat} ({args.terraform})")
    print(f"  --count      {mo:8.2f} s")
    print(f"  bare apply   {mb:8.2f} s   count / bare = {r1:.2f} (target <= 1.3) {'ok' if r1 <= 1.3 else 'MISSED'}")
    print(f"  provisions   {provisions:8.2f} s   provisions / count = {r2:.1f} (target >= 10) {'ok' if r2 >= 10 else 'MISSED'}")
    return 0 if r1 <= 1.3 and r2 >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
