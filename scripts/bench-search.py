"""One measurement of scripts/bench-search: API address, database file (or
`clickhouse:URL/DATABASE`), size label.

The database is opened read-only beside the server only to sample stored trace ids and
to see whether the trace-id index compactor and the full-text indexer have caught up
(on ClickHouse: whether the spool is empty); every timing goes through the JSON API.
"""
import http.client
import json
import os
import random
import sqlite3
import statistics
import sys
import time
import urllib.parse
import urllib.request

api, db_path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
host, port = api.rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port), timeout=600)
clickhouse = db_path.startswith("clickhouse:")
db = None if clickhouse else sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)


def clickhouse_query(sql):
    """A query on the ClickHouse database the server stores in: its rows, tab-separated."""
    url, database = db_path[len("clickhouse:"):].rsplit("/", 1)
    parsed = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)
    c.request("POST", f"/?database={database}", body=sql.encode())
    r = c.getresponse()
    body = r.read().decode()
    if r.status != 200:
        raise SystemExit(f"{sql}: {body[:300]}")
    return [line.split("\t") for line in body.splitlines()]


def get(path):
    started = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status != 200:
        raise SystemExit(f"{path} answered {response.status}: {body[:300]!r}")
    return elapsed, json.loads(body)


def text_backlog():
    """Span blocks the full-text indexer has not reached yet."""
    return db.execute(
        "SELECT count(*) FROM span_blocks WHERE id >= (SELECT indexed_end FROM text_index_state)"
    ).fetchone()[0]


def index_state():
    covered = db.execute("SELECT COALESCE(MAX(last_block), 0) FROM trace_runs").fetchone()[0]
    tail = db.execute("SELECT COUNT(*) FROM block_traces WHERE block_id > ?", (covered,)).fetchone()[0]
    levels = [r[0] for r in db.execute("SELECT level FROM trace_runs")]
    orphans = db.execute(
        "SELECT COUNT(*) FROM trace_run_chunks c WHERE NOT EXISTS "
        "(SELECT 1 FROM trace_runs r WHERE r.run_id = c.run_id)"
    ).fetchone()[0]
    return tail, levels, orphans


waited = time.perf_counter()
if clickhouse:
    while True:
        health = json.loads(urllib.request.urlopen(f"http://{api}/api/v1/health").read())
        if health["store"]["spool"]["records"] == 0 or time.perf_counter() - waited > 600:
            break
        time.sleep(0.5)
    parts = clickhouse_query(
        "SELECT count(), sum(rows), sum(bytes_on_disk) FROM system.parts "
        "WHERE database = currentDatabase() AND table = 'spans' AND active"
    )[0]
    print(
        f"\n## {size:,} spans: `spans` in {parts[0]} parts, {int(parts[1]):,} rows, "
        f"{int(parts[2]) / 1e6:.1f} MB; spool empty {time.perf_counter() - waited:.1f} s after the fill"
    )
    known = [r[0] for r in clickhouse_query(
        "SELECT lower(hex(trace_id)) FROM span_search WHERE entry = 1 ORDER BY cityHash64(trace_id, "
        f"{size}) LIMIT 300"
    )]
