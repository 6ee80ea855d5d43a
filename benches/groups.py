#!/usr/bin/env python3
"""Group benchmark (issue: groups that reconcile keeps whole).

1. Scale a group 0 -> N (default 20) whose members take 1 s to create (a `terraform_data` VM
   with a `local-exec` provisioner `sleep 1`), each timed from an empty directory:

     reconcile   `infrakit-tf reconcile --group g.json`             target: <= 1.3 x bare
     bare        `terraform apply` of the same N files, written beforehand (untimed)
     provisions  N `infrakit-tf provision` calls, one after the other  target: >= 10 x reconcile

2. A converged group of M members (default 1,000, VM-only `terraform_data`, no delay):

     reconcile   `infrakit-tf reconcile --group g.json` (nothing to do)  target: <= 1.05 x bare
     bare        `terraform plan -refresh=true` of the same directory

Runs alternate; medians of REPEAT (default 3; the N provisions run once: they take the
longest). Usage:

  python3 benches/groups.py [--members N] [--converged M] [--repeat R] [--parallelism P]
                            [--terraform PATH] [--bin PATH]

--parallelism P is given to both sides (`--parallelism` / `-parallelism=`): terraform's
default of 10 makes 20 creates two waves of 1 s, whatever runs them.

Exit status 1 when a target is missed.
"""
import json
import os
import subprocess
import sys
import tempfile

from common import alternate, fresh, many_at_once, parse, parser


def group_spec(path, size, delay):
    vm = {"input": {"size": "small"}}
    if delay:
        vm["provisioner"] = [{"local-exec": {"command": "sleep 1"}}]
    spec = {
        "ID": "bench",
        "Properties": {
            "Allocation": {"Size": size},
            "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {"terraform_data": {"vm": vm}}}},
            "Flavor": {"Plugin": "flavor-vanilla", "Properties": {"Tags": {"bench": "yes"}}},
        },
    }
    with open(path, "w") as f:
        json.dump(spec, f)


def scale_up(args):
    """Medians (seconds) of reconcile 0 -> N, bare apply of the same N, and N provisions."""
    n = args.members
    return many_at_once(
        args,
        lambda path: group_spec(path, n, delay=True),
        lambda spec: ["reconcile", "--group", spec],
        lambda spec: [["provision", "--no-apply", spec]] * n,
        lambda spec: [["provision", spec]] * n,
    )


def converged(args):
    """Medians (seconds) of a no-op reconcile of M members and a bare refreshing plan."""
    with tempfile.TemporaryDirectory() as tmp:
        d, quiet = fresh(tmp, args.terraform)
        spec = os.path.join(tmp, "g.json")
        group_spec(spec, args.converged, delay=False)
        ours = [args.bin, "--dir", d, "-q", "reconcile", "--group", spec]
        bare = [args.terraform, "plan", "-input=false", "-refresh=true"]
        subprocess.run(ours, **quiet)  # creates the M members
        subprocess.run(ours, **quiet)  # warm-up
        subprocess.run(bare, **quiet)
        return alternate((ours, quiet), (bare, quiet), args.repeat)


def main():
    ap = parser(__doc__)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--converged", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["scale", "converged"], help="run one part only")
    ap.add_argument("--parallelism", type=int)
    args = parse(ap)
    ok = True

    if args.only != "converged":
        ours, bare, provisions = scale_up(args)
        r1, r2 = ours / bare, provisions / ours
        ok &= r1 <= 1.3 and r2 >= 10
        par = f", parallelism {args.parallelism}" if args.parallelism else ", terraform's default parallelism (10)"
        print(f"scale 0 -> {args.members} (1 s per create{par}), median of {args.repeat} ({args.terraform})")
        print(f"  reconcile    {ours:8.2f} s")
        print(f"  bare apply   {bare:8.2f} s   reconcile / bare = {r1:.2f} (target <= 1.3) {'ok' if r1 <= 1.3 else 'MISSED'}")
        print(f"  provisions   {provisions:8.2f} s   provisions / reconcile = {r2:.1f} (target >= 10) {'ok' if r2 >= 10 else 'MISSED'}")
    if args.only == "scale":
        return 0 if ok else 1

    mo, mb = converged(args)
    r3 = mo / mb
    ok &= r3 <= 1.05
    print(f"converged group of {args.converged}, median of {args.repeat}")
    print(f"  reconcile    {mo:8.2f} s")
    print(f"  bare plan    {mb:8.2f} s   reconcile / plan = {r3:.2f} (target <= 1.05) {'ok' if r3 <= 1.05 else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
