"""What the terraform benchmarks share: the release binary, a scratch directory with an empty
terraform CLI config, a clean environment, a VM-only spec, and alternating median timing."""
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def release_binary(given=None):
    """The binary to measure: `given`, else a fresh release build."""
    if given:
        return given
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "infrakit-tf")


def parser(doc):
    """The options every terraform benchmark takes, `--terraform` (default: the one on PATH) and
    `--bin` (default: a fresh release build); add yours, then `parse`."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--terraform", default=shutil.which("terraform"))
    ap.add_argument("--bin", help="infrakit-tf binary (default: build the release binary)")
    return ap


def parse(ap):
    """The arguments, with a terraform (or an exit saying how to give one) and the binary built."""
    args = ap.parse_args()
    if not args.terraform:
        sys.exit("no terraform: give --terraform PATH")
    args.bin = release_binary(args.bin)
    return args


def scratch(tmp, terraform):
    """(managed dir, env, VM-only spec path) inside `tmp`, for `terraform`."""
    d = os.path.join(tmp, "dir")
    os.mkdir(d)
    rc = os.path.join(tmp, "terraformrc")
    open(rc, "w").close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFRAKIT_TF_", "TF_"))}
    env.update(TF_CLI_CONFIG_FILE=rc, INFRAKIT_TF_TERRAFORM=terraform, TF_IN_AUTOMATION="1")
    spec = os.path.join(tmp, "vm.json")
    with open(spec, "w") as f:
        json.dump({"Properties": {"resource": {"terraform_data": {"vm": {"input": {"size": "small"}}}}}}, f)
    return d, env, spec


def alternate(a, b, repeat, between=None):
    """Runs `a` and `b` (argv + kwargs pairs) alternately `repeat` times; medians in seconds.
    `between` runs untimed after each `a`."""
    ta, tb = [], []
    for _ in range(repeat):
        for argv, kw, out in ((a[0], a[1], ta), (b[0], b[1], tb)):
            t0 = time.perf_counter()
            subprocess.run(argv, **kw)
            out.append(time.perf_counter() - t0)
            if out is ta and between:
                between()
    return statistics.median(ta), statistics.median(tb)


def timed(argv, **kw):
    """Seconds one run takes."""
    t0 = time.perf_counter()
    subprocess.run(argv, **kw)
    return time.perf_counter() - t0


def fresh(tmp, terraform):
    """(managed dir, quiet run kwargs) of an empty, initialised directory inside `tmp`: the
    user's own configuration is one (empty) `main.tf`, as every directory has one."""
    d, env, _ = scratch(tmp, terraform)
    with open(os.path.join(d, "main.tf"), "w") as f:
        f.write("terraform {}\n")
    quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
    subprocess.run([terraform, "init", "-input=false"], **quiet)  # untimed, every side
    return d, quiet


def promote_queued(d):
    """Renames every queued `.tf.json.new` in `d` to `.tf.json`, as a promotion does."""
    for p in glob.glob(os.path.join(d, "*.tf.json.new")):
        os.rename(p, p[: -len(".new")])


def many_at_once(args, write_spec, ours, queue, single):
    """N instances from an empty directory, three ways; medians of `args.repeat` (the N single
    provisions run once: they take the longest). `write_spec(path)` writes the spec;
    `ours(spec)` is the one command that creates the N; `queue(spec)` lists
    the commands that write the same N files without applying (the bare side then promotes them
    and times one `terraform apply`); `single(spec)` lists the N single provisions. `args` has
    `terraform`, `bin`, `repeat`, `parallelism` (given to both sides, or None)."""
    par = ["--parallelism", str(args.parallelism)] if args.parallelism else []
    bare_par = [f"-parallelism={args.parallelism}"] if args.parallelism else []
    ours_t, bare_t = [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            d, quiet = fresh(tmp, args.terraform)
            spec = os.path.join(tmp, "spec.json")
            write_spec(spec)
            ours_t.append(timed([args.bin, "--dir", d, "-q", *par, *ours(spec)], **quiet))
        with tempfile.TemporaryDirectory() as tmp:
            d, quiet = fresh(tmp, args.terraform)
            spec = os.path.join(tmp, "spec.json")
            write_spec(spec)
            for argv in queue(spec):
                subprocess.run([args.bin, "--dir", d, "-q", *argv], **quiet)
            promote_queued(d)
            bare_t.append(timed([args.terraform, "apply", "-auto-approve", "-input=false", *bare_par], **quiet))
    with tempfile.TemporaryDirectory() as tmp:
        d, quiet = fresh(tmp, args.terraform)
        spec = os.path.join(tmp, "spec.json")
        write_spec(spec)
        t0 = time.perf_counter()
        for argv in single(spec):
            subprocess.run([args.bin, "--dir", d, "-q", *par, *argv], **quiet)
        singles = time.perf_counter() - t0
    return statistics.median(ours_t), statistics.median(bare_t), singles
