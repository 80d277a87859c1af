"""tfclaims: an empirical harness that tests common claims about Transformers."""

import os

# Before torch starts: OpenMP threads that spin while waiting fight any other busy process for the cores
# of a small machine (every op then costs milliseconds). A passive wait policy costs nothing when the
# machine is quiet. Set it in the environment to override; each run record stores what was in force.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
