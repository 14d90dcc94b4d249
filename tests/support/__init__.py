"""What the tests share: the servers they start, the fault proxy, the Slurm cluster, crash and race
drivers, the writers of real saves, and the test data."""