else:
    while True:
        tail, levels, orphans = index_state()
        # Settled: no level below the final one holds a merge's worth (4) of runs.
        full = any(levels.count(l) >= 4 for l in levels if l < 1000)
        if tail < 64 and not full and orphans == 0 and text_backlog() == 0 or time.perf_counter() - waited > 600:
            break
        time.sleep(0.5)
    entries, chunk_bytes = db.execute(
        "SELECT COALESCE(SUM(entries), 0), (SELECT COALESCE(SUM(length(entries)), 0) FROM trace_run_chunks) FROM trace_runs"
    ).fetchone()
    blocks = db.execute("SELECT COUNT(*) FROM block_traces").fetchone()[0]
    print(
        f"\n## {size:,} spans: {blocks:,} blocks; index: {len(levels)} runs (levels {sorted(levels)}), "
        f"{entries:,} entries, {chunk_bytes / 1e6:.1f} MB, {tail} blocks outside runs; "
        f"caught up {time.perf_counter() - waited:.1f} s after the fill"
    )

    # Known ids: each from a random block of the whole store.
    max_block = db.execute("SELECT MAX(block_id) FROM block_traces").fetchone()[0]
    rng = random.Random(size)
    known = []
    while len(known) < 300:
        row = db.execute(
            "SELECT trace_ids FROM block_traces WHERE block_id >= ? ORDER BY block_id LIMIT 1",
            (rng.randint(1, max_block),),
        ).fetchone()
        ids = row[0]
        pick = rng.randrange(len(ids) // 16)
        known.append(ids[pick * 16 : (pick + 1) * 16].hex())

unknown = [os.urandom(16).hex() for _ in range(300)]


def percentiles(name, ids, expect_found):
    times = []
    for trace_id in ids:
        started = time.perf_counter()
        conn.request("GET", f"/api/v1/traces/{trace_id}")
        response = conn.getresponse()
        response.read()
        times.append((time.perf_counter() - started) * 1000)
        if (response.status == 200) != expect_found:
            raise SystemExit(f"trace {trace_id}: status {response.status}")
    times.sort()
    p99 = times[int(round((len(times) - 1) * 0.99))]
    print(
        f"trace by id, {name:8s} p50 {statistics.median(times):6.2f} ms  p99 {p99:6.2f} ms  "
        f"max {times[-1]:6.2f} ms  ({len(times)} lookups)"
    )


get("/api/v1/traces/" + known[0])  # warm the connection
percentiles("known", known, True)
percentiles("unknown", unknown, False)

newest = get("/api/v1/traces?limit=20")[1]["traces"]
model = next(m for t in newest for m in t["models"])
newest_start = max(int(t["start_time_unix_nano"]) for t in newest)
minute_ago = newest_start // 10**9 - 60
queries = {
    "newest": "limit=20",
    "last minute, service": f"service=retriever&from={minute_ago}&limit=20",
    "service=retriever": "service=retriever&limit=20",
    f"model={model}": "model=" + urllib.parse.quote(model) + "&limit=20",
    "status=error": "status=error&limit=20",
    "min_duration=2s": "min_duration=2s&limit=20",
    "a model no span has": "model=no-such-model&limit=20",
    "attr.gray.tag=canary": "attr.gray.tag=canary&limit=20",
    "an attr. no span has": "attr.tier=none&limit=20",
    "q=quarterly earn (text)": "q=quarterly%20earn&limit=20",
    "q=retrieval support (names)": "q=retrieval%20support&limit=20",
    "q= words no span has": "q=zebra%20crossing&limit=20",
}
# The search a dashboard repeats: the last hour, two column filters; p99 of 20.
hour_ago = newest_start // 10**9 - 3600
path = f"/api/v1/traces?service=inference&model={urllib.parse.quote(model)}&from={hour_ago}&limit=20"
times = sorted(get(path)[0] for _ in range(20))
print(
    f"search {'last hour, service + model':26s} p50 {statistics.median(times):8.1f} ms  "
    f"max {times[-1]:8.1f} ms  (20 runs: the p95)",
    flush=True,
)
for name, query in queries.items():
    path = "/api/v1/traces?" + query
    first, body = get(path)
    times = [first] + ([get(path)[0] for _ in range(4)] if first < 2000 else [])
    line = f"search {name:26s} {statistics.median(times):8.1f} ms  {len(body['traces'])} traces"
    if body.get("searched_from_unix_nano"):
        # A first page cut short by the store's time budget: how far back it searched.
        back = (newest_start - int(body["searched_from_unix_nano"])) / 1e9
        line += f" (cut short: traces of the newest {back:.0f} s)"
    if body.get("next_cursor"):
        cursor = urllib.parse.quote(body["next_cursor"])
        after = [get(path + "&cursor=" + cursor)[0] for _ in range(3 if first < 2000 else 1)]
        line += f"; next page {statistics.median(after):.1f} ms"
    print(line, flush=True)
