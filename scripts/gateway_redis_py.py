"""redis-py, unmodified, against a tagma gateway: pipelining, transactions, WATCH, errors.

Usage: python3 scripts/gateway_redis_py.py PORT
"""
import sys

import redis


def main() -> None:
    port = int(sys.argv[1])
    r = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    assert r.ping() is True

    # Strings, expiry, hashes.
    assert r.set("py:k", "v") is True
    assert r.get("py:k") == "v"
    assert r.set("py:k", "w", nx=True) is None
    assert r.set("py:k", "w", xx=True, get=True) == "v"
    assert r.incr("py:n") == 1 and r.incrby("py:n", 41) == 42
    assert r.set("py:t", "x", ex=100) is True and 99 <= r.ttl("py:t") <= 100
    assert r.hset("py:h", mapping={"a": "1", "b": "2"}) == 2
    assert r.hgetall("py:h") == {"a": "1", "b": "2"}
    assert r.hincrby("py:h", "a", 5) == 6
    assert r.type("py:h") == "hash"

    # A pipeline without a transaction: many commands in flight, replies in order.
    p = r.pipeline(transaction=False)
    for i in range(500):
        p.set(f"py:p{i}", i)
        p.get(f"py:p{i}")
    out = p.execute()
    assert out[0::2] == [True] * 500
    assert out[1::2] == [str(i) for i in range(500)]

    # A transaction (MULTI/EXEC), atomic on every replica.
    p = r.pipeline(transaction=True)
    p.incr("py:tx").incr("py:tx").get("py:tx")
    assert p.execute() == [1, 2, "2"]

    # WATCH: optimistic locking, the classic check-and-set loop; and a conflict.
    with r.pipeline() as p:
        p.watch("py:tx")
        value = int(p.get("py:tx"))
        p.multi()
        p.set("py:tx", value * 10)
        assert p.execute() == [True]
    assert r.get("py:tx") == "20"
    other = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    with r.pipeline() as p:
        p.watch("py:tx")
        other.incr("py:tx")
        p.multi()
        p.set("py:tx", 0)
        try:
            p.execute()
            raise AssertionError("EXEC ran though a watched key changed")
        except redis.WatchError:
            pass
    assert r.get("py:tx") == "21"

    # Errors: Redis's error replies, the connection stays usable.
    for call, text in [
        (lambda: r.incr("py:k"), "not an integer"),
        (lambda: r.get("py:h"), "WRONGTYPE"),
        (lambda: r.execute_command("LPUSH", "py:l", "a"), "unknown command"),
        (lambda: r.execute_command("GET"), "wrong number of arguments"),
    ]:
        try:
            call()
            raise AssertionError(f"no error ({text})")
        except redis.ResponseError as e:
            assert text in str(e), str(e)
    assert r.ping() is True

    # RESP2 clients (redis-py's protocol=2) get the same answers.
    r2 = redis.Redis(host="127.0.0.1", port=port, decode_responses=True, protocol=2)
    assert r2.hgetall("py:h") == {"a": "6", "b": "2"}
    assert r2.get("py:absent") is None
    p = r2.pipeline(transaction=True)
    p.incr("py:tx2").hgetall("py:h")
    assert p.execute() == [1, {"a": "6", "b": "2"}]

    # SCAN walks every key once (redis-py turns the cursor into an int).
    keys = set(r.scan_iter(match="py:p*", count=50))
    assert len(keys) == 500, len(keys)
    assert r.dbsize() >= 500
    print("redis-py: every check passed")


if __name__ == "__main__":
    main()
