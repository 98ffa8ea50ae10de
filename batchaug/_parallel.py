"""The thread split's old import path: it lives in :mod:`batchaug.functional._utils`, beside the
chunk policy (how CPU work is split). Kept for the modules that still import it here."""
from batchaug.functional._utils import (  # noqa: F401
    cpu_count, current_threads, for_each, image_threads, pool, single_threaded)
