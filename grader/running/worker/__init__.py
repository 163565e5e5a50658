"""The worker process: the only place student code is imported and run."""
