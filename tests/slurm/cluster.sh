#!/usr/bin/env bash
# tests/slurm/cluster.sh - a throwaway, single-node SLURM cluster for tests.
#
#   cluster.sh check            exit 0 if SLURM can run here (installed, or
#                               installable from Debian's packages), else 1
#   cluster.sh install          install the packages only
#   cluster.sh up   STATE_DIR   install what is missing, start the daemons,
#                               wait until the node is idle and sacct answers,
#                               write STATE_DIR/env.sh (source it before sbatch)
#   cluster.sh down STATE_DIR   stop exactly the daemons listed in STATE_DIR/pids
#
# Why accounting: `--launcher slurm` submits through submitit, and submitit
# polls job states with `sacct -o JobID,State,NodeList --parsable2 -j <ids>`.
# SLURM 22.05 (Debian bookworm) has no database-free backend for sacct, so the
# cluster runs slurmdbd on a private MariaDB (loopback only, data under
# STATE_DIR).
#
# Everything the cluster writes (configs, munge key and socket, spool and
# state dirs, logs, pid files, database) lives under STATE_DIR; nothing is
# written to /etc. Daemons run in the foreground under setsid, with their
# output in STATE_DIR/log and their PIDs in STATE_DIR/pids ("name pid" lines).
# Each carries the environment variable TFCLAIMS_SLURM_STATE=STATE_DIR, which
# `down` checks before it signals a PID, so it never touches anything else;
# `down` cancels all jobs first, and then also stops any process left with
# that marker (a slurmstepd inherits it from slurmd).
#
# Environment knobs: SLURM_UP_TIMEOUT (seconds to wait for readiness, 60),
# SLURM_CLUSTER_NAME (tfclaims). Needs root (slurmd runs jobs as any user).
set -Eeuo pipefail

readonly PKGS=(slurm-wlm slurmdbd munge mariadb-server mariadb-client)
readonly CMDS=(munged mungekey slurmctld slurmd slurmdbd sbatch sacct sacctmgr
               scancel scontrol sinfo squeue mariadbd mariadb-install-db
               mariadb mariadb-admin)
readonly MARK=TFCLAIMS_SLURM_STATE
readonly CLUSTER=${SLURM_CLUSTER_NAME:-tfclaims}
readonly UP_TIMEOUT=${SLURM_UP_TIMEOUT:-60}

log() { echo "cluster.sh: $*" >&2; }
die() { echo "cluster.sh: error: $*" >&2; exit 1; }

usage() {
    echo "usage: $0 check | install | up STATE_DIR | down STATE_DIR" >&2
    exit 2
}

# ---------------------------------------------------------------- check/install

missing_cmds() {
    local c
    for c in "${CMDS[@]}"; do command -v "$c" >/dev/null 2>&1 || echo "$c"; done
}

# Prints the packages that apt has no candidate for (empty: all installable).
uninstallable_pkgs() {
    local p cand
    for p in "${PKGS[@]}"; do
        cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
        [[ -n "$cand" && "$cand" != "(none)" ]] || echo "$p"
    done
}

cmd_check() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (slurmd and the installer need it)"
    [[ -z "$(missing_cmds)" ]] && { echo "slurm: installed ($(slurmctld -V))"; return 0; }
    command -v apt-get >/dev/null || die "slurm not installed and no apt-get here"
    local bad
    bad=$(uninstallable_pkgs | tr '\n' ' ')
    [[ -z "$bad" ]] || die "no apt candidate for: $bad(run apt-get update?)"
    echo "slurm: not installed, installable with apt-get"
}

