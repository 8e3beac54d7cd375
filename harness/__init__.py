"""jenga-harness: configs, workloads, backends, records, analysis and plots around ``jenga``."""
