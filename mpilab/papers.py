"""The source papers' published figures, as data (never measured here).

Lectures set these beside what they measure on the machine in use; keeping them in one
place means two lectures that cite the same table cite the same numbers. The numbers are
in ``papers.json`` beside this file, as the papers printed them; each table is
``{"about": ..., "index": [...], "columns": {...}}``; :func:`table` gives a pandas
DataFrame indexed as the paper indexed it.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["PINGPONG", "HALO_K1", "SHM_HYBRID", "table"]

_PUBLISHED = json.loads((Path(__file__).with_name("papers.json")).read_text(encoding="utf-8"))

#: A. A. Myasishchev, transfer of N doubles vs the local copy a(i) = b(i) (Tables 1-3):
#: one-way transfer time (µs), copy time (µs) and their ratio, by N.
PINGPONG: dict[str, dict] = _PUBLISHED["PINGPONG"]

#: Reshetova, Cheverda, Koinov, 2D acoustic wave (Tables 1-3): seconds for the whole run
#: with blocking MPI_Send/MPI_Recv, nonblocking MPI_Isend/MPI_Irecv (interior computed
#: while messages fly, then the boundary) and Coarray Fortran, by subdomain edge (each
#: process owns sub x sub points); K1 = blocking / nonblocking, K2 = blocking / coarray.
HALO_K1: dict[str, dict] = _PUBLISHED["HALO_K1"]

#: Souza, Panetta, Stephany, 2D heat on 4800 x 4800 points, 5000 steps, Fortran 90
#: (Table 4): MPI S/R against the hybrid S/R between nodes + SHM-NC inside a node, by
#: N1-N2-N3 = processes - processes per node - nodes (Cray, 2 x 22-core Broadwell per
#: node); seconds, speedup and efficiency against the sequential 333.59 s, as printed
#: (the S/R speedup of 64-32-2, 20.52, is not 333.59 / 15.26 = 21.9).
SHM_HYBRID: dict[str, dict] = _PUBLISHED["SHM_HYBRID"]


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
