#!/usr/bin/env python3
"""Seed 000's accept rig, in Python, as a program that cannot be rebuilt.

Eight workers are forked; each builds its own select.epoll, registers the shared listening
socket (non-blocking) with EPOLLIN | EPOLLEXCLUSIVE in the order the parent dictates, and a
stop pipe without the flag, then loops in epoll.poll(): an event on the listener is an accept
(EAGAIN counted as an empty wake-up), the stop pipe's hang-up ends the worker. The client then
makes the connections one at a time, GAP ms apart, each read to its end (the worker closes it),
so every connection is accepted before the next is made. Printed: one JSON line with the
accepted and empty counts per worker, in registration order.

Nothing here knows herdless: run it with LD_PRELOAD=libherdless_preload.so to give it turns.

Usage: accept_rig.py [--workers 8] [--connections 500] [--gap-ms 2] [--no-flag]
"""
import argparse
import errno
import json
import os
import select
import socket
import sys
import time

FLAG = True  # --no-flag: the listener registered without EPOLLEXCLUSIVE


def worker(index, listener, go_r, ack_w, stop_r, out_w):
    os.read(go_r, 1)  # the parent's "register now"
    ep = select.epoll()
    ep.register(listener.fileno(), select.EPOLLIN | (select.EPOLLEXCLUSIVE if FLAG else 0))
    ep.register(stop_r, select.EPOLLIN)
    os.write(ack_w, b"r")
    accepted = empty = wakeups = 0
    while True:
        try:
            events = ep.poll()
        except InterruptedError:
            continue
        wakeups += 1
        stop = False
        for fd, _bits in events:
            if fd == stop_r:
                stop = True
            elif fd == listener.fileno():
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    empty += 1
                    continue
                accepted += 1
                conn.close()
        if stop:
            break
    ep.close()
    line = json.dumps({"worker": index, "accepted": accepted, "empty": empty, "wakeups": wakeups})
    os.write(out_w, (line + "\n").encode())
    os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--connections", type=int, default=500)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--no-flag", action="store_true", help="register without EPOLLEXCLUSIVE")
    args = ap.parse_args()
    global FLAG
    FLAG = not args.no_flag

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    listener.setblocking(False)
    stop_r, stop_w = os.pipe()
    out_r, out_w = os.pipe()
    ack_r, ack_w = os.pipe()
    pids, gos = [], []
    for i in range(args.workers):
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(stop_w)
            os.close(go_w)
            worker(i, listener, go_r, ack_w, stop_r, out_w)
        os.close(go_r)
        pids.append(pid)
        gos.append(go_w)
    os.close(stop_r)
    # Registration in the parent's order: worker i registers when worker i-1 has.
    for go in gos:
        os.write(go, b"g")
        os.read(ack_r, 1)
    time.sleep(0.1)  # every worker into its first epoll_wait
    address = listener.getsockname()
    for _ in range(args.connections):
        with socket.create_connection(address) as c:
            while c.recv(64):
                pass
        time.sleep(args.gap_ms / 1000.0)
    os.close(stop_w)  # every worker's stop pipe hangs up
    results = {}
    buf = b""
    while len(results) < args.workers:
        chunk = os.read(out_r, 4096)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            r = json.loads(line)
            results[r["worker"]] = r
    for pid in pids:
        os.waitpid(pid, 0)
    accepted = [results[i]["accepted"] for i in range(args.workers)]
    empty = [results[i]["empty"] for i in range(args.workers)]
    wakeups = [results[i]["wakeups"] for i in range(args.workers)]
    print(json.dumps({
        "accepted": accepted,
        "empty": empty,
        "wakeups": wakeups,
        "total": sum(accepted),
        "max_minus_min": max(accepted) - min(accepted),
    }))
    return 0 if sum(accepted) == args.connections else 1


if __name__ == "__main__":
    sys.exit(main())
