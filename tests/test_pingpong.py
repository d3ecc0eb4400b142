"""The ping-pong's owner (mpilab.pingpong) on a real cluster: its records, the one-way and
local-copy modes, forwarding, bad arguments, and the graders' one-way times beside load."""

import numpy as np
import pytest

from mpilab import pingpong


@pytest.mark.measures
def test_pingpong_records_on_the_cluster(lab):
    df = pingpong.pingpong(lab, [8, 65536], impls=("kernel", "mpi4py"), reps=3, min_time=0.002)
    assert sorted(df["impl"].unique()) == ["kernel", "mpi4py"]
    assert list(df["size_bytes"].unique()) == [8, 65536]
    assert (df["t_us_min"] <= df["t_us_median"]).all()
    assert (df["t_us_median"] <= df["t_us_max"]).all() and (df["t_us_min"] > 0).all()
    big = df[df["size_bytes"] == 65536]
    np.testing.assert_allclose(big["bandwidth_MBps"], 65536 / big["t_us_median"])
    for col in ("hostname", "cores", "mpi_library", "mpi_version", "transport", "ranks",
                "oversubscribed"):
        assert col in df.columns, col
    assert (df["ranks"] == 4).all() and (df["transport"] == "shm").all()
    assert bool(df["oversubscribed"].iloc[0]) == (4 > df["cores"].iloc[0])
    # 64 KiB can never be faster than 8 B over the same path, unless the time is that of
    # waiting for a core: Debian's MPICH busy-polls without yielding when oversubscribed
    # (about 4 ms per message here, whatever the size)
    best = df.groupby(["impl", "size_bytes"])["t_us_min"].first()
    if not (bool(df["oversubscribed"].iloc[0]) and df["mpi_library"].iloc[0] == "mpich"):
        assert best[("kernel", 65536)] > best[("kernel", 8)]


def test_oneway_and_memcopy(lab):
    df = pingpong.pingpong(lab, [1024], mode="oneway", reps=2, min_time=0.002)
    assert df["mode"].tolist() == ["oneway"]
    cp = pingpong.memcopy(lab, [8, 80000], method="loop", reps=3, min_time=0.001)
    assert cp["impl"].tolist() == ["memcopy-loop"] * 2 and (cp["ranks"] == 1).all()
    with pytest.raises(ValueError, match="multiples of 8"):
        pingpong.memcopy(lab, [12])
    with pytest.raises(Exception, match="method must be one of"):  # raised on rank 0 only
        pingpong.memcopy(lab, [8], method="teleport", timeout=30)
    assert lab.healthy()


@pytest.mark.measures
def test_forwarding_times_on_the_cluster(lab):
    """Both ping-pongs and the allgathers run in one loop on every rank; a 1 MiB message
    takes longer than 8 B whichever array it is sent from; the record says where it ran."""
    got = pingpong.forwarding(lab, 1 << 20, reps=3)
    assert got["nbytes"] == 1 << 20 and got["ranks"] == 4 and got["oversubscribed"] is (
        4 > got["cores"])
    assert {"alpha_us", "resent_us", "forwarded_us", "mpi_library", "hostname"} <= set(got)
    assert 0 < got["alpha_us"] < min(got["resent_us"], got["forwarded_us"])
    assert got["ratio"] == got["forwarded_us"] / got["resent_us"]


def test_bad_arguments_are_python_errors(lab):
    from mpilab import cluster

    with pytest.raises(cluster.RankError, match="impl must be one of"):
        pingpong.pingpong(lab, [8], impls=("carrier-pigeon",))
    with pytest.raises(cluster.RankError, match="sizes must be >= 0"):
        pingpong.pingpong(lab, [-8])
    assert lab.healthy()


def _one_way_beside(busy: int) -> dict:
    """The script's times beside a second job of `busy` spinning processes (none: alone),
    the load the grading-errors bench uses (:func:`mpilab.grading.error_rates.load`)."""
    import json
    import sys
    from pathlib import Path

    from mpilab import jobs, runtime
    from mpilab.grading.error_rates import load

    script = Path(__file__).parent / "mpi" / "one_way_beside_load.py"
    with load(busy):
        res = jobs.run(runtime.launch(2), [sys.executable, str(script)], timeout=120)
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.measures
def test_one_way_times_of_big_messages_hold_beside_busy_processes():
    """Lab 01's grader measures 4 MiB beside whatever else runs: a repetition short
    enough to fit in a time slice keeps its best as it is alone, where repetitions of many
    round trips are cut by the scheduler every time (on the course's 2-core Xeon VM,
    2026-11-28: 4 MiB 277-301 µs alone and 283-297 beside 2 busy processes; with 10 round
    trips a repetition 293-316 alone, 496-505 beside). The long repetitions last 12 ms or
    more (tests/mpi/one_way_beside_load.py): on the Zen 4 EPYC VM, 10 round trips of
    4 MiB took 3.4 ms and were not cut (171 against 178 µs beside, 2026-11-29). Measured
    alone and beside in one test."""
    alone, beside = _one_way_beside(0), _one_way_beside(2)
    big = 1  # 4 MiB
    assert beside["course"][big] < 1.3 * alone["course"][big], (alone, beside)
    # the test can fail: the fixed repetitions do slow down beside the load (it has
    # cores to share: 2 ranks and 2 busy processes on at most 2 cores)
    from mpilab import runtime

    if runtime.usable_cores() <= 2:
        assert beside["fixed"][big] > 1.3 * beside["course"][big], (alone, beside)
