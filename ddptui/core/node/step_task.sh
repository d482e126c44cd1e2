# The task of one Slurm step for every node (see step.py): run this node's command.
#
# A POSIX shell program, carried by srun's environment to every task (node.STEP_SHELL runs
# it; too large a one comes on stdin instead): a Python per task cost every node a Python's
# start and a compile while the job starts (0.4 s of the step at 64 nodes on a shared host).
# Like the command's own environment, srun's and the task's are readable by the job's user
# alone; the task takes the program out of its environment before anything else runs. step.py puts the table above this text: a `case`
# on SLURMD_NODENAME that sets the node's command (ddptui_exec), its environment
# (ddptui_env, exported in the command's subshell only: secret values never reach a command
# line), its tag and its start checks; ddptui_port_reason (a Python, on the head node only)
# says why the rendezvous port cannot be bound. Every name here starts with ddptui_, so that
# none changes a variable the command would inherit.
#
# Marks (step.MARK) frame the command's output: `node NAME`, `gpu 0|1` (whether the node may
# have a GPU: the GPU sampler step starts on that word), `proof FOUND` (the node's proof,
# see below), `exit CODE`.

ddptui_say() { printf '%s%s\n' "$ddptui_mark" "$1"; }

ddptui_say "node $ddptui_node"
if [ -z "$ddptui_tag" ]; then
    printf 'ddptui: node %s has no command in this step\n' "$ddptui_node"
    ddptui_say "exit 127"
    exit 127
fi
if [ -e /dev/nvidiactl ] || command -v nvidia-smi >/dev/null 2>&1; then
    ddptui_say "gpu 1"
else
    ddptui_say "gpu 0"
fi

