"""`python -m autotune`, the same as the command it installs (tsutil/extras.py)."""

from tsutil.extras import autotune

autotune()
