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
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from common import alternate, release_binary, scratch


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


def base_config(d):
    """The user's own configuration: every directory has one (here, nothing in it)."""
    with open(os.path.join(d, "main.tf"), "w") as f:
        f.write("terraform {}\n")


def timed(argv, **kw):
    t0 = time.perf_counter()
    subprocess.run(argv, **kw)
    return time.perf_counter() - t0


def scale_up(args):
    """Medians (seconds) of reconcile 0 -> N, bare apply of the same N, and N provisions."""
    ours, bare = [], []
    for _ in range(args.repeat):
        for which in ("ours", "bare"):
            with tempfile.TemporaryDirectory() as tmp:
                d, env, _ = scratch(tmp, args.terraform)
                base_config(d)
                spec = os.path.join(tmp, "g.json")
                group_spec(spec, args.members, delay=True)
                quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
                subprocess.run([args.terraform, "init", "-input=false"], **quiet)  # untimed, both sides
                if which == "ours":
                    ours.append(timed([args.bin, "--dir", d, "-q", *args.ours_flags, "reconcile", "--group", spec], **quiet))
                else:
                    for _ in range(args.members):
                        subprocess.run([args.bin, "--dir", d, "-q", "provision", "--no-apply", spec], **quiet)
                    for p in glob.glob(os.path.join(d, "*.tf.json.new")):
                        os.rename(p, p[: -len(".new")])
                    bare.append(timed([args.terraform, "apply", "-auto-approve", "-input=false", *args.bare_flags], **quiet))
    with tempfile.TemporaryDirectory() as tmp:
        d, env, _ = scratch(tmp, args.terraform)
        base_config(d)
        spec = os.path.join(tmp, "g.json")
        group_spec(spec, args.members, delay=True)
        quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
        subprocess.run([args.terraform, "init", "-input=false"], **quiet)
        t0 = time.perf_counter()
        for _ in range(args.members):
            subprocess.run([args.bin, "--dir", d, "-q", "provision", spec], **quiet)
        provisions = time.perf_counter() - t0
    return statistics.median(ours), statistics.median(bare), provisions


def converged(args):
    """Medians (seconds) of a no-op reconcile of M members and a bare refreshing plan."""
    with tempfile.TemporaryDirectory() as tmp:
        d, env, _ = scratch(tmp, args.terraform)
        base_config(d)
        spec = os.path.join(tmp, "g.json")
        group_spec(spec, args.converged, delay=False)
        quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
        ours = [args.bin, "--dir", d, "-q", "reconcile", "--group", spec]
        bare = [args.terraform, "plan", "-input=false", "-refresh=true"]
        subprocess.run(ours, **quiet)  # creates the M members
        subprocess.run(ours, **quiet)  # warm-up
        subprocess.run(bare, **quiet)
        return alternate((ours, quiet), (bare, quiet), args.repeat)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--converged", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--terraform", default=shutil.which("terraform"))
    ap.add_argument("--bin")
    ap.add_argument("--only", choices=["scale", "converged"], help="run one part only")
    ap.add_argument("--parallelism", type=int)
    args = ap.parse_args()
    args.ours_flags = ["--parallelism", str(args.parallelism)] if args.parallelism else []
    args.bare_flags = [f"-parallelism={args.parallelism}"] if args.parallelism else []
    if not args.terraform:
        sys.exit("no terraform: give --terraform PATH")
    args.bin = release_binary(args.bin)
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
