#!/usr/bin/env python3
"""Prints the current figures of the latest benchmark run as Markdown tables.

    python3 bench/results/summary.py            # every row and target (bench/results/README.md)
    python3 bench/results/summary.py --short    # the four rows of the README's table

Reads bench/results/latest.json, which `scripts/bench` writes (bench/README.md). After a new
full run, paste the output into bench/results/README.md and the README between its
`<!-- figures:begin -->` and `<!-- figures:end -->` markers; the README test
(crates/carmy-gateway/tests/it/front/readme.rs) fails until the README's table matches.
"""

import json
import pathlib
import sys

RESULTS = pathlib.Path(__file__).resolve().parent / "latest.json"


def row(label, concurrency, rate, p50, p99, *extra):
    cells = [label, str(concurrency), f"{rate:,.0f}", f"{p50:.2f}", f"{p99:.2f}", *extra]
    return "| " + " | ".join(cells) + " |"


def scenario(run):
    name = run["scenario"].replace("_", " ")
    if not run.get("replay_cache", True):
        name += ", cache off"
    if run.get("group_commit") is False:
        name += ", group commit off"
    return name


def main():
    latest = json.loads(RESULTS.read_text())
    date = latest["finished_at"][:10]
    version = latest["server"]["version"].split()[0]
    pg = latest["pgbench_new_identity"]
    runs = latest["runs"]

    def find(name, concurrency):
        return next(r for r in runs if r["scenario"] == name and r["concurrency"] == concurrency
                    and r.get("replay_cache", True) and r.get("group_commit", True))

    if "--short" in sys.argv[1:]:
        print(f"| scenario ({date}, PostgreSQL {version}, {latest['cpus']} CPUs) | c | calls/s | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for name, concurrency in [("new_identity", 1), ("new_identity", 32), ("replay", 32)]:
            r = find(name, concurrency)
            print(row(scenario(r), concurrency, r["calls_per_second"], r["p50_ms"], r["p99_ms"]))
        print(row("pgbench ceiling, two statements per new identity", pg["clients"], pg["tps"],
                  pg["p50_ms"], pg["p99_ms"]))
        return

    server = latest["server"]
    print(f"Run finished {latest['finished_at']} (`{' '.join(latest['command'])}`), {latest['cpus']} CPUs, "
          f"load average {latest['load_average'][0]}-{latest['load_average'][1]}, PostgreSQL {server['version']} "
          f"(`fsync={server['fsync']}`, `synchronous_commit={server['synchronous_commit']}`, "
          f"{server['shared_buffers']} shared buffers), {latest['settings']['seconds']:.0f} s per measurement.")
    print()
    print("| scenario | c | calls/s | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    read = latest["pgbench_read_one"]
    print(row("pgbench `new_identity.sql` (ceiling)", pg["clients"], pg["tps"], pg["p50_ms"], pg["p99_ms"]))
    print(row("pgbench `read_one.sql` (ceiling)", read["clients"], read["tps"], read["p50_ms"], read["p99_ms"]))
    for r in runs:
        print(row(scenario(r), r["concurrency"], r["calls_per_second"], r["p50_ms"], r["p99_ms"]))
    for size, r in latest.get("flatness", {}).items():
        if not r or r.get("rows_before") is None:
            continue  # a step this run did not make (e.g. 5 million rows without --large)
        print(row(f"new identity, {r['rows_before']:,} rows", r["concurrency"], r["calls_per_second"],
                  r["p50_ms"], r["p99_ms"]))
    print()
    print("| target | figure | |")
    print("|---|---|---|")
    for target in latest["targets"]:
        print(f"| {target['name']} | {target['figure']} | {target['status']} |")


if __name__ == "__main__":
    main()
