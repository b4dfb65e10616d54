"""The flows a user runs (doctor, remove, repair, install, apply, run, and the log), typed.

Every command goes target -> facts -> plan -> (apply) the same way, one module per job:
:mod:`.target` opens a target and reads its facts (and ``doctor``), :mod:`.planning` makes
every kind of plan, :mod:`.applying` applies one, :mod:`.running` runs a command as a
transaction, :mod:`.log` reads and acts on the transaction log; :mod:`.probes` builds the
probe set each of them runs. Loaded through :mod:`cudafix.app`'s lazy boundary, module by
module; the argument values are :mod:`cudafix.model.args`'.
"""
