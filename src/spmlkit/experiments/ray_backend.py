"""Where the Ray backend lived before sweeps became a package: its public names, re-exported.

The backend is :mod:`spmlkit.experiments.sweep.ray_backend` (docs/architecture.md, "Many runs
at once"); this module keeps ``from spmlkit.experiments.ray_backend import RayOptions``
working for code written against the earlier layout.
"""

from __future__ import annotations

from .sweep.ray_backend import MISSING_RAY, RayOptions, import_ray

__all__ = ["MISSING_RAY", "RayOptions", "import_ray"]
