"""What a store costs (README "Several hosts"): one `provision` (its targeted apply included)
and one `describe`, in a directory of N instances, local against the same with a PostgreSQL
store (and terraform's state in `backend "pg"`). Medians of alternating runs; each timed
provision is destroyed again, untimed, so that the directory keeps its size.

Needs a PostgreSQL server: --pg URL (a database on it is created and dropped), else one is
started for the run with .ci/postgres (Debian's postgresql).

    python3 benches/store.py [--instances 100] [--repeat 7] [--terraform PATH] [--bin PATH] [--pg URL]
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

from common import ROOT, parse, parser, scratch

BACKEND = '\nterraform {\n  backend "pg" {}\n}\n'


def psql(url, sql):
    subprocess.run(["psql", url, "-qAtc", sql], check=True, stdout=subprocess.DEVNULL)


def prepare(tmp, name, terraform, binary, instances, store_url, apply=True):
    """A directory of `instances` VMs (queued only, without `apply`), with a store at
    `store_url` when given."""
    os.mkdir(os.path.join(tmp, name))
    d, env, spec = scratch(os.path.join(tmp, name), terraform)
    with open(os.path.join(d, "main.tf"), "w") as f:
        f.write(BACKEND if store_url else "")
    if store_url:
        with open(os.path.join(d, "infrakit-tf.json"), "w") as f:
            json.dump({"store": {"postgres": store_url, "directory": name}}, f)
    kw = dict(env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, text=True)
    for start in range(0, instances, 1000):  # at most 1000 a provision
        count = str(min(1000, instances - start))
        how = ["--parallelism", "50", "provision"] if apply else ["provision", "--no-apply"]
        subprocess.run([binary, "--dir", d, *how, "--count", count, spec], **kw)
    return d, kw, spec


def measure(binary, d, kw, spec, repeat):
    """Medians (s) of provision (then an untimed destroy) and of describe."""
    prov, desc = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run([binary, "--dir", d, "provision", spec], **kw).stdout.strip()
        prov.append(time.perf_counter() - t0)
        subprocess.run([binary, "--dir", d, "destroy", "--yes", out], **kw)
        t0 = time.perf_counter()
        subprocess.run([binary, "--dir", d, "describe", "--output", "json"], **kw)
        desc.append(time.perf_counter() - t0)
    prov.sort()
    desc.sort()
    return prov[len(prov) // 2], desc[len(desc) // 2]


def main():
    p = parser(__doc__)
    p.add_argument("--instances", type=int, default=100)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--pg")
    a = parse(p)
    binary = a.bin
    with tempfile.TemporaryDirectory() as tmp:
        server, pgdir = a.pg, None
        if not server:
            pgdir = tempfile.mkdtemp(prefix="infrakit-tf-bench-pg.")  # its own: the server's user reads it
            server = subprocess.run([os.path.join(ROOT, ".ci/postgres"), "start", pgdir], check=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        db = "bench_store_%d" % os.getpid()
        psql(server, "CREATE DATABASE %s" % db)
        try:
            url = "%s/%s?sslmode=disable" % (server.rsplit("/", 1)[0], db)
            local = prepare(tmp, "local", a.terraform, binary, a.instances, None)
            store = prepare(tmp, "store", a.terraform, binary, a.instances, url)
            lp, ld, sp, sd = [], [], [], []
            for _ in range(a.repeat):  # alternate, so that a busy moment hits both
                p1, d1 = measure(binary, *local, 1)
                p2, d2 = measure(binary, *store, 1)
                lp.append(p1), ld.append(d1), sp.append(p2), sd.append(d2)
            med = lambda v: sorted(v)[len(v) // 2]
            print("instances: %d, repeat: %d, terraform: %s" % (a.instances, a.repeat, a.terraform))
            print("provision: local %.1f ms, store %.1f ms (+%.1f ms)" %
                  (med(lp) * 1e3, med(sp) * 1e3, (med(sp) - med(lp)) * 1e3))
            print("describe:  local %.1f ms, store %.1f ms (+%.1f ms)" %
                  (med(ld) * 1e3, med(sd) * 1e3, (med(sd) - med(ld)) * 1e3))
        finally:
            psql(server, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
            if pgdir:
                subprocess.run([os.path.join(ROOT, ".ci/postgres"), "stop", pgdir], stderr=subprocess.DEVNULL)
                shutil.rmtree(pgdir, ignore_errors=True)


if __name__ == "__main__":
    main()
