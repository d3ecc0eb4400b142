"""The source papers' published figures, as data (never measured here).

Lectures set these beside what they measure on the machine in use; keeping them in one
place means two lectures that cite the same table cite the same numbers. Each table is
``{"about": ..., "columns": {...}}`` with the paper's own values; :func:`table` gives a
pandas DataFrame indexed as the paper indexed it.
"""

from __future__ import annotations

__all__ = ["PINGPONG", "table"]

#: A. A. Myasishchev, transfer of N doubles vs the local copy a(i) = b(i) (Tables 1-3):
#: one-way transfer time (µs), copy time (µs) and their ratio, by N.
PINGPONG: dict[str, dict] = {
    "T1: 2 × Pentium IV 3.0 GHz, Fast Ethernet": {
        "about": "two single-core Pentium IV 3.0 GHz PCs of a BCCD cluster over 100 Mbit/s "
                 "Fast Ethernet, MPICH 1.2.7",
        "index": [5, 10, 100, 500, 1000, 2000, 3000, 4000],
        "columns": {
            "transfer_us": [23.3, 24.0, 80, 381, 756, 1507, 2288, 3064],
            "copy_us": [0.028, 0.05, 0.47, 2.3, 4.6, 8.9, 13.9, 17.5],
            "ratio": [832, 480, 170.8, 165.7, 164.3, 169.3, 164.6, 175.0],
        },
    },
    "T2: Athlon 64x2 4000+, shared memory": {
        "about": "one dual-core Athlon 64x2 4000+, MPICH 1.2.7 ch_shmem",
        "index": [1, 10, 100, 500, 1000, 2000, 3000, 4000, 5000, 10000],
        "columns": {
            "transfer_us": [3.5, 3.2, 4.5, 11.8, 16.9, 28.9, 46.2, 61.1, 73.1, 139.0],
            "copy_us": [0.01, 0.076, 0.64, 3.4, 6.2, 12.4, 19.0, 25.5, 32.7, 70.3],
            "ratio": [350.0, 42.1, 7.0, 3.5, 2.7, 2.3, 2.4, 2.4, 2.2, 2.0],
        },
    },
    "T3: Pentium E2160, shared memory": {
        "about": "one dual-core Pentium E2160, MPICH 1.2.7 ch_shmem",
        "index": [1, 10, 100, 500, 1000, 2000, 3000, 4000, 5000, 10000, 20000, 30000, 40000],
        "columns": {
            "transfer_us": [5.3, 5.2, 5.7, 8.4, 8.9, 13.4, 14.2, 16.4, 18.5, 52.8, 84.7,
                            169.6, 207.0],
            "copy_us": [0.013, 0.073, 0.73, 3.60, 7.20, 14.2, 15.10, 19.60, 26.80, 49.20,
                        98.90, 147.60, 210.10],
            "ratio": [406.9, 71.2, 7.8, 2.3, 1.2, 0.9, 0.9, 0.8, 0.7, 1.1, 0.9, 1.1, 1.0],
        },
    },
}


def table(tables: dict[str, dict], name: str, index_name: str = "N doubles"):
    """One of a paper's tables as a DataFrame (the paper's figures, labelled as such in
    ``attrs["source"]``)."""
    import pandas as pd

    t = tables[name]
    df = pd.DataFrame(t["columns"], index=pd.Index(t["index"], name=index_name))
    df.attrs["source"] = f"published figures ({name}: {t['about']}), not measured here"
    return df
