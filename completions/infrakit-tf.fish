# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_infrakit_tf_global_optspecs
    string join \n dir= output= yes vm-type= lock-timeout= terraform-timeout= parallelism= store= accept-config retries= settle= settle-wait= metrics-file= terraform= env= q/quiet v/verbose h/help V/version
end

function __fish_infrakit_tf_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_infrakit_tf_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_infrakit_tf_using_subcommand
    set -l cmd (__fish_infrakit_tf_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "validate" -d 'Check an instance spec and report every problem'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "provision" -d 'Create one instance from a spec and print its ID'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "destroy" -d 'Remove instances'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "label" -d 'Merge labels into an instance\'s VM tags'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "describe" -d 'List instances, one row each, queued or not'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "reconcile" -d 'Converge the directory and its groups: prune machines deleted behind Terraform\'s back, apply the queue, keep every group whole and current'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "sweep-orphans" -d 'Remove what nothing owns any more: instance files whose VM is gone from state, dedicated slots and global files no instance refers to'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "import" -d 'Adopt machines that already exist (a hand-made first manager) into the group'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "migrate" -d 'Move this directory into the store, for several hosts (guide: docs/several-hosts.md)'
complete -c infrakit-tf -n "__fish_infrakit_tf_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand validate" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l logical-id -d 'The instance\'s logical ID (a pet): names its siblings and dedicated slot, sets the `infrakit.logical_id` tag; overrides the spec\'s `LogicalID`. Repeatable: one pet per logical ID, all in one apply' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l count -d 'Provision N instances (each its own ID and slot) in one apply, so that they are created in parallel; stdout lists the N IDs, `--output json` an array (at most 1000)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l tag -d 'Add a tag to the VM (repeatable; overrides the spec\'s `Tags`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l no-apply -d 'Only write the files (queued as `.tf.json.new`); do not run terraform'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l dry-run -d 'Show the files that would change and terraform\'s plan; write and apply nothing'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand provision" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l reason -d 'Why: `terminate` removes the dedicated slot too; `rolling-update` keeps it' -r -f -a "terminate\t'Scale down or retire: remove the instance, its slot, and unreferenced globals'
rolling-update\t'Replace the instance: keep its dedicated slot for the replacement'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l group -d 'A group spec whose `Lifecycle.Drain` drains its members before they are destroyed (repeatable). Without any, the groups listed in infrakit-tf.json; a member\'s group is its `infrakit.group` tag' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l drain-cmd -d 'A shell command that drains a member before it is destroyed (exit 0: drained); run with the environment --health-cmd has [default: the group spec\'s `Lifecycle.Drain`]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l drain-timeout -d 'How long the drain command may run before it counts as failed (it is killed) [default: the spec\'s `Lifecycle.DrainTimeout`, else 5m]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l on-drain-failure -d 'What a failed drain does: `abandon` keeps the member (exit 17 once all else is done), `continue` destroys it anyway [default: the spec\'s `Lifecycle.OnDrainFailure`, else abandon]' -r -f -a "abandon\t'Keep the member: it is not destroyed, and the run exits 17'
continue\t'Destroy it anyway, with a warning'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l no-apply -d 'Only change the files; do not run terraform'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l dry-run -d 'Show the files that would change and terraform\'s plan; write and apply nothing'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand destroy" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l no-apply -d 'Only change the files; do not run terraform'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l dry-run -d 'Show the files that would change and terraform\'s plan; write and apply nothing'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand label" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l tag -d 'Show only instances with this tag (repeatable; all must match)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l group -d 'A group spec that says whether its members are current (repeatable). Without any, the groups listed in infrakit-tf.json' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l properties -d 'Include each VM\'s properties (in `--output json`)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand describe" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l max-destroy -d 'Refuse (exit 11, nothing applied) a run that would destroy more resources than this [default: 10]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l group -d 'A group spec to converge (InfraKit\'s format; repeatable). Without any, the groups listed in infrakit-tf.json (`"groups": [...]`, relative to the directory)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l max-unavailable -d 'Replace at most N outdated members at a time [default: the spec\'s `Updating.MaxUnavailable`, else 1]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l checkpoints -d 'Percentages of a group at which its rollout pauses, such as `20,50` (`none`: no pause) [default: the spec\'s `Updating.Checkpoints`]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l min-ready -d 'How long a batch\'s replacements must stay healthy (their check passing, run again until then) before the next batch [default: the spec\'s `Updating.MinReady`, else 0s]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l checkpoint-delay -d 'How long a rollout pauses at each checkpoint [default: the spec\'s `Updating.CheckpointDelay`, else 1h]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l rollback -d 'Roll group ID back to its last good spec: its members on a newer spec are replaced by members on it, and the group stays there (repeatable)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l retry-rollout -d 'Roll group ID\'s spec out again after it was rolled back (repeatable)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l health-cmd -d 'A shell command that says whether a replacement is healthy (exit 0); run with `INFRAKIT_TF_ID`, `INFRAKIT_TF_LOGICAL_ID`, `INFRAKIT_TF_GROUP` and `INFRAKIT_TF_ATTR_<KEY>` (its state attributes) in its environment. The next batch waits for it' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l health-timeout -d 'How long --health-cmd may run before it counts as failed' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l refresh-slice -d 'The share of the listed machines each run refreshes, to see changes made in the cloud: 1/N refreshes all of them within N runs' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l drain-cmd -d 'A shell command that drains a member before it is destroyed (exit 0: drained); run with the environment --health-cmd has [default: the group spec\'s `Lifecycle.Drain`]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l drain-timeout -d 'How long the drain command may run before it counts as failed (it is killed) [default: the spec\'s `Lifecycle.DrainTimeout`, else 5m]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l on-drain-failure -d 'What a failed drain does: `abandon` keeps the member (exit 17 once all else is done), `continue` destroys it anyway [default: the spec\'s `Lifecycle.OnDrainFailure`, else abandon]' -r -f -a "abandon\t'Keep the member: it is not destroyed, and the run exits 17'
continue\t'Destroy it anyway, with a warning'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l heal-cmd -d 'A shell command that checks each created member every run (exit 0: healthy); run with the environment --health-cmd has [default: the group spec\'s `Healing.Command`]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l heal-timeout -d 'How long a check may run before it counts as failed (it is killed) [default: the spec\'s `Healing.Timeout`, else 10s]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l heal-initial-delay -d 'How long after a member was first seen created it is first checked [default: the spec\'s `Healing.InitialDelay`, else 0s]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l heal-failures -d 'Failed checks in a row (one a run) that make a member unhealthy [default: the spec\'s `Healing.FailuresBeforeRepair`, else 3]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l heal-max-unhealthy -d 'The circuit breaker: with more unhealthy members than this (a count, or a percentage of the desired size, rounded down but at least 1), a group repairs none and the run exits 18 [default: the spec\'s `Healing.MaxUnhealthy`, else 50%]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l heal-max-repairs -d 'Unhealthy members repaired per group per run, at most [default: the spec\'s `Healing.MaxRepairsPerRun`, else 1]' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l no-wait -d 'Exit at once (code 5) when another infrakit-tf run holds the directory'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l check -d 'Refresh and plan without saving anything; exit 10 when something is pending'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l full-refresh -d 'Refresh every resource this run, as a plain `terraform plan` does (no listing, no slice)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand reconcile" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l max-destroy -d 'With --strays: refuse (exit 11) to destroy more than N machines' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l dry-run -d 'List the orphans and terraform\'s plan; change nothing'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l no-apply -d 'Remove the files but do not run terraform'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l strays -d 'Destroy the strays instead: machines a reconcile\'s listing showed with the tags of a resource of this directory that has its machine already (a twin a lost answer made, or a leak), in no state'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand sweep-orphans" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l resource -d 'A resource to adopt: its type, the existing object\'s cloud ID, and its name in the spec when the type appears more than once (repeatable; one must be the VM)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l group-id -d 'The group\'s ID: the `infrakit.group` tag; must match a group spec\'s `ID`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l exclude-prop -d 'Leave this property out of the adopted resources\' configuration (repeatable)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l dry-run -d 'Show what would be imported and created, and terraform\'s plan; change nothing'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand import" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l dir -d 'The managed directory (your Terraform config plus the files infrakit-tf writes)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l output -d 'Output format of the data on stdout' -r -f -a "table\t'Human-readable: an ID, or a table'
json\t'JSON with a stable schema, for scripts'"
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l vm-type -d 'Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l lock-timeout -d 'How long to wait for another infrakit-tf run to release the directory (`0` fails at once)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l terraform-timeout -d 'The longest one terraform run may take; then it gets one interrupt and, after a grace period (as long as this timeout, at most 60s), is killed (exit 14)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l parallelism -d 'How many resources terraform creates, changes or destroys at once (its `-parallelism`, whose default is 10); large groups on fast APIs want more' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l store -d 'The store\'s PostgreSQL URL, for several hosts (overrides `store.postgres` in infrakit-tf.json, which also names the directory in it: `store.directory`)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l retries -d 'Run a terraform init, plan or apply that failed with a transient error (throttling, an API\'s 5xx, a reset connection, a network timeout, a broken download) again, up to N times, after an exponential backoff; `0` never does (default 3, or `retries.max` in infrakit-tf.json)' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l settle -d 'How old the evidence must be before the cloud\'s "not there" is believed: a look-up or a read begun less than this after a create, or after an apply that failed or was cut short, may adopt what it finds, but never concludes that a machine does not exist' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l settle-wait -d 'A retry in the same run, after an apply that failed while creating, waits for the settle time when it is at most this long; otherwise (the default, `0s`) the machines that apply may have made are left to the next run, and the rest is applied' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l metrics-file -d 'After every command that writes, and every reconcile, write the run\'s metrics to PATH in Prometheus\'s text format, atomically (for node_exporter\'s textfile collector; over `metrics_file` in infrakit-tf.json)' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l terraform -d 'The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`' -r -F
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l env -d 'Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`' -r
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l yes -d 'Answer yes to confirmations (required without a terminal)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -l accept-config -d 'With a store: make this host\'s configuration the one every host must run with'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -s q -l quiet -d 'Print only data and errors'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -s v -l verbose -d 'Print more about what is done'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand migrate" -s V -l version -d 'Print version'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "validate" -d 'Check an instance spec and report every problem'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "provision" -d 'Create one instance from a spec and print its ID'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "destroy" -d 'Remove instances'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "label" -d 'Merge labels into an instance\'s VM tags'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "describe" -d 'List instances, one row each, queued or not'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "reconcile" -d 'Converge the directory and its groups: prune machines deleted behind Terraform\'s back, apply the queue, keep every group whole and current'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "sweep-orphans" -d 'Remove what nothing owns any more: instance files whose VM is gone from state, dedicated slots and global files no instance refers to'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "import" -d 'Adopt machines that already exist (a hand-made first manager) into the group'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "migrate" -d 'Move this directory into the store, for several hosts (guide: docs/several-hosts.md)'
complete -c infrakit-tf -n "__fish_infrakit_tf_using_subcommand help; and not __fish_seen_subcommand_from validate provision destroy label describe reconcile sweep-orphans import migrate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
