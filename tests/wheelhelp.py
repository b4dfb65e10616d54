from tests.support.old_wheelhelp import *  # noqa: F403  (deprecated alias, see tests/README.md)
