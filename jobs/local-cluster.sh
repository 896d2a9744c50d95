#!/bin/bash
# A two-node Slurm cluster on this one machine, for trying the job scripts and
# multi-node runs before a real cluster (and for ert's `cluster` tests).
#
#   sudo bash jobs/local-cluster.sh up        # munge, 2 hosts, slurmctld + 2 slurmd
#   export SLURM_CONF=/run/ert-cluster/slurm.conf   (printed by `up`)
#   sbatch --wait --nodes=2 jobs/slurm-cpu.sh configs/tiny.yaml
#   sudo bash jobs/local-cluster.sh status
#   sudo bash jobs/local-cluster.sh down      # removes every process, namespace and file it made
#   sudo bash jobs/local-cluster.sh throttle node2   # a slow node: a real-time process takes half its core
#   sudo bash jobs/local-cluster.sh unthrottle node2
#
# Each "host" (node1, node2) is a Linux network namespace with its own veth
# address on a bridge (10.77.0.0/24) and a UTS namespace with its own host
# name; its slurmd (and so every task Slurm starts there) runs inside both and
# is pinned to its share of this machine's cores.  Each host has its own
# /dev/shm (a tmpfs in its mount namespace), as separate machines have: MPI's
# shared-memory segments that a killed job leaves there go with the host at
# 'down', and never reach the next run's.  slurmctld runs as host
# "ertctl" on the bridge's address.  MPI between the hosts goes over the veth
# link (TCP), within a host through shared memory.  Slurm 22.05 from Debian,
# proctrack/linuxproc, no cgroups, MPI through Slurm's PMI-2 (srun --mpi=pmi2,
# the default here).  Needs root, iproute2, util-linux's unshare; installs
# slurmd, slurmctld, slurm-client and munge with apt if they are missing.
#
# Environment: ERT_CLUSTER_DIR (default /run/ert-cluster), ERT_CLUSTER_NET
# (default 10.77.0), ERT_CLUSTER_CPUS (CPUs Slurm gives each host; default
# half this machine's cpus, at least 2, so each host can hold an intra-node pair).
set -euo pipefail

DIR=${ERT_CLUSTER_DIR:-/run/ert-cluster}
NET=${ERT_CLUSTER_NET:-10.77.0}
BRIDGE=ertbr0
NODES=(node1 node2)
CTL=ertctl
PREFIX=ert-              # namespaces ert-node1, ert-node2; root-side veths ert-node1, ert-node2
ME=jobs/local-cluster.sh

die() { echo "$ME: error: $*" >&2; exit 1; }
say() { echo "$ME: $*"; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, slurmd, munge); run it with sudo"
}

need_tools() {
    local tool
    command -v ip >/dev/null || die "needs iproute2's 'ip' (apt-get install iproute2)"
    for tool in unshare nsenter taskset; do
        command -v "$tool" >/dev/null || die "needs util-linux's '$tool'"
    done
}

