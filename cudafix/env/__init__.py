"""Reading the target environment: where it is, its RECORDs, ownership and hashes.

May read the venv and ask its interpreter for paths; writes nothing but the caches under
``<venv>/.cudafix/cache/`` (through ``statedir``).
"""
