"""Sweeps: a grid over methods x hyperparameters x datasets x observations x seeds, one command.

A sweep file (YAML/TOML/JSON) names the grid::

    name: yeast-grid
    datasets: [yeast]                 # feature datasets, `extract` folders, or image datasets
    methods: [an, em, em_apl, gr]
    seeds: [0, 1, 2]
    lrs: [0.001, 0.003, 0.01]
    batch_sizes: [64]
    observations: [single_positive]
    hparams:                          # per-method grids (lists are swept, scalars fixed)
      em: {alpha: [0.05, 0.1, 0.2]}
    settings: {epochs: 20}            # anything else the trainer takes (TrainConfig fields for images)
    store: results.db                 # relative to the sweep file's folder

An empty sweep file is refused rather than run with defaults. The grid is made one run at a
time (:func:`iter_runs`; :func:`grid_size` counts it), so its size costs no memory; a grid of
more than :data:`MAX_GRID_RUNS` runs is refused when the file is read.

Every grid point is one *run* with a stable id (a hash of its resolved settings). Runs whose
id is already in the store as finished are skipped, so a killed sweep resumes where it
stopped, losing at most the runs in progress (image runs even resume from their last epoch
checkpoint). A run that raises is recorded with its error and the sweep goes on. Only the
process running the sweep writes the store, whichever backend trains the runs.

Several sweeps may work on one store at once (``spmlkit sweep`` started twice, on one
machine or on several that share the file): each claims a run in the store before starting
it, so together they run each grid point once, and each reports how many runs it left to the
others. The store must sit on a file system with working locks (not most NFS/SMB mounts).

Stopping: Ctrl-C or SIGTERM (under :func:`sigterm_stops_sweep`, as ``spmlkit sweep`` runs)
stop the sweep within seconds -- runs not started are cancelled, the workers terminated,
finished runs recorded, leases released -- and the same command resumes.

The modules, one job each (docs/architecture.md, "Many runs at once"):

- :mod:`~spmlkit.experiments.sweep.spec`: the sweep file, its checks, the grid's runs and ids;
- :mod:`~spmlkit.experiments.sweep.execute`: a run's configuration; training a run or a group
  of runs into records (what every backend calls);
- :mod:`~spmlkit.experiments.sweep.claims`: leases, their heartbeat, and records in the store;
- :mod:`~spmlkit.experiments.sweep.executor`: the interface a backend implements;
- :mod:`~spmlkit.experiments.sweep.processes` (``backend="process"``, in this process or in
  worker processes) and :mod:`~spmlkit.experiments.sweep.ray_backend` (``backend="ray"``);
- :mod:`~spmlkit.experiments.sweep.backends`: backend names -> executors;
- :mod:`~spmlkit.experiments.sweep.cores`: workers and threads from the usable CPUs;
- :mod:`~spmlkit.experiments.sweep.run`: :func:`run_sweep`, the loop over all of them.
"""

from __future__ import annotations

from .claims import LEASE_SECONDS, RENEW_SECONDS
from .execute import execute_run, execute_runs, run_config
from .run import SweepResult, SweepTerminated, run_sweep, sigterm_stops_sweep
from .spec import MAX_GRID_RUNS, SweepSpec, expand, grid_size, iter_runs, load_sweep, run_id

__all__ = ["SweepSpec", "SweepResult", "SweepTerminated", "load_sweep", "expand", "run_config", "run_sweep",
           "execute_run", "execute_runs", "sigterm_stops_sweep", "run_id", "LEASE_SECONDS", "RENEW_SECONDS",
           "iter_runs", "grid_size", "MAX_GRID_RUNS"]
