"""Where a run executes: strategy (the only place a TPU is resolved), worker roles from TF_CONFIG, precision policy,
atomic file and folder writes."""
