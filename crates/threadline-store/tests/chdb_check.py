"""Runs Threadline's current-version ClickHouse schema and every query a store issued
on Debian's 18.16 in chdb (current ClickHouse in process), on the same rows, and
compares the answers with 18.16's.

Usage: chdb_check.py MANIFEST.json — written by tests/clickhouse_versions.rs:
  {"database": ..., "ddl": [statements for the current version],
   "tables": {"name": "path of its rows in Native format"},
   "queries": [{"sql": ..., "answer": "18.16's TabSeparated answer"}]}
Answers are compared as sorted lines (ties in an ORDER BY may come out in either
order). Prints each mismatch; exits 1 if any.
"""

import json
import sys
import tempfile

from chdb import session


def main() -> int:
    with open(sys.argv[1]) as f:
        manifest = json.load(f)
    db = manifest["database"]
    s = session.Session(tempfile.mkdtemp(prefix="chdb-check-"))
    s.query(f"CREATE DATABASE IF NOT EXISTS {db}")
    s.query(f"USE {db}")
    for statement in manifest["ddl"]:
        s.query(statement)
    for table, path in manifest["tables"].items():
        s.query(f"INSERT INTO {db}.{table} SELECT * FROM file('{path}', Native)")
    spans = int(str(s.query(f"SELECT count() FROM {db}.spans", "TabSeparated")).strip())
    if spans == 0:
        print("no spans were loaded: nothing would be compared")
        return 1
    failures = 0
    for q in manifest["queries"]:
        try:
            got = s.query(q["sql"], "TabSeparated").bytes()
        except Exception as e:  # a query the current version refuses
            print(f"REFUSED: {q['sql']}\n  {e}")
            failures += 1
            continue
        want = q["answer"].encode("latin-1")
        if sorted(got.splitlines()) != sorted(want.splitlines()):
            print(f"DIFFERS: {q['sql']}\n  18.16: {want[:300]!r}\n  chdb:  {got[:300]!r}")
            failures += 1
    print(f"{spans} spans loaded; {len(manifest['queries'])} queries, {failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
