#!/usr/bin/env bash
# Unmodified Redis clients against `tagma gateway` in front of a 4-replica BFT cluster:
# redis-cli (every command family the gateway offers), redis-py (pipelining, transactions,
# WATCH, errors), a short redis-benchmark run, and redis-benchmark incrementing a counter while
# the leader replica is killed (every acknowledged INCR must be in the counter, once).
#
# Usage: scripts/gateway-clients.sh [TAGMA_BINARY]   (default: target/debug/tagma)
# Needs redis-cli and redis-benchmark (Debian: redis-tools) and the `redis` Python package.
set -euo pipefail
cd "$(dirname "$0")/.."
TAGMA=${1:-target/debug/tagma}
DIR=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
BASE=$(python3 -c 'import random; print(random.randrange(20000, 40000, 200))')
"$TAGMA" init --replicas 4 --dir "$DIR/c" --base-port "$BASE" >/dev/null
for i in 0 1 2 3; do
  "$TAGMA" replica --dir "$DIR/c" --id "$i" >"$DIR/r$i.log" 2>&1 &
  PIDS+=($!)
done
PORT=$(free_port)
"$TAGMA" gateway --dir "$DIR/c" --listen "127.0.0.1:$PORT" >"$DIR/gw.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
  redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
  sleep 0.2
done

