"""`python -m rayserve`, the same as the command it installs (tsutil/extras.py)."""

from tsutil.extras import ray

ray()
