"""spmlkit: multi-label learning when most labels are missing.

Single-positive multi-label learning (SPML) and its relatives under one API and one
protocol: the reference data protocol (:mod:`spmlkit.protocol`), every loss
(:mod:`spmlkit.losses`), the between-epoch label-state algorithms (:mod:`spmlkit.labeling`),
metrics (:mod:`spmlkit.metrics`) and one trainer for feature and image inputs (:mod:`spmlkit.training`).
"""

__version__ = "0.1.0"
