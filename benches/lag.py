#!/usr/bin/env python3
"""A cloud that lags and throttles (issue 37: README "A cloud that lags"). A converged group of
N machines (default 200) on the `fakecloud` test provider (every read sleeps `--read-ms`,
default 20 ms; every call served is counted), its look-up declared, retries 3 after 100 ms.

  throttled  one machine the listing does not show (`list-drop`) and whose every read is
             throttled (`throttle-ids`, RequestLimitExceeded): one `reconcile`. Targets: exit 0,
             the machine kept (not pruned), cloud reads (listings and reads) within the report's
             `reads.bound`, (retries + 1) x (2 + ceil(N / 12) + 1).
  full       the same with `--full-refresh`: what a run that widened into a refresh of
             everything (the fallback before this change) costs under the same throttle.
  unsettled  a create whose answer is lost (a 503 after the cloud acted), its listing lagging
             5 s, `--settle 30s`: the `reconcile` at once (the machine held back, not made
             again), then, once settled, the one that adopts it; each against a nothing-to-do
             reconcile of the same group.

Exit 1 when a target is missed. Usage:

  python3 benches/lag.py [--machines N] [--read-ms MS] [--provider PATH] [--terraform PATH] [--bin PATH]
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from common import parse, parser
from refresh import Bench, provider_binary

RETRIES = 3


def knob(b, name, text):
    with open(os.path.join(b.cloud, name), "w") as f:
        f.write(text)


def unknob(b, name):
    try:
        os.remove(os.path.join(b.cloud, name))
    except FileNotFoundError:
        pass


def run(b, extra, env=None):
    """(seconds, reads served (listings and resource reads), exit code, report or None) of one
    `reconcile` with `extra` arguments; a failed run is measured too."""
    open(b.calls, "w").close()
    t0 = time.perf_counter()
    p = subprocess.run(b.reconcile + extra, cwd=b.dir, env={**b.env, **(env or {})}, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    took = time.perf_counter() - t0
    with open(b.calls) as f:
        reads = sum(1 for line in f if line.startswith(("read ", "list ")))
    try:
        report = json.loads(p.stdout)
    except ValueError:
        report = None
    return took, reads, p.returncode, report


def main():
    sys.stdout.reconfigure(line_buffering=True)
    ap = parser(__doc__)
    ap.add_argument("--machines", type=int, default=200)
    ap.add_argument("--read-ms", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--setup-timeout", type=float, default=3600)
    ap.add_argument("--provider", help="terraform-provider-fakecloud (default: build it, debug)")
    args = parse(ap)
    args.provider = provider_binary(args.provider)
    args.bin = os.path.abspath(args.bin)
    n, ok = args.machines, True
    with tempfile.TemporaryDirectory(prefix="infrakit-lag-") as tmp:
        b = Bench(tmp, args)
        config_path = os.path.join(b.dir, "infrakit-tf.json")
        config = json.load(open(config_path))
        config["retries"] = {"max": RETRIES, "base_delay": "100ms"}
        json.dump(config, open(config_path, "w"))
        quick = {"INFRAKIT_TF_SETTLE": "0s"}
        t, _, code, rep = run(b, ["--parallelism", "50"], quick)
        if code != 0 or len(b.machines()) != n:
            sys.exit(f"set-up failed (exit {code}, {len(b.machines())} machines)")
        knob(b, "read-ms", f"{args.read_ms}\n")
        open(b.calls, "w").close()
        print(f"{n} machines (fakecloud, read {args.read_ms} ms, retries {RETRIES}; set-up {t:.1f} s)")
        base_t, base_r, _, _ = run(b, [], quick)
        print(f"  nothing to do     {base_t:7.2f} s  {base_r:5d} reads")

        # The last machine in address order: not in the first slices.
        last = max(f[: -len(".tf.json")] for f in os.listdir(b.dir) if f.startswith("instance-") and f.endswith(".tf.json"))
        vm = json.load(open(os.path.join(b.dir, "terraform.tfstate")))
        vm = next(r["instances"][0]["attributes"]["id"] for r in vm["resources"] if r["name"] == last)
        knob(b, "list-drop", vm)
        knob(b, "throttle-ids", vm)
        t, reads, code, rep = run(b, [], quick)
        bound = (RETRIES + 1) * (2 + math.ceil(n / 12) + 1)
        kept = rep is not None and rep.get("pruned") == [] and os.path.exists(os.path.join(b.cloud, vm + ".json"))
        good = code == 0 and kept and reads <= bound and (rep or {}).get("reads", {}).get("bound") == bound
        ok &= good
        print(f"  throttled         {t:7.2f} s  {reads:5d} reads  exit {code}  (bound {bound}; kept {kept}) {'ok' if good else 'MISSED'}")
        t, reads, code, _ = run(b, ["--full-refresh"], quick)
        print(f"  full refresh      {t:7.2f} s  {reads:5d} reads  exit {code}  (the old fallback, same throttle)")
        unknob(b, "throttle-ids")
        unknob(b, "list-drop")
        run(b, [], quick)

        # A lost create while the listing lags: one more member, its answer lost.
        settle = {"INFRAKIT_TF_SETTLE": "30s"}
        b.write_group(n + 1)
        knob(b, "list-lag-ms", "5000")
        knob(b, "lose-creates", "1 503\n")
        before = len(b.machines())
        t0 = time.perf_counter()
        t, reads, code, rep = run(b, [], settle)
        print(f"  lost create       {t:7.2f} s  {reads:5d} reads  exit {code}  (machines {before} -> {len(b.machines())})")
        t, reads, code, rep = run(b, [], settle)
        held = len((rep or {}).get("unconfirmed", []))
        good = code == 0 and held == 1 and len(b.machines()) == n + 1
        ok &= good
        print(f"  at once, held     {t:7.2f} s  {reads:5d} reads  exit {code}  (unconfirmed {held}, machines {len(b.machines())}) {'ok' if good else 'MISSED'}")
        time.sleep(max(0.0, 30.5 - (time.perf_counter() - t0)))
        t, reads, code, rep = run(b, [], settle)
        adopted = len((rep or {}).get("adopted", []))
        good = code == 0 and adopted == 1 and len(b.machines()) == n + 1
        ok &= good
        print(f"  settled, adopted  {t:7.2f} s  {reads:5d} reads  exit {code}  (adopted {adopted}) {'ok' if good else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
