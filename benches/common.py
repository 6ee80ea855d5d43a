"""What the terraform benchmarks share: the release binary, a scratch directory with an empty
terraform CLI config, a clean environment, a VM-only spec, and alternating median timing."""
import json
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def release_binary(given=None):
    """The binary to measure: `given`, else a fresh release build."""
    if given:
        return given
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "infrakit-tf")


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
