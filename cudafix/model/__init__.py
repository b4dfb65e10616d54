"""Values only: names, errors and the plan. No I/O, no processes; every other room imports these."""
