#!/usr/bin/env python3
"""The lab's table of seed 000's Python rig (accept_rig.py) without the preload and under it
on each backend, the three setups alternated in every round so that they share the machine's
moment. Prints one markdown row per setup and round (accepted per worker in registration
order, max - min, max share, Jain's index, empty accepts), then each setup's mean and range.

Usage: rig_table.py PRELOAD_SO [--rounds 3] [--connections 500] [--workers 8]
(`cargo build --release -p herdless-preload` makes target/release/libherdless_preload.so.)
"""
import argparse
import json
import os
import subprocess
import sys

RIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accept_rig.py")


def run(preload, backend, args):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
        env["HERDLESS_BACKEND"] = backend
    out = subprocess.run(
        [sys.executable, RIG, "--workers", str(args.workers), "--connections", str(args.connections)],
        env=env, check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)


def jain(xs):
    s, q = sum(xs), sum(x * x for x in xs)
    return (s * s) / (len(xs) * q) if q else 1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("preload")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=500)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    setups = [("without the preload", None, None),
              ("preload, native", args.preload, "native"),
              ("preload, emulated", args.preload, "emulated")]
    spreads = {name: [] for name, _, _ in setups}
    print("| round | setup | accepted per worker | max − min | max share | Jain | empty |")
    print("|---|---|---|---|---|---|---|")
    for r in range(1, args.rounds + 1):
        for name, preload, backend in setups:
            res = run(preload, backend, args)
            acc = res["accepted"]
            spreads[name].append(res["max_minus_min"])
            print(f"| {r} | {name} | {acc} | {res['max_minus_min']} | "
                  f"{100 * max(acc) / max(1, sum(acc)):.1f} % | {jain(acc):.3f} | {sum(res['empty'])} |")
    print()
    for name, xs in spreads.items():
        print(f"- {name}: max − min mean {sum(xs) / len(xs):.1f} (min {min(xs)}, max {max(xs)}) over {len(xs)} rounds")


if __name__ == "__main__":
    main()
