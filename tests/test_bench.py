"""python -m mpilab.bench: runs, writes the agreed JSON, and its ratios are sane.

Wall-clock speed is not tested here; the benchmarks report it.
"""

import json

import pytest
from bench_runs import bench
from conftest import needs_mpi

pytestmark = needs_mpi


@pytest.fixture(scope="module")
def pingpong_json(tmp_path_factory):
    out = {}
    for transport in ("shm", "tcp"):
        path = tmp_path_factory.mktemp("bench") / f"pp-{transport}.json"
        res = bench("pingpong", "--transport", transport, "--sizes", "8,64K", "--reps", "3",
                    "--rounds", "2", "--min-time", "0.003", "--json", str(path))
        assert res.returncode == 0, res.stderr
        assert "c-standalone" in res.stdout
        out[transport] = json.loads(path.read_text())
    return out


@pytest.mark.measures
def test_json_shape(pingpong_json):
    doc = pingpong_json["shm"]
    for key in ("hostname", "cores", "mpi_library", "mpi_version", "transport", "ranks",
                "oversubscribed", "launcher", "settings", "command"):
        assert key in doc["meta"], key
    impls = {(r["impl"], r["size_bytes"]) for r in doc["records"]}
    assert impls == {(i, n) for i in ("kernel", "c-standalone", "mpi4py") for n in (8, 65536)}
    for r in doc["records"]:
        for key in ("transport", "t_us_min", "t_us_median", "bandwidth_MBps", "iters"):
            assert key in r, key
        assert r["transport"] == "shm" and 0 < r["t_us_min"] <= r["t_us_median"]
        assert len(r["times_us"]) == 6  # 3 repetitions x 2 rounds, pooled


def test_a_pingpong_sweeps_buffers_are_on_one_page_kind(tmp_path):
    """A real sweep under mpiexec, 8 B to 4 MiB: every size's send and receive buffers on
    huge pages as the ranks read them from smaps (they were on 4 KiB pages below 4 MiB
    and on huge pages from it, so the sweep switched page kind at its last size)."""
    from mpilab import buffers

    if buffers.transparent_hugepages() not in ("madvise", "always"):
        pytest.skip("no transparent huge pages to ask for here")
    path = tmp_path / "pp-pages.json"
    res = bench("pingpong", "--sizes", "8,4K,64K,1M,4M", "--impls", "kernel", "--reps", "2",
                "--rounds", "1", "--min-time", "0.002", "--json", str(path))
    assert res.returncode == 0, res.stderr
    shares = {r["size_bytes"]: r["huge_page_share"] for r in json.loads(path.read_text())["records"]}
    assert sorted(shares) == [8, 4096, 65536, 1 << 20, 4 << 20]
    assert all(s is not None and s > 0.9 for s in shares.values()), shares


@pytest.mark.measures
def test_ratios_are_sane(pingpong_json):
    # The minimum over repetitions: a preemption by another process on a 2-core machine
    # inflates medians of one implementation, never the best repetition of both.
    def best(doc, impl, n):
        return next(r["t_us_min"] for r in doc["records"]
                    if r["impl"] == impl and r["size_bytes"] == n)

    shm, tcp = pingpong_json["shm"], pingpong_json["tcp"]
    for n in (8, 65536):
        ratio = best(shm, "kernel", n) / best(shm, "c-standalone", n)
        assert 0.2 < ratio < 5, f"kernel/C at {n} B = {ratio:.2f}: the same C loop?"
    # small messages through the TCP stack cost more than through shared memory
    assert best(tcp, "kernel", 8) > best(shm, "kernel", 8)


def test_thread_levels_are_measured_side_by_side(tmp_path):
    """One job per MPI_Init_thread level and round; every record says what it asked for
    and what MPI provided (MPI may give more than asked, never less for these)."""
    path = tmp_path / "levels.json"
    res = bench("pingpong", "--sizes", "8", "--impls", "kernel,c-standalone", "--reps", "2",
                "--rounds", "2", "--min-time", "0.002", "--thread-levels", "single,funneled",
                "--json", str(path))
    assert res.returncode == 0, res.stderr
    assert "kernel@single" in res.stdout and "kernel@funneled" in res.stdout, res.stdout
    doc = json.loads(path.read_text())
    assert doc["meta"]["settings"]["thread_levels"] == ["single", "funneled"]
    got = {(r["impl"], r["thread_level"]): r for r in doc["records"]}
    assert set(got) == {("kernel", "single"), ("kernel", "funneled"),
                        ("c-standalone", "single")}
    order = ["single", "funneled", "serialized", "multiple"]
    for level in ("single", "funneled"):
        r = got[("kernel", level)]
        assert order.index(r["thread_provided"]) >= order.index(level), r
        assert len(r["times_us"]) == 4  # 2 repetitions x 2 rounds, one job per round
    assert got[("c-standalone", "single")]["thread_provided"] is None
    # the meta says each level MPI provided; the records their median's interval
    assert set(doc["meta"]["thread_level"]) == {"single", "funneled"}
    assert all(r["ci_level"] == 0.95 and r["ci_lo_us"] is None for r in doc["records"])


