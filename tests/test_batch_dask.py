"""`scsitrace batch --scheduler`: a real Dask cluster (a `dask scheduler` and two `dask worker`
processes on 127.0.0.1, started here and stopped afterwards) gives a dataset identical to the
local run's, bad trace included."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from scsitrace import cli

pytest.importorskip("distributed")
REPO = Path(__file__).resolve().parents[1]
DASK = Path(sys.executable).with_name("dask")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not DASK.exists():
        pytest.skip("no dask command next to this Python")
    logs = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{free_port()}"
    procs = []

    def start(name, *args):
        log = open(logs / f"{name}.log", "wb")
        procs.append(subprocess.Popen([str(DASK), *args], stdout=log, stderr=subprocess.STDOUT, cwd=logs))

    try:
        start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
              "--no-dashboard")
        for i in range(2):
            start(f"worker{i}", "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                  "--no-dashboard", "--no-nanny", "--memory-limit", "0")
        from distributed import Client
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout=5) as client:
                    client.wait_for_workers(2, timeout=max(1, deadline - time.monotonic()))
                break
            except OSError:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise
                time.sleep(0.5)
        yield address
    finally:
        for p in procs[1:]:
            p.kill()                      # the workers hold nothing; a graceful close takes seconds
        procs[0].terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert all(p.returncode is not None for p in procs)


def test_cluster_run_equals_local_run(cluster, tmp_path):
    corpus = tmp_path / "corpus"
    for case in ("cut-l1", "reset-l1", "random4k-vcd-l1"):
        shutil.copytree(REPO / "fixtures" / "bus" / case, corpus / case)
    (corpus / "bad.ancot").write_text("this is not a trace\n")
    local, remote = tmp_path / "local", tmp_path / "remote"
    common = [str(corpus), "--timeout", "120"]
    assert cli.main(["batch", *common, "-o", str(local), "-j", "1"]) == 2
    assert cli.main(["batch", *common, "-o", str(remote), "--scheduler", cluster]) == 2
    summary = pl.read_parquet(remote / "summary.parquet")
    assert summary["status"].to_list() == ["bad", "ok", "ok", "ok"]
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*.parquet"))
    assert names == sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*.parquet"))
    assert "ios/trace_id=1/part-0.parquet" in names
    for name in names:
        a, b = pl.read_parquet(local / name), pl.read_parquet(remote / name)
        assert a.schema == b.schema, name
        assert a.equals(b), name
