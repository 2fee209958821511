"""Local processes (kept for older imports: see deploy.local)."""

from deploy.local import ROOT, ManagedProcess, free_port

__all__ = ["ROOT", "ManagedProcess", "free_port"]
