#!/usr/bin/env python3
"""Load benchmark of `tessera serve`: starts the server (the embedded model unless --model), then for
each client count runs that many clients at once, each submitting --jobs jobs one after the other and
following each job's event stream to its end. Prints, per client count, jobs per second, the p50 and
p99 latency from submit to the end of the stream, the first token's latency, and whether every
accepted job finished (nothing lost). With --write-results, replaces the "Serving" section of
bench/RESULTS.md with the table and the machine it ran on.

  python3 tools/bench_serve.py [--clients 1,4,16] [--jobs 4] [--resolution 33] [--write-results]
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values, p):
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def run_job(url, body):
    t0 = time.monotonic()
    req = urllib.request.Request(url + "/v1/jobs", data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as r:
        job = json.loads(r.read())
    first_token, end = None, None
    with urllib.request.urlopen("%s/v1/jobs/%d/events" % (url, job["id"]), timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "token" and first_token is None:
                first_token = time.monotonic() - t0
            if event["type"] in ("done", "failed", "cancelled"):
                end = event["type"]
                break
    return time.monotonic() - t0, first_token or 0.0, end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "app", "cli", "tessera"))
    ap.add_argument("--model", default="")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--jobs", type=int, default=4, help="jobs per client")
    ap.add_argument("--resolution", type=int, default=33)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--write-results", action="store_true")
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix="tessera-bench-serve-")
    cmd = [a.tessera]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    cmd += ["serve", "--port", "0", "--out", out, "--max-queue", "1000", "--per-client", "1000"]
    if a.model:
        cmd += ["--model", a.model]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    m = re.search(r"http://([^ ]+)", line)
    if not m:
        sys.exit("tessera serve did not start: " + line)
    url = "http://" + m.group(1)
    prompts = ["a chair", "a mug", "a lamp", "a cube", "a ball", "a table", "a vase", "a tree"]
    rows = []
    try:
        run_job(url, {"prompt": "a cube", "resolution": a.resolution})  # warm-up
        for clients in [int(c) for c in a.clients.split(",")]:
            latencies, firsts, ends = [], [], []
            lock = threading.Lock()

            def client(i):
                for j in range(a.jobs):
                    body = {"prompt": prompts[(i + j) % len(prompts)], "seed": i * 100 + j,
                            "resolution": a.resolution}
                    lat, first, end = run_job(url, body)
                    with lock:
                        latencies.append(lat)
                        firsts.append(first)
                        ends.append(end)

            t0 = time.monotonic()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - t0
            done = sum(1 for e in ends if e == "done")
            rows.append({"clients": clients, "jobs": len(ends), "done": done,
                         "jobs_per_s": len(ends) / wall, "p50": percentile(latencies, 50),
                         "p99": percentile(latencies, 99), "first_token_p50": percentile(firsts, 50)})
            r = rows[-1]
            print("%2d clients: %3d jobs, %3d done, %.2f jobs/s, latency p50 %.2f s p99 %.2f s, "
                  "first token p50 %.2f s" % (clients, r["jobs"], r["done"], r["jobs_per_s"],
                                              r["p50"], r["p99"], r["first_token_p50"]))
    finally:
        server.terminate()
        server.wait()
    if a.write_results:
        write_results(a, rows)


def write_results(a, rows):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0]
    lines = ["## Serving (tessera serve)", "",
             "Command: `python3 tools/bench_serve.py --clients %s --jobs %d --resolution %d "
             "--write-results`  " % (a.clients, a.jobs, a.resolution),
             "Machine: %s, %d cores, %s; model: %s  " % (cpu, os.cpu_count(), platform.system(),
                                                        a.model or "tessera-tiny (embedded)"),
             "Date: %s UTC, load average before the run: %.2f" %
             (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), load), "",
             "Each client submits its jobs one after the other (first prompts such as \"a chair\", "
             "sampled with distinct seeds) and follows each job's event stream to its end; latency is submit "
             "to the end of the stream. The server runs one job at a time, so latency grows with the "
             "queue while throughput stays the model's.", "",
             "| clients | jobs | done | jobs/s | latency p50 | latency p99 | first token p50 |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %d | %d | %d | %.2f | %.2f s | %.2f s | %.2f s |" %
                     (r["clients"], r["jobs"], r["done"], r["jobs_per_s"], r["p50"], r["p99"],
                      r["first_token_p50"]))
    section = "\n".join(lines) + "\n"
    path = os.path.join(ROOT, "bench", "RESULTS.md")
    text = open(path).read()
    start = text.find("## Serving (tessera serve)")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
