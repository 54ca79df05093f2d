"""The policies between jobs, one module each (registered in dlcp/experiment/job_policy.py's
JOB_POLICIES when the package is discovered)."""
