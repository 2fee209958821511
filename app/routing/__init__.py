"""Routing: which engine a request goes to, among those where it fits now.

Pure policies behind one small interface (``base.Router``), tested like the
admission policy: ``least_loaded`` and ``prefix`` (affinity with bounded
load). Admission calls the router once it knows where a request fits.
"""
