from tests.support.cli import *  # noqa: F403  (deprecated alias, see tests/README.md)