failures=0
expect() { # expect EXPECTED redis-cli ARGS...
  local want=$1; shift
  local got
  got=$(redis-cli -p "$PORT" "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//')
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: redis-cli $* -> '$got' (expected '$want')"
    failures=$((failures + 1))
  fi
}

echo "== redis-cli"
expect PONG ping
expect hi echo hi
expect OK select 0
expect OK set cli:k v
expect v get cli:k
expect "" set cli:k w nx
expect v set cli:k w xx get
expect 3 append cli:k 42
expect 3 strlen cli:k
expect 1 setnx cli:new 1
expect w42 getset cli:k fresh
expect fresh getdel cli:k
expect OK mset cli:a 1 cli:b 2
expect "1 2" mget cli:a cli:b
expect 0 msetnx cli:a 9 cli:c 3
expect 2 exists cli:a cli:b
expect 2 del cli:a cli:b
expect 5 incrby cli:n 5
expect 4 decr cli:n
expect 2 decrby cli:n 2
expect 3 incr cli:n
expect OK set cli:s text
expect "ERR value is not an integer or out of range" incr cli:s
expect OK set cli:t x ex 100
expect 100 ttl cli:t
expect 1 persist cli:t
expect -1 pttl cli:t
expect 1 expire cli:t 50
expect 1 pexpire cli:t 50000
expect string type cli:t
expect 2 hset cli:h f 1 g 2
expect 6 hincrby cli:h f 5
expect 6 hget cli:h f
expect 2 hlen cli:h
expect "f 6 g 2" hgetall cli:h
expect 1 hdel cli:h g
expect hash type cli:h
expect "WRONGTYPE Operation against a key holding the wrong kind of value" get cli:h
expect "ERR unknown command 'lpush', with args beginning with: 'cli:l' 'a'" lpush cli:l a
expect "cli:h" keys "cli:h*"
got=$(redis-cli -p "$PORT" --scan --pattern 'cli:*' | sort | tr '\n' ' ')
[[ "$got" == "cli:h cli:n cli:new cli:s cli:t " ]] || { echo "FAIL: --scan gave '$got'"; failures=$((failures + 1)); }
got=$(printf 'CLIENT SETNAME tool\nCLIENT GETNAME\n' | redis-cli -p "$PORT" | tr '\n' ' ')
[[ "$got" == "OK tool " ]] || { echo "FAIL: CLIENT SETNAME/GETNAME gave '$got'"; failures=$((failures + 1)); }
got=$(redis-cli -p "$PORT" info replication | tr -d '\r' | grep -c '^tagma_f:1$')
[[ "$got" == 1 ]] || { echo "FAIL: INFO replication has no tagma_f"; failures=$((failures + 1)); }
got=$(printf 'MULTI\nINCR cli:tx\nINCR cli:tx\nEXEC\n' | redis-cli -p "$PORT" | tr '\n' ' ')
[[ "$got" == "OK QUEUED QUEUED 1 2 " ]] || { echo "FAIL: MULTI/EXEC gave '$got'"; failures=$((failures + 1)); }
got=$(printf 'MULTI\nINCR cli:tx\nDISCARD\nGET cli:tx\n' | redis-cli -p "$PORT" | tr '\n' ' ')
[[ "$got" == "OK QUEUED OK 2 " ]] || { echo "FAIL: MULTI/DISCARD gave '$got'"; failures=$((failures + 1)); }
got=$(printf 'WATCH cli:tx\nMULTI\nSET cli:tx 10\nEXEC\nUNWATCH\n' | redis-cli -p "$PORT" | tr '\n' ' ')
[[ "$got" == "OK OK QUEUED OK OK " ]] || { echo "FAIL: WATCH/EXEC gave '$got'"; failures=$((failures + 1)); }
expect OK set cli:px v px 100000
expect OK set cli:px w keepttl
got=$(redis-cli -p "$PORT" pttl cli:px)
[[ "$got" -gt 90000 ]] || { echo "FAIL: KEEPTTL lost the deadline ($got)"; failures=$((failures + 1)); }
got=$(redis-cli -p "$PORT" dbsize)
[[ "$got" -ge 5 ]] || { echo "FAIL: DBSIZE $got"; failures=$((failures + 1)); }
got=$(redis-cli -3 -p "$PORT" hgetall cli:h | tr '\n' ' ')
[[ "$got" == "1# \"f\" => \"6\" " || "$got" == "f 6 " ]] || { echo "FAIL: RESP3 HGETALL gave '$got'"; failures=$((failures + 1)); }
got=$(redis-cli -p "$PORT" client id)
[[ "$got" -gt 0 ]] || { echo "FAIL: CLIENT ID $got"; failures=$((failures + 1)); }
expect "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?" auth nopass
got=$(redis-cli -p "$PORT" command docs get | head -1)
[[ "$got" == "get" ]] || { echo "FAIL: COMMAND DOCS gave '$got'"; failures=$((failures + 1)); }
count=$(redis-cli -p "$PORT" command count)
[[ "$count" -gt 40 ]] || { echo "FAIL: COMMAND COUNT $count"; failures=$((failures + 1)); }
[[ $failures == 0 ]] || { echo "redis-cli: $failures failures"; exit 1; }
echo "redis-cli: every check passed"

echo "== redis-py"
python3 scripts/gateway_redis_py.py "$PORT"

echo "== redis-benchmark (short)"
out=$(redis-benchmark -p "$PORT" -t set,get,incr,hset,mset -n 5000 -P 16 -c 20 -q 2>&1 | tr '\r' '\n' | grep 'requests per second')
echo "$out"
[[ $(echo "$out" | wc -l) == 5 ]] || { echo "FAIL: redis-benchmark did not finish every test"; exit 1; }

# The leader is killed while redis-benchmark increments one counter: every INCR it saw
# acknowledged must be in the counter, once (the clients' retries are not applied twice).
echo "== redis-benchmark while the leader is killed"
leader=$("$TAGMA" status --dir "$DIR/c" --json | python3 -c 'import json,sys; print(next(r["leader"] for r in json.load(sys.stdin)["replicas"] if r["leader"] is not None))')
[[ "$leader" =~ ^[0-3]$ ]] || { echo "FAIL: no leader in tagma status ($leader)"; exit 1; }
INCRS=200000
redis-benchmark -p "$PORT" -n "$INCRS" -c 50 -P 16 INCR bench:killed >"$DIR/kill-bench.log" 2>&1 &
bench=$!
sleep 1
kill -0 "$bench" 2>/dev/null || { echo "FAIL: redis-benchmark ended before the leader was killed"; exit 1; }
kill -9 "${PIDS[$leader]}"
echo "killed replica $leader (the leader) during the run"
wait "$bench" || { echo "FAIL: redis-benchmark exited with an error"; tail -5 "$DIR/kill-bench.log"; exit 1; }
if grep -qi "error" "$DIR/kill-bench.log"; then
  echo "FAIL: redis-benchmark saw errors:"; grep -i 'error' "$DIR/kill-bench.log" | head -5; exit 1
fi
grep -q "$INCRS requests completed" "$DIR/kill-bench.log" || { echo "FAIL: redis-benchmark did not complete $INCRS requests"; tail -5 "$DIR/kill-bench.log"; exit 1; }
grep "requests completed" "$DIR/kill-bench.log" | tail -1
counter=$(redis-cli -p "$PORT" get bench:killed)
[[ "$counter" == "$INCRS" ]] || { echo "FAIL: $INCRS INCRs acknowledged, the counter holds $counter"; exit 1; }
echo "all $INCRS acknowledged INCRs are in the counter after the leader's death"
echo "gateway clients: all passed"
