"""The source papers' published figures, as data (never measured here).

Lectures set these beside what they measure on the machine in use; keeping them in one
place means two lectures that cite the same table cite the same numbers. Each table is
``{"about": ..., "columns": {...}}`` with the paper's own values; :func:`table` gives a
pandas DataFrame indexed as the paper indexed it.
"""

from __future__ import annotations

__all__ = ["PINGPONG", "HALO_K1", "SHM_HYBRID", "table"]

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

#: Reshetova, Cheverda, Koinov, 2D acoustic wave (Tables 1-3): seconds for the whole run
#: with blocking MPI_Send/MPI_Recv, nonblocking MPI_Isend/MPI_Irecv (interior computed
#: while messages fly, then the boundary) and Coarray Fortran, by subdomain edge (each
#: process owns sub x sub points); K1 = blocking / nonblocking, K2 = blocking / coarray.
HALO_K1: dict[str, dict] = {
    "T1: 32 processes, 1 node": {
        "about": "NKS-1P, Siberian Supercomputer Center: 32 processes on one node, "
                 "shared memory",
        "processes": 32, "nodes": 1,
        "index": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
        "columns": {
            "blocking_s": [0.7112, 0.8023, 0.9644, 1.7282, 13.4545, 58.0052, 235.748,
                           950.391, 7289.87],
            "nonblocking_s": [0.8354, 0.9521, 1.0242, 1.9274, 13.2655, 55.7663, 231.423,
                              938.779, 7224.81],
            "coarray_s": [1.8702, 1.5837, 1.7398, 2.9875, 15.2554, 59.4654, 229.871,
                          931.316, 7197.64],
            "K1": [0.85133, 0.84266, 0.94161, 0.89665, 1.01425, 1.04015, 1.01869, 1.01237,
                   1.00901],
            "K2": [0.38028, 0.50660, 0.55432, 0.57848, 0.88195, 0.97544, 1.02557, 1.02048,
                   1.01281],
        },
    },
    "T2: 81 processes, 3 nodes": {
        "about": "NKS-1P, Siberian Supercomputer Center: 81 processes on 3 nodes",
        "processes": 81, "nodes": 3,
        "index": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144],
        "columns": {
            "blocking_s": [1.9435, 1.8814, 2.3584, 4.3914, 33.6353, 147.062, 596.154,
                           2438.56, 18280.8, 72257.6],
            "nonblocking_s": [2.0923, 2.0553, 2.7774, 4.2807, 33.3587, 139.319, 546.412,
                              2268.14, 18191.1, 68475.1],
            "coarray_s": [15.7352, 18.9951, 26.5697, 41.3869, 78.7507, 203.012, 669.766,
                          3201.47, 19032.1, 70315.3],
            "K1": [0.92888, 0.91539, 0.84914, 1.02586, 1.00829, 1.05558, 1.09103, 1.07514,
                   1.00493, 1.05523],
            "K2": [0.12351, 0.09905, 0.08876, 0.10611, 0.42711, 0.72440, 0.89009, 0.76170,
                   0.96052, 1.02762],
        },
    },
    "T3: 169 processes, 6 nodes": {
        "about": "NKS-1P, Siberian Supercomputer Center: 169 processes on 6 nodes",
        "processes": 169, "nodes": 6,
        "index": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144],
        "columns": {
            "blocking_s": [3.8883, 5.5972, 6.0715, 9.8369, 71.9304, 308.099, 1286.59,
                           5112.81, 39476.1, 146576.0],
            "nonblocking_s": [4.6066, 5.0899, 5.5972, 9.6963, 69.1176, 289.368, 1235.63,
                              4698.08, 39346.7, 145210.0],
            "coarray_s": [64.4715, 69.8915, 85.9082, 125.546, 225.179, 503.697, 1701.49,
                          7261.31, 40761.5, 148365.0],
            "K1": [0.84407, 1.09967, 1.08474, 1.01450, 1.04070, 1.06473, 1.04124, 1.08828,
                   1.00329, 1.00941],
            "K2": [0.06031, 0.08008, 0.07067, 0.07835, 0.31944, 0.61168, 0.75615, 0.70412,
                   0.96847, 0.987941],
        },
    },
}

