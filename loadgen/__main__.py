"""`python -m loadgen`, the same as the command it installs (tsutil/extras.py)."""

from tsutil.extras import loadgen

loadgen()
