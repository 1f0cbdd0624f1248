"""Sandboxes that run untrusted harness code. runner.py runs inside; the backends outside."""
