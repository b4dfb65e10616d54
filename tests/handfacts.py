from tests.support.facts import *  # noqa: F403  (deprecated alias, see tests/README.md)
