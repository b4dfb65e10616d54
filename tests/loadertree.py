from tests.support.loadertree import *  # noqa: F403  (deprecated alias, see tests/README.md)