def test_repetitions_until_the_interval_or_the_cap(tmp_path):
    """--ci adds rounds until the median's 95 % interval is narrow enough (here: any
    interval, which takes 6 repetitions), --max-reps stops a target never met; every job
    measures the barrier's exit skew and the meta carries it with the thread level."""
    docs = {}
    for name, target in (("loose", "1e9"), ("tight", "1e-9")):
        path = tmp_path / f"{name}.json"
        res = bench("pingpong", "--sizes", "8", "--impls", "kernel", "--reps", "3",
                    "--rounds", "1", "--min-time", "0.002", "--ci", target, "--max-reps", "9",
                    "--json", str(path))
        assert res.returncode == 0, res.stderr
        docs[name] = json.loads(path.read_text())
    loose, tight = docs["loose"]["records"][0], docs["tight"]["records"][0]
    assert len(loose["times_us"]) == 6 and loose["ci_reached"] and loose["ci_rel"] <= 1e9
    assert loose["ci_lo_us"] <= loose["t_us_median"] <= loose["ci_hi_us"]
    assert len(tight["times_us"]) == 9 and not tight["ci_reached"] and tight["max_reps"] == 9
    for name, rounds in (("loose", 2), ("tight", 3)):
        meta = docs[name]["meta"]
        assert meta["settings"]["rounds_run"] == rounds and meta["thread_level"] == "single"
        skew = meta["barrier_exit_skew"]
        assert skew["jobs"] == rounds and 0 <= skew["us_median"] <= skew["us_max"]
        assert skew["clock_offset_uncertainty_us"] > 0


def test_bad_arguments_fail_cleanly():
    res = bench("pingpong", "--sizes", "8,lots")
    assert res.returncode == 2 and "not a size" in res.stderr
    res = bench("pingpong", "--impls", "kernel,abacus", "--sizes", "8")
    assert res.returncode == 2 and "impl must be one of" in res.stderr
    assert bench("nosuchbench").returncode == 2
    res = bench("pingpong", "--sizes", "8", "--thread-levels", "single,lots")
    assert res.returncode == 2 and "thread level must be one of" in res.stderr


