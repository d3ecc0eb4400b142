"""What MPI this machine has and how to launch it: the one place that knows.

Everything that starts MPI processes (the cluster, the benchmarks, the tests) asks this
package for the launcher command, its arguments and environment, so running as root,
more ranks than cores, the transport and container quirks are handled once. One module
per concern:

``discovery``
    which MPI library (``$MPILAB_MPI``), its ``mpicc`` and ``mpiexec``, the launcher's
    family and version, the library mpi4py loaded, its eager limits;
``machine``
    what this process may use: cores (affinity and cgroup quota), memory, /dev/shm,
    the sweep sizes that fit, the host facts every record carries;
``launching``
    :func:`launch` and its :class:`Launch`, the environment a launcher must not inherit
    from an initialised MPI, whether single-copy transfers work here;
``cleanup``
    the shared-memory segments and hydra files that ended jobs leave behind.

Every public name is here as ``runtime.<name>``. Nothing in the package imports mpi4py
or numpy at import time, nor any other mpilab module, so ``setup.py`` can load it from
its files to find the compiler wrapper.
"""

from __future__ import annotations

from .cleanup import (
    HYDRA_PROCESSES,
    HYDRA_TOPOLOGY_PREFIX,
    SEGMENT_PREFIXES,
    leaked_shm_segments,
    release_singleton_segments,
    remove_stale_hydra_files,
    remove_stale_session_dirs,
    remove_stale_shm_segments,
    shm_segments,
)
from .discovery import (
    LIBRARIES,
    MPINotFound,
    eager_limits,
    env_bins,
    launcher_family,
    library_info,
    library_info_of_a_fresh_process,
    mpicc,
    mpiexec,
    openmpi_major,
    selected_library,
)
from .launching import (
    THREAD_LEVELS,
    TRANSPORTS,
    Launch,
    clean_env,
    cma_works,
    launch,
    without_mpi_singleton_env,
)
from .machine import (
    SMALL_MEMORY,
    cgroup_dirs,
    cpu_quota,
    is_root,
    last_level_cache,
    machine_info,
    memory_limit,
    physical_memory,
    rank_counts,
    resources,
    shm_size,
    small_machine,
    usable_cores,
)

__all__ = [
    "HYDRA_PROCESSES", "HYDRA_TOPOLOGY_PREFIX", "LIBRARIES", "SEGMENT_PREFIXES",
    "SMALL_MEMORY", "THREAD_LEVELS", "TRANSPORTS", "Launch", "MPINotFound", "cgroup_dirs",
    "clean_env", "cma_works", "cpu_quota", "eager_limits", "env_bins", "is_root",
    "last_level_cache", "launch", "launcher_family", "leaked_shm_segments", "library_info",
    "library_info_of_a_fresh_process", "machine_info",
    "memory_limit", "mpicc", "mpiexec", "openmpi_major", "physical_memory", "rank_counts",
    "release_singleton_segments", "remove_stale_hydra_files", "remove_stale_session_dirs",
    "remove_stale_shm_segments",
    "resources", "selected_library", "shm_segments", "shm_size", "small_machine",
    "usable_cores", "without_mpi_singleton_env",
]
