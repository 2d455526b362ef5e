#!/usr/bin/env bash
# Installs, starts and stops a throwaway Milvus (standalone, the `milvus` Python package's
# server) for the tests and benchmarks of the `milvus` feature.
#
#   scripts/milvus.sh install        a virtualenv with milvus==2.3.5 (once; ~80 MB)
#   scripts/milvus.sh start DIR      data, log and pidfile in DIR; waits until the REST API
#                                    answers (up to 180 s) and prints its URL
#   scripts/milvus.sh stop DIR       SIGINT to the server, waits for its processes (60 s), then
#                                    SIGKILL
#   scripts/milvus.sh url            the REST URL (http://127.0.0.1:19530)
#
# The virtualenv is $RERANK_MILVUS_VENV (default: $HOME/.cache/rerank/milvus-venv). Milvus
# standalone uses fixed ports (REST and gRPC 19530, metrics 9091, its etcd 2379), so one server
# runs at a time; `start` refuses when something already answers there.
set -euo pipefail

venv="${RERANK_MILVUS_VENV:-$HOME/.cache/rerank/milvus-venv}"
rest="http://127.0.0.1:19530"

usage() {
    echo "usage: $0 install | start DIR | stop DIR | url" >&2
    exit 2
}

answers() {
    # The REST proxy is up when the collection list comes back with code 200.
    curl -fsS -m 2 "$rest/v1/vector/collections" 2>/dev/null | grep -q '"code":200'
}

cmd="${1:-}"
case "$cmd" in
install)
    if [ -x "$venv/bin/milvus-server" ]; then
        exit 0
    fi
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check milvus==2.3.5
    [ -x "$venv/bin/milvus-server" ]
    ;;
start)
    [ $# -eq 2 ] || usage
    dir="$2"
    mkdir -p "$dir"
    if answers; then
        echo "a Milvus already answers on $rest; stop it first" >&2
        exit 1
    fi
    [ -x "$venv/bin/milvus-server" ] || { echo "run $0 install first" >&2; exit 1; }
    # The server binds its ports without SO_REUSEADDR and moves to the next free port when one
    # is taken: right after a stop, 19530 is held for up to a minute by connections in
    # TIME_WAIT. Wait for it, then ask for it explicitly (a failure to bind is then an error,
    # not a server on another port).
    free=""
    for _ in $(seq 1 240); do
        if python3 -c 'import socket; socket.socket().bind(("127.0.0.1", 19530))' 2>/dev/null; then
            free=1
            break
        fi
        sleep 0.5
    done
    [ -n "$free" ] || { echo "port 19530 stayed busy for 120 s" >&2; exit 1; }
    # Its own session, so `stop` can signal the wrapper and the server it spawns together.
    setsid "$venv/bin/milvus-server" --data "$dir/data" --proxy-port 19530 \
        >"$dir/milvus.log" 2>&1 </dev/null &
    echo $! >"$dir/milvus.pid"
    for _ in $(seq 1 360); do
        if ! kill -0 "$(cat "$dir/milvus.pid")" 2>/dev/null; then
            echo "milvus-server exited (see $dir/milvus.log)" >&2
            tail -5 "$dir/milvus.log" >&2 || true
            exit 1
        fi
        # Not the health port: after a restart on old data it stays closed for minutes while
        # the REST API already serves.
        if answers; then
            echo "$rest"
            exit 0
        fi
        sleep 0.5
    done
    echo "Milvus did not come up in 180 s (see $dir/milvus.log)" >&2
    exit 1
    ;;
stop)
    [ $# -eq 2 ] || usage
    dir="$2"
    pidfile="$dir/milvus.pid"
    [ -s "$pidfile" ] || exit 0
    pid="$(cat "$pidfile")"
    # `start` made the wrapper a session leader: its session holds the wrapper, the server and
    # the server's etcd. SIGINT lets the server deregister itself (a server killed without
    # that makes the next start wait for its stale sessions); SIGKILL only after 60 s.
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 1 600); do
        [ -z "$(pgrep -s "$pid" 2>/dev/null)" ] && break
        sleep 0.1
    done
    pkill -KILL -s "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        [ -z "$(pgrep -s "$pid" 2>/dev/null)" ] && break
        sleep 0.1
    done
    rm -f "$pidfile"
    ;;
url)
    echo "$rest"
    ;;
*)
    usage
    ;;
esac