@pytest.mark.measures
def test_cluster_lifecycle_benchmark(tmp_path):
    """Cold start, reconnect from a new process, restart and stop are each timed."""
    from mpilab import cluster

    path = tmp_path / "cluster.json"
    res = bench("cluster", "--ranks", "2", "--reps", "1", "--json", str(path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(path.read_text())
    assert doc["meta"]["ranks"] == 2 and "oversubscribed" in doc["meta"]
    phases = {r["impl"]: r for r in doc["records"]}
    assert set(phases) == {"cold-start", "reconnect", "restart", "stop"}
    for r in phases.values():
        assert 0 < r["t_us_min"] <= r["t_us_median"] and r["ranks"] == 2
    # a reconnect reuses the running engines: it cannot cost a cold start
    assert phases["reconnect"]["t_us_min"] < phases["cold-start"]["t_us_min"]
    cid = doc["meta"]["settings"]["cluster_id"]
    assert cluster.cluster_processes(cid) == [], "the benchmark left engines running"


@pytest.mark.measures
def test_buffers_compares_page_kinds_and_mechanisms(tmp_path):
    """python -m mpilab.bench buffers: every kind of buffer under both large-message paths,
    each record saying its kind, mechanism and how much of it sat on huge pages."""
    from mpilab import buffers, runtime

    path = tmp_path / "buffers.json"
    res = bench("buffers", "--sizes", "4M", "--reps", "3", "--rounds", "2", "--min-time",
                "0.005", "--json", str(path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(path.read_text())
    settings = doc["meta"]["settings"]
    assert settings["transparent_hugepages"] == buffers.transparent_hugepages()
    mechanisms = ["copy-in-out"] + (["single-copy"] if runtime.cma_works() else [])
    assert sorted(settings["mechanisms"]) == ["copy-in-out", "single-copy"]
    got = {(r["mechanism"], r["buffer"]): r for r in doc["records"]}
    assert set(got) == {(m, k) for m in mechanisms for k in buffers.BUFFER_KINDS}
    for r in got.values():
        assert r["size_bytes"] == 4 << 20 and len(r["times_us"]) == 6  # 3 reps x 2 rounds
        assert 0 < r["t_us_min"] <= r["t_us_median"] and r["mode"] == "oneway"
    assert "copy-in-out/4k-pages" in res.stdout and "transparent huge pages" in res.stdout
    if buffers.transparent_hugepages() in ("madvise", "always"):
        assert got[("copy-in-out", "huge-pages")]["huge_page_share"] > 0.9
    assert got[("copy-in-out", "4k-pages")]["huge_page_share"] == 0
    # sane, not timed: 4 MiB really moved in every case (faster than memory could copy it
    # means it did not), and no case is stalled (the slow copy-in/out mode measured here is
    # about 2 GB/s, 14x the fastest single copy; see lecture 01)
    for key, r in got.items():
        gb_per_s = r["size_bytes"] / r["t_us_median"] / 1e3
        assert 0.1 < gb_per_s < 200, (key, r["t_us_median"])
    times = [r["t_us_median"] for r in got.values()]
    assert max(times) / min(times) < 100, times


def test_progress_compares_overlap_with_and_without_testall(tmp_path):
    """python -m mpilab.bench progress on this host: the three modes side by side, each
    step's MPI time and computing, the shares hidden, the result checked."""
    from mpilab.halo import progress

    path = tmp_path / "progress.json"
    res = bench("progress", "--nx", "8192", "--ny", "64", "--steps", "6", "--last", "4",
                "--rounds", "2", "--json", str(path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(path.read_text())
    recs = {r["mode"]: r for r in doc["records"]}
    assert list(recs) == ["nonblocking", "overlap", "overlap-test"]
    for r in recs.values():
        assert r["valid"] is True and r["emulated"] is False and r["ranks"] == 2
        assert len(r["times_us"]) == 2 * 4 * 2  # ranks x recorded steps x rounds
        assert 0 < r["mpi_us_median"] < r["t_us_median"]
        assert 0 < r["compute_us_median"] < r["t_us_median"]
        assert 0 <= r["hidden"] <= 1 and 0 <= r["overlap_osu"] <= 1
    assert recs["nonblocking"]["hidden"] == 0  # the exchange alone, against itself
    settings = doc["meta"]["settings"]
    assert settings["exchange_alone_us"] == recs["nonblocking"]["mpi_us_median"]
    assert "overlap-test" in res.stdout and "hidden" in res.stdout
    # the measures themselves
    assert progress.hidden_share(10.0, 100.0) == 0.9
    assert progress.hidden_share(150.0, 100.0) == 0.0
    assert progress.osu_overlap(1000.0, 1000.0, 100.0) == 1.0   # the step is the computing
    assert progress.osu_overlap(1100.0, 1000.0, 100.0) == 0.0   # computing + exchange
    assert progress.osu_overlap(1050.0, 1000.0, 100.0) == 0.5
    with pytest.raises(ValueError, match="must include 'nonblocking'"):
        progress.run(modes="overlap,overlap-test")
    bad = bench("progress", "--modes", "overlap,telepathy")
    assert bad.returncode == 2 and "telepathy" in bad.stderr


def test_progress_iallreduce_case_is_checked_and_calibrated(tmp_path):
    """--case iallreduce: OSU's three ways, every sum checked exact, the computation's
    sweeps chosen from the allreduce alone (at least one per MPI_Test)."""
    path = tmp_path / "iar.json"
    res = bench("progress", "--case", "iallreduce", "--n", "4096", "--last", "3",
                "--rounds", "2", "--ranks", "3", "--json", str(path))   # 3 ranks: oversubscribed
    assert res.returncode == 0, res.stderr
    doc = json.loads(path.read_text())
    recs = {r["mode"]: r for r in doc["records"]}
    assert list(recs) == ["allreduce", "iallreduce", "iallreduce-test"]
    for r in recs.values():
        assert r["valid"] is True and r["size_bytes"] == 8 * 4096 and r["ranks"] == 3
        assert len(r["times_us"]) == 3 * 3 * 2  # ranks x calls x rounds
        assert r["passes"] >= 16 and r["oversubscribed"] == (doc["meta"]["cores"] < 3)
    assert "allreduce of 4096 doubles" in res.stdout
    bad = bench("progress", "--case", "iallreduce", "--modes", "iallreduce")
    assert bad.returncode == 2 and "must include 'allreduce'" in bad.stderr


@pytest.mark.measures
def test_pingpong_window_mode_runs_in_every_implementation(tmp_path):
    """--mode window (osu_bw: 64 MPI_Isend at a time, one acknowledgement per window) in
    the Cython kernel, the standalone C program and mpi4py: per-message times, sane."""
    path = tmp_path / "window.json"
    res = bench("pingpong", "--mode", "window", "--sizes", "8,64K", "--reps", "2",
                "--rounds", "1", "--min-time", "0.002", "--json", str(path))
    assert res.returncode == 0, res.stderr
    recs = json.loads(path.read_text())["records"]
    assert {(r["impl"], r["size_bytes"]) for r in recs} == {
        (i, n) for i in ("kernel", "c-standalone", "mpi4py") for n in (8, 65536)}
    assert all(r["mode"] == "window" and 0 < r["t_us_median"] < 1e4 for r in recs)
    # 64 KiB carry 8192 times the bytes of 8 B: it cannot take less time per message
    t = {(r["impl"], r["size_bytes"]): r["t_us_median"] for r in recs}
    assert all(t[(i, 65536)] > t[(i, 8)] for i in ("kernel", "c-standalone", "mpi4py"))


@pytest.mark.measures
def test_forwarding_measures_a_resent_and_a_forwarded_array_side_by_side(tmp_path):
    """python -m mpilab.bench forwarding: per size one record per ping-pong, every round's
    time and ratio, the ratio computed from the same round's two times; sane, not fast."""
    path = tmp_path / "forwarding.json"
    res = bench("forwarding", "--sizes", "64K,1M", "--reps", "3", "--rounds", "2",
                "--pause", "0", "--json", str(path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(path.read_text())
    recs = {(r["size_bytes"], r["impl"]): r for r in doc["records"]}
    assert sorted(recs) == [(65536, "forwarded"), (65536, "resent"), (1 << 20, "forwarded"),
                            (1 << 20, "resent")]
    for n in (65536, 1 << 20):
        rs, fw = recs[(n, "resent")], recs[(n, "forwarded")]
        assert rs["ranks"] == fw["ranks"] == 2 and len(fw["times_us"]) == 2  # a time a round
        assert fw["ratios"] == pytest.approx(
            [f / r for f, r in zip(fw["times_us"], rs["times_us"], strict=True)])
        assert fw["ratio_max"] == pytest.approx(max(fw["ratios"]))
        # a message of n bytes takes longer than one of 8, whichever array it leaves from
        assert min(rs["t_us_min"], fw["t_us_min"]) > rs["alpha_us"] > 0
    assert doc["meta"]["settings"]["rounds"] == 2 and "ratio, median" in res.stdout
    bad = bench("forwarding", "--sizes", "4")
    assert bad.returncode == 2 and "size must be >= 8" in bad.stderr


@pytest.mark.measures
def test_contention_measures_pairs_side_by_side(tmp_path):
    """python -m mpilab.bench contention on this host: one pair alone beside two at once
    (oversubscribed on fewer than 4 cores, and said so), a record per size and pair count,
    bandwidths that add up."""
    from mpilab import pingpong, runtime

    path = tmp_path / "contention.json"
    res = bench("contention", "--sizes", "8,64K", "--pairs", "2", "--reps", "3",
                "--rounds", "2", "--min-time", "0.003", "--json", str(path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(path.read_text())
    recs = {(r["size_bytes"], r["pairs"]): r for r in doc["records"]}
    assert sorted(recs) == [(8, 1), (8, 2), (65536, 1), (65536, 2)]  # 1 pair added
    cores = runtime.usable_cores()
    for (n, k), r in recs.items():
        assert r["ranks"] == 2 * k and r["mode"] == "oneway" and r["emulated"] is False
        assert len(r["times_us"]) == 3 * 2  # reps x rounds
        assert r["oversubscribed"] is (2 * k > cores)
        assert r["aggregate_MBps"] == pytest.approx(k * r["pair_bandwidth_MBps"])
        assert r["pair_bandwidth_MBps"] == pytest.approx(n / r["t_us_median"])
    assert recs[(8, 1)]["slowdown"] == 1.0 and recs[(65536, 1)]["slowdown"] == 1.0
    # sane, not fast: two pairs neither beat one by much nor stall
    assert 0.5 < recs[(65536, 2)]["slowdown"] < 50
    assert "oversubscribed" in res.stdout or cores >= 4
    assert doc["meta"]["settings"]["pairs"] == [1, 2]
    assert pingpong.default_pairs(1) == [1] and pingpong.default_pairs(2) == [1]
    assert pingpong.default_pairs(16) == [1, 2, 4, 8]
    bad = bench("contention", "--pairs", "0")
    assert bad.returncode == 2 and "pairs" in bad.stderr
