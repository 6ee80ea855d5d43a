"""What adopting the machines of a cut apply costs (README "Machines an apply cut short made"),
with the fakecloud test provider (tests/fakecloud, built here) in a directory of N instances:

- `reconcile` with nothing to do, after no cut apply: the look-up must cost nothing (the same
  terraform runs as without it);
- the `reconcile` after a provision whose whole process group was SIGKILLed as soon as the
  cloud held a new machine (it boots for a while: the killed terraform never recorded it):
  the look-up (the state, then data sources and an import planned in a mirror), the adoption
  and the apply that imports;
- the same `reconcile` with look-ups not declared: the machine is made again (the cost without
  adoption, and the duplicate it leaves).

Medians of --repeat rounds, each on a fresh copy of the prepared directory.

    python3 benches/adopt.py [--instances 20] [--repeat 3] [--terraform PATH] [--bin PATH]
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from common import ROOT, parse, parser, timed

LOOKUPS = {
    t: {"data_source": d, "arguments": {"tags": "{{tags}}"}, "ids": "ids", "tags": "tags"}
    for t, d in (("fakecloud_instance", "fakecloud_instances"), ("fakecloud_volume", "fakecloud_volumes"))
}
SPEC = {"Properties": {"resource": {
    "fakecloud_instance": {"vm": {"name": "web"}},
    "fakecloud_volume": {"data": {"@scope": "@dedicated", "size": 5}}}},
    "Tags": {"infrakit.group": "web"}}


def provider():
    subprocess.run(["cargo", "build", "--quiet", "-p", "fakecloud"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "debug", "terraform-provider-fakecloud")


def prepare(tmp, terraform, binary, instances, lookups):
    """A directory of `instances`, its cloud, and the kwargs to run infrakit-tf there."""
    root = os.path.join(tmp, "root")
    d, cloud = os.path.join(root, "dir"), os.path.join(root, "cloud")
    os.makedirs(d), os.makedirs(cloud)
    pkg = os.path.join(root, "mirror/registry.terraform.io/infrakit/fakecloud/0.0.1/linux_amd64")
    os.makedirs(pkg)
    shutil.copy(provider(), os.path.join(pkg, "terraform-provider-fakecloud"))
    rc = os.path.join(root, "rc")
    with open(rc, "w") as f:
        f.write('provider_installation {\n filesystem_mirror {\n  path = "%s"\n  include = ["infrakit/fakecloud"]\n }\n'
                ' direct { exclude = ["infrakit/fakecloud"] }\n}\n' % os.path.join(root, "mirror"))
    with open(os.path.join(d, "main.tf"), "w") as f:
        f.write('terraform {\n  required_providers {\n    fakecloud = { source = "infrakit/fakecloud" }\n  }\n}\n'
                'provider "fakecloud" {}\n')
    config = {"vm_types": {"fakecloud_instance": {}}}
    if lookups:
        config["lookups"] = LOOKUPS
    with open(os.path.join(d, "infrakit-tf.json"), "w") as f:
        json.dump(config, f)
    spec = os.path.join(root, "web.json")
    with open(spec, "w") as f:
        json.dump(SPEC, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFRAKIT_TF_", "TF_"))}
    env.update(TF_CLI_CONFIG_FILE=rc, INFRAKIT_TF_TERRAFORM=terraform, FAKECLOUD_DIR=cloud)
    kw = dict(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    subprocess.run([binary, "--dir", d, "--parallelism", "20", "provision", "--count", str(instances), spec], **kw)
    return root, d, cloud, spec, kw


def cut(binary, d, cloud, spec, kw):
    """A provision killed with its terraform as soon as the cloud holds a new machine."""
    before = set(os.listdir(cloud))
    with open(os.path.join(cloud, "boot-ms"), "w") as f:
        f.write("3000")
    p = subprocess.Popen([binary, "--dir", d, "provision", spec], env=kw["env"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    while not {n for n in os.listdir(cloud) if n.endswith(".json")} - before:
        time.sleep(0.005)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    os.remove(os.path.join(cloud, "boot-ms"))


def vms(cloud):
    return sum(1 for n in os.listdir(cloud) if n.startswith("i-") and n.endswith(".json"))


def main():
    p = parser(__doc__)
    p.add_argument("--instances", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    a = parse(p)
    quiet, recover, without, twice = [], [], [], []
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            root, d, cloud, spec, kw = prepare(tmp, a.terraform, a.bin, a.instances, True)
            quiet.append(timed([a.bin, "--dir", d, "reconcile"], **kw))
            cut(a.bin, d, cloud, spec, kw)
            recover.append(timed([a.bin, "--dir", d, "reconcile"], **kw))
            assert vms(cloud) == a.instances + 1, "adopted, nothing twice"
        with tempfile.TemporaryDirectory() as tmp:
            root, d, cloud, spec, kw = prepare(tmp, a.terraform, a.bin, a.instances, False)
            cut(a.bin, d, cloud, spec, kw)
            without.append(timed([a.bin, "--dir", d, "reconcile"], **kw))
            twice.append(vms(cloud) - (a.instances + 1))
    med = statistics.median
    print("instances: %d, repeat: %d, terraform: %s" % (a.instances, a.repeat, a.terraform))
    print("reconcile, no cut apply (no look-up):      %.0f ms" % (med(quiet) * 1e3))
    print("reconcile after a cut apply, adopting:     %.0f ms" % (med(recover) * 1e3))
    print("reconcile after a cut apply, no look-ups:  %.0f ms (machines made twice: %s)" % (med(without) * 1e3, twice))


if __name__ == "__main__":
    main()
