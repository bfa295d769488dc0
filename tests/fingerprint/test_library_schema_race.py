"""Workers opening one fresh SQLite fingerprint library at the same moment (a Dask run's first
tasks) all get it: the ones that lose the race to create the tables use the winner's."""
from __future__ import annotations

import threading

from metainfer_core.fingerprint import FingerprintLibrary


def test_workers_opening_a_fresh_sqlite_library_at_once_all_get_it(tmp_path):
    for trial in range(20):
        url = f"sqlite:///{tmp_path}/fp{trial}.db"
        start, errors, libs = threading.Barrier(6), [], []

        def open_library():
            start.wait()
            try:
                libs.append(FingerprintLibrary(url))
            except Exception as exc:   # the failure this test exists to catch
                errors.append(exc)

        workers = [threading.Thread(target=open_library) for _ in range(6)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert errors == [] and len(libs) == 6
        assert libs[0].versions() == []
