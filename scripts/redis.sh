#!/usr/bin/env bash
# Starts or stops a throwaway Redis for the tests and benchmarks of the `redis` feature.
#
#   scripts/redis.sh install          installs Debian's redis-server if it is missing (root)
#   scripts/redis.sh start PORT DIR   listens on 127.0.0.1:PORT only, no persistence,
#                                     daemonized, pidfile and log in DIR; waits until it answers
#   scripts/redis.sh stop PORT DIR    kills the server whose pid is in DIR (and waits for it)
set -euo pipefail

usage() {
    echo "usage: $0 install | start PORT DIR | stop PORT DIR" >&2
    exit 2
}

cmd="${1:-}"
case "$cmd" in
install)
    if command -v redis-server >/dev/null 2>&1; then
        exit 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "redis-server is missing; install it (e.g. apt-get install redis-server)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends redis-server >/dev/null
    command -v redis-server >/dev/null
    ;;
start)
    [ $# -eq 3 ] || usage
    port="$2" dir="$3"
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
        --daemonize yes --pidfile "$dir/redis-$port.pid" --logfile "$dir/redis-$port.log" \
        --dir "$dir"
    # Wait until it answers (up to 5 s).
    for _ in $(seq 1 100); do
        if [ -s "$dir/redis-$port.pid" ] &&
            (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'PING\r\n' >&3 && head -c 5 <&3 | grep -q PONG) 2>/dev/null; then
            exit 0
        fi
        sleep 0.05
    done
    echo "redis-server did not come up on 127.0.0.1:$port (see $dir/redis-$port.log)" >&2
    exit 1
    ;;
stop)
    [ $# -eq 3 ] || usage
    port="$2" dir="$3"
    pidfile="$dir/redis-$port.pid"
    [ -s "$pidfile" ] || exit 0
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
    ;;
*)
    usage
    ;;
esac
