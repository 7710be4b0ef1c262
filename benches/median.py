"""Reads `shmenv bench --json --baseline` lines on stdin; prints one markdown table row
with the medians (argv[1] is the row label)."""
import json
import statistics
import sys

rows = [json.loads(line) for line in sys.stdin if line.strip()]
med = lambda key: statistics.median(r[key] for r in rows)
each = ", ".join(f"{r['ratio']:.2f}" for r in rows)
print(f"| {sys.argv[1]} | {med('steps_per_sec'):,.0f} | {med('baseline_steps_per_sec'):,.0f} | {med('ratio'):.2f} | {each} |")
