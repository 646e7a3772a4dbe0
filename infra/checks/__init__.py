"""Custom Checkov checks for infra/ (see run_checkov.py)."""