#: Souza, Panetta, Stephany, 2D heat on 4800 x 4800 points, 5000 steps, Fortran 90
#: (Table 4): MPI S/R against the hybrid S/R between nodes + SHM-NC inside a node, by
#: N1-N2-N3 = processes - processes per node - nodes (Cray, 2 x 22-core Broadwell per
#: node); seconds, speedup and efficiency against the sequential 333.59 s, as printed
#: (the S/R speedup of 64-32-2, 20.52, is not 333.59 / 15.26 = 21.9).
SHM_HYBRID: dict[str, dict] = {
    "T4: S/R vs S/R + SHM-NC, up to 64 nodes": {
        "about": "Cray XC50 nodes of two 22-core Xeon E5-2699 v4, 4800² heat, 5000 steps, "
                 "Fortran 90 (PGI -O3), mean of 5 runs; sequential 333.59 s",
        "index": ["1-1-1", "4-4-1", "9-9-1", "16-16-1", "25-25-1", "36-36-1", "64-32-2",
                  "100-25-4", "144-36-4", "225-25-9", "256-32-8", "400-40-10", "576-36-16",
                  "625-25-25", "900-36-25", "1024-32-32", "1600-40-40", "2304-36-64"],
        "columns": {
            "processes": [1, 4, 9, 16, 25, 36, 64, 100, 144, 225, 256, 400, 576, 625, 900,
                          1024, 1600, 2304],
            "per_node": [1, 4, 9, 16, 25, 36, 32, 25, 36, 25, 32, 40, 36, 25, 36, 32, 40,
                         36],
            "nodes": [1, 1, 1, 1, 1, 1, 2, 4, 4, 9, 8, 10, 16, 25, 25, 32, 40, 64],
            "sr_s": [343.84, 78.36, 48.07, 44.36, 38.56, 26.82, 15.26, 8.17, 2.61, 1.53,
                     1.36, 0.94, 0.70, 0.63, 0.48, 0.43, 0.38, 0.36],
            "sr_speedup": [0.97, 4.26, 6.94, 7.52, 8.65, 12.44, 20.52, 40.83, 127.81, 218.03,
                           245.29, 354.88, 476.56, 529.51, 694.98, 775.79, 877.87, 926.64],
            "sr_efficiency": [0.97, 1.06, 0.77, 0.47, 0.35, 0.35, 0.32, 0.41, 0.89, 0.97,
                              0.96, 0.89, 0.83, 0.85, 0.77, 0.76, 0.55, 0.40],
            "hybrid_s": [450.87, 113.66, 54.05, 44.85, 40.41, 28.47, 16.77, 10.06, 6.24, 4.60,
                         4.33, 3.14, 2.28, 1.88, 1.61, 1.43, 1.29, 1.05],
            "hybrid_speedup": [0.74, 2.93, 6.17, 7.44, 8.26, 11.72, 19.89, 33.16, 53.46,
                               72.52, 77.04, 106.24, 146.31, 177.44, 207.20, 233.28, 258.60,
                               317.70],
            "hybrid_efficiency": [0.74, 0.73, 0.69, 0.46, 0.33, 0.33, 0.31, 0.33, 0.37, 0.32,
                                  0.30, 0.27, 0.25, 0.28, 0.23, 0.23, 0.16, 0.14],
        },
    },
}


def table(tables: dict[str, dict], name: str, index_name: str = "N doubles"):
    """One of a paper's tables as a DataFrame (the paper's figures, labelled as such in
    ``attrs["source"]``).

    Parameters
    ----------
    tables : dict
        One paper's tables: :data:`PINGPONG`, :data:`HALO_K1` or :data:`SHM_HYBRID`.
    name : str
        The table's key in `tables` (``"T1: 2 × Pentium IV 3.0 GHz, Fast Ethernet"``).
    index_name : str, optional
        Name of the index, what the paper's rows are (default ``"N doubles"``).

    Returns
    -------
    pandas.DataFrame
        The table's ``columns`` (in their own units: ``_us`` µs, ``_s`` seconds) indexed
        by its ``index``; ``attrs["source"]`` names the table and the machine it was
        published for.
    """
    import pandas as pd

    t = tables[name]
    df = pd.DataFrame(t["columns"], index=pd.Index(t["index"], name=index_name))
    df.attrs["source"] = f"published figures ({name}: {t['about']}), not measured here"
    return df
