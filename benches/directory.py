#!/usr/bin/env python3
"""Directory-engine benchmark (issue: the scoped directory engine).

Builds a directory of N instance files (default 10,000), each with a dedicated slot file, the
way infrakit-tf writes them, then times with the release binary:

  cat        `cat` of every instance file            (the I/O floor)
  describe   `describe --output json`                target: <= 1.5 x cat
  vm-only    `provision --no-apply` of a VM-only spec target: <= 0.5 x describe
  dedicated  `provision --no-apply` with a dedicated resource   target: <= 1.0 x describe

Each is run REPEAT times after one warm-up; the median is reported. Usage:

  python3 benches/directory.py [--instances N] [--repeat R] [--bin PATH]

Exit status 1 when a target is missed, so the script can gate a CI job.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "infrakit-tf")


def populate(d, n):
    """n instances like `provision` writes them, each attached to its own dedicated slot."""
    for i in range(1, n + 1):
        iid = f"instance-{1_700_000_000 + i}"
        vm = {
            "input": {
                "image": "debian-12",
                "size": "small",
                "disk": f"${{terraform_data.web-{i}-data.id}}",
                "tags": {
                    "infrakit.attach": f"web_dedicated_{i},web_global",
                    "infrakit.group": "web",
                    "infrakit.instance.name": iid,
                    "tier": "frontend",
                },
                "user_data": f"#!/bin/sh\necho hello from {iid}\n",
            }
        }
        doc = {"resource": {"terraform_data": {iid: vm}}}
        with open(os.path.join(d, f"{iid}.tf.json"), "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
        slot = {"resource": {"terraform_data": {f"web-{i}-data": {"input": {"size_gb": 10}}}}}
        with open(os.path.join(d, f"web_dedicated_{i}.tf.json"), "w") as f:
            json.dump(slot, f, indent=2, sort_keys=True)
            f.write("\n")
    with open(os.path.join(d, "web_global.tf.json"), "w") as f:
        json.dump({"resource": {"terraform_data": {"web-nfs": {}}}}, f)


def median_seconds(argv, repeat, **kw):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--bin", help="infrakit-tf binary (default: build the release binary)")
    args = ap.parse_args()
    binary = args.bin or build()
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "dir")
        os.mkdir(d)
        populate(d, args.instances)
        specs = {}
        for name, resources in {
            "vm-only": {"terraform_data": {"vm": {"input": {"size": "small"}}}},
            "dedicated": {"terraform_data": {"vm": {}, "data": {"@scope": "@dedicated-web", "input": {}}}},
        }.items():
            specs[name] = os.path.join(tmp, f"{name}.json")
            with open(specs[name], "w") as f:
                json.dump({"Properties": {"resource": resources}, "Tags": {"infrakit.group": "web"}}, f)
        files = sorted(glob.glob(os.path.join(d, "instance-*.tf.json")))
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFRAKIT_TF_")}
        r = {
            "cat": median_seconds(["cat", *files], args.repeat),
            "describe": median_seconds([binary, "--dir", d, "describe", "--output", "json"], args.repeat, env=env),
            "vm-only": median_seconds([binary, "--dir", d, "-q", "provision", specs["vm-only"], "--no-apply"], args.repeat, env=env),
            "dedicated": median_seconds([binary, "--dir", d, "-q", "provision", specs["dedicated"], "--no-apply"], args.repeat, env=env),
        }
    targets = [("describe", "cat", 1.5), ("vm-only", "describe", 0.5), ("dedicated", "describe", 1.0)]
    print(f"{args.instances} instance files, median of {args.repeat} runs")
    for k, v in r.items():
        print(f"  {k:<10} {v * 1000:8.1f} ms")
    ok = True
    for what, base, limit in targets:
        ratio = r[what] / r[base]
        verdict = "ok" if ratio <= limit else "MISSED"
        ok &= ratio <= limit
        print(f"  {what} / {base} = {ratio:.2f} (target <= {limit}) {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
