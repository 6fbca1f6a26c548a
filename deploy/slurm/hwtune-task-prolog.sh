#!/bin/sh
# Slurm TaskProlog: give every task the hwtune profile of its own slice of the node.
#
#   install -m 0755 deploy/slurm/hwtune-task-prolog.sh /etc/slurm/hwtune-task-prolog.sh
#   slurm.conf:  TaskProlog=/etc/slurm/hwtune-task-prolog.sh
#
# slurmstepd runs the TaskProlog as the job's user, once per task, just before it starts the
# task, with the task's environment (SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, ...) and no search
# PATH. Each line it prints as "export NAME=value" is added to the task's environment, the value
# taken literally (no shell unquoting); "unset NAME" and "print TEXT" are the other verbs
# (slurm.conf(5), TaskProlog; SchedMD/slurm src/slurmd/slurmstepd/task.c, _proc_stdout).
# `hwtune env` reads SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE itself and plans for this task's
# share of the cores, NUMA nodes and GPUs; --format dotenv prints NAME=value without quoting,
# which is what Slurm expects after "export ".

HWTUNE="${HWTUNE:-/usr/local/bin/hwtune}"

# Not installed on this node: leave the task's environment as it is.
[ -x "$HWTUNE" ] || exit 0

"$HWTUNE" env --format dotenv 2>/dev/null | while IFS= read -r line; do
    case "$line" in
        '' | '#'*) ;;
        *=*) printf 'export %s\n' "$line" ;;
    esac
done

# A failing hwtune must never fail the task: the job then runs with TensorFlow's defaults.
exit 0
