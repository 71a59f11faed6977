import sys

from rayserve.cli import main

sys.exit(main())
