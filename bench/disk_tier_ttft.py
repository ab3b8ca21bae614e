#!/usr/bin/python3
"""Time to first token with the prefix cache's disk tier (docs/performance.md: "Prefix cache disk tier").

For each prompt length: cold (a prompt never seen), RAM hit (the same prompt again), and
disk hit after a restart (the server stopped with SIGTERM, which writes the RAM tier to
--prompt-cache-dir, and started again on the same directory): the first request after
the restart, then best of the rest with the RAM tier reset in between ({"tier": "ram"}),
and once more after dropping the records from the page cache (sync +
posix_fadvise(DONTNEED) on every file). Each figure is the wall time of a non-streamed
/v1/completions request with max_tokens 1 (= its time to first token). Restore GB/s is
the disk tier's payload bytes read / seconds spent reading them for that request
(prefix_cache.disk.read_bytes and read_bytes_per_s), recompute tokens/s the prompt
length / the cold time.

  bench/disk_tier_ttft.py [--pagoda build/release/pagoda] [--model /tmp/disk-tinyllama-q4_0.gguf]
                          [--sizes 4096,16384] [--reps 3] [--cold-reps 4096:3,16384:1] [--threads 2]

The model is made with `pagoda synth --shape tinyllama-1.1b --type q4_0 --ctx 20480` when missing.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return json.loads(r.read())


def start(args, log_path):
    log = open(log_path, "w")
    p = subprocess.Popen(args, stdout=log, stderr=log)
    deadline = time.time() + 300
    while time.time() < deadline:
        with open(log_path) as f:
            text = f.read()
        if "ready:" in text:
            port = int(text.split("listening on http://")[1].split(":")[1].split(" ")[0])
            return p, port
        if p.poll() is not None:
            sys.exit("server exited:\n" + text)
        time.sleep(0.2)
    sys.exit("server did not start")


def disk(port):
    return get(port, "/v1/cache/stats")["prefix_cache"]["disk"]


def ttft(port, prompt):
    before = disk(port)
    t0 = time.perf_counter()
    r = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    t = time.perf_counter() - t0
    after = disk(port)
    read_bytes = after["read_bytes"] - before["read_bytes"]

    def secs(d):
        return d["read_bytes"] / d["read_bytes_per_s"] if d["read_bytes_per_s"] else 0.0

    read_s = secs(after) - secs(before)
    return {"s": t, "cached": r["usage"]["prompt_tokens_details"]["cached_tokens"], "read_bytes": read_bytes,
            "read_s": read_s, "gbps": read_bytes / read_s / 1e9 if read_s > 0 else 0.0}


def drop_page_cache(d):
    os.sync()
    for name in os.listdir(d):
        fd = os.open(os.path.join(d, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", default="build/release/pagoda")
    ap.add_argument("--model", default="/tmp/disk-tinyllama-q4_0.gguf")
    ap.add_argument("--sizes", default="4096,16384")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cold-reps", default="4096:3,16384:1")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if not os.path.exists(a.model):
        subprocess.check_call([a.pagoda, "synth", "--shape", "tinyllama-1.1b", "--type", "q4_0", "--ctx", "20480",
                               "-o", a.model])
    sizes = [int(s) for s in a.sizes.split(",")]
    cold_reps = {int(k): int(v) for k, v in (kv.split(":") for kv in a.cold_reps.split(","))}
    work = tempfile.mkdtemp(prefix="pagoda_disk_ttft_")
    rng = random.Random(1)
    res = {n: {} for n in sizes}
    flush_s = {}
    for n in sizes:  # each length on its own server pair and directory: results come in length by length
        cache_dir = os.path.join(work, f"cache{n}")
        args = [a.pagoda, "serve", "-m", a.model, "--port", "0", "--threads", str(a.threads), "--ctx-size",
                str(n + 256), "--kv-cache-bytes", "3GiB", "--prompt-cache-dir", cache_dir,
                "--prompt-cache-disk-bytes", "8GiB", "--no-log-requests"]
        p, port = start(args, os.path.join(work, f"serve{n}a.log"))
        colds = []
        for rep in range(cold_reps.get(n, a.reps)):
            prompt = [rng.randrange(3, 32000) for _ in range(n)]
            colds.append(ttft(port, prompt))
            print(f"{n}: cold {colds[-1]['s']:.2f} s", flush=True)
        res[n]["cold"] = colds
        res[n]["ram"] = [ttft(port, prompt) for _ in range(a.reps)]
        print(f"{n}: RAM hit {min(r['s'] for r in res[n]['ram']):.3f} s", flush=True)
        p.send_signal(signal.SIGTERM)
        t0 = time.perf_counter()
        p.wait()
        flush_s[n] = time.perf_counter() - t0
        p, port = start(args, os.path.join(work, f"serve{n}b.log"))
        first = ttft(port, prompt)
        rest = []
        for _ in range(a.reps - 1):
            post(port, "/v1/cache/reset", {"tier": "ram"})
            rest.append(ttft(port, prompt))
        post(port, "/v1/cache/reset", {"tier": "ram"})
        drop_page_cache(cache_dir)
        dropped = ttft(port, prompt)
        res[n]["disk_first"] = first
        res[n]["disk"] = [first] + rest
        res[n]["disk_dropped"] = dropped
        res[n]["disk_stats"] = disk(port)
        print(f"{n}: disk hit after restart {first['s']:.3f} s, best {min(r['s'] for r in res[n]['disk']):.3f} s, "
              f"page cache dropped {dropped['s']:.3f} s", flush=True)
        p.send_signal(signal.SIGTERM)
        p.wait()
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    print(f"\nCPU: {cpu}, {a.threads} threads; shutdown (SIGTERM, writing the RAM tier): "
          + ", ".join(f"{n}: {flush_s[n]:.2f} s" for n in sizes) + "; disk tier after: "
          + ", ".join(f"{n}: {res[n]['disk_stats']['blocks']} blocks, {res[n]['disk_stats']['bytes']} bytes" for n in sizes))
    print("| prompt | cold | RAM hit | disk hit, 1st after restart | disk hit, best | disk hit, page cache dropped "
          "| restore GB/s (page cache / dropped) | recompute tok/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        r = res[n]
        cold = min(x["s"] for x in r["cold"])
        best_disk = min(r["disk"], key=lambda x: x["s"])
        print(f"| {n} | {cold:.2f} s ({len(r['cold'])} run{'s' if len(r['cold']) > 1 else ''}) "
              f"| {min(x['s'] for x in r['ram']):.3f} s | {r['disk_first']['s']:.3f} s | {best_disk['s']:.3f} s "
              f"| {r['disk_dropped']['s']:.3f} s | {best_disk['gbps']:.2f} / {r['disk_dropped']['gbps']:.2f} "
              f"| {n / cold:.1f} |")
    print(json.dumps(res), file=open(os.path.join(work, "results.json"), "w"))
    print(f"(raw: {work}/results.json; cached tokens: "
          + ", ".join(f"{n}: {res[n]['disk_first']['cached']}" for n in sizes) + ")")


if __name__ == "__main__":
    main()