# Runs apt-get with service start-up disabled, so that the packages' init
# scripts don't start a second munged/mariadbd on the system paths.
apt_quiet() {
    local guard=/usr/sbin/policy-rc.d made=0 rc=0
    if [[ ! -e $guard ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$guard" && chmod 755 "$guard" && made=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get "$@" || rc=$?
    [[ $made -eq 0 ]] || rm -f "$guard"
    return $rc
}

install_packages() {
    [[ -z "$(missing_cmds)" ]] && return 0
    log "installing ${PKGS[*]} (log: $LOGDIR/apt.log)"
    {
        apt_quiet update -q &&
        apt_quiet install -y -q --no-install-recommends "${PKGS[@]}"
    } >"$LOGDIR/apt.log" 2>&1 || die "apt-get install failed, see $LOGDIR/apt.log"
    local still
    still=$(missing_cmds | tr '\n' ' ')
    [[ -z "$still" ]] || die "commands still missing after install: $still"
}

# ---------------------------------------------------------------- processes

# True if PID is alive and was started by this script for this STATE_DIR.
is_ours() {
    local pid=$1
    [[ -r /proc/$pid/environ ]] || return 1
    { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qxF "$MARK=$STATE"
}

# start_daemon NAME CMD...: run CMD in the foreground of a new session,
# stdout/stderr to log/NAME.out (the daemon's own log is log/NAME.log), and
# record "NAME PID" in the pids file.
start_daemon() {
    local name=$1; shift
    env "$MARK=$STATE" SLURM_CONF="$CONF" setsid "$@" \
        </dev/null >>"$LOGDIR/$name.out" 2>&1 &
    echo "$name $!" >>"$PIDS"
}

# pids_named NAME...: PIDs listed for those names (names may be
# space- or newline-separated).
pids_named() {
    local names=" ${*//$'\n'/ } "
    awk -v names="$names" 'index(names, " " $1 " ") {print $2}' "$PIDS"
}

# stop_named NAME...: stop the listed daemons of those names.
stop_named() {
    local pids
    mapfile -t pids < <(pids_named "$@")
    stop_pids "${pids[@]}"
}

pid_of() { awk -v n="$1" '$1 == n {print $2}' "$PIDS" 2>/dev/null | tail -n1; }

# Waits (within the global deadline) until CMD succeeds; fails early if the
# daemon NAME has exited.
wait_for() {
    local name=$1 what=$2; shift 2
    local pid
    pid=$(pid_of "$name")
    until "$@" >/dev/null 2>&1; do
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            die "$name exited while waiting for $what; last log line: $(last_log "$name")"
        fi
        ((SECONDS < DEADLINE)) || die "timed out after ${UP_TIMEOUT}s waiting for $what (see $LOGDIR/$name.log)"
        sleep 0.5
    done
}

last_log() { tail -qn1 "$LOGDIR/$1".{log,out} 2>/dev/null | tr '\n' ' ' || true; }

# True while PID runs (a zombie counts as gone).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# stop_pids PID...: SIGTERM those of ours, wait up to 15 s, SIGKILL the rest.
stop_pids() {
    local pid left=() i
    for pid in "$@"; do
        is_ours "$pid" && kill -TERM "$pid" 2>/dev/null && left+=("$pid")
    done
    for ((i = 0; i < 150 && ${#left[@]} > 0; i++)); do
        sleep 0.1
        for pid in "${!left[@]}"; do alive "${left[$pid]}" || unset "left[$pid]"; done
    done
    for pid in "${left[@]}"; do
        log "pid $pid ignored SIGTERM for 15s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# ---------------------------------------------------------------- ports

port_in_use() {
    if command -v ss >/dev/null; then
        ss -Htln "sport = :$1" 2>/dev/null | grep -q .
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# pick_port DEFAULT: DEFAULT if free, else the next free port above it that
# no earlier pick_port call returned. Result in $REPLY.
pick_port() {
    local p=$1
    while port_in_use "$p" || [[ " ${TAKEN_PORTS:-} " == *" $p "* ]]; do
        p=$((p + 1))
    done
    TAKEN_PORTS="${TAKEN_PORTS:-} $p"
    REPLY=$p
}

# ---------------------------------------------------------------- configs

set_paths() {
    STATE=$(mkdir -p "$1" && cd "$1" && pwd -P)
    CONF=$STATE/etc/slurm.conf
    DBDCONF=$STATE/etc/slurmdbd.conf
    PIDS=$STATE/pids
    LOGDIR=$STATE/log
    RUNDIR=$STATE/run
    MUNGE_SOCKET=$RUNDIR/munge.socket
    DB_SOCKET=$RUNDIR/mariadb.sock
    NODE=$(hostname -s 2>/dev/null || true)
    NODE=${NODE:-localhost}
}

make_dirs() {
    mkdir -p "$STATE"/{etc,log,run,munge,mysql,tmp,slurmctld,slurmd}
    chmod 700 "$STATE"/{etc,munge}
}

# Node line from the hardware as slurmd sees it, memory a little below real.
node_line() {
    local hw mem
    hw=$(slurmd -C | head -n1)
    mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    hw=$(sed -e 's/NodeName=[^ ]*//' -e 's/RealMemory=[^ ]*//' <<<"$hw")
    echo "NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE $hw RealMemory=$((mem * 95 / 100)) State=UNKNOWN" |
        tr -s ' '
}

write_slurm_conf() {
    cat >"$CONF" <<EOF
# generated by tests/slurm/cluster.sh - single node, for tests only
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$RUNDIR/slurmctld.pid
SlurmdPidFile=$RUNDIR/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$STATE/etc/plugstack.conf
MailProg=/bin/true
# no cgroups in a container: memory is enforced by polling each job's processes every second
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
# pre-emption by partition: a job in 'urgent' takes the node from jobs in 'preempt-cancel' (cancelled:
# PREEMPTED) and 'preempt-requeue' (requeued by SLURM); 'debug' is never pre-empted
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
# GresTypes left empty: --gres=gpu:N is rejected at submission
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=20
Waittime=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=30
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# for slurmdbd connections the munge socket is taken from here, not AuthInfo
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
$(node_line)
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=preempt-cancel Nodes=$NODE MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=preempt-requeue Nodes=$NODE MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=urgent Nodes=$NODE MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
# queued jobs wait here with the reason PartitionDown
PartitionName=closed Nodes=$NODE MaxTime=INFINITE State=DOWN
EOF
    : >"$STATE/etc/plugstack.conf"
}

write_slurmdbd_conf() {
    (
        umask 077
        cat >"$DBDCONF" <<EOF
# generated by tests/slurm/cluster.sh
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUNDIR/slurmdbd.pid
LogFile=$LOGDIR/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    )
}

# ---------------------------------------------------------------- daemons

start_munge() {
    local key=$STATE/munge/munge.key
    [[ -s $key ]] || mungekey --create --keyfile="$key" >>"$LOGDIR/munged.log" 2>&1
    chmod 600 "$key"
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    start_daemon munged munged --foreground --force --key-file="$key" \
        --socket="$MUNGE_SOCKET" --pid-file="$RUNDIR/munged.pid" \
        --log-file="$LOGDIR/munged.log" --seed-file="$STATE/munge/munged.seed"
    wait_for munged "munged" munge_ok
}

munge_ok() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }

db_sql() { mariadb --no-defaults --socket="$DB_SOCKET" -u root -e "$1"; }

start_mariadb() {
    if [[ ! -d $STATE/mysql/mysql ]]; then
        mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql" \
            --skip-test-db --auth-root-authentication-method=socket \
            >>"$LOGDIR/mariadb.log" 2>&1 || die "mariadb-install-db failed, see $LOGDIR/mariadb.log"
    fi
    start_daemon mariadb mariadbd --no-defaults --user=root \
        --datadir="$STATE/mysql" --socket="$DB_SOCKET" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --skip-name-resolve --skip-log-bin \
        --pid-file="$RUNDIR/mariadb.pid" --log-error="$LOGDIR/mariadb.log" \
        --tmpdir="$STATE/tmp" --innodb-use-native-aio=0 \
        --innodb-buffer-pool-size=64M --max-connections=50
    wait_for mariadb "MariaDB" mariadb-admin --no-defaults --socket="$DB_SOCKET" -u root ping
    db_sql "CREATE OR REPLACE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
    start_daemon slurmdbd slurmdbd -D
    wait_for slurmdbd "slurmdbd" sacctmgr -n list cluster
    if ! sacctmgr -n -P list cluster format=cluster | grep -qxF "$CLUSTER"; then
        sacctmgr -i add cluster "$CLUSTER" >>"$LOGDIR/slurmdbd.log" 2>&1 ||
            die "sacctmgr add cluster $CLUSTER failed"
    fi
}

node_idle() { [[ $(sinfo -h -n "$NODE" -o %T 2>/dev/null) == idle ]]; }
ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurm() {
    start_daemon slurmctld slurmctld -D -f "$CONF"
    wait_for slurmctld "slurmctld" ctld_up
    start_daemon slurmd slurmd -D -f "$CONF" -N "$NODE"
    wait_for slurmd "node $NODE idle" node_idle
    wait_for slurmctld "sacct" sacct -n -X -S now
}

write_env() {
    cat >"$STATE/env.sh" <<EOF
# source this to use the test cluster (tests/slurm/cluster.sh)
export SLURM_CONF=$CONF
EOF
}

# ---------------------------------------------------------------- up / down

# 0: every listed daemon runs; 1: none; 2: some (a broken cluster).
running_state() {
    [[ -s $PIDS ]] || return 1
    local name pid alive=0 total=0
    while read -r name pid; do
        total=$((total + 1))
        is_ours "$pid" && alive=$((alive + 1))
    done <"$PIDS"
    ((alive == total)) && return 0
    ((alive == 0)) && return 1
    return 2
}

on_up_exit() {
    local rc=$?
    ((rc == 0)) && return 0
    stop_all 2>/dev/null || true
    exit "$rc"
}

cmd_up() {
    [[ $(id -u) -eq 0 ]] || die "must run as root"
    set_paths "$1"
    ((${#MUNGE_SOCKET} < 100)) || die "STATE_DIR path too long for a unix socket: $STATE"
    make_dirs
    local st=0
    running_state || st=$?
    if ((st == 0)); then
        export SLURM_CONF=$CONF
        DEADLINE=$((SECONDS + UP_TIMEOUT))
        wait_for slurmctld "node $NODE idle" node_idle
        write_env
        log "already running in $STATE"
        return 0
    fi
    if ((st == 2)); then
        log "some daemons in $STATE are dead, restarting"
        stop_all
    fi
    rm -f "$PIDS"
    install_packages
    trap on_up_exit EXIT
    local t0=$SECONDS
    DEADLINE=$((SECONDS + UP_TIMEOUT))
    pick_port 6817; CTLD_PORT=$REPLY
    pick_port 6818; SLURMD_PORT=$REPLY
    pick_port 6819; DBD_PORT=$REPLY
    pick_port 3306; DB_PORT=$REPLY
    DB_PASS=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    export SLURM_CONF=$CONF
    write_slurm_conf
    write_slurmdbd_conf
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurm
    write_env
    trap - EXIT
    log "up in $((SECONDS - t0))s: $STATE ($(slurmctld -V), ports ctld=$CTLD_PORT slurmd=$SLURMD_PORT dbd=$DBD_PORT db=$DB_PORT)"
    echo "source $STATE/env.sh"
}

# Cancels every job (so that no slurmstepd outlives slurmd), waits up to 15 s.
cancel_jobs() {
    local i jobs
    ctld_up || return 0
    mapfile -t jobs < <(squeue -h -o %A 2>/dev/null)
    ((${#jobs[@]} == 0)) || scancel --full "${jobs[@]}" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do
        [[ -z $(squeue -h -o %A 2>/dev/null) ]] && return 0
        sleep 0.5
    done
    log "jobs still listed after scancel; stopping daemons anyway"
}

# Stops processes that carry our marker but aren't listed (e.g. the
# slurmstepd of a job that outlived slurmd).
sweep_strays() {
    local env pid strays=()
    for env in /proc/[0-9]*/environ; do
        pid=${env#/proc/}; pid=${pid%/environ}
        [[ $pid != "$$" ]] && is_ours "$pid" && alive "$pid" && strays+=("$pid")
    done
    ((${#strays[@]} == 0)) && return 0
    log "stopping stray processes: ${strays[*]}"
    stop_pids "${strays[@]}"
}

stop_all() {
    [[ -s $PIDS ]] || return 0
    export SLURM_CONF=$CONF
    cancel_jobs
    # slurm daemons first (slurmctld reports to slurmdbd as it stops), then
    # slurmdbd, then its database and munged; each group in parallel.
    stop_named slurmd slurmctld
    stop_named slurmdbd
    stop_named "$(awk '{print $1}' "$PIDS")"
    sweep_strays
    mv -f "$PIDS" "$PIDS.stopped" 2>/dev/null || true
}

# The packages alone (CI installs them before the tests, which bring clusters up and down themselves).
cmd_install() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (the installer needs it)"
    LOGDIR=$(mktemp -d)
    install_packages
    rm -rf "$LOGDIR"
    echo "slurm: installed ($(slurmctld -V))"
}

cmd_down() {
    [[ -d $1 ]] || { log "no such state dir: $1"; return 0; }
    set_paths "$1"
    [[ -s $PIDS ]] || { log "nothing running in $STATE"; return 0; }
    stop_all
    log "stopped cluster in $STATE"
}

main() {
    case "${1:-}" in
        check) [[ $# -eq 1 ]] || usage; cmd_check ;;
        install) [[ $# -eq 1 ]] || usage; cmd_install ;;
        up) [[ $# -eq 2 ]] || usage; cmd_up "$2" ;;
        down) [[ $# -eq 2 ]] || usage; cmd_down "$2" ;;
        *) usage ;;
    esac
}

trap 'log "failed at line $LINENO: $BASH_COMMAND"' ERR
main "$@"