install_missing() {
    local missing=()
    command -v munged >/dev/null || missing+=(munge)
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v ip >/dev/null || missing+=(iproute2)
    [ ${#missing[@]} = 0 ] && return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]} and there is no apt-get to install them"
    say "installing ${missing[*]} (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$DIR/apt.log" 2>&1 \
        || { apt-get update -q >>"$DIR/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive \
             apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$DIR/apt.log" 2>&1; } \
        || die "apt-get install ${missing[*]} failed (log: $DIR/apt.log)"
}

ns_pids() {  # pids of processes inside network namespace $1
    ip netns pids "$1" 2>/dev/null || true
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        say "munge already answers"
        return 0
    fi
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key >/dev/null
        else dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=128 status=none; fi
        touch "$DIR/made-munge-key"
    fi
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- munged
    else
        munged --force
    fi
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && { touch "$DIR/started-munge"; return 0; }
        sleep 0.1
    done
    die "munged did not answer (see /var/log/munge/munged.log)"
}

write_conf() {
    local ncpu cpus mem
    ncpu=$(nproc --all)
    cpus=${ERT_CLUSTER_CPUS:-$(( ncpu / 2 > 2 ? ncpu / 2 : 2 ))}
    mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / 4 ))
    cat >"$DIR/slurm.conf" <<EOF
# Written by $ME: a two-host test cluster on one machine (removed by '$ME down').
ClusterName=ertbox
SlurmctldHost=$CTL($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmi2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=3
MessageTimeout=2
KillWait=2
InactiveLimit=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName=node1 NodeAddr=$NET.11 CPUs=$cpus RealMemory=$mem Gres=gpu:4 State=UNKNOWN
NodeName=node2 NodeAddr=$NET.12 CPUs=$cpus RealMemory=$mem Gres=gpu:4 State=UNKNOWN
PartitionName=ert Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF
    # The two hosts share this machine's kernel, so UCX (MPICH's netmod in the pip wheel) and libfabric
    # would see one machine and move "inter-node" messages through shared memory, never touching the veth
    # link (ert warns when that happens: the interface's byte counters stay still).  Every task is told to
    # use TCP between hosts, as it would have to between real ones; within a host MPI keeps its own shared
    # memory.  A variable the user set is left alone.
    cat >"$DIR/task-prolog" <<'EOF'
#!/bin/sh
[ -n "${UCX_TLS:-}" ] || echo "export UCX_TLS=tcp,self"
[ -n "${FI_PROVIDER:-}" ] || echo "export FI_PROVIDER=tcp"
EOF
    chmod 755 "$DIR/task-prolog"
    echo "TaskProlog=$DIR/task-prolog" >>"$DIR/slurm.conf"
    # Four stand-in "GPUs" per host, so that Slurm accepts GPU jobs (jobs/slurm-gpu.sh) and sets
    # SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES as it would: Slurm 22.05 wants device files for them,
    # and these four are harmless (no cgroup confines devices here).  No GPU is used.
    local node
    : >"$DIR/gres.conf"
    for node in "${NODES[@]}"; do
        echo "NodeName=$node Name=gpu File=/dev/null,/dev/zero,/dev/full,/dev/urandom" >>"$DIR/gres.conf"
    done
    echo "$cpus" >"$DIR/cpus"
}

make_hosts() {
    # Each made thing is marked in $DIR as it is made, so that a failed 'up' undoes exactly its own work
    # (never the bridge or namespaces of a rig that was up before it).
    ip link add "$BRIDGE" type bridge
    touch "$DIR/made-bridge"
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    local i=0 node
    for node in "${NODES[@]}"; do
        i=$(( i + 1 ))
        ip netns add "$PREFIX$node"
        touch "$DIR/made-ns-$node"
        ip link add "$PREFIX$node" type veth peer name "$PREFIX$node-in"
        ip link set "$PREFIX$node" master "$BRIDGE" up
        ip link set "$PREFIX$node-in" netns "$PREFIX$node"
        ip -n "$PREFIX$node" link set "$PREFIX$node-in" name eth0
        ip -n "$PREFIX$node" addr add "$NET.1$i/24" dev eth0
        ip -n "$PREFIX$node" link set lo up
        ip -n "$PREFIX$node" link set eth0 up
        ip -n "$PREFIX$node" route add default via "$NET.1"
    done
}

node_cpus() {  # this machine's cpus given to host number $1 (1-based) of ${#NODES[@]}: its share, round-robin
    local n=${#NODES[@]} k=$(( $1 - 1 )) ncpu list=()
    ncpu=$(nproc --all)
    if [ "$ncpu" -lt "$n" ]; then echo "0-$(( ncpu - 1 ))"; return; fi
    local per=$(( ncpu / n )) c
    for c in $(seq $(( k * per )) $(( k * per + per - 1 ))); do list+=("$c"); done
    (IFS=,; echo "${list[*]}")
}

start_slurm() {
    export SLURM_CONF="$DIR/slurm.conf"
    mkdir -p "$DIR/ctld"
    # slurmctld checks that its host name is SlurmctldHost's: give it its own UTS namespace.
    unshare --uts --fork sh -c "hostname $CTL; exec slurmctld -D -f '$SLURM_CONF' -i" \
        >>"$DIR/slurmctld.out" 2>&1 &
    local i=0 node
    for node in "${NODES[@]}"; do
        i=$(( i + 1 ))
        mkdir -p "$DIR/spool-$node"
        # Its own network, host name and mounts: a fresh /sys shows the host's own interfaces (as
        # `ip netns exec` does), with this machine's cgroup tree bound back under it for slurmd.
        mkdir -p "$DIR/cgroup-$node"
        nsenter --net="/run/netns/$PREFIX$node" unshare --uts --mount --propagation private --fork sh -c \
            "set -e; mount --rbind /sys/fs/cgroup '$DIR/cgroup-$node'; mount -t sysfs sysfs /sys;
             mount --rbind '$DIR/cgroup-$node' /sys/fs/cgroup; umount -l '$DIR/cgroup-$node';
             mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm;
             hostname $node; exec taskset -c $(node_cpus $i) slurmd -D -f '$SLURM_CONF' -N $node" \
            >>"$DIR/slurmd-$node.out" 2>&1 &
    done
    for _ in $(seq 150); do
        if sinfo -h -o '%T' 2>/dev/null | grep -qx idle && [ "$(sinfo -h -N -o '%T' | grep -c idle)" = ${#NODES[@]} ]; then
            return 0
        fi
        sleep 0.2
    done
    sinfo -N 2>&1 | sed "s|^|$ME: sinfo: |" >&2 || true
    tail -n 5 "$DIR"/slurmctld.log "$DIR"/slurmd-*.log 2>/dev/null | sed "s|^|$ME: log: |" >&2 || true
    local bad
    bad=$(grep -h -i -E "fatal:|initialization failed|unable to initialize cgroup|hybrid mode" "$DIR"/slurmd-*.log 2>/dev/null \
          | head -n 1 | sed 's/^\[[^]]*\] //')
    if [ -n "$bad" ] && echo "$bad" | grep -qi -E "cgroup|hybrid"; then
        die "slurmd could not start its cgroup plugin on this machine ($bad): Slurm 22.05 needs a cgroup tree it can use (logs in $DIR)"
    elif [ -n "$bad" ]; then
        die "slurmd could not start: $bad (logs in $DIR)"
    fi
    die "the two hosts did not come up idle within 30 s (logs in $DIR)"
}

HOSTS_MARK="# ert local-cluster"

add_names() {  # the hosts resolve each other by name, as a cluster's do (MPI launchers need it)
    local i=0 node lines=""
    for node in "${NODES[@]}"; do
        i=$(( i + 1 ))
        lines+="$NET.1$i $node $HOSTS_MARK"$'\n'
    done
    lines+="$NET.1 $CTL $HOSTS_MARK"$'\n'
    if printf '%s' "$lines" 2>/dev/null >>/etc/hosts; then
        touch "$DIR/added-names"
    else
        say "note: /etc/hosts is not writable here: the hosts do not resolve each other by name (Slurm uses their addresses; for mpiexec give -hosts $NET.11,$NET.12)"
    fi
}

link_conf() {  # /etc/slurm/slurm.conf -> ours when the machine has none, so plain sbatch finds it
    if [ ! -e /etc/slurm/slurm.conf ]; then
        mkdir -p /etc/slurm
        ln -s "$DIR/slurm.conf" /etc/slurm/slurm.conf
        touch "$DIR/linked-etc"
    fi
}

undo_failed_up() {  # what this 'up' made before it failed, and only that; its logs stay in $DIR
    local node
    for node in "${NODES[@]}"; do
        if [ -e "$DIR/made-ns-$node" ]; then
            for pid in $(ns_pids "$PREFIX$node"); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns delete "$PREFIX$node" 2>/dev/null || true
            ip link delete "$PREFIX$node" 2>/dev/null || true
        fi
    done
    pkill -KILL -f "slurmctld -D -f $DIR/slurm.conf" 2>/dev/null || true
    if [ -e "$DIR/made-bridge" ]; then ip link delete "$BRIDGE" 2>/dev/null || true; fi
    if [ -e "$DIR/added-names" ]; then remove_names; fi
    if [ -e "$DIR/started-munge" ]; then pkill -x munged 2>/dev/null || true; fi
    if [ -e "$DIR/made-munge-key" ]; then rm -f /etc/munge/munge.key; fi
    if [ -e "$DIR/linked-etc" ] && [ -L /etc/slurm/slurm.conf ]; then rm -f /etc/slurm/slurm.conf; fi
    rm -f "$DIR"/made-* "$DIR/added-names" "$DIR/started-munge" "$DIR/linked-etc"
    echo "$ME: up failed: undid what it made (logs kept in $DIR)" >&2
}

on_up_exit() {
    local rc=$?
    [ "$rc" = 0 ] || undo_failed_up
    return "$rc"
}

remove_names() {
    if grep -q "$HOSTS_MARK" /etc/hosts 2>/dev/null; then
        # In place (not sed -i's rename): /etc/hosts may be a bind mount.
        grep -v "$HOSTS_MARK" /etc/hosts >"/tmp/ert-cluster-hosts.$$" || true
        cat "/tmp/ert-cluster-hosts.$$" >/etc/hosts
        rm -f "/tmp/ert-cluster-hosts.$$"
    fi
}

cmd_up() {
    need_root
    if [ -e "$DIR/up" ]; then
        say "already up ($DIR); '$ME down' first to rebuild it"
        cmd_status
        return 0
    fi
    if ip link show "$BRIDGE" >/dev/null 2>&1 || ip netns list 2>/dev/null | grep -qw "$PREFIX${NODES[0]}"; then
        die "another local cluster is up (bridge $BRIDGE or namespace $PREFIX${NODES[0]} exists, not made from $DIR): take it down with its own ERT_CLUSTER_DIR first"
    fi
    mkdir -p "$DIR"
    trap on_up_exit EXIT
    install_missing
    need_tools
    start_munge
    write_conf
    make_hosts
    add_names
    link_conf
    start_slurm
    touch "$DIR/up"
    trap - EXIT
    say "up: hosts ${NODES[*]} ($NET.11, $NET.12), $(cat "$DIR/cpus") CPUs each; controller $CTL at $NET.1"
    say "for sbatch/srun/sinfo:  export SLURM_CONF=$DIR/slurm.conf"
}

cmd_down() {
    need_root
    local node pid
    # Only a running controller has jobs to cancel (after a failed up, scancel waited 20 s for none).
    if [ -f "$DIR/slurm.conf" ] && [ -f "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
        SLURM_CONF="$DIR/slurm.conf" scancel --quiet --full "--partition=ert" 2>/dev/null || true
    fi
    for node in "${NODES[@]}"; do
        if ip netns list 2>/dev/null | grep -qw "$PREFIX$node"; then
            for pid in $(ns_pids "$PREFIX$node"); do kill -TERM "$pid" 2>/dev/null || true; done
        fi
    done
    [ -f "$DIR/slurmctld.pid" ] && kill -TERM "$(cat "$DIR/slurmctld.pid")" 2>/dev/null || true
    sleep 0.5
    for node in "${NODES[@]}"; do
        if ip netns list 2>/dev/null | grep -qw "$PREFIX$node"; then
            for pid in $(ns_pids "$PREFIX$node"); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns delete "$PREFIX$node" 2>/dev/null || true
        fi
        ip link delete "$PREFIX$node" 2>/dev/null || true
    done
    pkill -KILL -f "slurmctld -D -f $DIR/slurm.conf" 2>/dev/null || true   # if TERM to its pid file's pid did not end it
    ip link delete "$BRIDGE" 2>/dev/null || true
    remove_names
    remove_hydra_leftovers
    if [ -e "$DIR/started-munge" ]; then
        pkill -x munged 2>/dev/null || true
    fi
    if [ -e "$DIR/made-munge-key" ]; then
        rm -f /etc/munge/munge.key
    fi
    if [ -e "$DIR/linked-etc" ]; then
        [ -L /etc/slurm/slurm.conf ] && rm -f /etc/slurm/slurm.conf
    fi
    rm -rf "$DIR"
    say "down: no hosts, no Slurm daemons, no $DIR"
}

remove_hydra_leftovers() {
    # MPICH's hydra (mpiexec and its proxies, run on the hosts) writes /tmp/hydra_hwloc_xmlfile_* and
    # removes it when it ends, but not when it is killed; /tmp is shared by the hosts (run directories live
    # there).  Removed: those made while this rig was up that no process holds open, a few seconds old (a
    # job elsewhere on this machine reads its own within milliseconds of making it).  The hosts' /dev/shm
    # needs nothing: it goes with their namespaces.
    [ -e "$DIR/up" ] || return 0
    local f
    for f in $(find /tmp -maxdepth 1 -name 'hydra_*' -newer "$DIR/up" ! -newermt '5 seconds ago' 2>/dev/null); do
        if ! ls -l /proc/[0-9]*/fd 2>/dev/null | grep -qF -- "$f"; then rm -f -- "$f"; fi
    done
}

cmd_status() {
    local node
    if [ ! -e "$DIR/up" ]; then
        say "down (no $DIR/up)"
        return 3
    fi
    say "state in $DIR; export SLURM_CONF=$DIR/slurm.conf"
    for node in "${NODES[@]}"; do
        if ip netns list 2>/dev/null | grep -qw "$PREFIX$node"; then
            say "$node: namespace $PREFIX$node, $(ip -n "$PREFIX$node" -4 -o addr show eth0 | awk '{print $4}'), processes: $(ns_pids "$PREFIX$node" | wc -l)"
        else
            say "$node: namespace missing"
        fi
    done
    SLURM_CONF="$DIR/slurm.conf" sinfo -N -o '%N %T %c %G' 2>&1 | sed "s|^|$ME: sinfo: |"
}

cmd_exec() {  # run a command on one host: inside its network, host name and mounts (those of its slurmd)
    local node=${1:-} pid n
    [ -n "$node" ] && [ $# -ge 2 ] || die "usage: $ME exec HOST COMMAND [ARG...]"
    shift
    for n in "${!NODES[@]}"; do   # a host's address names it too (where /etc/hosts could not)
        [ "$node" = "$NET.1$(( n + 1 ))" ] && node=${NODES[$n]}
    done
    need_root
    [ -e "$DIR/up" ] || die "the cluster is down: '$ME up' first"
    pid=$(cat "$DIR/slurmd-$node.pid" 2>/dev/null) || die "no host '$node' (hosts: ${NODES[*]})"
    kill -0 "$pid" 2>/dev/null || die "host $node's slurmd (pid $pid) is not running"
    # As between real hosts: MPI between hosts over TCP (see write_conf), unless the caller chose.
    export UCX_TLS=${UCX_TLS:-tcp,self} FI_PROVIDER=${FI_PROVIDER:-tcp}
    local i k=0
    for i in "${!NODES[@]}"; do [ "${NODES[$i]}" = "$node" ] && k=$(( i + 1 )); done
    # ... and on its share of the cores, as its slurmd.
    exec nsenter -t "$pid" --net --uts --mount --wd="$PWD" -- taskset -c "$(node_cpus "$k")" "$@"
}

cmd_ssh() {  # ssh's calling convention, for launchers (hydra: mpiexec -launcher ssh -launcher-exec ...)
    while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done   # ssh options such as -x
    local node=${1:?usage: $ME ssh HOST COMMAND}
    shift
    cmd_exec "$node" sh -c "$*"
}

# A slow host for the tests: a competing process pinned to the host's cores, as a noisy neighbour or a
# runaway daemon would be, at real-time priority (SCHED_FIFO 1), busy BUSY_US then asleep IDLE_US, over and
# over (default 500/500: half of every millisecond).  A plain busy loop at normal priority slowed no
# ceiling: the scheduler hands out whole slices of milliseconds, so each region of ~1 ms ran untouched
# and only the run's wall time grew.  This one wakes up inside the regions, as OS noise does.  The process
# is ert's own disturbance (`ert-disturb`, ert/measure/disturb.py: standard library only, so the host's
# python3 runs the file), without an end.
DISTURB="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/ert/measure/disturb.py"

cmd_throttle() {
    local node=${1:-} busy=${2:-500} idle=${3:-500} pid
    [ -n "$node" ] || die "usage: $ME throttle HOST [BUSY_US IDLE_US]"
    case "$busy$idle" in *[!0-9]*) die "throttle: BUSY_US and IDLE_US are whole microseconds, got '$busy' '$idle'" ;; esac
    need_root
    [ -e "$DIR/up" ] || die "the cluster is down: '$ME up' first"
    [ ! -e "$DIR/throttle-$node.pid" ] || die "$node is throttled already ('$ME unthrottle $node' first)"
    command -v python3 >/dev/null || die "throttle needs python3"
    # Inside the host (its namespaces, on its cores: cmd_exec); `down` ends it with the host's other processes.
    bash "${BASH_SOURCE[0]}" exec "$node" chrt -f 1 python3 "$DISTURB" --busy-us "$busy" \
        --period-us $(( busy + idle )) --seconds 0 --quiet </dev/null >/dev/null 2>&1 &
    pid=$!
    sleep 0.3
    kill -0 "$pid" 2>/dev/null || die "throttle: the process on $node did not start (chrt -f needs CAP_SYS_NICE; host name right?)"
    echo "$pid" >"$DIR/throttle-$node.pid"
    say "$node throttled: pid $pid busy ${busy} us of every $(( busy + idle )) us on its cores, real-time priority"
}

cmd_unthrottle() {
    local node=${1:?usage: $ME unthrottle HOST} pid
    need_root
    pid=$(cat "$DIR/throttle-$node.pid" 2>/dev/null) || { say "$node is not throttled"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$DIR/throttle-$node.pid"
    say "$node unthrottled"
}

case "${1:-}" in
    -h|--help) sed -n '2,/^[^#]/{s/^# \{0,1\}//p;}' "${BASH_SOURCE[0]}" ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    exec) shift; cmd_exec "$@" ;;
    ssh) shift; cmd_ssh "$@" ;;
    throttle) shift; cmd_throttle "$@" ;;
    unthrottle) shift; cmd_unthrottle "$@" ;;
    *) echo "usage: $ME up|down|status | exec HOST COMMAND... | ssh [-opts] HOST COMMAND... | throttle HOST [BUSY_US IDLE_US] | unthrottle HOST" >&2; exit 2 ;;
esac