# The interface holding the node's address, for GLOO/NCCL_SOCKET_IFNAME. A node with one
# interface besides lo (a VM, a container, a network namespace) needs no look: that one
# carries its traffic (an address of lo's own, 127.*, is not). /proc/net/dev lists the
# interfaces of this process's own network namespace (/sys/class/net may be another's: a
# daemon entered with nsenter keeps the host's); its two header lines hold a `|`. (At 64 tasks sharing a host, running `ip` was
# about 0.1 s of the step's start.) Else iproute2's `ip`; where it is missing, the node's
# Python asks the kernel per interface. `ip -o` prints `N: NAME[@LINK]    inet ADDR/LEN
# ...`; asked for the address alone, the name is cut out of its one line by the shell (at
# 64 tasks sharing a host, the loop over every address cost the step's start 0.05 s); an
# `ip` that cannot filter gets the loop.
ddptui_ifname=
if [ -n "$ddptui_ifname_for" ] && [ "${ddptui_ifname_for#127.}" = "$ddptui_ifname_for" ] &&
    [ -r /proc/net/dev ]; then
    ddptui_ifs=0
    while IFS=: read -r ddptui_if _; do
        case $ddptui_if in
        *'|'*) continue ;;
        esac
        ddptui_if=${ddptui_if##* }
        [ "$ddptui_if" = lo ] && continue
        ddptui_ifs=$((ddptui_ifs + 1))
        ddptui_one=$ddptui_if
    done </proc/net/dev
    [ "$ddptui_ifs" = 1 ] && ddptui_ifname=$ddptui_one
fi
if [ -n "$ddptui_ifname_for" ] && [ -z "$ddptui_ifname" ]; then
    if command -v ip >/dev/null 2>&1; then
        ddptui_ifname=$(ip -o -4 addr show to "$ddptui_ifname_for/32" 2>/dev/null)
        ddptui_ifname=${ddptui_ifname#*: }
        ddptui_ifname=${ddptui_ifname%% *}
        ddptui_ifname=${ddptui_ifname%@*}
        [ -n "$ddptui_ifname" ] || ddptui_ifname=$(ip -o -4 addr show 2>/dev/null |
            while read -r _ ddptui_if _ ddptui_addr _; do
                if [ "${ddptui_addr%/*}" = "$ddptui_ifname_for" ]; then
                    printf '%s\n' "${ddptui_if%@*}"
                    break
                fi
            done)
    else
        ddptui_ifname=$(ddptui_ifname_holding "$ddptui_ifname_for" 2>/dev/null)
    fi
fi

# The head node first binds the rendezvous port as c10d's store will: a port in use ends the
# step at once (the other nodes would wait in the rendezvous for a head that never starts),
# the reason (who holds it) in the head's log. A port that binds needs no reason.
# shellcheck disable=SC2086 # the address and the port, two words
if [ -n "$ddptui_port_check" ] && ! ddptui_port_bindable $ddptui_port_check 2>/dev/null; then
    ddptui_taken=$(ddptui_port_reason $ddptui_port_check)
    if [ -n "$ddptui_taken" ]; then
        printf 'ddptui: rendezvous port %s on %s is not available (%s): choose another with --rdzv-port\n' \
            "${ddptui_port_check#* }" "$ddptui_node" "$ddptui_taken"
        ddptui_say "exit 1"
        scancel --signal=TERM "${SLURM_JOB_ID-}.${SLURM_STEP_ID-}" </dev/null >/dev/null 2>&1
        exit 1
    fi
fi

# TERM/INT/HUP/USR1/USR2 reach the command from Slurm (every process of the step is
# signalled); this shell outlives them to report the command's exit code (a trapped signal
# waits until the foreground command has ended). The command starts with TERM/INT/HUP at
# their defaults and USR1/USR2 ignored: their default would end a torchrun agent and orphan
# its workers, and it does not forward them. Ignored, they would stay so in every worker
# (exec keeps an ignored signal ignored): the workers' hook turns the agent's ignore into a
# handler that does nothing (DDPTUI_IGNORED_SIGNALS, worker_hook.py), so each worker starts
# with their defaults, as under a plain torchrun, and gets them straight from Slurm.
# This shell's own stderr is put aside while the command runs: a shell tells of a command
# that a signal ended ("Terminated"), which would land in the node's log at every teardown.
trap ':' TERM INT HUP
trap '' USR1 USR2
exec 3>&2 2>/dev/null
(
    exec 2>&3 3>&-
    ddptui_env
    DDPTUI_IGNORED_SIGNALS=USR1,USR2
    export DDPTUI_IGNORED_SIGNALS
    if [ -n "$ddptui_ifname" ]; then
        : "${GLOO_SOCKET_IFNAME=$ddptui_ifname}" "${NCCL_SOCKET_IFNAME=$ddptui_ifname}"
        export GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME
    fi
    if ! command -v "$ddptui_cmd" >/dev/null 2>&1; then
        printf 'ddptui: cannot start %s: no such command\n' "$ddptui_cmd" >&2
        exit 127
    fi
    ddptui_exec
) </dev/null
ddptui_code=$?
exec 2>&3 3>&-

# The node's proof, once its command has ended: no process here carries the node's tag.
# grep reads every process's environment; it carries the tag itself, so its own
# /proc/self/environ must be what it lists first, or the look is no proof (a grep without
# -z, say) and none is given: the console's reap step then proves the node. The list of
# processes is taken here, before the look's own process exists (a shell may exec grep in
# the subshell it forked, whose number would be on the list). Processes of the job still
# ending (Slurm signalled them too) get a second to go; any still there then are left to
# that reap step, which stops them and proves the node.
ddptui_found=
ddptui_wait=0
while :; do
    set -- /proc/[0-9]*/environ
    ddptui_look=$(DDPTUI_TAG=$ddptui_tag grep -s -l -z -x -F -e "DDPTUI_TAG=$ddptui_tag" \
        /proc/self/environ "$@")
    case $ddptui_look in
    /proc/self/environ) break ;;
    /proc/self/environ*) ;;
    *) break ;;
    esac
    # how many besides the look itself: every line but the first
    ddptui_now=$(printf '%s\n' "$ddptui_look" | wc -l)
    if [ -z "$ddptui_found" ] && [ "$ddptui_code" = 137 ]; then
        # The agent was killed (SIGKILL) with its workers running: re-parented to PID 1,
        # out of the step's reach, they would train on and hold the other nodes in the
        # job's collectives (an elastic job never shrinks; a fixed one's agents wait in
        # torchrun's exit barrier). Stopped now, as job_helper.py does on other backends.
        for ddptui_pid in $ddptui_look; do
            ddptui_pid=${ddptui_pid#/proc/}
            ddptui_pid=${ddptui_pid%/environ}
            case $ddptui_pid in
            self) ;;
            *) kill -TERM "$ddptui_pid" 2>/dev/null ;;
            esac
        done
        printf 'ddptui: torchrun agent lost (killed by signal 9) with its workers running: ' >&2
        printf 'stopped %s orphaned process(es)\n' "$((ddptui_now - 1))" >&2
    fi
    ddptui_found=${ddptui_found:-$((ddptui_now - 1))}
    ddptui_wait=$((ddptui_wait + 1))
    [ "$ddptui_wait" -gt 20 ] && break
    sleep 0.05
done
case $ddptui_look in
/proc/self/environ) ddptui_say "proof ${ddptui_found:-0}" ;;
esac
ddptui_say "exit $ddptui_code"
exit "$ddptui_code"
