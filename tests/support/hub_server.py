#!/usr/bin/env python3
"""A Hugging Face Hub stand-in on the loopback interface, for the download tests (no internet).

It answers the requests Tessera's downloader makes, the way the Hub does:
  HEAD/GET /ORG/NAME/resolve/REVISION/PATH
      small files: 307 to /api/resolve-cache/models/ORG/NAME/COMMIT/PATH (relative, as the Hub
          answers today), which gives 200, ETag "<git blob sha1>", X-Repo-Commit, Content-Length and
          the bytes on GET;
      LFS files: 302 to /cdn/<sha256>, X-Linked-Etag "<sha256>", X-Linked-Size, X-Repo-Commit;
      404 (X-Error-Code RepoNotFound / EntryNotFound / RevisionNotFound) when unknown;
      401 for a gated repository without "Authorization: Bearer <its token>".
  HEAD/GET /cdn/<sha256>   the blob, with Range (206 + Content-Range).
Faults, set by POST /_fault with a JSON object (each applies to the next CDN transfers):
  {"drop_after": N}    close the connection after N bytes of the next transfer (once)
  {"corrupt": true}    flip a byte in every transfer (the hash no longer matches)
  {"trickle_ms": M}    sleep M ms per 16 kB chunk
  {"claim_size": N}    state N as every LFS file's size (a Hub that lies, or a file too big for the disk)
  {}                   clear every fault
GET /_stats: {"cdn_bytes": bytes of blobs sent, "requests": [...paths]}.

Usage: hub_server.py --spec SPEC.json --port-file FILE   (port 0: any free port, written to FILE)
SPEC: {"ORG/NAME": {"commit": "<40 hex>", "gated_token": "" or "hf_...",
                    "files": {"PATH": {"source": "/abs/file", "lfs": true|false}}}}
"""
import argparse
import hashlib
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"faults": {}, "cdn_bytes": 0, "requests": []}


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, name, spec):
        self.name = name
        self.commit = spec["commit"]
        self.token = spec.get("gated_token", "")
        self.files = {}
        for path, f in spec["files"].items():
            data = open(f["source"], "rb").read()
            self.files[path] = {"data": data, "lfs": bool(f.get("lfs")),
                                "sha256": hashlib.sha256(data).hexdigest(),
                                "sha1": git_blob_sha1(data)}


def make_handler(repos, blobs):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send_plain(self, code, error_code="", body=b""):
            self.send_response(code)
            if error_code:
                self.send_header("X-Error-Code", error_code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_POST(self):
            if self.path == "/_fault":
                n = int(self.headers.get("Content-Length", "0"))
                with LOCK:
                    STATE["faults"] = json.loads(self.rfile.read(n) or b"{}")
                return self.send_plain(200)
            self.send_plain(404)

        def do_HEAD(self):
            self.handle_get()

        def do_GET(self):
            if self.path == "/_stats":
                with LOCK:
                    body = json.dumps({"cdn_bytes": STATE["cdn_bytes"],
                                       "requests": STATE["requests"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.handle_get()

        def handle_get(self):
            with LOCK:
                STATE["requests"].append(self.command + " " + self.path)
            m = re.match(r"^/cdn/([0-9a-f]{64})$", self.path)
            if m:
                return self.send_blob(m.group(1))
            cache = re.match(r"^/api/resolve-cache/models/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)$",
                             self.path)
            m = cache or re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", self.path)
            if not m:
                return self.send_plain(404)
            name, revision, path = m.group(1), m.group(2), m.group(3)
            repo = repos.get(name)
            if repo is None:
                return self.send_plain(404, "RepoNotFound")
            if repo.token and self.headers.get("Authorization", "") != "Bearer " + repo.token:
                return self.send_plain(401, "GatedRepo", b"Access to this repository is restricted")
            if revision not in ("main", repo.commit):
                return self.send_plain(404, "RevisionNotFound")
            f = repo.files.get(path)
            if f is None:
                return self.send_plain(404, "EntryNotFound")
            if f["lfs"]:
                with LOCK:
                    claimed = STATE["faults"].get("claim_size")
                self.send_response(302)
                self.send_header("Location", "/cdn/" + f["sha256"])
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("X-Linked-Etag", '"%s"' % f["sha256"])
                self.send_header("X-Linked-Size", str(claimed if claimed is not None else len(f["data"])))
                self.send_header("ETag", '"%s"' % f["sha1"])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if not cache:
                self.send_response(307)
                self.send_header("Location", "/api/resolve-cache/models/%s/%s/%s"
                                 % (name, repo.commit, path))
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", '"%s"' % f["sha1"])
            self.send_header("Content-Length", str(len(f["data"])))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(f["data"])

        def send_blob(self, sha):
            data = blobs.get(sha)
            if data is None:
                return self.send_plain(404)
            start = 0
            rng = self.headers.get("Range", "")
            m = re.match(r"^bytes=(\d+)-$", rng)
            if m:
                start = int(m.group(1))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % len(data))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data) - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if self.command == "HEAD":
                return
            with LOCK:
                faults = dict(STATE["faults"])
                if "drop_after" in faults:
                    del STATE["faults"]["drop_after"]  # once
            body = bytearray(data[start:])
            if faults.get("corrupt") and body:
                body[len(body) // 2] ^= 0xFF
            limit = faults.get("drop_after")
            sent = 0
            chunk = 16384
            while sent < len(body):
                if limit is not None and sent >= limit:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                end = min(len(body), sent + chunk)
                if limit is not None:
                    end = min(end, limit)
                self.wfile.write(bytes(body[sent:end]))
                with LOCK:
                    STATE["cdn_bytes"] += end - sent
                sent = end
                if faults.get("trickle_ms"):
                    time.sleep(faults["trickle_ms"] / 1000.0)

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    a = ap.parse_args()
    spec = json.load(open(a.spec))
    repos = {name: Repo(name, s) for name, s in spec.items()}
    blobs = {}
    for repo in repos.values():
        for f in repo.files.values():
            blobs[f["sha256"]] = f["data"]
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(repos, blobs))
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as out:
        out.write(str(server.server_address[1]))
    os.replace(tmp, a.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
