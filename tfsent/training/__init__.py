"""Training: the task objects, the build/fit loop, the optimizer recipe, callbacks, metrics and reports."""
