from tests.support.old_txhelp import *  # noqa: F403  (deprecated alias, see tests/README.md)
