"""What the store costs readers and quick writers, over TLS (README "Several hosts", "What it
costs"): in a directory of N instances, kept locally against the same in a store reached with
`sslmode=verify-full` on loopback, medians of alternating runs:

- queued (provision --no-apply --count N): `describe`, and `provision --no-apply` (each timed
  one undone again, untimed, with `destroy --no-apply`): the store's fixed cost (connection,
  TLS handshake, lock, snapshot, commit) is the difference;
- applied (`reconcile` once, only for N up to --apply-max): `describe` and `reconcile --check`.

Then where the time goes: one store `describe` of the queued directory under `strace -f -c`
(system calls by count; strace from Debian's package), and the time of connecting alone
(`psql -c 'select 1'` with the same TLS settings).

Needs a TLS PostgreSQL: --pg-tls URL with --ca FILE (a database on it is created and dropped
through --admin, a libpq string that reaches it without TLS: its socket), else one is started
for the run with `.ci/postgres start-tls` (Debian's postgresql and openssl).

    python3 benches/store_readers.py [--instances 1000 10000] [--repeat 5] [--apply-max 1000] [--terraform PATH] [--bin PATH]
"""
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from common import ROOT, parse, parser
from store import prepare


def run(binary, d, kw, *args):
    return subprocess.run([binary, "--dir", d, *args], **kw).stdout.strip()


def timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def compare(repeat, local, store, f):
    """Medians (ms) of f(local) and f(store), alternating."""
    tl, ts = [], []
    for _ in range(repeat):
        tl.append(f(local))
        ts.append(f(store))
    return statistics.median(tl) * 1e3, statistics.median(ts) * 1e3


def main():
    p = parser(__doc__)
    p.add_argument("--instances", type=int, nargs="+", default=[1000])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--apply-max", type=int, default=1000)
    p.add_argument("--pg-tls")
    p.add_argument("--ca")
    p.add_argument("--admin")
    a = parse(p)
    binary = a.bin
    pgdir = None
    server, ca, admin = a.pg_tls, a.ca, a.admin
    if not server:
        pgdir = tempfile.mkdtemp(prefix="infrakit-tf-bench-pgtls.")
        server = subprocess.run([os.path.join(ROOT, ".ci/postgres"), "start-tls", pgdir], check=True,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        ca = os.path.join(pgdir, "tls", "ca.crt")
        port = server.rsplit(":", 1)[1].split("/")[0]
        admin = "host=%s port=%s user=infrakit dbname=postgres" % (pgdir, port)
    psql = lambda sql: subprocess.run(["psql", admin, "-qAtc", sql], check=True, stdout=subprocess.DEVNULL)
    try:
        for n in a.instances:
            db = "bench_readers_%d_%d" % (os.getpid(), n)
            psql("CREATE DATABASE %s" % db)
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    url = "%s/%s?sslmode=verify-full&sslrootcert=%s" % (server.rsplit("/", 1)[0], db, ca)
                    local = prepare(tmp, "local", a.terraform, binary, n, None, apply=False)
                    store = prepare(tmp, "store", a.terraform, binary, n, url, apply=False)
                    describe = lambda h: timed(lambda: run(binary, h[0], h[1], "describe", "--output", "json"))
                    describe(local), describe(store)  # untimed: a host's first reader runs `terraform init`

                    def provision(h):
                        t0 = time.perf_counter()
                        out = run(binary, h[0], h[1], "provision", "--no-apply", h[2])
                        took = time.perf_counter() - t0
                        run(binary, h[0], h[1], "destroy", "--no-apply", "--yes", out)
                        return took

                    print("instances: %d, repeat: %d, terraform: %s, store over TLS (verify-full), loopback" %
                          (n, a.repeat, a.terraform))
                    for what, f in (("describe (queued)", describe), ("provision --no-apply", provision)):
                        lm, sm = compare(a.repeat, local, store, f)
                        print("  %-22s local %8.1f ms, store %8.1f ms (+%.1f ms)" % (what, lm, sm, sm - lm))
                    trace(binary, store)
                    connect = [timed(lambda: subprocess.run(["psql", url, "-qAtc", "select 1"], check=True,
                                                            stdout=subprocess.DEVNULL)) for _ in range(a.repeat)]
                    print("  psql connect+TLS+select 1: %.1f ms" % (statistics.median(connect) * 1e3))
                    if n <= a.apply_max:
                        for h in (local, store):
                            run(binary, h[0], h[1], "--parallelism", "50", "reconcile")
                        check = lambda h: timed(lambda: run(binary, h[0], h[1], "reconcile", "--check"))
                        for what, f in (("describe (applied)", describe), ("reconcile --check", check)):
                            lm, sm = compare(a.repeat, local, store, f)
                            print("  %-22s local %8.1f ms, store %8.1f ms (x%.2f)" % (what, lm, sm, sm / lm))
            finally:
                psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
    finally:
        if pgdir:
            subprocess.run([os.path.join(ROOT, ".ci/postgres"), "stop", pgdir], stderr=subprocess.DEVNULL)
            shutil.rmtree(pgdir, ignore_errors=True)


def trace(binary, h):
    """System calls of one store describe, by count (strace -c), the five most frequent."""
    if not shutil.which("strace"):
        print("  (no strace: system calls not counted)")
        return
    out = subprocess.run(["strace", "-f", "-c", "-o", "/dev/stdout", binary, "--dir", h[0], "describe", "--output",
                          "json"], env=h[1]["env"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m:
            rows.append((int(m.group(1)), m.group(2)))
    rows.sort(reverse=True)
    print("  system calls of one store describe (queued): " + ", ".join("%s %d" % (n, c) for c, n in rows[:6]))


if __name__ == "__main__":
    main()
