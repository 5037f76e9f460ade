"""Where the CPU of a profiled `tagma bench` run goes, by stage of the ordering pipeline.

    python3 scripts/profile_stages.py FOLDED BENCH_JSON

FOLDED: `perf script | inferno-collapse-perf` of every CPU during the run's window, thread
kinds merged (scripts/profile.sh writes it). BENCH_JSON: the run's `--json` report. Prints a
Markdown table: each stage's share of the machine's samples, and its CPU time per consensus
instance and per request (all replicas together), from the report's throughput and batch size
and the 2 CPUs sampled.
"""

import json
import os
import sys
from collections import Counter

STAGES = [
    ("client-in", "receive and authenticate requests (client connection readers)"),
    ("peer-in", "receive peer messages: read, MAC, decode, hash batches, check request authenticators"),
    ("verify", "verify ACCEPT signatures (Ed25519, consensus thread)"),
    ("sign", "sign ACCEPTs (Ed25519, consensus thread)"),
    ("order", "order: the protocol core, its queues and wake-ups (consensus thread)"),
    ("peer-out", "send peer messages (writers: MAC, socket writes, loopback delivery)"),
    ("execute", "execute (execution thread)"),
    ("log", "log decided batches (storage thread)"),
    ("reply", "send replies (client connection writers)"),
    ("load", "load generator (clients in the bench process)"),
    ("idle", "idle"),
    ("other", "other"),
]


def stage(frames):
    thread = frames[0]
    stack = ";".join(frames)
    if thread == "consensus":
        if "ed25519" in stack or "curve25519" in stack:
            return "verify" if "verif" in stack else "sign"
        return "order"
    return {
        "client-in": "client-in",
        "peer-in": "peer-in",
        "peer-out": "peer-out",
        "execution": "execute",
        "storage": "log",
        "client-out": "reply",
        "tagma-client": "load",
        "swapper": "idle",
    }.get(thread, "load" if thread == "tagma" else "other")


def main():
    folded, bench = sys.argv[1], sys.argv[2]
    samples = Counter()
    for line in open(folded):
        stack, _, count = line.rstrip().rpartition(" ")
        samples[stage(stack.split(";"))] += int(count)
    total = sum(samples.values())
    report = json.load(open(bench))
    ops = report["throughput_ops_s"]
    batch = report["batch_mean"]
    cpus = os.cpu_count() or 2
    # CPU seconds per second of wall time, spread over the stages by their sample shares.
    per_request_us = lambda share: share * cpus / ops * 1e6
    print(
        f"{report['mode']} n = {report['n']}, {report['request_bytes']}/{report['reply_bytes']} bytes, "
        f"{report['clients']} clients: {ops:,.0f} ops/s, batch_mean {batch:.1f}, "
        f"p50 {report['latency_ms']['p50']:.2f} ms; {cpus} CPUs sampled\n"
    )
    print("| stage | share of all CPU | µs per instance (all replicas) | µs per request |")
    print("|---|---|---|---|")
    for key, label in STAGES:
        share = samples[key] / total if total else 0.0
        if share == 0.0:
            continue
        us = per_request_us(share)
        per_instance = "—" if key in ("load", "idle") else f"{us * batch:,.0f}"
        print(f"| {label} | {100 * share:.1f} % | {per_instance} | {us:.2f} |")


if __name__ == "__main__":
    main()
