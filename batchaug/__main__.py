import sys

from batchaug.cli import main

sys.exit(main())
