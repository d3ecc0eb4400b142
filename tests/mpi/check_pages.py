"""What pages the heat kernels' fields sit on, and what the records say of them.

Run by tests/test_halo.py under mpiexec on 1 and 2 ranks. The two-sided kernel puts its
fields on huge pages or on 4 KiB pages as asked, whatever was allocated and freed before
in the same process (memory reused from malloc's heap kept its first pages: fields on
huge pages asked for after fields on 4 KiB pages were freed got 4 KiB pages);
`halo.huge_share` reads what Linux gave, for the course's fields and for the MPI
library's windows, and `time_halo`'s records carry it (the least over their timed calls). Arguments that make no sense
raise the same ValueError on every rank.

Prints one line "PAGES <json>" on rank 0: what the windows got, so that the test can
compare it with the machine's settings.
"""

import json

from mpicheck import check, comm, expect, finish, raises, rank

from mpilab import buffers, halo

N = 600  # 2.8 MiB a field: whole 2 MiB extents inside it
THP = buffers.transparent_hugepages()
HUGE_OK = THP in ("always", "madvise")
seen = {}


def share(mode, **kw):
    return halo.huge_share(comm, "heat", mode, nx=N, ny=N, **kw)


@check
def two_sided_fields_get_the_pages_asked_for_in_any_order():
    order = ["huge-pages", "4k-pages", "huge-pages", "4k-pages", "huge-pages"]
    got = [share("blocking", pages=p) for p in order]
    for p, s in zip(order, got, strict=True):
        expect(s is not None and 0.0 <= s <= 1.0, f"{p}: share {s!r}")
        if s is None:
            continue
        if p == "4k-pages":
            expect(s == 0.0, f"fields on 4 KiB pages asked for: {s:.2f} of them huge")
        elif HUGE_OK:
            expect(s >= 0.9, f"fields on huge pages asked for (THP {THP}): only {s:.2f} "
                             f"huge, in the order {order} -> {got}")


@check
def the_windows_pages_are_read_not_assumed():
    for mode in ("shm", "shm-nc", "put-fence"):
        s = share(mode)
        expect(s is not None and 0.0 <= s <= 1.0, f"{mode}: share {s!r}")
        seen[mode] = s


@check
def records_say_what_the_fields_were_asked_for_and_got():
    recs = halo.time_halo(comm, "heat", ["blocking", "shm"], nx=N, ny=N, reps=2, iters=2,
                          rounds=2, pages=["huge-pages", "4k-pages"])
    got = [(r["mode"], r["pages"]) for r in recs]
    expect(got == [("blocking", "huge-pages"), ("blocking", "4k-pages"), ("shm", None)],
           f"one record per two-sided mode and kind of page, one per window: {got}")
    for r in recs:
        s = r["huge_page_share"]
        expect(s is not None and 0.0 <= s <= 1.0, f"{r['mode']} {r['pages']}: share {s!r}")
        if r["pages"] is not None:
            expect(s == share("blocking", pages=r["pages"]),
                   f"{r['pages']}: the record's share {s} is not what the fields get")
    seen["record-shm"] = recs[-1]["huge_page_share"]
    wave = halo.time_halo(comm, "wave", ["blocking"], nx=64, ny=64, reps=1, iters=1)
    expect("pages" not in wave[0], "the wave's records claim no page kind")


@check
def bad_arguments_raise_everywhere():
    raises(ValueError, halo.time_halo, comm, "heat", "blocking", nx=N, ny=N, pages="2m")
    raises(ValueError, halo.time_halo, comm, "wave", "blocking", nx=N, ny=N,
           pages="4k-pages")
    raises(ValueError, share, "shm", pages="4k-pages")
    raises(ValueError, halo.huge_share, comm, "wave", "blocking", nx=N, ny=N)
    raises(ValueError, share, "blocking", pages="numpy")


if rank == 0:
    print("PAGES " + json.dumps({"thp": THP, "windows": seen}), flush=True)
finish(together=True)
